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

**Model uncertainty.** A prediction (a number about the paper's router, never fitted) is simulated on every
testbed of every model's ensemble (`predict_models`), and `across_models` says per row on how many testbeds of
each model the paper's claim holds (`repro.identify.predictions.holds`): "holds on every model", "holds on no
model" or "depends on the model". The main job's robustness column reads it beside the chosen model's own
ensemble (`repro.identify.testbed.robustness_of`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.identify.targets import Target

if TYPE_CHECKING:
    from repro.experiment.executor import Executor

FIGURES: tuple[tuple[str, str], ...] = (
    ("table2_", "Table II"), ("width", "§V-D widths"), ("fig4_", "Fig. 4"), ("fig5_", "Fig. 5"),
    ("fig6_", "Fig. 6"), ("fig3_", "Fig. 3"), ("kv_", "§V-G KV budget"),
)
"""A training row's figure, by the prefix of its key (the first that matches)."""

MODELS_DIR = "data/identify/models"
"""Where `repro models` writes one folder per model, ``models.csv``, ``selection.json`` and ``robustness.csv``
(relative to the repository)."""
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


def predict_models(folders: Sequence[Path], profile: str, rows: Sequence[Target], *,
                   stated: Mapping[str, float] | None = None, executor: Executor | None = None,
                   refresh: bool = False) -> pd.DataFrame:
    """Long table (model, member, key, value): the prediction ``rows`` simulated on every testbed of each
    model's ensemble (``ensemble.csv`` in its folder, written by `repro models`). A model's predictions are
    kept in its folder (``predictions.csv``) and read back unless ``refresh`` or the rows changed."""
    from repro.engine.mechanisms import resolve
    from repro.identify import predictions as pred
    from repro.identify.fit import Problem
    from repro.identify.space import PAPER_SPACE, mechanism_space

    keys = {t.key for t in rows}
    out = []
    for folder in folders:
        model = folder.name
        cache = folder / "predictions.csv"
        if cache.exists() and not refresh:
            long = pd.read_csv(cache)
            if keys <= set(long["key"]):
                out.append(long.assign(model=model))
                continue
        if not (folder / "ensemble.csv").exists():
            raise ValueError(f"{folder}: no ensemble.csv: run `repro models --models {model}` first")
        mechs = resolve([] if model == "base" else model.split("+"))
        space = (*PAPER_SPACE, *mechanism_space(mechs))
        problem = Problem(profile, (), space, mechanisms=tuple(m.name for m in mechs))
        ens = pd.read_csv(folder / "ensemble.csv")
        long = pred.predict(ens, space, profile, rows, stated=stated, executor=executor, fixed=problem.fixed)
        long.to_csv(cache, index=False)
        out.append(long.assign(model=model))
    cols = ["model", "member", "key", "value"]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def across_models(rows: Sequence[Target], long: pd.DataFrame, order: Sequence[str] = ()) -> pd.DataFrame:
    """Per prediction row: on how many testbeds of each model the paper's claim holds, and in words: "holds on
    every model" (on every testbed of each), "holds on no model" (on none), "depends on the model" (on no
    testbed of one model, on some of another), else "holds on some testbeds of every model" (its constants
    decide it on each). ``order``: the models' order in the words (e.g. best by cross-validation first)."""
    from repro.identify.predictions import holds

    models = list(dict.fromkeys([*order, *long["model"]]))
    models = [m for m in models if m in set(long["model"])]
    out = []
    for t in rows:
        counts = {}
        for m in models:
            v = long[(long["model"] == m) & (long["key"] == t.key)]["value"].astype(float)
            counts[m] = (sum(holds(t, float(x)) for x in v), len(v))
        per = "; ".join(f"{short_name(m)} {k}/{n}" for m, (k, n) in counts.items())
        on = [m for m, (k, n) in counts.items() if n and k == n]
        some = [m for m, (k, n) in counts.items() if k]
        verdict = ("holds on every model" if len(on) == len(models) and models
                   else "holds on no model" if not some
                   else "depends on the model" if len(some) < len(models)
                   else "holds on some testbeds of every model")
        out.append({"key": t.key, "paper": t.value, "models": len(models), "models_holding_everywhere": len(on),
                    "models_holding_somewhere": len(some), "verdict": verdict, "per_model": per})
    return pd.DataFrame(out)


def short_name(model: str) -> str:
    """A model's name in a sentence: "every mechanism" for the whole catalogue, else its name."""
    from repro.engine.mechanisms import CATALOGUE

    return "every mechanism" if set(model.split("+")) == {m.name for m in CATALOGUE} else model


def markdown_table(models_dir: Path | str = MODELS_DIR) -> str:
    """The shipped model table as docs/IDENTIFY.md prints it (`repro conclusion --docs` writes it; a test compares):
    per model, best by cross-validation first, its fit's scores, the documents gap at its best fit, the widest
    feasible gap its searches found, and its worst held-out figure (from ``models.csv``, ``separation.csv`` and
    each folder's ``lofo.csv``)."""
    from repro.paths import REPO_ROOT

    root = Path(models_dir)
    root = root if root.is_absolute() else REPO_ROOT / root
    tab = pd.read_csv(root / "models.csv")
    sep = pd.read_csv(root / "separation.csv").set_index("model") if (root / "separation.csv").exists() else None
    lines = ["| model | k | chi2 (dof) | chi2/dof | AIC | BIC | held-out chi2 (LOFO) | Akaike w | CV w | documents gap "
             "at best | widest feasible gap (feasible of vectors) | worst held-out figure | fit (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in tab.to_dict("records"):
        m = str(r["model"])
        widest = ""
        if sep is not None and m in sep.index:
            g = sep.loc[m]
            widest = f"{float(g['widest_gap']):+.3f} ({int(g['feasible'])} of {int(g['vectors'])})"
        lofo = root / m / "lofo.csv"
        worst = ""
        if lofo.exists():
            lf = pd.read_csv(lofo)
            worst = str(lf.loc[lf["held_out_chi2"].idxmax(), "figure"]) if len(lf) else ""
        fit_s = "" if pd.isna(r.get("fit_wall_s")) or not r.get("fit_wall_s") else f"{int(r['fit_wall_s'])}"
        lines.append(f"| `{m}` | {int(r['k'])} | {float(r['chi2']):.1f} ({int(r['dof'])}) | "
                     f"{float(r['chi2_per_dof']):.1f} | {float(r['aic']):.1f} | {float(r['bic']):.1f} | "
                     f"{float(r['cv_chi2']):.0f} | {float(r['akaike_weight']):.2f} | {float(r['cv_weight']):.2f} | "
                     f"{float(r['docs_gap']):+.3f} | {widest} | {worst} | {fit_s} |")
    return "\n".join(lines)
