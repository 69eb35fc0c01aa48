"""§III-C, notebook 02: the output-length predictor's held-out accuracy against a constant baseline.

The paper states no accuracy: its point (§V-H) is that a magnitude estimate suffices.
Lengths in tokens.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PLOT_GROUPS = ("sharegpt", "chat", "reasoning", "documents")
"""Held-out groups shown in the figure, in order."""
QUICK_POINTS_PER_GROUP = 1500
"""Points plotted per group at quick scale (full plots every held-out point)."""


def predictor_accuracy(seed: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out accuracy of the shipped predictor vs the constant baseline.

    Returns ``(table, points)``: table has one row per (group, model) with n, mae_tokens,
    median_abs_rel_error, spearman; points has true and predicted output tokens per held-out
    request (group, true_tokens, predicted_tokens). ``seed``: the data split (default: the shipped one).
    """
    from repro.routing.predictor import SPLIT_SEED, build_datasets, default_train_median, evaluate, load_default

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
        pts.append(pd.DataFrame({"group": group, "true_tokens": np.asarray(y, float), "predicted_tokens": p}))
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


def predictor_headline(table: pd.DataFrame) -> list[dict[str, float | str]]:
    """Headline rows on the pooled families: the learned model's Spearman rho and MAE (tokens), the constant's MAE."""
    pooled = table[table.group == "families_pooled"].set_index("model")
    learned = pooled.loc["learned"]
    const = pooled.loc["constant (train median)"]
    return [
        {"key": "predictor_spearman_pooled", "ours": learned.spearman, "unit": "rho"},
        {"key": "predictor_mae_pooled", "ours": learned.mae_tokens, "unit": "tokens"},
        {"key": "predictor_mae_constant_pooled", "ours": const.mae_tokens, "unit": "tokens"},
    ]
