"""Notebook 09 (§V-F, Figs. 5-7): repro.paper.sections.load_and_tails, and RunSpec's arrival field."""

import numpy as np
import pandas as pd
import pytest

from repro.errors import ConfigError
from repro.experiment.inputs import build_trace
from repro.experiment.spec import RunSpec, spec_from_dict
from repro.paper.grids import specs_grid
from repro.paper.sections import load_and_tails as nb


def test_runspec_arrival_is_validated_and_drives_the_trace():
    base = RunSpec(n_requests=300)
    assert "arrival" not in base.to_dict()  # run ids made before the field stay valid
    burst = base.replace(arrival={"process": "burst", "burst_factor": 3, "period_s": 10.0, "duty": 0.2})
    assert burst.arrival["burst_factor"] == 3.0 and burst.run_id != base.run_id
    assert build_trace(burst).meta["arrival"]["process"] == "burst"
    assert build_trace(base).meta["arrival"]["process"] == "gamma"  # the workload's own
    a = build_trace(burst).df.arrival_s.to_numpy()
    in_burst = (a % 10.0) < 2.0
    assert in_burst.mean() > 0.5  # 3x the rate for 20% of the time: 60% of arrivals expected
    assert spec_from_dict(burst.to_dict()) == burst
    with pytest.raises(ConfigError, match="arrival"):
        RunSpec(arrival={"process": "burst", "burst_factor": 9.0, "duty": 0.5})
    with pytest.raises(ConfigError, match="arrival"):
        RunSpec(arrival={"proces": "poisson"})
    with pytest.raises(ConfigError, match="arrival"):
        RunSpec(arrival="burst")


def test_burst_requests():
    assert nb.burst_requests(16.0, 10.0, 200) == 480  # three periods at the mean rate
    assert nb.burst_requests(16.0, 30.0, 2000) == 2000  # sim quick: the run is already long enough
    with pytest.raises(ConfigError, match="period"):
        nb.burst_requests(16.0, 0.0, 200)


def test_burst_table_by_hand():
    """Two seeds of three windows: round robin and marginal cost paired by (seed, window)."""
    rows = []
    for seed, rr, mc in ((1, (0.8, 0.6, 0.9), (0.9, 0.6, 0.7)), (2, (0.5, 0.5, 0.5), (0.4, 0.4, 0.4))):
        for w, (a, b) in enumerate(zip(rr, mc, strict=True)):
            rows.append({"policy": "round_robin", "seed": seed, "window_s": 5.0 * w, "goodput": a,
                         "ttft_p95_s": 0.2 + w})
            rows.append({"policy": "marginal_cost", "seed": seed, "window_s": 5.0 * w, "goodput": b,
                         "ttft_p95_s": 0.1 * (w + 1)})
    bt = nb.burst_table(pd.DataFrame(rows)).set_index("policy")
    # seed 1: above, equal, below; seed 2: below three times -> 2 of 6 windows at or above
    assert bt.loc["marginal_cost", "windows_at_or_above_rr"] == pytest.approx(2 / 6)
    assert bt.loc["marginal_cost", "rolling_ttft_p95_s_mean"] == pytest.approx(0.2)
    assert bt.loc["marginal_cost", "rolling_ttft_p95_s_max"] == pytest.approx(0.3)
    assert bt.loc["round_robin", "rolling_goodput_mean"] == pytest.approx((0.8 + 0.6 + 0.9 + 1.5) / 6)
    assert bt.loc["marginal_cost", "windows"] == 6


