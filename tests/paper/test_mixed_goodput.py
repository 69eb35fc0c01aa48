"""Notebook 04 (§V-A, Table II): repro.paper.sections.mixed_goodput."""

import numpy as np
import pytest

from repro.paper.sections import mixed_goodput as nb
from repro.routing.policies import PAPER_POLICIES


def test_table_two_small_grid(section):
    ctx = section(seeds=(1, 2), n_requests=200)
    runs = ctx.run(nb.table_two_specs(ctx, 16.0))
    assert len(runs) == 8
    tab = nb.table_two(runs)
    assert list(tab.policy) == list(PAPER_POLICIES)
    mc = tab.set_index("policy").loc["marginal_cost"]
    assert mc.paper_mean_goodput == pytest.approx(0.864)
    assert mc.mean_goodput == pytest.approx(np.mean([mc.trace1_goodput, mc.trace2_goodput]))
    keys = [r["key"] for r in nb.table_two_headline(tab)]
    assert "table2_mc_mean" in keys and "table2_ll_worst" in keys
