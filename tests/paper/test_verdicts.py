"""Intervals and verdicts of headline rows (repro.paper.verdicts, repro.paper.headline)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from repro.experiment.metrics import RequestOutcomes
from repro.paper.headline import headline_frame
from repro.paper.verdicts import (
    Estimate,
    goodput_estimate,
    joint_bootstrap,
    over_traces,
    paired_difference,
    resample,
    verdict,
    wilson,
)


def _flags(p: float, n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(float)


def test_wilson_matches_the_textbook_values():
    # Wilson 95 % for 8 of 10: [0.490, 0.943]; for 0 of 20: [0, 0.161]
    e = wilson(8, 10)
    assert (round(e.lo, 3), round(e.hi, 3)) == (0.490, 0.943)
    z = wilson(0, 20)
    assert z.lo == 0.0 and round(z.hi, 3) == 0.161


def test_one_trace_interval_has_the_binomial_width():
    # 10,000 requests at 0.8: the request-level 95 % half-width is 1.96 * sqrt(.8 * .2 / 1e4) = 0.0078
    e = goodput_estimate([_flags(0.8, 10_000, 1)])
    assert e.traces == 1 and e.requests == 10_000 and "1 trace" in e.method
    assert (e.hi - e.lo) / 2 == pytest.approx(0.0078, rel=0.1)
    assert e.lo < e.value < e.hi


def test_traces_that_disagree_widen_the_interval():
    same = [_flags(0.8, 5000, s) for s in (1, 2, 3)]
    apart = [_flags(p, 5000, s) for p, s in ((0.7, 1), (0.8, 2), (0.9, 3))]
    w_same = goodput_estimate(same)
    w_apart = goodput_estimate(apart)
    assert (w_apart.hi - w_apart.lo) > 5 * (w_same.hi - w_same.lo)
    assert w_apart.lo < 0.75 and w_apart.hi > 0.85  # the trace-to-trace spread is in the interval


def test_pairing_detects_a_small_difference_that_unpaired_intervals_cannot():
    # B is A with 1 % of its good requests turned bad: a 0.008 gap on identical requests
    rng = np.random.default_rng(7)
    a = [_flags(0.8, 10_000, s) for s in (1, 2, 3)]
    b = [np.where((x == 1) & (rng.random(len(x)) < 0.01), 0.0, x) for x in a]
    d = paired_difference(a, b)
    assert d.value == pytest.approx(np.mean([x.mean() - y.mean() for x, y in zip(a, b, strict=True)]))
    assert d.excludes_zero() == 1
    ga, gb = goodput_estimate(a), goodput_estimate(b)
    assert ga.lo < gb.hi  # unpaired, the two intervals overlap
    assert paired_difference(b, a).excludes_zero() == -1


def test_identical_runs_differ_by_exactly_zero_and_no_ordering_is_claimed():
    a = [_flags(0.8, 2000, s) for s in (1, 2)]
    d = paired_difference(a, a)
    assert d.value == 0 and d.lo == 0 and d.hi == 0 and d.excludes_zero() == 0
    assert verdict("ordering", d, paper=0.3) == "within noise"


def test_paired_difference_refuses_unpaired_inputs():
    with pytest.raises(ValueError, match="same traces"):
        paired_difference([np.ones(10)], [np.ones(9)])


def test_over_traces_has_no_interval_with_one_trace():
    assert not over_traces([0.5]).has_interval
    e = over_traces([0.1, 0.2, 0.3])
    assert e.has_interval and e.lo >= 0.1 and e.hi <= 0.3 and e.value == pytest.approx(0.2)


@pytest.mark.parametrize(("est", "paper", "expected"), [
    (Estimate(0.05, 0.01, 0.09), 0.3, "reproduced"),        # both say A is better
    (Estimate(-0.05, -0.09, -0.01), 0.3, "contradicted"),   # we show the opposite
    (Estimate(0.01, -0.01, 0.03), 0.3, "within noise"),     # interval includes 0
    (Estimate(0.05), 0.3, "within noise"),                  # no interval: nothing shown
    (Estimate(-0.05, -0.09, -0.01), -0.2, "reproduced"),    # the paper's sign is negative too
])
def test_ordering_verdicts(est, paper, expected):
    assert verdict("ordering", est, paper) == expected


def test_value_verdicts_use_the_interval_and_the_tolerance():
    ours = Estimate(0.80, 0.79, 0.81)
    assert verdict("value", ours, 0.85, unit="fraction") == "reproduced"      # 0.81 + 0.05 reaches 0.85
    assert verdict("value", ours, 0.87, unit="fraction") == "not reproduced"
    assert verdict("value", ours, 0.87, unit="fraction", tolerance=0.1) == "reproduced"
    assert verdict("value", Estimate(10.0), 12.0, unit="req/s") == "not reproduced"  # 15 % of 12 = 1.8
    assert verdict("value", Estimate(10.5), 12.0, unit="req/s") == "reproduced"
    assert verdict("value", Estimate(0.575), 0.1, unit="points") == "reproduced"  # within one point
    assert verdict("value", Estimate(1.2), 0.1, unit="points") == "not reproduced"
    assert verdict("value", ours, math.nan) == "context"
    assert verdict("input", ours, 0.80) == "input"
    with pytest.raises(ValueError, match="kind"):
        verdict("guess", ours, 0.8)


def test_headline_frame_judges_rows_and_refuses_a_key_twice():
    rows = [{"key": "x_gap", "ours": Estimate(0.04, 0.01, 0.07), "paper": 0.3, "kind": "ordering",
             "runs": ["r1", "r2", "r1"]},
            {"key": "x_input", "ours": 7.4, "paper": 7.4, "kind": "input", "unit": "x"},
            {"key": "x_ours", "ours": 3.0}]
    f = headline_frame(rows, "99_test", measured="sim")
    assert list(f.verdict) == ["reproduced", "input", "context"]
    assert f.loc[0, "runs"] == "r1 r2" and f.loc[0, "ours_lo"] == 0.01
    with pytest.raises(ValueError, match="twice"):
        headline_frame(rows + [{"key": "x_ours", "ours": 1.0}], "99_test")


def test_a_claimed_tie_needs_the_whole_interval_near_zero():
    assert verdict("ordering", Estimate(0.004, -0.01, 0.015), -0.006, claim=0) == "reproduced"
    assert verdict("ordering", Estimate(0.01, -0.01, 0.04), -0.006, claim=0) == "within noise"   # too wide
    assert verdict("ordering", Estimate(0.05, 0.03, 0.07), -0.006, claim=0) == "not reproduced"  # a clear lead
    # an ordering stated in words only (paper NaN) is judged on the claim's side
    assert verdict("ordering", Estimate(0.05, 0.03, 0.07), math.nan, claim=1) == "reproduced"
    assert verdict("ordering", Estimate(0.05, 0.03, 0.07), math.nan) == "context"


def test_findings_show_each_verdict_and_the_caveats_of_how_it_was_measured(tmp_path):
    from repro.paper.findings import findings_markdown
    from tests.paper.conftest import make_section

    rows = [{"key": "x_gap", "ours": Estimate(0.01, -0.01, 0.03), "paper": 0.3, "kind": "ordering"},
            {"key": "x_input", "ours": 7.4, "paper": 7.4, "kind": "input", "unit": "x"}]
    head = headline_frame(rows, "99_test", measured="sim")
    text = findings_markdown(head, title="99", backend="sim", scale="quick", traces=1, requests=200, measured="sim")
    assert "| `x_gap` | 0.010 [-0.010, 0.030] | 0.3 | 〰 within noise |" in text
    assert "one trace" in text and "given" in text and "no ordering is shown" in text
    live = findings_markdown(head, title="99", backend="emulated", scale="full", traces=3, requests=1000,
                             measured="emulated, 8 live runs, 2 INVALID, K=1")
    assert "invalid" in live and "one trace" not in live and "quick scale" not in live
    ctx = make_section(results_dir=tmp_path)
    with pytest.raises(Exception, match="write_headline"):
        ctx.findings()
    ctx.write_headline(rows)
    assert "x_gap" in str(getattr(ctx.findings(), "data", ""))


def test_write_headline_fills_paper_values_from_the_reference(tmp_path):
    from repro.paper.headline import HEADLINE_COLUMNS, write_headline

    p = write_headline([{"key": "table2_mc_mean", "ours": 0.8}, {"key": "ours_only", "ours": 1.0, "unit": "x"}],
                       "04_test", tmp_path, measured="emulated, 4 live runs, all valid, K=2")
    df = pd.read_csv(p)
    assert p.name == "04_headline.csv" and list(df.columns) == list(HEADLINE_COLUMNS)
    assert (df.measured == "emulated, 4 live runs, all valid, K=2").all()  # validity beside every number
    assert df.loc[0, "paper"] == 0.864 and df.loc[0, "unit"] == "fraction"
    assert "goodput" in df.loc[0, "meaning"]  # the reference's quantity, so summary.csv says what each number is
    assert df.loc[0, "verdict"] == "not reproduced"  # 0.8 without an interval, 0.064 from the paper's 0.864
    assert pd.isna(df.loc[1, "paper"]) and pd.isna(df.loc[1, "meaning"]) and df.loc[1, "verdict"] == "context"


def _outcomes(good, ttft=None):
    good = np.asarray(good, dtype=float)
    return RequestOutcomes(good, np.asarray(ttft if ttft is not None else np.linspace(0.1, 1.0, len(good)), float))


def test_joint_bootstrap_pairs_requests_and_keeps_or_draws_traces():
    rng = np.random.default_rng(1)
    a = [_outcomes(rng.integers(0, 2, 300)) for _ in range(3)]
    b = [_outcomes(o.good.copy(), o.ttft * 2) for o in a]  # the same requests, twice as slow

    def stat(g):
        return {"diff": float(np.mean([x.good.mean() - y.good.mean() for x, y in zip(g["a"], g["b"], strict=True)])),
                "p99_ratio": float(np.mean([np.percentile(y.ttft, 99) / np.percentile(x.ttft, 99)
                                            for x, y in zip(g["a"], g["b"], strict=True)]))}

    est = joint_bootstrap({"a": a, "b": b}, stat)
    # paired: every resample draws the same requests on both sides, so the difference is exactly 0 and the ratio 2
    assert (est["diff"].lo, est["diff"].hi) == (0.0, 0.0)
    assert est["p99_ratio"].lo == pytest.approx(2.0) and est["p99_ratio"].hi == pytest.approx(2.0)
    assert est["diff"].traces == 3 and est["diff"].requests == 900 and "3 traces" in est["diff"].method
    # one trace all good, one all bad: drawing traces spreads the mean over [0, 1]; keeping them does not
    split = {"g": [_outcomes(np.ones(50)), _outcomes(np.zeros(50))]}

    def mean(g):
        return {"m": float(np.mean([o.good.mean() for o in g["g"]]))}

    drawn, kept = joint_bootstrap(split, mean), joint_bootstrap(split, mean, resample_traces=False)
    assert (drawn["m"].lo, drawn["m"].hi) == (0.0, 1.0)
    assert (kept["m"].lo, kept["m"].hi) == (0.5, 0.5) and "within each of 2 traces" in kept["m"].method
    with pytest.raises(ValueError, match="same traces"):
        joint_bootstrap({"a": a, "b": b[:2]}, stat)


def test_resample_over_units():
    x = np.arange(100, dtype=float)
    est = resample(100, lambda i: {"mean": float(x[i].mean())}, unit="window")["mean"]
    assert est.value == pytest.approx(49.5) and est.lo < 49.5 < est.hi and "100 windows" in est.method
    assert 2 * 1.96 * x.std() / 10 == pytest.approx(est.hi - est.lo, rel=0.2)  # the normal-theory width
    one = resample(1, lambda i: {"mean": 3.0}, unit="trace")["mean"]
    assert not one.has_interval and one.method == "none: 1 trace"