def test_load_and_tails_small(section):
    ctx = section(seeds=(1,), n_requests=300)
    specs = [s for f in (0.25, 1.0) for s in specs_grid(ctx, rates=16.0 * f)]
    assert nb.load_sweep_specs(ctx, 16.0, [1.0, 0.25]) == specs  # the sweep's specs, lowest rate first
    with pytest.raises(ValueError, match="rate_fractions"):
        nb.load_sweep_specs(ctx, 16.0, [5.0])
    runs = ctx.run(specs)
    sweep = nb.load_sweep_table(runs, 16.0)
    assert sorted(set(sweep.load)) == [0.25, 1.0]
    rr = sweep[sweep.policy == "round_robin"].set_index("load")
    assert rr.loc[0.25, "paper_goodput"] == pytest.approx(0.880)
    assert rr.loc[1.0, "paper_ttft_p99_s"] == pytest.approx(0.56)
    op = nb.operating_point_table(runs)
    assert len(op) == 4 and (op.set_index("policy").loc["marginal_cost", "paper_ttft_p99_s"]) == pytest.approx(0.321)
    bspecs = nb.burst_specs(section(seeds=(1,), n_requests=600), 16.0,
                            burst={"process": "burst", "burst_factor": 3.0, "period_s": 10.0, "duty": 0.2})
    assert all(s.arrival["process"] == "burst" for s in bspecs)
    tl = nb.burst_timeline(ctx, bspecs, window_s=5.0)
    assert {"policy", "seed", "window_s", "goodput", "ttft_p95_s"} <= set(tl.columns)
    bt = nb.burst_table(tl)
    # marginal cost's share of windows at or above round robin, recounted window by window
    rr = tl[tl.policy == "round_robin"].set_index("window_s").goodput
    mc = tl[tl.policy == "marginal_cost"].set_index("window_s").goodput
    assert len(mc) == len(rr) > 1
    assert bt.set_index("policy").loc["marginal_cost", "windows_at_or_above_rr"] == pytest.approx((mc >= rr).mean())
    head = {r["key"]: r for r in nb.load_and_tails_headline(sweep, op, bt, runs, ctx, tl)}
    assert {"fig5_rr_goodput_light", "fig6_mc_ttft_p99", "fig7_tail_reduction", "fig7_mc_ttft_p95_rolling"} <= set(head)
    light = runs[(runs.policy == "round_robin") & (runs.rate == 4.0)]
    assert head["fig5_rr_goodput_light"]["ours"].value == pytest.approx(light.goodput.iloc[0])
    assert head["fig5_rr_goodput_light"]["ours"].requests == 300
    held = head["fig7_mc_windows_at_or_above_rr"]["ours"]  # Wilson over the windows
    assert held.requests == len(mc) and held.value == pytest.approx((mc >= rr).mean())


def test_rolling_estimates_block_bootstrap():
    # two traces x 40 windows; marginal_cost's P95 is half round-robin's, least_loaded's three quarters
    rng = np.random.default_rng(0)
    rows = []
    for seed in (1, 2):
        for w in range(40):
            base = 0.4 + 0.2 * rng.random()
            rows += [{"policy": p, "seed": seed, "window_s": 10.0 * w, "ttft_p95_s": base * f, "goodput": 1.0}
                     for p, f in (("marginal_cost", 0.5), ("round_robin", 1.0), ("least_loaded", 0.75))]
    tl = pd.DataFrame(rows)
    est = nb.rolling_estimates(tl)
    means = tl.groupby("policy").ttft_p95_s.mean()
    assert est["mc"].value == pytest.approx(means["marginal_cost"])
    assert est["others_lo"].value == pytest.approx(means["least_loaded"])
    assert est["others_hi"].value == pytest.approx(means["round_robin"])
    # the same blocks for every policy: the reduction is exactly 1 - 0.5 / 0.875 on every resample
    assert est["reduction"].lo == pytest.approx(100 * (1 - 0.5 / 0.875))
    assert est["reduction"].hi == pytest.approx(est["reduction"].lo)
    assert est["mc"].lo < est["mc"].value < est["mc"].hi and est["mc"].traces == 2
    assert "80 (trace, window) blocks" in est["mc"].method
    assert nb.rolling_estimates(tl[tl.policy == "marginal_cost"]) == {}
