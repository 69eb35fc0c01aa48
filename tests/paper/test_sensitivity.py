"""Sensitivity to our estimated constants (notebook 10): repro.paper.sections.sensitivity."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from repro.errors import ConfigError  # noqa: E402
from repro.paper.sections import sensitivity as sv  # noqa: E402

SWEEP = {"prefill_per_token_s": (sv.DEFAULTS["prefill_per_token_s"], 1.2e-4),
         "transfer_bandwidth_bytes_per_s": (5.0e9,)}


def test_points_default_is_the_shipped_profile_and_bad_values_are_refused():
    pts = sv.sweep_points(SWEEP)
    assert [(p.constant, p.value, p.is_default) for p in pts] == [
        ("prefill_per_token_s", sv.DEFAULTS["prefill_per_token_s"], True), ("prefill_per_token_s", 1.2e-4, False),
        ("transfer_bandwidth_bytes_per_s", 5.0e9, False)]
    assert pts[0].physics is None and pts[1].physics == {"prefill_per_token_s": 1.2e-4}
    with pytest.raises(ConfigError, match="allowed"):
        sv.sweep_points({"prefill_base_s": (0.05,)})  # stated by the paper: not swept
    with pytest.raises(ConfigError, match="prefill_per_token_s"):
        sv.sweep_points({"prefill_per_token_s": (-1.0,)})
    # the full sweep: 1-D in each constant, the default among its values, ranges around it
    for constant, values in sv.SWEEP.items():
        assert min(values) < sv.DEFAULTS[constant] < max(values) and sv.DEFAULTS[constant] in values
    for constant, values in sv.QUICK_SWEEP.items():  # the default and one end of the full range
        assert sv.DEFAULTS[constant] in values and set(values) <= set(sv.SWEEP[constant]) and len(values) == 2
    assert sv.plan("quick") == sv.Plan(sv.QUICK_SWEEP, sv.SENSITIVITY_REQUESTS[0], sv.QUICK_TRACES)
    assert sv.plan("full") == sv.Plan(sv.SWEEP, sv.SENSITIVITY_REQUESTS[1], 3)  # the paper's three traces
    assert sv.plan("full", 50).n_requests == 50
    with pytest.raises(ConfigError, match="sensitivity_requests"):
        sv.plan("quick", -1)


def test_table_one_row_per_point_and_ordering_with_paired_intervals(section):
    ctx = section(seeds=(1, 2), n_requests=60)
    pts = sv.sweep_points(SWEEP)
    rates = {p.hardware: 16.0 for p in pts}  # the operating rate, not searched here
    assert len(rates) == 3 and rates[()] == 16.0
    items = sv.sensitivity_specs(ctx, pts, rates, 60)
    assert len(items) == len(pts) * len(sv.CELLS) * 2
    over = [s for lab, s in items if lab["value"] == 1.2e-4]
    assert all(s.physics == {"prefill_per_token_s": 1.2e-4} for s in over)
    assert {s.cost_model for s in over} == {"calibrated", "sim_derived"}
    runs = ctx.run(items)
    tab = sv.sensitivity_table(runs, ctx, idle_requests=200)
    assert len(tab) == len(pts) * len(sv.ORDERINGS)
    assert tab.groupby(["constant", "value", "ordering"]).size().eq(1).all()
    assert (tab.lo <= tab["diff"]).all() and (tab["diff"] <= tab.hi).all()
    assert tab.method.str.contains("paired t interval over 2 traces").all() and set(tab.requests) == {120}
    lead = tab[tab.ordering == "table2_lead"].iloc[0]
    g = runs[(runs.constant == lead.constant) & (runs.value == lead.value) & (runs.topology == "2p4d")]
    means = g.groupby("variant").goodput.mean()
    assert lead.b == f"{means[list(sv.BEST_BASELINES)].idxmax()}@2p4d"  # the best Table II baseline there
    assert lead["diff"] == pytest.approx(lead.a_goodput - lead.b_goodput)
    # a slower prefill leaves more documents requests hopeless even on an idle cluster
    miss = tab.drop_duplicates(["constant", "value"]).set_index("value").documents_idle_miss
    assert miss[1.2e-4] > miss[sv.DEFAULTS["prefill_per_token_s"]] >= 0
    head = sv.sensitivity_headline(tab)
    assert [r["key"] for r in head] == [f"sensitivity_{o.key}_min" for o in sv.ORDERINGS]
    for r in head:
        g = tab[tab.ordering == r["key"][len("sensitivity_"):-len("_min")]]
        assert r["kind"] == "ordering" and r["claim"] == 1 and r["ours"].value == pytest.approx(g["diff"].min())
        assert r["ours"].has_interval and r["runs"]
    fig = sv.sensitivity_figure(tab)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == len(sv.ORDERINGS)
    fig2 = sv.sensitivity_figure(tab[tab.ordering.isin(["table2_lead", "length_gain"])])
    assert len([ax for ax in fig2.axes if ax.get_visible()]) == 2
