"""Notebook 06 (§V-C, Fig. 3): repro.paper.sections.heterogeneity."""

import pytest

from repro.paper.sections import heterogeneity as nb
from repro.routing.policies import PAPER_POLICIES


def test_heterogeneity_table_and_claims(fake_runs):
    runs = fake_runs(workload=["chat", "reasoning", "documents", "mixed"], policy=list(PAPER_POLICIES), seed=[1, 2])
    runs.loc[(runs.workload == "documents") & (runs.policy == "round_robin"), "goodput"] = 0.1
    tab = nb.heterogeneity_table(runs)
    assert len(tab) == 16 and tab.groupby("workload")["rank"].min().eq(1).all()
    t = tab.set_index(["policy", "workload"])
    assert t.loc[("length_threshold", "chat"), "paper_goodput"] == pytest.approx(0.855)
    assert t.loc[("round_robin", "documents"), "paper_ttft_p99_s"] == pytest.approx(1.1)
    head = {r["key"]: r for r in nb.heterogeneity_headline(tab)}
    assert head["fig3_rr_worst_documents"]["ours"] == 1.0
    assert head["fig3_rr_documents"]["ours"] == pytest.approx(0.1)
    # live quick runs two policies per workload: no ranking claim is made from a partial grid
    part = nb.heterogeneity_table(runs[runs.policy.isin(["round_robin", "marginal_cost"])])
    head = {r["key"]: r for r in nb.heterogeneity_headline(part)}
    assert "fig3_rr_documents" in head
    assert not any(k.startswith(("fig3_mc_best", "fig3_rr_worst", "fig3_lt")) for k in head)
