"""Notebook 14 (the paper's scorer beside ours): repro.paper.sections.scorers."""

import pytest

from repro.errors import ConfigError
from repro.paper.sections import mixed_goodput
from repro.paper.sections import scorers as nb
from repro.vocab import WORKLOADS


@pytest.fixture
def ctx(section):
    import dataclasses

    c = section(seeds=(1, 2), n_requests=200)
    return dataclasses.replace(c, notebook="14_scorers", rates={w: 16.0 if w == "mixed" else 8.0 for w in WORKLOADS})


def test_each_formula_is_judged_by_the_claims_own_section(ctx):
    rows, runs = nb.scorer_rows(ctx, claims=["Table II"])
    head = {r["key"]: r for r in rows}
    assert set(head) == {f"{k}@{f}" for k in nb.CLAIMS["Table II"] for f in nb.FORMULAS}
    # the paper's scorer's rows are Table II's own rows (notebook 04), measured on the same runs
    own = ctx.run(mixed_goodput.table_two_specs(ctx, 16.0))
    mine = {r["key"]: r for r in mixed_goodput.table_two_headline(mixed_goodput.table_two(own), own, ctx)}
    for key in nb.CLAIMS["Table II"]:
        assert head[f"{key}@marginal_cost"]["ours"] == mine[key]["ours"]
    # the variant's lead is its own runs minus the best baseline's, paired by trace
    b = runs[(runs.formula == "marginal_cost_batching")]
    assert "marginal_cost_batching" in set(b.policy) and "marginal_cost" not in set(b.policy)
    means = b.groupby("policy").goodput.mean()
    best = means.drop("marginal_cost_batching").max()
    lead = head["table2_mc_minus_best_baseline@marginal_cost_batching"]
    assert lead["ours"].value == pytest.approx(means["marginal_cost_batching"] - best)
    assert lead["ours"].has_interval and lead["kind"] == "ordering"
    assert lead["meaning"].startswith("marginal_cost_batching: ")
    table = nb.scorer_table(rows)
    assert list(table.section_key) == list(nb.CLAIMS["Table II"])
    assert {"marginal_cost verdict", "marginal_cost_batching verdict"} <= set(table.columns)
    assert table.set_index("section_key").loc["table2_mc_mean", "paper"] == pytest.approx(0.864)
    mech = nb.mechanisms(table)
    assert list(mech.formula) == list(nb.FORMULAS) and set(mech.rows) == {2}
    fig = nb.scorer_figure(rows, "t")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["table2_mc_minus_best_baseline"]  # absolute goodputs are left to the table


def test_bad_formulas_and_claims_are_refused(ctx):
    with pytest.raises(ConfigError, match="formulas"):
        nb.scorer_rows(ctx, formulas=["no_such_router"])
    with pytest.raises(ConfigError, match="claims"):
        nb.scorer_rows(ctx, claims=["Table 9"])
