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


def test_term_contributions_per_formula(section):
    ctx = section(seeds=(1, 2), n_requests=200)
    points = {"saturation": 16.0}
    runs = ctx.run([item for f in nb.FORMULAS for item in nb.ablation_specs(
        ctx, points, uncalibrated_features=(), features=["length", "slo"], formula=f)])
    assert set(runs.policy) == set(nb.FORMULAS)
    terms = nb.term_contributions(ctx, runs)
    assert len(terms) == 4 and set(terms.formula) == set(nb.FORMULAS)
    for r in terms.itertuples():  # the change is the formula's own runs, paired by trace, with its interval
        g = runs[(runs.policy == r.formula)].set_index(["variant", "seed"]).goodput
        want = 100 * sum(g[(r.feature, s)] - g[("full", s)] for s in (1, 2)) / 2
        assert r.change_points == pytest.approx(want) and r.change_lo <= r.change_points <= r.change_hi
    fig = nb.term_figure(terms, {"saturation": "saturation (16 req/s)"}, title="t")
    bars = [p for p in fig.axes[0].patches]
    assert len(bars) == 4 and fig.axes[0].get_title() == "saturation (16 req/s)"
