import numpy as np
import pandas as pd
import pytest

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import legacy_analysis as A
from repro.paper import reference as paper_reference


def test_scale_plan_defaults_and_overrides():
    assert A.scale_plan("sim", "quick", [], 0) == ([1, 2], 2000)
    assert A.scale_plan("sim", "full", [], 0) == ([1, 2, 3], 10000)
    assert A.scale_plan("emulated", "quick", [5], 0) == ([5], 200)
    assert A.scale_plan("emulated", "quick", [], 0) == ([1], 200)
    assert A.scale_plan("sim", "quick", [], 123) == ([1, 2], 123)
    with pytest.raises(ConfigError, match="n_requests"):
        A.scale_plan("sim", "quick", [], -1)
    with pytest.raises(ConfigError, match="rates"):
        A.check_rates({"chat": 1.0})
    with pytest.raises(ConfigError, match="mixed"):
        A.check_rates({**A.SIM_SATURATION_RATES, "mixed": 0})


def test_ablation_grid_pairs_by_seed_and_signs_paper_values():
    items = A.ablation_specs(seeds=(1,), rates=A.operating_rates(16.0, 0.75), n_requests=200)
    # 2 points x (full + 4 terms calibrated, full + slo uncalibrated) x 1 seed
    assert len(items) == 2 * (5 + 2)
    off = [s.policy_options for lab, s in items if lab["variant"] == "length"]
    assert off and all(o == {"use_length": False} for o in off)
    runs = A.run_labelled(items)
    assert {"operating_point", "variant", "policy_options", "goodput"} <= set(runs.columns)
    tab = A.ablation_table(runs)
    row = tab.set_index(["operating_point", "cost_model", "feature"]).loc[("steady", "calibrated", "length")]
    assert row.paper_change_points == pytest.approx(-3.2)
    assert row.change_points == pytest.approx((row.without_goodput - row.full_goodput) * 100)
    sat = tab.set_index(["operating_point", "cost_model", "feature"]).loc[("saturation", "calibrated", "slo")]
    assert sat.paper_change_points == pytest.approx(3.7)
    head = {r["key"]: r["ours"] for r in A.ablation_headline(tab)}
    assert head["fig8_no_length_steady"] == pytest.approx(-row.change_points)  # the reference states a loss
    assert {"fig8_cache_pressure", "fig8_slo_sat", "fig8_slo_uncalibrated", "fig8_length_largest_loss"} <= set(head)


def test_ablation_rejects_unknown_feature():
    with pytest.raises(ConfigError, match="feature"):
        A.ablation_specs(uncalibrated_features=("nope",))
    with pytest.raises(ConfigError, match="steady_fraction"):
        A.operating_rates(16.0, 1.5)


def test_noise_grid_and_headline():
    items = A.noise_specs(seeds=(1,), n_requests=200, noise_levels=(0.0, 1.5))
    assert [s.predictor_noise for _, s in items] == [0.0, 1.5, 0.0, 1.5, 0.0]
    assert items[-1][1].policy == "round_robin"
    tab = A.noise_table(A.run_labelled(items))
    assert set(tab.policy) == {"marginal_cost", "length_threshold", "round_robin"}
    head = {r["key"]: r for r in A.noise_headline(tab)}
    assert head["fig9_goodput_lo"]["ours"] <= head["fig9_goodput_hi"]["ours"]
    assert head["fig9_max_noise"]["ours"] == pytest.approx(150.0)
    assert head["fig9_range_points"]["paper"] == pytest.approx(4.2)
    with pytest.raises(ConfigError, match="noise_levels"):
        A.noise_specs(noise_levels=(-1.0,))


def test_batching_physics_matches_paper_at_batch_8():
    t = A.batching_physics_table().set_index("batch")
    assert t.loc[8, "batching_per_token_increase_pct"] == pytest.approx(paper_reference.lookup("decode_batch8_penalty"), abs=0.5)
    assert t.loc[8, "serial_wait_factor"] == 8.0


def test_anchor_rate_bisects_a_monotone_curve():
    base = RunSpec(workload="mixed", rate=100.0, n_requests=100)
    curve = lambda spec: 1.0 / (1.0 + spec.rate / 5.0)  # noqa: E731  goodput 0.5 at 5 req/s
    rate, probes = A.anchor_rate(base, 0.5, probe=curve, band=0.001)
    assert rate == pytest.approx(5.0, rel=0.02)
    assert probes[0][0] == 100.0 and probes[1][0] == pytest.approx(10.0)
    assert A.anchor_rate(base, 0.001, probe=curve)[0] == 100.0  # already below target at the start
    with pytest.raises(ConfigError, match="does not reach"):
        A.anchor_rate(base, 0.999, probe=lambda s: 0.1)


