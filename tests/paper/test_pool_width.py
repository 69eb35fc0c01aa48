"""Notebook 07 (§V-D): repro.paper.sections.pool_width."""

import pytest

from repro.errors import ConfigError
from repro.paper.sections import pool_width as nb
from repro.routing.policies import PAPER_POLICIES


def test_width_topologies():
    assert nb.width_topologies([3, 6]) == ["2p3d", "2p6d"]
    with pytest.raises(ConfigError, match="widths"):
        nb.width_topologies([0])


def test_width_table_margins(fake_runs, section):
    runs = fake_runs(topology=["2p3d", "2p4d", "2p6d"], policy=list(PAPER_POLICIES), seed=[1])
    tab = nb.width_table(runs)
    assert sorted(set(tab.decode_width)) == [3, 4, 6]
    w4 = tab[tab.decode_width == 4].set_index("policy").goodput
    assert tab[tab.decode_width == 4].mc_margin_over_best_baseline.iloc[0] == pytest.approx(
        w4["marginal_cost"] - w4.drop("marginal_cost").max())
    head = {r["key"]: r for r in nb.width_headline(tab, runs, section())}
    assert {"width3_mc", "width4_ll", "width6_rr", "width4_mc_margin"} <= set(head)
    m4 = head["width4_mc_margin"]
    assert m4["ours"].value == pytest.approx(tab[tab.decode_width == 4].mc_margin_over_best_baseline.iloc[0])
    assert (m4["claim"], head["width3_mc_margin"]["claim"]) == (1, 0)  # width 4 leads, width 3 ties
    assert m4["paper"] == pytest.approx(0.864 - 0.835)
