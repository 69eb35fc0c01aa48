"""Model selection over the mechanism catalogue, by the paper's baseline numbers alone.

Each model (a set of mechanisms, `repro.engine.mechanisms`) is fitted to the same baseline-only training
table (`repro.identify.fit.identify`, the same search budget and seed for every model). This module scores the
fits from their histories (every visited vector with each row's simulated number):

- the training fit: chi-square, degrees of freedom, chi-square per degree of freedom, Akaike's and Schwarz's
  criteria (``AIC = chi2 + 2k``, ``BIC = chi2 + k ln n``: a chi-square is -2 log-likelihood up to a constant)
  and the Akaike weights;
- **leave one figure out**: for each figure of the paper (`figure_of`), the best visited vector of the fit
  *without* that figure's rows, and the held-out rows' residuals there (in sd): a prediction, never a fit.
  Restricted to the vectors the full search visited (a profile of the history, not a refit), which favours
  no model: each is scored on its own search;
- the separations the paper's baselines show: the documents gap between the load-aware baselines and
  round-robin (``min(least-loaded, length-threshold) - round-robin``, the paper's >= +0.11), at the best fit.

The choice is by cross-validation (the smallest held-out chi-square per held-out row), not by the training fit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from repro.identify.targets import Target

FIGURES: tuple[tuple[str, str], ...] = (
    ("table2_", "Table II"), ("width", "§V-D widths"), ("fig4_", "Fig. 4"), ("fig5_", "Fig. 5"),
    ("fig6_", "Fig. 6"), ("fig3_", "Fig. 3"), ("kv_", "§V-G KV budget"),
)
"""A training row's figure, by the prefix of its key (the first that matches)."""

DOCS_RR = "fig3_rr_documents"
DOCS_FLOORS = ("fig3_ll_documents_floor", "fig3_lt_documents_floor")
PAPER_DOCS_GAP = 0.695 - 0.585
"""§V-C: every load-aware policy holds >= 0.695 where round-robin collapses to 0.585 (a gap >= 0.11)."""


def figure_of(key: str) -> str:
    for prefix, fig in FIGURES:
        if key.startswith(prefix):
            return fig
    return "other"


def row_chi2(history: pd.DataFrame, targets: Sequence[Target]) -> pd.DataFrame:
    """Each visited vector's squared residual per row (columns: the rows' keys; capped as the fit's)."""
    out = {}
    for t in targets:
        sim = history[f"sim:{t.key}"].astype(float).to_numpy()
        out[t.key] = np.array([min(t.residual(v) ** 2, 1e6) if math.isfinite(v) else 1e6 for v in sim])
    return pd.DataFrame(out, index=history.index)


def leave_one_figure_out(history: pd.DataFrame, targets: Sequence[Target]) -> pd.DataFrame:
    """Per figure: the held-out rows, the best vector without them (its chi-square on the rest) and the
    held-out rows' chi-square there (each row's residual in sd)."""
    r2 = row_chi2(history, targets)
    rows = []
    for fig in dict.fromkeys(figure_of(t.key) for t in targets):
        held = [t.key for t in targets if figure_of(t.key) == fig]
        rest = [t.key for t in targets if t.key not in held]
        train = r2[rest].sum(axis=1)
        i = train.idxmin()
        resid = {k: math.copysign(math.sqrt(float(r2.loc[i, k])), 1.0) for k in held}
        rows.append({"figure": fig, "held_out": " ".join(held), "rows": len(held), "train_chi2": float(train[i]),
                     "held_out_chi2": float(r2.loc[i, held].sum()),
                     "held_out_sd": "; ".join(f"{k} {resid[k]:.1f}" for k in held)})
    return pd.DataFrame(rows)


def score(model: str, history: pd.DataFrame, targets: Sequence[Target], k: int) -> dict[str, Any]:
    """One model's figures (module docstring) from its fit's history."""
    n = len(targets)
    r2 = row_chi2(history, targets)
    total = r2.sum(axis=1)
    best = total.idxmin()
    chi2 = float(total[best])
    dof = max(n - k, 1)
    lofo = leave_one_figure_out(history, targets)
    cv = float(lofo["held_out_chi2"].sum())
    h = history.loc[best]
    gap = math.nan
    if f"sim:{DOCS_RR}" in history and all(f"sim:{k_}" in history for k_ in DOCS_FLOORS):
        gap = float(min(h[f"sim:{k_}"] for k_ in DOCS_FLOORS) - h[f"sim:{DOCS_RR}"])
    return {"model": model, "k": k, "rows": n, "dof": dof, "chi2": chi2, "chi2_per_dof": chi2 / dof,
            "aic": chi2 + 2 * k, "bic": chi2 + k * math.log(n), "cv_chi2": cv, "cv_chi2_per_row": cv / n,
            "docs_gap": gap, "docs_rr": float(h.get(f"sim:{DOCS_RR}", math.nan)),
            "vectors": len(history), "worst_figure": str(lofo.sort_values("held_out_chi2").iloc[-1]["figure"])}


def table(scores: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The models side by side, with Akaike weights (``exp(-dAIC/2)``, normalised) and cross-validation
    weights (the same of the held-out chi-square), best by cross-validation first."""
    df = pd.DataFrame(list(scores))
    for col, w in (("aic", "akaike_weight"), ("cv_chi2", "cv_weight")):
        d = df[col] - df[col].min()
        e = np.exp(-d / 2)
        df[w] = e / e.sum()
    return df.sort_values("cv_chi2", kind="stable").reset_index(drop=True)


def load_fit(folder: Path, targets: Sequence[Target]) -> tuple[str, pd.DataFrame, int]:
    """A fitted model's name, history and parameter count from its report folder (``fit.json``,
    ``history.csv``)."""
    fit = json.loads((folder / "fit.json").read_text())
    hist = pd.read_csv(folder / "history.csv")
    missing = [t.key for t in targets if f"sim:{t.key}" not in hist.columns]
    if missing:
        raise ValueError(f"{folder}: fitted to other rows (missing {missing[:3]})")
    return str(fit.get("model", folder.name)), hist, len(fit["parameters"])
