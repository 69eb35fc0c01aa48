"""A `repro paper` run's summary: every notebook's judged headline rows in one table.

``results/<backend>-<scale>/summary.csv`` (`default_dirs`) holds `repro.paper.headline.HEADLINE_COLUMNS`
plus `SUMMARY_CONTEXT`. `own_rows` leaves out rows that repeat a measurement under another key,
so that one run feeding several claims is counted once (`verdict_counts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from repro.paper.claims import own_rows, same_claim, tally
from repro.paths import resolve_dir
from repro.sources import commit_id

__all__ = ["collect_headlines", "commit_id", "default_dirs", "own_rows", "tally", "verdict_counts"]

SUMMARY_CONTEXT = ("same_as", "backend", "scale", "commit")
"""What ``summary.csv`` adds to `repro.paper.headline.HEADLINE_COLUMNS`: ``same_as`` (the first key
that is the same measurement of the same sentence: the same runs and value, or the same value and interval
to 12 digits, against the same paper number; or notebook 14's ``X@marginal_cost``, which is ``X`` measured
again (`repro.paper.claims.same_claim`); a measurement that two sentences of the paper state with different
numbers counts for each), and the
conditions of the whole run (backend, scale, the commit of the code, ``-dirty`` when it had
uncommitted changes). Traces, requests, validity and run ids are per row."""


def collect_headlines(names: Sequence[str], results_dir: Path, *, backend: str = "", scale: str = "",
                      commit: str = "") -> pd.DataFrame:
    """The ``<NN>_headline.csv`` rows of the named notebooks, concatenated, with `SUMMARY_CONTEXT`."""
    from repro.paper.headline import HEADLINE_COLUMNS

    frames = [pd.read_csv(p, keep_default_na=True) for name in names
              if (p := results_dir / f"{name.split('_', 1)[0]}_headline.csv").exists()]
    out = (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(HEADLINE_COLUMNS)))
    first: dict[tuple, str] = {}
    same = []
    all_keys = set(out.key.astype(str))
    for r in out.itertuples():
        runs = "" if pd.isna(getattr(r, "runs", "")) else str(r.runs)
        paper = "" if pd.isna(r.paper) else round(float(r.paper), 12)  # the same sentence: the same paper number
        keys = []
        if runs:
            keys.append(("runs", runs, round(float(r.ours), 12), paper))
        if not (pd.isna(r.ours_lo) or pd.isna(r.ours_hi)) and float(r.ours_hi) > float(r.ours_lo):
            keys.append(("interval", str(r.unit), round(float(r.ours), 12), round(float(r.ours_lo), 12),
                         round(float(r.ours_hi), 12), paper))
        hit = next((first[k] for k in keys if k in first), None) or same_claim(str(r.key), all_keys) or r.key
        for k in keys:
            first.setdefault(k, hit)
        same.append(hit)
    out["same_as"] = ["" if s == k else s for s, k in zip(same, out.key, strict=True)]
    return out.assign(backend=backend, scale=scale, commit=commit)


def verdict_counts(summary: pd.DataFrame) -> dict[str, int]:
    """Rows per verdict, each measurement once (rows with ``same_as`` left out)."""
    from repro.paper.rules import VERDICTS

    own = own_rows(summary)
    return {v: int((own.verdict == v).sum()) for v in VERDICTS}


def default_dirs(backend: str, scale: str) -> tuple[Path, Path]:
    """Where `run_paper` writes by default: ``results/<backend>-<scale>`` and ``figures/<backend>-<scale>``
    (backends and scales never overwrite each other)."""
    return resolve_dir(f"results/{backend}-{scale}"), resolve_dir(f"figures/{backend}-{scale}")
