"""§III-C, notebook 02: the output-length predictor's held-out accuracy against a constant baseline.

The paper states no accuracy: its point (§V-H) is that a magnitude estimate suffices.
Lengths in tokens.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from repro.statistics.intervals import Estimate, resample

if TYPE_CHECKING:
    from repro.paper.headline import HeadlineRow

PLOT_GROUPS = ("sharegpt", "chat", "reasoning", "documents")
"""Held-out groups shown in the figure, in order."""
QUICK_POINTS_PER_GROUP = 1500
"""Points plotted per group at quick scale (full plots every held-out point)."""


def predictor_accuracy(seed: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out accuracy of the shipped predictor vs the constant baseline.

    Returns ``(table, points)``: table has one row per (group, model) with n, mae_tokens,
    median_abs_rel_error, spearman; points has true and predicted output tokens per held-out
    request (group, true_tokens, predicted_tokens, constant_tokens: the baseline's). ``seed``: the
    data split (default: the shipped one).
    """
    from repro.routing.predictor import build_datasets, default_train_median, evaluate, load_default
    from repro.workload.sharegpt import SPLIT_SEED

    data = build_datasets(SPLIT_SEED if seed is None else seed, splits=("heldout",))["heldout"]
    model = load_default()
    baseline = default_train_median()
    res = evaluate(model, data, baseline)
    rows = []
    for group, by_model in res.items():
        for name, m in by_model.items():
            rows.append({"group": group, "model": "learned" if name == "model" else "constant (train median)",
                         **{k: m[k] for k in ("n", "mae_tokens", "median_abs_rel_error", "spearman")}})
    table = pd.DataFrame(rows)
    pts = []
    for group, (X, y) in data.items():
        p = np.asarray(model.predict(X), dtype=float)
        pts.append(pd.DataFrame({"group": group, "true_tokens": np.asarray(y, float), "predicted_tokens": p,
                                 "constant_tokens": float(baseline)}))
    return table, pd.concat(pts, ignore_index=True)


def plotted_points(points: pd.DataFrame, scale: str, seed: int) -> pd.DataFrame:
    """The held-out points of `PLOT_GROUPS` the figure shows: every point at full scale; at quick
    scale a seeded subsample of `QUICK_POINTS_PER_GROUP` per group (kept in their order)."""
    per_group = QUICK_POINTS_PER_GROUP if scale == "quick" else None
    rng = np.random.default_rng(seed)
    shown = []
    for g in PLOT_GROUPS:
        sub = points[points.group == g]
        if per_group is not None and len(sub) > per_group:
            sub = sub.iloc[np.sort(rng.choice(len(sub), per_group, replace=False))]
        shown.append(sub)
    return pd.concat(shown, ignore_index=True)


def predictor_headline(table: pd.DataFrame, points: pd.DataFrame | None = None) -> list[HeadlineRow]:
    """Headline rows on the pooled families: the learned model's Spearman rho and MAE (tokens), the
    constant's MAE. With ``points`` (`predictor_accuracy`'s, every held-out request) each carries a 95 %
    interval from a bootstrap over the pooled held-out requests; the values are the table's."""
    pooled = table[table.group == "families_pooled"].set_index("model")
    value = {"spearman": float(pooled.loc["learned", "spearman"]),
             "mae": float(pooled.loc["learned", "mae_tokens"]),
             "mae_constant": float(pooled.loc["constant (train median)", "mae_tokens"])}
    est = {k: Estimate(v) for k, v in value.items()}
    if points is not None:
        from repro.routing.predictor import spearman  # (scikit-learn behind it: imported when needed)

        fam = points[points.group != "sharegpt"]
        y, p, c = (fam[col].to_numpy(float) for col in ("true_tokens", "predicted_tokens", "constant_tokens"))

        def stat(idx: np.ndarray) -> dict[str, float]:
            return {"spearman": spearman(p[idx], y[idx]), "mae": float(np.mean(np.abs(p[idx] - y[idx]))),
                    "mae_constant": float(np.mean(np.abs(c[idx] - y[idx])))}

        boot = resample(len(y), stat, unit="held-out request", requests=len(y))
        est = {k: dataclasses.replace(boot[k], value=v) for k, v in value.items()}  # (the table rounds)
    return [
        {"key": "predictor_spearman_pooled", "ours": est["spearman"], "unit": "rho"},
        {"key": "predictor_mae_pooled", "ours": est["mae"], "unit": "tokens"},
        {"key": "predictor_mae_constant_pooled", "ours": est["mae_constant"], "unit": "tokens"},
    ]
