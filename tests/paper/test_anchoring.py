"""§VI's predictions at an anchored rate: repro.experiment.anchoring."""

import math

import numpy as np
import pytest

from repro.errors import ConfigError
from repro.experiment.anchor import Anchor
from repro.experiment.anchoring import PREDICTION_COLUMNS, predict, ttft_p99_estimate
from repro.experiment.runner import simulated_summary
from repro.experiment.spec import RunSpec

BASE = RunSpec(workload="mixed", topology="2p4d", n_requests=300, seed=1, rate=16.0,
               profile="a40-qwen2.5-3b")  # the estimated profile: traces 1 and 2 differ at 12 req/s there
# round-robin anchored at 12 req/s, its goodput falling 0.1 per doubling of the rate around it
ANCHOR = Anchor(target=0.8, metric="goodput", band=0.01, found=True, rate=12.0, value=0.8,
                probes=((6.0, 0.9), (24.0, 0.7), (12.0, 0.8)))


def test_one_row_per_policy_with_intervals():
    policies = ("round_robin", "least_loaded", "marginal_cost")
    out = predict(BASE, ANCHOR, policies, seeds=(1, 2))
    assert list(out.columns) == PREDICTION_COLUMNS and list(out.policy) == list(policies)
    assert list(out.measured) == [True, False, False]
    assert (out.rate == 12.0).all() and (out.traces == 2).all() and (out.requests == 600).all()
    # the anchor's interval: its probes' line crosses 0.81 and 0.79 a tenth of a doubling either side of 12
    assert list(out.rate_lo) == pytest.approx([12.0 / 2 ** 0.1] * 3)
    assert list(out.rate_hi) == pytest.approx([12.0 * 2 ** 0.1] * 3)
    for r in out.itertuples():
        runs = [simulated_summary(BASE.replace(policy=r.policy, rate=12.0, seed=s))[0] for s in (1, 2)]
        # the values are the runs' own, averaged over the traces
        assert r.goodput == pytest.approx(np.mean([x["goodput"] for x in runs]))
        assert r.ttft_p99_s == pytest.approx(np.mean([x["ttft_p99_s"] for x in runs]))
        assert r.goodput_lo <= r.goodput <= r.goodput_hi and r.goodput_lo < r.goodput_hi
        assert r.ttft_p99_lo_s <= r.ttft_p99_s <= r.ttft_p99_hi_s and r.ttft_p99_lo_s < r.ttft_p99_hi_s
        assert "2 traces" in r.goodput_interval and "2 traces" in r.ttft_interval


def test_one_trace_gets_a_bootstrap_over_its_requests():
    out = predict(BASE, ANCHOR, ["marginal_cost"], seeds=[3], n_requests=200)
    r = out.iloc[0]
    assert (r.traces, r.requests) == (1, 200) and not r.measured
    assert r.goodput_lo < r.goodput_hi and r.ttft_p99_lo_s < r.ttft_p99_hi_s
    assert "1 trace" in r.goodput_interval and "requests, 1 trace" in r.ttft_interval
    assert r.ttft_p99_s == pytest.approx(
        simulated_summary(BASE.replace(policy="marginal_cost", rate=12.0, seed=3, n_requests=200))[0]["ttft_p99_s"])


def test_ttft_p99_estimate_leaves_out_requests_without_a_first_token():
    from repro.experiment.metrics import RequestOutcomes

    ttft = np.r_[np.linspace(0.1, 1.0, 100), [np.nan] * 5]
    est = ttft_p99_estimate([RequestOutcomes(np.ones(105), ttft)])
    assert est.value == pytest.approx(np.percentile(np.linspace(0.1, 1.0, 100), 99))
    assert est.has_interval and est.requests == 105


def test_refused_without_a_found_anchor_or_on_a_live_backend():
    failed = Anchor(target=0.99, metric="goodput", band=0.01, found=False, rate=math.nan, value=math.nan,
                    probes=((16.0, 0.8),), reason="mixed, round_robin goodput target 0.990 +- 0.01: no bracket")
    with pytest.raises(ConfigError, match="not found, nothing to predict at: mixed"):
        predict(BASE, failed)
    with pytest.raises(ConfigError, match="field 'backend'"):
        predict(BASE.replace(backend="emulated"), ANCHOR)
    with pytest.raises(ConfigError, match="field 'policies'"):
        predict(BASE, ANCHOR, [])
    with pytest.raises(ConfigError, match="unknown policy"):
        predict(BASE, ANCHOR, ["nope"])
