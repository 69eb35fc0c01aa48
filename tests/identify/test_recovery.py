"""A recovery test of the real design: the paper's training table (its rows, rates and
noise; fewer requests per run to keep it minutes), its numbers made by the simulator from known values of the
parameters with a mechanism switched on (request_path: the prefill step a fifth of the stated base), then
perturbed by the rows' own noise. The fit from those numbers recovers the known values within its ensemble, and
the separations the known testbed shows (the documents gap between the baselines) at its best fit."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from repro.experiment.executor import make_executor
from repro.identify.fit import Problem, evaluate, identify
from repro.identify.space import space_by_name
from repro.identify.targets import load_targets
from repro.paths import DATA_DIR

TRUTH = {"prefill_per_token_s": 7.0e-5, "prefill_step_share": 0.2, "rate_documents": 14.0}
FREED = ("prefill_per_token_s", "prefill_step_share", "rate_documents")


@pytest.mark.slow
def test_the_fit_recovers_known_values_and_the_separations_from_the_papers_design():
    rows = [dataclasses.replace(t, n_requests=500, seeds=(1, 2))
            for t in load_targets(DATA_DIR / "identify" / "paper_baselines.csv")]
    fixed = {"rate_chat": 40.0, "rate_fig5_light": 6.0, "rate_fig5_top": 30.0}
    rows = [dataclasses.replace(t, rate=str(fixed[t.rate[1:]])) if t.rate[1:] in fixed else t for t in rows]
    space = space_by_name(FREED)
    truth_problem = Problem("a40-qwen2.5-3b", tuple(rows), space, stated={"rate_mixed": 24.0},
                            mechanisms=("request_path",))
    x_true = [p.to_internal(TRUTH[p.name]) for p in space]
    clean = evaluate(truth_problem, x_true)
    rng = np.random.default_rng(7)
    noisy = []
    for t in rows:  # the rows' own noise: times relative (log scale), the rest absolute; bounds as stated
        v = clean[t.key]
        v = v * math.exp(rng.normal(0, t.sd)) if t.log_scale else v + rng.normal(0, t.sd)
        if t.metric == "preempted_fraction":
            v = max(v, 0.0)
        noisy.append(dataclasses.replace(t, value=max(v, 1e-3) if t.log_scale else v, bound=""))
    problem = dataclasses.replace(truth_problem, targets=tuple(noisy))
    ex = make_executor("local", 2)
    try:
        ident = identify(problem, executor=ex, popsize=5, generations=5, seed=1)
    finally:
        ex.close()
    pars = ident.parameters(12).set_index("parameter")
    # every known value within its ensemble's range, widened by a tenth of the prior (a search of ~100 vectors
    # visits few near the best, so the ensemble can be a single vector)
    for name in FREED:
        lo, hi = float(pars.loc[name, "ensemble_lo"]), float(pars.loc[name, "ensemble_hi"])
        p = next(q for q in space if q.name == name)
        pad = 0.10 * (p.internal_bounds[1] - p.internal_bounds[0])
        assert p.to_internal(lo) - pad <= p.to_internal(TRUTH[name]) <= p.to_internal(hi) + pad, (name, lo, hi)
    best = ident.best
    gap_true = min(clean["fig3_ll_documents_floor"], clean["fig3_lt_documents_floor"]) - clean["fig3_rr_documents"]
    gap_fit = (min(best["sim:fig3_ll_documents_floor"], best["sim:fig3_lt_documents_floor"])
               - best["sim:fig3_rr_documents"])
    assert abs(gap_fit - gap_true) <= 0.03, (gap_fit, gap_true)
    assert float(best["chi2"]) / ident.dof < 4.0
