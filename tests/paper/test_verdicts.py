"""Intervals and verdicts of headline rows (repro.statistics.intervals, repro.paper.headline)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from repro.experiment.metrics import RequestOutcomes
from repro.paper.headline import headline_frame
from repro.paper.rules import judge, traces_needed, verdict
from repro.statistics.intervals import (
    Estimate,
    goodput_estimate,
    joint_bootstrap,
    least_difference,
    over_traces,
    paired_difference,
    resample,
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


def test_one_trace_interval_is_a_block_bootstrap_and_iid_flags_keep_the_binomial_width():
    # 10,000 iid requests at 0.8: the 95 % half-width is 1.96 * sqrt(.8 * .2 / 1e4) = 0.0078; blocks change nothing
    e = goodput_estimate([_flags(0.8, 10_000, 1)])
    assert e.traces == 1 and e.requests == 10_000 and "1 trace" in e.method and "block bootstrap" in e.method
    assert (e.hi - e.lo) / 2 == pytest.approx(0.0078, rel=0.15)
    assert e.lo < e.value < e.hi


def test_one_trace_interval_widens_with_autocorrelated_requests():
    # the same mean, but good and bad requests come in runs (load comes and goes): the iid width is too narrow
    from repro.paper.coverage import TraceModel, synthetic_traces

    flags, _ = synthetic_traces(TraceModel(traces=1), np.random.default_rng(3))
    e = goodput_estimate(flags)
    iid = 1.96 * flags[0].std() / math.sqrt(len(flags[0]))
    assert (e.hi - e.lo) / 2 > 2.5 * iid


def test_traces_give_a_t_interval_over_their_goodputs():
    traces = [_flags(p, 5000, s) for p, s in ((0.7, 1), (0.8, 2), (0.9, 3))]
    e = goodput_estimate(traces)
    means = [t.mean() for t in traces]
    half = 4.302653 * np.std(means, ddof=1) / math.sqrt(3)  # t(2) at 97.5 %
    assert e.value == pytest.approx(np.mean(means))
    assert (e.lo, e.hi) == pytest.approx((e.value - half, e.value + half))
    assert e.spread == pytest.approx(np.std(means, ddof=1)) and "t interval over 3 traces" in e.method
    # three values no longer give their [min, max]: the t interval reaches past them
    assert e.lo < min(means) and e.hi > max(means)
    same = goodput_estimate([_flags(0.8, 5000, s) for s in (1, 2, 3)])
    assert (e.hi - e.lo) > 5 * (same.hi - same.lo)


def test_pairing_detects_a_small_difference_that_unpaired_intervals_cannot():
    # B is A with 1 % of its good requests turned bad: a 0.008 gap on identical requests
    rng = np.random.default_rng(7)
    a = [_flags(0.8, 10_000, s) for s in (1, 2, 3)]
    b = [np.where((x == 1) & (rng.random(len(x)) < 0.01), 0.0, x) for x in a]
    d = paired_difference(a, b)
    assert d.value == pytest.approx(np.mean([x.mean() - y.mean() for x, y in zip(a, b, strict=True)]))
    assert d.excludes_zero() == 1 and d.method.startswith("paired t interval")
    ga, gb = goodput_estimate(a), goodput_estimate(b)
    assert ga.lo < gb.hi  # unpaired, the two intervals overlap
    assert paired_difference(b, a).excludes_zero() == -1


def test_identical_runs_differ_by_exactly_zero_which_is_a_precise_null():
    a = [_flags(0.8, 2000, s) for s in (1, 2)]
    d = paired_difference(a, a)
    assert d.value == 0 and d.lo == 0 and d.hi == 0 and d.excludes_zero() == 0
    assert verdict("ordering", d, paper=0.3) == "not reproduced"  # a precise null: its size shown smaller
    assert "smaller" in judge("ordering", d, 0.3).reason


def test_paired_difference_refuses_unpaired_inputs():
    with pytest.raises(ValueError, match="same traces"):
        paired_difference([np.ones(10)], [np.ones(9)])


def test_over_traces_is_a_t_interval_and_has_none_with_one_trace():
    assert not over_traces([0.5]).has_interval
    e = over_traces([0.1, 0.2, 0.3])
    assert e.value == pytest.approx(0.2) and (e.lo, e.hi) == pytest.approx((0.2 - 0.248414, 0.2 + 0.248414), abs=1e-5)


def test_least_difference_is_selection_aware():
    # A ties two rivals in truth; picking the better rival after the fact by its point estimate and using its own
    # 95 % interval would claim more than the data show. The simultaneous interval is wider than either alone.
    a = [_flags(0.8, 4000, s) for s in range(1, 6)]
    r1 = [_flags(0.8, 4000, s + 10) for s in range(1, 6)]
    r2 = [_flags(0.8, 4000, s + 20) for s in range(1, 6)]
    est, best = least_difference(a, {"r1": r1, "r2": r2})
    one = paired_difference(a, {"r1": r1, "r2": r2}[best])
    assert est.value == one.value and best in est.method and "Bonferroni" in est.method
    assert est.lo < one.lo  # at 97.5 % per rival
    other = paired_difference(a, r2 if best == "r1" else r1)
    assert est.value <= other.value and est.hi <= max(one.hi, other.hi)


@pytest.mark.parametrize(("est", "paper", "expected"), [
    (Estimate(0.30, 0.29, 0.31), 0.3, "reproduced"),        # excludes zero, the paper's size within half its gap
    (Estimate(0.05, 0.01, 0.09), 0.3, "not reproduced"),    # the paper's side, but shown far smaller than its gap
    (Estimate(-0.05, -0.09, -0.01), 0.3, "contradicted"),   # we show the opposite
    (Estimate(0.1, -0.01, 0.2), 0.3, "within noise"),       # holds zero, and its interval reaches inside the band
    (Estimate(0.05, -0.01, 0.11), 0.3, "not reproduced"),   # its whole interval below half the gap
    (Estimate(0.2, -0.01, 0.41), 0.3, "within noise"),      # holds zero and the paper's gap
    (Estimate(0.01, -0.01, 0.03), 0.3, "not reproduced"),   # a precise null: its size shown smaller than the gap
    (Estimate(0.05), 0.3, "within noise"),                  # no interval: nothing shown
    (Estimate(-0.30, -0.31, -0.29), -0.3, "reproduced"),    # the paper's sign is negative too
    (Estimate(0.9, 0.7, 1.1), 0.3, "not reproduced"),       # the paper's side, shown larger than its gap
])
def test_ordering_verdicts_judge_the_size_not_only_the_sign(est, paper, expected):
    assert verdict("ordering", est, paper) == expected


def test_orderings_stated_without_a_gap_are_judged_on_the_side():
    assert verdict("ordering", Estimate(0.05, 0.03, 0.07), math.nan, claim=1) == "reproduced"
    assert verdict("ordering", Estimate(0.05, -0.03, 0.07), math.nan, claim=1) == "within noise"
    assert verdict("ordering", Estimate(-0.05, -0.07, -0.03), math.nan, claim=1) == "contradicted"
    assert verdict("ordering", Estimate(0.001, -0.01, 0.012), math.nan, claim=1) == "not reproduced"  # precise null
    assert verdict("ordering", Estimate(0.05, 0.03, 0.07), math.nan) == "context"


def test_value_verdicts_use_the_interval_the_papers_noise_and_the_margin():
    ours = Estimate(0.85, 0.845, 0.855)
    assert verdict("value", ours, 0.864, unit="fraction") == "reproduced"      # within the 0.029 margin
    assert verdict("value", Estimate(0.80, 0.79, 0.81), 0.864, unit="fraction") == "not reproduced"
    assert verdict("value", Estimate(0.80, 0.79, 0.81), 0.864, unit="fraction", tolerance=0.1) == "reproduced"
    assert verdict("value", Estimate(10.0, 9.9, 10.1), 12.0, unit="req/s") == "not reproduced"  # 10 % of 12 = 1.2
    assert verdict("value", Estimate(11.5, 11.4, 11.6), 12.0, unit="req/s") == "reproduced"
    assert verdict("value", ours, math.nan) == "context"
    assert verdict("input", ours, 0.80) == "input"
    with pytest.raises(ValueError, match="kind"):
        verdict("guess", ours, 0.8)


def test_a_wide_value_decides_nothing():
    # three traces of a heavy-tailed P99: the interval holds the paper's 0.9 s, but also 0 s: no evidence either way
    e = over_traces([0.5, 13.0, 2.0])
    j = judge("value", e, 0.899, unit="s")
    assert j.verdict == "within noise" and "neither" in j.reason
    # three traces of a router that herds on some: the interval holds the paper's 0.864 but also 0.43
    assert verdict("value", Estimate(0.612, 0.163, 1.061), 0.864, unit="fraction") == "within noise"


def test_an_integer_count_reproduces_only_when_exactly_ours():
    assert verdict("value", Estimate(6.0, 6.0, 6.0), 7.0, unit="GPUs") == "not reproduced"
    assert verdict("value", Estimate(6.5, 6.0, 7.0), 7.0, unit="GPUs") == "within noise"
    assert verdict("value", Estimate(7.0, 7.0, 7.0), 7.0, unit="GPUs") == "reproduced"


def test_a_missing_value_where_the_paper_states_one_is_not_reproduced_with_its_reason():
    j = judge("value", Estimate(math.nan, method="none: no tail advantage to share"), 40.0, unit="%")
    assert j.verdict == "not reproduced" and "no tail advantage to share" in j.reason
    assert verdict("ordering", Estimate(math.nan), math.nan, claim=1) == "not reproduced"
    assert verdict("value", Estimate(math.nan), math.nan) == "context"


def test_within_noise_says_how_many_traces_would_decide():
    from repro.paper.rules import decided_at, rescaled

    e = Estimate(0.02, -0.01, 0.05, "t interval over 3 traces", 3, 30_000)  # holds t, half the smallest effect
    j = judge("ordering", e, math.nan, claim=1)
    n, noun, _ = decided_at("ordering", e, math.nan, claim=1)
    assert j.verdict == "within noise" and n > 3 and f"about {n} {noun} of ours" in j.reason
    assert judge("ordering", rescaled(e, n), math.nan, claim=1).verdict == "reproduced"
    # the paper's own noise alone keeps a goodput value from ever being shown within the margin
    near = Estimate(0.884, 0.883, 0.885, "t interval over 10 traces", 10, 1)
    assert "no number of ours would decide it: the paper's own noise" in judge("value", near, 0.864).reason
    assert traces_needed(e, 0.0, 0.0, 0.0) > 3  # the quick approximation `compare` uses


def test_headline_frame_judges_rows_and_refuses_a_key_twice():
    rows = [{"key": "x_gap", "ours": Estimate(0.3, 0.29, 0.31), "paper": 0.3, "kind": "ordering",
             "runs": ["r1", "r2", "r1"]},
            {"key": "x_input", "ours": 7.4, "paper": 7.4, "kind": "input", "unit": "x"},
            {"key": "x_ours", "ours": 3.0}]
    f = headline_frame(rows, "99_test", measured="sim")
    assert list(f.verdict) == ["reproduced", "input", "context"]
    assert f.loc[0, "runs"] == "r1 r2" and f.loc[0, "ours_lo"] == 0.29
    with pytest.raises(ValueError, match="twice"):
        headline_frame(rows + [{"key": "x_ours", "ours": 1.0}], "99_test")


def test_a_claimed_tie_needs_the_whole_interval_near_zero():
    assert verdict("ordering", Estimate(0.004, -0.01, 0.015), -0.006, claim=0) == "reproduced"
    assert verdict("ordering", Estimate(0.01, -0.01, 0.04), -0.006, claim=0) == "within noise"   # too wide
    assert verdict("ordering", Estimate(0.05, 0.03, 0.07), -0.006, claim=0) == "not reproduced"  # a clear lead
    # in goodput points the margin is 2 points, not 0.02 points
    assert verdict("ordering", Estimate(0.5, -1.0, 1.5), 0.0, unit="points") == "reproduced"


def test_findings_show_each_verdict_and_the_caveats_of_how_it_was_measured(tmp_path):
    from repro.paper.findings import findings_markdown
    from tests.paper.conftest import make_section

    rows = [{"key": "x_gap", "ours": Estimate(0.05, -0.01, 0.11), "paper": 0.3, "kind": "ordering"},
            {"key": "x_input", "ours": 7.4, "paper": 7.4, "kind": "input", "unit": "x"}]
    head = headline_frame(rows, "99_test", measured="sim")
    text = findings_markdown(head, title="99", backend="sim", scale="quick", traces=1, requests=200, measured="sim")
    assert ("| `x_gap` | 0.050 [-0.010, 0.110] | 0.3 | ❌ not reproduced | direction undecided, size shown smaller"
            in text)
    assert "one trace" in text and "given" in text
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
    assert df.loc[0, "verdict"] == "within noise"  # 0.8 without an interval: a point alone decides nothing
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
    within = joint_bootstrap({"a": a, "b": b}, stat, resample_traces=False)  # block indices shared by a and b
    assert (within["diff"].lo, within["diff"].hi) == (0.0, 0.0) and "block bootstrap" in within["diff"].method
    # traces that disagree: drawing traces gives (for a mean) the t interval over them; keeping them does not
    split = {"g": [_outcomes(np.full(50, p)) for p in (1.0, 0.0, 1.0, 0.0, 1.0)]}

    def mean(g):
        return {"m": float(np.mean([o.good.mean() for o in g["g"]]))}

    drawn, kept = joint_bootstrap(split, mean), joint_bootstrap(split, mean, resample_traces=False)
    t = over_traces([1.0, 0.0, 1.0, 0.0, 1.0])
    assert drawn["m"].value == t.value and "t interval over 5 traces" in drawn["m"].method
    assert (drawn["m"].hi - drawn["m"].lo) == pytest.approx(t.hi - t.lo, rel=0.05)  # B = 1000 resamples
    assert (kept["m"].lo, kept["m"].hi) == pytest.approx((0.6, 0.6)) and "within each of 5 traces" in kept["m"].method
    with pytest.raises(ValueError, match="same traces"):
        joint_bootstrap({"a": a, "b": b[:2]}, stat)


def test_resample_over_units():
    x = np.arange(100, dtype=float)
    est = resample(100, lambda i: {"mean": float(x[i].mean())}, unit="window")["mean"]
    assert est.value == pytest.approx(49.5) and est.lo < 49.5 < est.hi and "100 windows" in est.method
    assert 2 * 1.96 * x.std() / 10 == pytest.approx(est.hi - est.lo, rel=0.2)  # the normal-theory width
    one = resample(1, lambda i: {"mean": 3.0}, unit="trace")["mean"]
    assert not one.has_interval and one.method == "none: 1 trace"
