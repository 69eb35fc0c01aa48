"""Notebook 05 (§V-B): repro.paper.sections.calibration_value."""

import pytest

from repro.paper.sections import calibration_value as nb


def test_calibration_small_grid(section):
    ctx = section(seeds=(1, 2), n_requests=200)
    # on the estimated profile at 16 req/s the three conditions' tails differ (the tail share is a ratio of them)
    runs = ctx.run([s.replace(profile="a40-qwen2.5-3b") for s in nb.calibration_specs(ctx, 16.0)])
    assert len(runs) == 8 and set(runs.cost_model) == {"calibrated", "sim_derived"}
    tab = nb.calibration_table(runs)
    assert list(tab.condition) == [c for _, _, c in nb.CALIBRATION_CONDITIONS]
    t = tab.set_index("condition")
    assert t.loc["learned, calibrated", "paper_goodput"] == pytest.approx(0.864)
    assert t.loc["learned, simulator-derived", "paper_ttft_p99_hi_s"] == pytest.approx(0.52)
    assert t.loc["round-robin", "request_skew"] == pytest.approx(1.0, abs=0.02)
    head = {r["key"]: r for r in nb.calibration_headline(runs, ctx)}
    gain = head["calib_goodput_gain"]["ours"]  # in points, paired over the two traces' 400 requests
    assert gain.value == pytest.approx(
        100 * (t.loc["learned, calibrated", "goodput"] - t.loc["learned, simulator-derived", "goodput"]))
    assert gain.lo <= gain.value <= gain.hi and (gain.traces, gain.requests) == (2, 400)
    skew = head["calib_simderived_token_skew_minus_jsq"]["ours"]
    assert skew.value == pytest.approx(t.loc["learned, simulator-derived", "token_skew"]
                                       - t.loc["least-loaded (JSQ)", "token_skew"])
    # the P99 ranges and the tail share are the table's numbers, with intervals from resampled requests
    for key, cond in (("calib_calibrated_ttft_p99", "learned, calibrated"),
                      ("calib_simderived_ttft_p99", "learned, simulator-derived")):
        lo, hi = head[f"{key}_lo"]["ours"], head[f"{key}_hi"]["ours"]
        assert lo.value == pytest.approx(t.loc[cond, "ttft_p99_min_s"])
        assert hi.value == pytest.approx(t.loc[cond, "ttft_p99_max_s"])
        for e in (lo, hi):
            assert e.lo <= e.value <= e.hi and e.lo < e.hi and "within each of 2 traces" in e.method
    share = head["calib_tail_share"]["ours"]
    rr, cal, der = (t.loc[c, "ttft_p99_s"] for c in ("round-robin", "learned, calibrated",
                                                      "learned, simulator-derived"))
    assert share.value == pytest.approx(100 * (der - cal) / (rr - cal))
    assert share.has_interval and share.lo <= share.value <= share.hi
    gap = head["calib_simderived_token_minus_request_skew"]["ours"]
    assert gap.value == pytest.approx(t.loc["learned, simulator-derived", "skew_gap"]) and gap.has_interval
    load = nb.calibration_load(runs)
    assert set(load.kind) == {"request count", "token load"} and len(load) == 16
