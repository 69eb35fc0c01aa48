"""`slack_router.policy.SlackRouter`: its decisions on hand-built views, its options, and a run in the
simulator through the harness (by import path, as a user's policy)."""

from __future__ import annotations

import json

import pytest
from slack_router import SlackRouter

from repro.errors import ConfigError
from repro.experiment.executor import LocalExecutor, SerialExecutor
from repro.experiment.journal import read as read_journal
from repro.experiment.runner import run, sweep
from repro.experiment.spec import RunSpec
from repro.routing.policies import make_policy, policy_class
from repro.routing.policies.base import NO_HEALTHY, ClusterView, InstanceSignals, Placement, Rejection, RequestInfo

IMPORT_PATH = "slack_router.policy:SlackRouter"


def sig(i, backlog=0.0, n=0, kv=0.0, healthy=True, role="d"):
    """One instance's signals: backlog (s), in-flight requests, KV usage (fraction), health."""
    return InstanceSignals(i, f"{role}{i}", backlog, n, 0.0, kv, 0.0, healthy)


def view(pre=None, dec=None):
    pre = pre or [sig(0, role="p"), sig(1, role="p")]
    dec = dec or [sig(i) for i in range(4)]
    return ClusterView(0.0, pre, dec)


def req(o=256.0, L=200):
    """A request predicted ``o`` output tokens long, with a prompt of ``L`` tokens."""
    return RequestInfo("r", L, o, "loose", 0.0)


def test_found_by_import_path_with_its_options():
    assert policy_class(IMPORT_PATH) is SlackRouter
    pol = make_policy(IMPORT_PATH, None, kv_weight=2.0, kv_soft=0.5)
    assert pol.describe() == {"policy": "slack_router", "kv_weight": 2.0, "kv_soft": 0.5, "ref_tokens": 256.0}
    with pytest.raises(ConfigError, match="unknown option 'kv'"):
        make_policy(IMPORT_PATH, None, kv=1.0)
    for bad in ({"kv_soft": 1.5}, {"kv_weight": -1.0}, {"ref_tokens": 0.0}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            SlackRouter(**bad)


def test_prefill_goes_to_the_least_backlog():
    pol = SlackRouter()
    v = view(pre=[sig(0, backlog=3.0, role="p"), sig(1, backlog=0.5, n=9, role="p"), sig(2, backlog=1.0, role="p")])
    assert pol.place(req(), v).prefill == 1  # seconds of backlog, not the request count


def test_decode_is_least_backlog_below_the_soft_kv_limit():
    pol = SlackRouter()
    dec = [sig(0, backlog=5.0, kv=0.1), sig(1, backlog=1.0, kv=0.79), sig(2, backlog=2.0, kv=0.0), sig(3, backlog=9.0)]
    assert pol.place(req(), view(dec=dec)).decode == 1  # 0.79 < kv_soft: no penalty


def test_kv_pressure_above_the_soft_limit_costs_seconds_scaled_by_the_predicted_length():
    # d0: 1 s of backlog, KV 0.9 (0.1 over the soft limit); d1: 1.15 s, KV 0.2
    dec = [sig(0, backlog=1.0, kv=0.9), sig(1, backlog=1.15, kv=0.2)]
    pol = SlackRouter(kv_weight=1.0, kv_soft=0.8, ref_tokens=256.0)
    assert pol.kv_penalty_s(req(o=256.0), dec[0]) == pytest.approx(0.1)  # 1 s per unit over 0.8
    assert pol.kv_penalty_s(req(o=2560.0), dec[0]) == pytest.approx(1.0)  # ten times as long: ten times
    assert pol.kv_penalty_s(req(o=2560.0), dec[1]) == 0.0
    assert pol.place(req(o=256.0), view(dec=dec)).decode == 0  # 1.1 s < 1.15 s
    assert pol.place(req(o=2560.0), view(dec=dec)).decode == 1  # a long request avoids the full cache: 2.0 > 1.15
    assert SlackRouter(kv_weight=0.0).place(req(o=2560.0), view(dec=dec)).decode == 0  # KV ignored


def test_ties_go_to_fewer_in_flight_then_rotate():
    pol = SlackRouter()
    dec = [sig(0, n=2), sig(1, n=1), sig(2, n=1), sig(3, n=5)]
    assert {pol.place(req(), view(dec=dec)).decode for _ in range(6)} == {1, 2}
    pol = SlackRouter()
    assert [pol.place(req(), view()).prefill for _ in range(4)] == [1, 0, 1, 0]


def test_skips_unhealthy_instances_and_rejects_when_a_pool_has_none():
    pol = SlackRouter()
    dec = [sig(0, backlog=0.0, healthy=False), sig(1, backlog=3.0), sig(2, backlog=1.0, healthy=False),
           sig(3, backlog=2.0)]
    pre = [sig(0, backlog=0.0, role="p", healthy=False), sig(1, backlog=4.0, role="p")]
    assert pol.place(req(), view(pre=pre, dec=dec)) == Placement(1, 3)
    dead = [sig(i, healthy=False) for i in range(4)]
    assert pol.place(req(), view(dec=dead)) == Rejection(NO_HEALTHY)
    assert pol.place(req(), view(pre=[sig(0, role="p", healthy=False)])) == Rejection(NO_HEALTHY)


def test_deterministic_and_does_not_mutate_the_view():
    dec = [sig(i, backlog=float(i % 2), n=i % 3, kv=0.7 + 0.05 * i) for i in range(4)]
    v = view(dec=dec)
    before = [(s.backlog_s, s.in_flight, s.kv_usage, s.healthy) for s in v.decode]
    a = [SlackRouter().place(req(o=100.0 * k), v) for k in range(1, 20)]
    b = [SlackRouter().place(req(o=100.0 * k), v) for k in range(1, 20)]
    assert a == b
    assert [(s.backlog_s, s.in_flight, s.kv_usage, s.healthy) for s in v.decode] == before


def test_runs_in_the_simulator_by_import_path(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_JOBS", "1")
    spec = RunSpec(policy=IMPORT_PATH, policy_options={"kv_weight": 2.0}, workload="mixed", rate=12.0,
                   n_requests=200, seed=1)
    res = run(spec, tmp_path)
    journal = read_journal(res.journal_path)
    assert len(journal) == 200 and (journal["status"] == "ok").all(), journal["status"].value_counts()
    assert journal["decode_instance"].nunique() == 4  # 2p4d: every decode instance used
    manifest = json.loads((res.run_dir / "manifest.json").read_text())
    assert manifest["complete"] and manifest["summary"]["requests"] == 200
    assert manifest["spec"]["policy"] == IMPORT_PATH and manifest["spec"]["policy_options"] == {"kv_weight": 2.0}
    assert 0.0 < manifest["summary"]["goodput"] <= 1.0
    again = run(spec, tmp_path / "again")  # deterministic: the same journal, byte for byte
    assert again.journal_path.read_bytes() == res.journal_path.read_bytes()


@pytest.mark.slow
def test_a_sweep_on_worker_processes_imports_it_too(tmp_path):
    # the policy is imported again in each worker process (by its import path): same table as one process
    specs = [RunSpec(policy=IMPORT_PATH, workload="chat", rate=20.0, n_requests=200, seed=s) for s in (1, 2)]
    with LocalExecutor(2) as pool:
        parallel = sweep(specs, tmp_path / "parallel", progress=False, executor=pool)
    serial = sweep(specs, tmp_path / "serial", progress=False, executor=SerialExecutor())
    assert parallel.equals(serial) and list(parallel["policy"]) == [IMPORT_PATH] * 2
