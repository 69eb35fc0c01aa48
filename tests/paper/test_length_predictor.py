"""Notebook 02 (§III-C): repro.paper.sections.length_predictor (the figure's subsample)."""

import numpy as np
import pandas as pd

from repro.paper.sections import length_predictor as nb


def _points(n):
    return pd.DataFrame([{"group": g, "true_tokens": float(i), "predicted_tokens": float(i)}
                         for g in (*nb.PLOT_GROUPS, "families_pooled") for i in range(n)])


def test_plotted_points_subsamples_at_quick_scale_only():
    pts = _points(nb.QUICK_POINTS_PER_GROUP + 10)
    quick = nb.plotted_points(pts, "quick", 1)
    assert quick.groupby("group").size().to_dict() == {g: nb.QUICK_POINTS_PER_GROUP for g in nb.PLOT_GROUPS}
    assert quick.equals(nb.plotted_points(pts, "quick", 1))  # seeded
    for _, g in quick.groupby("group"):
        assert g.true_tokens.is_monotonic_increasing  # kept in their order
    assert len(nb.plotted_points(pts, "full", 1)) == len(nb.PLOT_GROUPS) * (nb.QUICK_POINTS_PER_GROUP + 10)


def test_predictor_headline_reads_the_pooled_rows():
    table = pd.DataFrame([
        {"group": "families_pooled", "model": "learned", "n": 3, "mae_tokens": 10.0, "median_abs_rel_error": 0.2,
         "spearman": 0.7},
        {"group": "families_pooled", "model": "constant (train median)", "n": 3, "mae_tokens": 30.0,
         "median_abs_rel_error": 0.5, "spearman": 0.0}])
    head = {r["key"]: r["ours"].value for r in nb.predictor_headline(table)}
    assert head == {"predictor_spearman_pooled": 0.7, "predictor_mae_pooled": 10.0,
                    "predictor_mae_constant_pooled": 30.0}


def test_predictor_headline_intervals_over_held_out_requests():
    rng = np.random.default_rng(3)
    y = rng.integers(10, 1000, size=400).astype(float)
    pts = pd.DataFrame({"group": np.repeat(["chat", "sharegpt"], 200), "true_tokens": y,
                        "predicted_tokens": y + rng.normal(0, 50, size=400), "constant_tokens": 300.0})
    fam = pts[pts.group == "chat"]
    table = pd.DataFrame([
        {"group": "families_pooled", "model": "learned", "mae_tokens": 41.0, "spearman": 0.9},
        {"group": "families_pooled", "model": "constant (train median)", "mae_tokens": 250.0, "spearman": 0.0}])
    head = {r["key"]: r["ours"] for r in nb.predictor_headline(table, pts)}
    mae = head["predictor_mae_pooled"]
    assert mae.value == 41.0 and mae.requests == 200 and "200 held-out requests" in mae.method
    true_mae = float(np.mean(np.abs(fam.predicted_tokens - fam.true_tokens)))  # sharegpt left out of the pool
    assert mae.lo < true_mae < mae.hi and mae.hi - mae.lo < 20
    const = head["predictor_mae_constant_pooled"]
    assert const.lo < float(np.mean(np.abs(300.0 - fam.true_tokens))) < const.hi
    rho = head["predictor_spearman_pooled"]
    assert 0.8 < rho.lo < rho.hi <= 1.0
