"""Notebook 10 (§V-G, Fig. 8): repro.paper.sections.feature_ablation."""

import pytest

from repro.errors import ConfigError
from repro.paper.sections import feature_ablation as nb


def test_ablation_grid_pairs_by_seed_and_signs_paper_values(section):
    ctx = section(seeds=(1,), n_requests=200)
    items = nb.ablation_specs(ctx, nb.ablation_rates(16.0, 0.75))
    # 2 points x (full + 4 terms calibrated, full + slo uncalibrated) x 1 seed
    assert len(items) == 2 * (5 + 2)
    off = [s.policy_options for lab, s in items if lab["variant"] == "length"]
    assert off and all(o == {"use_length": False} for o in off)
    runs = ctx.run(items)
    assert {"operating_point", "variant", "policy_options", "goodput"} <= set(runs.columns)
    tab = nb.ablation_table(runs)
    row = tab.set_index(["operating_point", "cost_model", "feature"]).loc[("steady", "calibrated", "length")]
    assert row.paper_change_points == pytest.approx(-3.2)
    assert row.change_points == pytest.approx((row.without_goodput - row.full_goodput) * 100)
    sat = tab.set_index(["operating_point", "cost_model", "feature"]).loc[("saturation", "calibrated", "slo")]
    assert sat.paper_change_points == pytest.approx(3.7)
    head = {r["key"]: r for r in nb.ablation_headline(tab, runs, ctx)}
    loss = head["fig8_no_length_steady"]["ours"]  # the reference states a loss: positive when the term helps
    assert loss.value == pytest.approx(-row.change_points) and loss.requests == 200
    assert head["fig8_cache_pressure"]["claim"] == 0  # "nothing measurable": a claimed tie
    assert {"fig8_slo_sat", "fig8_slo_uncalibrated", "fig8_length_loss_minus_next_steady"} <= set(head)
    nxt = tab[(tab.operating_point == "steady") & (tab.cost_model == "calibrated") & (tab.feature != "length")]
    assert head["fig8_length_loss_minus_next_steady"]["ours"].value == pytest.approx(
        nxt.change_points.min() - row.change_points)


def test_ablation_rejects_unknown_feature(section):
    with pytest.raises(ConfigError, match="feature"):
        nb.ablation_specs(section(), uncalibrated_features=("nope",))
    with pytest.raises(ConfigError, match="steady_fraction"):
        nb.ablation_rates(16.0, 1.5)


def test_ablation_features_subset(section):
    ctx = section(seeds=(1,), n_requests=100)
    items = nb.ablation_specs(ctx, {"saturation": 16.0}, uncalibrated_features=(), features=["length", "slo"])
    assert [lab["variant"] for lab, _ in items] == ["full", "length", "slo"]
    assert items[1][1].policy_options == {"use_length": False}
    with pytest.raises(ConfigError, match="unknown feature"):
        nb.ablation_specs(ctx, features=["colour"])
