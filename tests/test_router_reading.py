"""The paper's router as a deployed proxy runs it (docs/ROUTER_READING.md): the ledger counts a request's decode work
down only once its decode has started, so a saturated decode instance does not read cheap; and the
simulator and the proxy book the same ledger events for the same request."""

from __future__ import annotations

import math

import numpy as np
import pytest

from repro.experiment.inputs import build_predictions, build_trace, engine_pools, make_router
from repro.experiment.spec import RunSpec
from repro.routing.policies import READINGS, make_policy
from repro.sim.simulator import Simulator


def herding(policy: str) -> tuple[float, int, int]:
    """Mixed, 2p4d, 16 req/s, trace 1, 125 % predictor noise, 3,000 requests: the busiest decode
    instance's share of the requests, its preemptions, and the requests preempted in all."""
    spec = RunSpec(backend="sim", workload="mixed", topology="2p4d", rate=16.0, n_requests=3000, seed=1,
                   profile="a40-qwen2.5-3b",  # the estimated profile, whose KV budget fills at 16 req/s
                   policy=policy, predictor_noise=1.25)
    _, pre, _, dec = engine_pools(spec)
    trace = build_trace(spec)
    journal = Simulator(trace.df, build_predictions(spec, trace), make_router(spec), pre, dec, spec.sim,
                        spec.poll_interval_s()).run()
    counts = journal.decode_instance.value_counts()
    busiest = counts.index[0]
    preempted = journal[journal.decode_instance == busiest].preemptions.sum()
    return counts.iloc[0] / len(journal), int(preempted), int((journal.preemptions > 0).sum())


def test_a_ledger_that_counts_down_unstarted_decode_work_herds_and_the_default_does_not():
    """With the prior anchoring (the countdown restarts at the prefill's answer) requests queued for a full
    decode engine drain from its backlog unstarted: it reads cheap and the argmin piles onto it (half the
    requests, ~1,000 preemptions). Counting down only from the decode start, the busiest instance takes
    little more than its quarter."""
    new_share, new_pre, _ = herding("marginal_cost")
    old_share, old_pre, _ = herding("marginal_cost_prefill_anchor")
    assert old_share > 0.5 and old_pre > 800, (old_share, old_pre)
    assert new_share < 0.42, (new_share, new_pre)
    assert old_share - new_share > 0.1 and old_pre > 2 * new_pre, (old_share, new_share, old_pre, new_pre)


def test_the_readings_are_the_paper_router_with_their_two_switches():
    """Each named reading is `marginal_cost` with its ledger anchor and TPOT reading; an explicit option
    overrides the reading's own; a bad one is refused naming the field and the allowed values."""
    expect = {"marginal_cost": ("decode_start", "batch"),
              "marginal_cost_prefill_anchor": ("prefill_answer", "batch"),
              "marginal_cost_backlog_tpot": ("decode_start", "backlog"),
              "marginal_cost_prior": ("prefill_answer", "backlog")}
    assert set(READINGS) == set(expect)
    for name, (anchor, tpot) in expect.items():
        pol = make_policy(name)
        assert (pol.ledger_anchor, pol.tpot_reading) == (anchor, tpot)
        assert make_router(RunSpec(backend="sim", policy=name)).ledger.anchor == anchor
    assert make_policy("marginal_cost_prior", ledger_anchor="decode_start").ledger_anchor == "decode_start"
    with pytest.raises(ValueError, match="'tpot_reading'.*batch, backlog"):
        make_policy("marginal_cost", tpot_reading="hinge")


class Recorder:
    """Wraps a `Router`: records every ledger event (kind, request id, time) the backend reports."""

    def __init__(self, router):
        self.router = router
        self.events: list[tuple[str, str, float]] = []
        for kind in ("prefill_done", "decode_started", "finish"):
            setattr(self, kind, self._hook(kind))

    def _hook(self, kind):
        inner = getattr(self.router, kind)

        def call(request_id, now):
            self.events.append((kind, request_id, now))
            inner(request_id, now)
        return call

    def route(self, request, now):
        decision = self.router.route(request, now)
        if request.request_id in self.router.ledger:
            self.events.append(("dispatch", request.request_id, now))
        return decision

    def __getattr__(self, name):
        return getattr(self.router, name)


def ledger_events(n_requests: int = 400) -> dict:
    """Mixed on 1p2d at 16 req/s, trace 2 (preemptions happen): every ledger event the simulator reports
    (kind, request id, time), and the journal. Needs the simulator from its sources (a `Recorder` is not
    a compiled `Router`): `test_the_simulator_books_...` runs it under ``$REPRO_PURE_PYTHON``."""
    spec = RunSpec(backend="sim", workload="mixed", topology="1p2d", rate=16.0, n_requests=n_requests, seed=2,
                   profile="a40-qwen2.5-3b",
                   policy="marginal_cost")
    _, pre, _, dec = engine_pools(spec)
    trace = build_trace(spec)
    rec = Recorder(make_router(spec))
    journal = Simulator(trace.df, build_predictions(spec, trace), rec, pre, dec, spec.sim,
                        spec.poll_interval_s()).run()
    return {"events": rec.events, "left": len(rec.router.ledger),
            "journal": journal[["request_id", "status", "prefill_end_s", "decode_started_s", "first_token_s",
                                "finish_s", "preemptions"]].to_dict(orient="list")}


def test_the_simulator_books_dispatch_prefill_answer_decode_start_and_settle_once_each():
    """Every served request meets the ledger in the order dispatch -> prefill answered -> decode started ->
    settled, each once (a preempted request's second start is not reported twice), at the journal's
    times; the proxy reports the same events at its own (tests/test_proxy.py checks its side)."""
    import json
    import os
    import subprocess
    import sys

    import pandas as pd

    code = "import json; from tests.test_router_reading import ledger_events; print(json.dumps(ledger_events()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600,
                         env={**os.environ, "REPRO_PURE_PYTHON": "1", "PYTHONWARNINGS": "ignore"})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    j = pd.DataFrame(got["journal"]).set_index("request_id")
    assert (j.preemptions > 0).any()  # the case that could double a start is in the run
    by_request: dict[str, list[tuple[str, float]]] = {}
    for kind, rid, now in got["events"]:
        by_request.setdefault(rid, []).append((kind, now))
    for rid, events in by_request.items():
        kinds = [k for k, _ in events]
        assert kinds == ["dispatch", "prefill_done", "decode_started", "finish"], (rid, kinds)
        times = dict(events)
        row = j.loc[rid]
        assert times["prefill_done"] == row.prefill_end_s
        assert times["decode_started"] == row.decode_started_s
        assert times["finish"] == row.finish_s
        assert times["dispatch"] <= times["prefill_done"] <= times["decode_started"] < row.first_token_s
    assert got["left"] == 0
    assert set(by_request) == set(j.index[j.status == "ok"])
    assert not math.isnan(np.nanmax(j.decode_started_s))
