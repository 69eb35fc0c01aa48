"""The §V-B..§V-F notebook logic (repro.paper.legacy_results) and RunSpec's arrival field."""

import numpy as np
import pandas as pd
import pytest

from repro.errors import ConfigError
from repro.experiment.inputs import build_trace
from repro.experiment.spec import RunSpec, spec_from_dict
from repro.paper import legacy_results as R
from repro.paper.section import PAPER_POLICIES, run_grid


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


def test_default_n_and_shape_cluster(tmp_path):
    assert R.default_n("sim", "quick") == 2000 and R.default_n("vllm", "full") == 1000 and R.default_n("sim", "full", 77) == 77
    with pytest.raises(ConfigError, match="n_requests"):
        R.default_n("sim", "quick", -1)
    assert R.shape_cluster(None, "2p4d") is None
    with pytest.raises(ConfigError, match="topology"):
        R.shape_cluster("cluster.yaml", "2p4d")
    (tmp_path / "c-2p4d.yaml").write_text("x")
    assert R.shape_cluster(str(tmp_path / "c-{topology}.yaml"), "2p4d").endswith("c-2p4d.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        R.shape_cluster(str(tmp_path / "c-{topology}.yaml"), "1p2d")
    assert [R.gpus(t) for t in ("1p2d", "4p4d")] == [3, 8]
    assert R.width_topologies([3, 6]) == ["2p3d", "2p6d"]
    with pytest.raises(ConfigError, match="widths"):
        R.width_topologies([0])


def _fake_runs(**axes):
    rows = []
    rng = np.random.default_rng(0)
    keys = list(axes)
    import itertools

    for combo in itertools.product(*axes.values()):
        row = dict(zip(keys, combo))
        row.setdefault("cost_model", "calibrated")
        row.update(goodput=float(rng.uniform(0.5, 0.9)), ttft_p99_s=float(rng.uniform(0.2, 1.0)),
                   token_skew=1.05, request_skew=1.01)
        rows.append(row)
    return pd.DataFrame(rows)


def test_calibration_small_grid():
    runs = run_grid(R.calibration_specs(seeds=(1, 2), n_requests=200, rate=16.0))
    assert len(runs) == 8 and set(runs.cost_model) == {"calibrated", "sim_derived"}
    tab = R.calibration_table(runs)
    assert list(tab.condition) == [c for _, _, c in R.CALIBRATION_CONDITIONS]
    t = tab.set_index("condition")
    assert t.loc["learned, calibrated", "paper_goodput"] == pytest.approx(0.864)
    assert t.loc["learned, simulator-derived", "paper_ttft_p99_hi_s"] == pytest.approx(0.52)
    assert t.loc["round-robin", "request_skew"] == pytest.approx(1.0, abs=0.02)
    head = {r["key"]: r for r in R.calibration_headline(tab)}
    assert head["calib_goodput_gain"]["ours"] == pytest.approx(
        100 * (t.loc["learned, calibrated", "goodput"] - t.loc["learned, simulator-derived", "goodput"]))
    assert {"calib_tail_share", "calib_simderived_token_skew_worse_than_jsq"} <= set(head)
    load = R.calibration_load(runs)
    assert set(load.kind) == {"request count", "token load"} and len(load) == 16


def test_heterogeneity_table_and_claims():
    runs = _fake_runs(workload=["chat", "reasoning", "documents", "mixed"], policy=list(PAPER_POLICIES), seed=[1, 2])
    runs.loc[(runs.workload == "documents") & (runs.policy == "round_robin"), "goodput"] = 0.1
    tab = R.heterogeneity_table(runs)
    assert len(tab) == 16 and tab.groupby("workload")["rank"].min().eq(1).all()
    t = tab.set_index(["policy", "workload"])
    assert t.loc[("length_threshold", "chat"), "paper_goodput"] == pytest.approx(0.855)
    assert t.loc[("round_robin", "documents"), "paper_ttft_p99_s"] == pytest.approx(1.1)
    head = {r["key"]: r for r in R.heterogeneity_headline(tab)}
    assert head["fig3_rr_worst_documents"]["ours"] == 1.0
    assert head["fig3_rr_documents"]["ours"] == pytest.approx(0.1)
    # live quick runs two policies per workload: no ranking claim is made from a partial grid
    part = R.heterogeneity_table(runs[runs.policy.isin(["round_robin", "marginal_cost"])])
    head = {r["key"]: r for r in R.heterogeneity_headline(part)}
    assert "fig3_rr_documents" in head and not any(k.startswith(("fig3_mc_best", "fig3_rr_worst", "fig3_lt")) for k in head)


def test_width_table_margins():
    runs = _fake_runs(topology=["2p3d", "2p4d", "2p6d"], policy=list(PAPER_POLICIES), seed=[1])
    tab = R.width_table(runs)
    assert sorted(set(tab.decode_width)) == [3, 4, 6]
    w4 = tab[tab.decode_width == 4].set_index("policy").goodput
    assert tab[tab.decode_width == 4].mc_margin_over_best_baseline.iloc[0] == pytest.approx(
        w4["marginal_cost"] - w4.drop("marginal_cost").max())
    keys = {r["key"] for r in R.width_headline(tab)}
    assert {"width3_mc", "width4_ll", "width6_rr", "width4_mc_margin"} <= keys


def test_frontier_best_shape_and_gpu_saving():
    runs = _fake_runs(topology=["1p2d", "2p2d", "1p3d", "2p4d", "3p4d"], policy=["marginal_cost", "round_robin"], seed=[1])
    g = {("1p2d", "marginal_cost"): 0.2, ("1p2d", "round_robin"): 0.6, ("2p2d", "marginal_cost"): 0.5,
         ("1p3d", "marginal_cost"): 0.6, ("2p2d", "round_robin"): 0.4, ("1p3d", "round_robin"): 0.45,
         ("2p4d", "marginal_cost"): 0.85, ("2p4d", "round_robin"): 0.8, ("3p4d", "marginal_cost"): 0.9,
         ("3p4d", "round_robin"): 0.86}
    runs["goodput"] = [g[(t, p)] for t, p in zip(runs.topology, runs.policy)]
    shapes, front = R.frontier_table(runs)
    f = front.set_index(["gpus", "policy"])
    assert f.loc[(4, "marginal_cost"), "best_shape"] == "1p3d" and f.loc[(4, "marginal_cost"), "goodput"] == 0.6
    assert f.loc[(6, "marginal_cost"), "paper_goodput"] == pytest.approx(0.870)
    sv = R.gpu_saving(front, 6)
    assert sv["baseline_gpus"] == 7 and sv["saving_pct"] == pytest.approx(100 / 7)
    head = {r["key"]: r["ours"] for r in R.frontier_headline(shapes, front)}
    assert head["fig4_inversion_at_1p2d"] == 1.0 and head["fig4_rr_1p2d"] == 0.6


def test_load_and_tails_small():
    specs = [s for f in (0.25, 1.0) for s in R.specs_grid(rates=16.0 * f, seeds=(1,), n_requests=300)]
    runs = run_grid(specs)
    sweep = R.load_sweep_table(runs, 16.0)
    assert sorted(set(sweep.load)) == [0.25, 1.0]
    rr = sweep[sweep.policy == "round_robin"].set_index("load")
    assert rr.loc[0.25, "paper_goodput"] == pytest.approx(0.880) and rr.loc[1.0, "paper_ttft_p99_s"] == pytest.approx(0.56)
    op = R.operating_point_table(runs)
    assert len(op) == 4 and (op.set_index("policy").loc["marginal_cost", "paper_ttft_p99_s"]) == pytest.approx(0.321)
    bspecs = R.burst_specs(seeds=(1,), rate=16.0, n_requests=600,
                           burst={"process": "burst", "burst_factor": 3.0, "period_s": 10.0, "duty": 0.2})
    assert all(s.arrival["process"] == "burst" for s in bspecs)
    tl = R.burst_timeline(bspecs, window_s=5.0)
    assert {"policy", "seed", "window_s", "goodput", "ttft_p95_s"} <= set(tl.columns)
    bt = R.burst_table(tl)
    assert bt.set_index("policy").loc["round_robin", "windows_at_or_above_rr"] == 1.0
    keys = {r["key"] for r in R.load_and_tails_headline(sweep, op, bt)}
    assert {"fig5_rr_goodput_light", "fig6_mc_ttft_p99", "fig7_tail_reduction", "fig7_mc_ttft_p95_rolling"} <= keys
