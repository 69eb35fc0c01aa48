"""§VI's anchoring, second half: the simulator's predictions for the other policies at an anchored rate.

`repro.experiment.anchor.anchor_rate` finds the rate at which one policy's simulated goodput (or P99
TTFT) equals a measured one; `predict` runs the other policies at that rate on the simulator and gives
each its goodput and P99 TTFT with a 95 % interval. They are the simulator's predictions, not
measurements: §VI found that the simulator reproduces goodput to a mean absolute residual of 0.068
but not the measured winner.

It sits beside `anchor_rate`; its intervals are `repro.statistics.intervals`' bootstraps.

Goodput a fraction, P99 TTFT in seconds, rates in req/s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from repro.errors import ConfigError, check_int
from repro.experiment.anchor import Anchor
from repro.experiment.metrics import RequestOutcomes
from repro.experiment.runner import simulated_summary
from repro.experiment.spec import RunSpec
from repro.routing.policies import PAPER_POLICIES
from repro.statistics.intervals import Estimate, goodput_estimate, joint_bootstrap

PREDICTION_COLUMNS = ["policy", "measured", "rate", "rate_lo", "rate_hi", "goodput", "goodput_lo", "goodput_hi",
                      "ttft_p99_s", "ttft_p99_lo_s", "ttft_p99_hi_s", "traces", "requests", "goodput_interval",
                      "ttft_interval"]
"""`predict`'s columns, in order."""


def ttft_p99_estimate(outcomes: Sequence[RequestOutcomes]) -> Estimate:
    """The mean over traces of each run's P99 TTFT (seconds; over the requests that produced a first
    token, as `repro.experiment.metrics.summarize`) with its 95 % interval: `joint_bootstrap` (over two or
    more traces the t interval with a bootstrap standard error; with one trace a block bootstrap over its
    requests, so that one trace still gets an interval)."""
    def stat(groups: Mapping[str, Sequence[RequestOutcomes]]) -> dict[str, float]:
        return {"ttft_p99_s": float(np.mean([o.ttft_percentile(99) for o in groups["runs"]]))}

    return joint_bootstrap({"runs": list(outcomes)}, stat)["ttft_p99_s"]


def predict(base: RunSpec, anchor: Anchor, policies: Sequence[str] = PAPER_POLICIES, seeds: Sequence[int] = (1,),
            n_requests: int | None = None) -> pd.DataFrame:
    """The simulator's predictions at ``anchor``'s rate: each of ``policies`` (default options) on
    ``base`` (a ``sim`` spec: workload, topology, cost model, simulator) at ``anchor.rate`` req/s, once
    per trace of ``seeds``, with ``n_requests`` requests each (default ``base.n_requests``).

    One row per policy, in the order given (`PREDICTION_COLUMNS`): ``measured`` (the anchored policy),
    the rate and its interval (``rate_lo``/``rate_hi``, the anchor's), goodput (a fraction) and P99
    TTFT (seconds), each the mean over traces with its 95 % interval (goodput: `goodput_estimate`, t over
    traces or a block bootstrap within one; P99 TTFT: `ttft_p99_estimate`), how each
    interval was made, the traces and the requests in all. Runs go through `simulated_summary` (the sim
    cache). Raises `ConfigError` when the anchor was not found, or for no policies or seeds.
    """
    if not anchor.found:
        raise ConfigError(f"anchor: not found, nothing to predict at: {anchor.reason}")
    if base.backend != "sim":
        raise ConfigError(f"anchor: field 'backend' = {base.backend!r}: predictions are the simulator's ('sim')")
    if not policies:
        raise ConfigError("anchor: field 'policies' is empty; give at least one policy")
    if not seeds:
        raise ConfigError("anchor: field 'seeds' is empty; give at least one trace seed")
    n = base.n_requests if n_requests is None else n_requests
    check_int("anchor", "n_requests", n, 1, 10_000_000)
    rows: list[dict[str, Any]] = []
    for p in policies:
        outcomes = [simulated_summary(base.replace(policy=p, policy_options={}, rate=anchor.rate, seed=int(s),
                                                   n_requests=n))[1] for s in seeds]
        g = goodput_estimate([o.good for o in outcomes])
        t = ttft_p99_estimate(outcomes)
        rows.append({"policy": p, "measured": p == anchor.policy, "rate": anchor.rate, "rate_lo": anchor.rate_lo,
                     "rate_hi": anchor.rate_hi, "goodput": g.value, "goodput_lo": g.lo, "goodput_hi": g.hi,
                     "ttft_p99_s": t.value, "ttft_p99_lo_s": t.lo, "ttft_p99_hi_s": t.hi, "traces": len(outcomes),
                     "requests": int(sum(len(o.good) for o in outcomes)), "goodput_interval": g.method,
                     "ttft_interval": t.method})
    return pd.DataFrame(rows, columns=PREDICTION_COLUMNS)
