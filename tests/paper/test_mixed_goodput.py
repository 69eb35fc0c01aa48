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
    rows = {r["key"]: r for r in nb.table_two_headline(tab, runs, ctx)}
    assert set(rows) == {"table2_mc_mean", "table2_mc_trace1", "table2_mc_trace2", "table2_ll_worst",
                         "table2_mc_minus_best_baseline", "table2_mc_spread"}
    # our trace i is not the paper's trace i: shown, not compared; the spread over traces is judged instead
    assert np.isnan(rows["table2_mc_trace1"]["paper"]) and "Not compared" in rows["table2_mc_trace1"]["meaning"]
    spread = rows["table2_mc_spread"]["ours"]
    sd = np.std([mc.trace1_goodput, mc.trace2_goodput], ddof=1) / np.std([0.860, 0.877, 0.855], ddof=1)
    assert spread.value == pytest.approx(sd) and spread.lo < spread.value < spread.hi
    assert spread.hi / spread.lo > 10  # the paper's three traces (2 degrees of freedom) pin no spread
    # the mean's interval rests on both traces' requests; each trace's on its own 200
    mean, t1 = rows["table2_mc_mean"]["ours"], rows["table2_mc_trace1"]["ours"]
    assert mean.value == pytest.approx(mc.mean_goodput) and (mean.traces, mean.requests) == (2, 400)
    assert (t1.traces, t1.requests) == (1, 200) and t1.lo < t1.value < t1.hi
    # the margin is paired against every baseline over the same two traces, the best one's is the value, and its
    # interval is simultaneous over the three (selection-aware)
    margin = rows["table2_mc_minus_best_baseline"]
    best = tab[tab.policy != "marginal_cost"].sort_values("mean_goodput").iloc[-1]
    assert margin["kind"] == "ordering" and margin["claim"] == 1
    assert margin["ours"].value == pytest.approx(mc.mean_goodput - best.mean_goodput)
    assert len(margin["runs"]) == 8 and margin["ours"].traces == 2 and "min over 3 rivals" in margin["ours"].method
    assert margin["paper"] == pytest.approx(0.864 - 0.835)
