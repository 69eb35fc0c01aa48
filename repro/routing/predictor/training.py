"""Training and evaluating the shipped predictor (`train_default`, ``python -m repro.routing.predictor``).

Training data (`build_datasets`): the ShareGPT pairs table is split by row with a fixed seed (80% train /
20% held out). The training set is the raw training rows plus, on the same rows, requests synthesized
by the three workload families (`repro.workload.traces.synthesize`: chat, reasoning, documents), so
that the model sees the prompt templates and filler the traces actually send and learns that the
reasoning template means long outputs and documents' answers are short. Held-out metrics
(`evaluate`) are computed on the held-out rows the same way (raw ShareGPT, and per family), for the
model and for a constant baseline predicting the training median: MAE in tokens, median absolute
relative error |pred - y| / y, and Spearman rank correlation (0 for a constant prediction, which
carries no rank information) (`length_metrics`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from repro.paths import PREDICTOR_DIR
from repro.routing.predictor.model import LengthPredictor, OutputLengthModel, load_default
from repro.workload.sharegpt import HELDOUT_FRACTION, SPLIT_SEED, heldout_mask


# ---- metrics --------------------------------------------------------------------------------
def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation; 0.0 when either side is constant (no rank information)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return 0.0
    ra = pd.Series(a).rank().to_numpy()
    rb = pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


def length_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """MAE (tokens), median absolute relative error, Spearman; n."""
    y = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    return {
        "n": int(len(y)),
        "mae_tokens": round(float(np.mean(np.abs(p - y))), 2),
        "median_abs_rel_error": round(float(np.median(np.abs(p - y) / y)), 4),
        "spearman": round(spearman(p, y), 4),
    }


# ---- training -------------------------------------------------------------------------------
def build_datasets(seed: int = SPLIT_SEED, splits: Sequence[str] = ("train", "heldout")
                   ) -> dict[str, dict[str, tuple[pd.DataFrame, np.ndarray]]]:
    """``{"train"|"heldout": {group: (X, y)}}`` with groups sharegpt, chat, reasoning,
    documents (see the module docstring)."""
    from repro.vocab import FAMILIES
    from repro.workload.sharegpt import load_table
    from repro.workload.traces import family_pools, predictor_frame, synthesize

    table = load_table()
    held = heldout_mask(len(table), seed)
    pools = family_pools(all_rows=True)
    out: dict[str, dict[str, tuple[pd.DataFrame, np.ndarray]]] = {}
    for split, mask in (("train", ~held), ("heldout", held)):
        if split not in splits:
            continue
        rows = np.flatnonzero(mask)
        groups: dict[str, tuple[pd.DataFrame, np.ndarray]] = {}
        groups["sharegpt"] = (
            pd.DataFrame({"prompt_head": table["prompt_head"].to_numpy()[rows],
                          "prompt_tokens": table["prompt_tokens"].to_numpy()[rows]}),
            table["output_tokens"].to_numpy()[rows].astype(np.float64),
        )
        for k, fam in enumerate(FAMILIES):
            src = np.intersect1d(pools[fam], rows)
            synth = synthesize(fam, src, seed=seed + 1 + k + (0 if split == "train" else 100),
                               id_prefix=f"{split}-{fam}-")
            groups[fam] = (predictor_frame(synth),
                           synth["output_tokens"].to_numpy().astype(np.float64))
        out[split] = groups
    return out


def evaluate(model: OutputLengthModel, datasets: dict[str, tuple[pd.DataFrame, np.ndarray]],
             baseline: float) -> dict[str, Any]:
    """Held-out metrics per group (and pooled families) for ``model`` and the constant."""
    res: dict[str, Any] = {}
    pooled_y, pooled_p = [], []
    for group, (X, y) in datasets.items():
        p = model.predict(X)
        res[group] = {"model": length_metrics(y, p),
                      "constant_baseline": length_metrics(y, np.full(len(y), baseline))}
        if group != "sharegpt":
            pooled_y.append(y)
            pooled_p.append(p)
    y, p = np.concatenate(pooled_y), np.concatenate(pooled_p)
    res["families_pooled"] = {"model": length_metrics(y, p),
                              "constant_baseline": length_metrics(y, np.full(len(y), baseline))}
    return res


def train_default(out: str | Path | None = PREDICTOR_DIR, seed: int = SPLIT_SEED,
                  **params: Any) -> dict[str, Any]:
    """Train on the training split, evaluate on the held-out split, save to ``out``.

    Returns the metrics dict (also written to ``out/metrics.json``).
    """
    t0 = time.perf_counter()
    data = build_datasets(seed)
    train = data["train"]
    X = pd.concat([x for x, _ in train.values()], ignore_index=True)
    y = np.concatenate([y for _, y in train.values()])
    model = LengthPredictor(**params).fit(X, y)
    metrics = {
        "split": {"seed": seed, "heldout_fraction": HELDOUT_FRACTION,
                  "train_rows": {g: int(len(v[1])) for g, v in train.items()},
                  "heldout_rows": {g: int(len(v[1])) for g, v in data["heldout"].items()}},
        "constant_baseline_value": model.train_median_,
        "heldout": evaluate(model, data["heldout"], model.train_median_),
        "train_seconds": round(time.perf_counter() - t0, 2),
    }
    if out is not None:
        out = Path(out)
        model.save(out, extra={"training": {"split_seed": seed,
                                            "heldout_fraction": HELDOUT_FRACTION,
                                            "groups": list(train)}})
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        load_default.cache_clear()
    return metrics


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else PREDICTOR_DIR
    metrics = train_default(out)
    print(f"wrote {out}")
    for group, m in metrics["heldout"].items():
        a, b = m["model"], m["constant_baseline"]
        print(f"{group:16s} n={a['n']:5d}  MAE {a['mae_tokens']:8.1f} vs {b['mae_tokens']:8.1f}  "
              f"MdARE {a['median_abs_rel_error']:.3f} vs {b['median_abs_rel_error']:.3f}  "
              f"Spearman {a['spearman']:.3f} vs {b['spearman']:.3f}")
    return 0