def _runs(goodput):
    rows = []
    for (wl, pol), g in goodput.items():
        rows.append({"workload": wl, "policy": pol, "goodput": g, "ttft_p99_s": 1.0, "rate": 10.0, "seed": 1})
    return pd.DataFrame(rows)


def test_residual_grid_and_summary():
    ref = _runs({("mixed", "round_robin"): 0.7, ("mixed", "marginal_cost"): 0.8,
                 ("chat", "round_robin"): 0.9, ("chat", "marginal_cost"): 0.85})
    mod = _runs({("mixed", "round_robin"): 0.72, ("mixed", "marginal_cost"): 0.75,
                 ("chat", "round_robin"): 0.9, ("chat", "marginal_cost"): 0.95}).assign(rate=0.1, ttft_p99_s=4.0)
    grid = A.residual_grid(ref, mod, "serial")
    assert len(grid) == 4 and grid.rate_ratio.eq(100.0).all() and grid.ttft_p99_ratio.eq(4.0).all()
    s = A.residual_summary(grid).iloc[0]
    assert s.mean_abs_residual == pytest.approx((0.02 + 0.05 + 0.0 + 0.10) / 4)
    assert s.winners_reproduced == 1  # mixed: mc both; chat: rr vs mc
    assert s.bursty_spread_reference == pytest.approx(0.1)


def test_calibration_in_sim_oracle_vs_ledger():
    items = A.calibration_in_sim_specs(seeds=(1,), services={"batching": 16.0}, n_requests=300)
    assert {(s.backlog, s.cost_model) for _, s in items} == {(b, c) for b in ("oracle", "ledger") for c in ("calibrated", "sim_derived")}
    tab = A.calibration_in_sim_table(A.run_labelled(items))
    assert list(tab.backlog) == ["oracle", "ledger"]
    led = tab.set_index("backlog").loc["ledger"]
    assert led.paper_gain_points == pytest.approx(0.1) and led.paper_hardware_gain_points == pytest.approx(4.5)
    assert np.isnan(tab.set_index("backlog").loc["oracle", "paper_gain_points"])


def test_frontier_and_goals():
    items = A.frontier_specs(seeds=(1,), n_requests=200, shapes=("1p2d", "2p4d"),
                             policies=("round_robin", "marginal_cost", "marginal_cost+guard", A.OURS))
    guard = [s for lab, s in items if lab["variant"] == "marginal_cost+guard"]
    assert guard[0].policy == "marginal_cost" and guard[0].policy_options["admission_guard"] is True
    assert {lab["gpus"] for lab, _ in items} == {3, 6}
    frontier = A.mean_by(A.run_labelled(items), "topology")
    wl_items = A.workload_specs(seeds=(1,), n_requests=200, rates={"mixed": 16.0},
                                policies=("round_robin", "marginal_cost", "power_of_two", A.OURS))
    workloads = A.mean_by(A.run_labelled(wl_items), "workload")
    assert set(workloads.kind) == {"paper", "production", "ours"}
    goals = A.beyond_goals(frontier, workloads)
    assert len(goals) == 3 and goals.met.dtype == bool
    keys = {r["key"] for r in A.beyond_headline(frontier, workloads, goals)}
    assert {"fig4_mc_1p2d", "fig4_rr_1p2d", "beyond_plus_1p2d", "beyond_goal_worst_gap"} <= keys
    # a frontier without our router (e.g. -p 'policies=["round_robin"]') has no goals to check there
    without = A.beyond_goals(frontier[frontier.variant != A.OURS], workloads[workloads.variant != A.OURS])
    assert without.empty
    assert not any(r["key"].startswith("beyond_plus") for r in A.beyond_headline(
        frontier[frontier.variant != A.OURS], workloads[workloads.variant != A.OURS], without))


def test_vllm_router_skips_with_a_note_in_sim():
    runs, note = A.vllm_router_runs(backend="sim", cluster=None, seeds=(1,), rates={"mixed": 16.0}, n_requests=10)
    assert runs.empty and "emulated" in note
