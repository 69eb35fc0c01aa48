"""The overview: claim -> section -> verdict -> figure, and every backend's run side by side.

`overview_table` reads one `repro paper` run's ``summary.csv`` (`repro.paper.runner`) and returns
one row per claim (each measurement once): the section, the claim, ours with its 95 % interval, the
paper's value, the verdict, and the figure that shows it. `compare` puts every run found under
``results/`` (``results/<backend>-<scale>/summary.csv``) side by side, one column of verdicts per
run beside the paper's value: the same claim judged on sim, emulated and vllm.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from repro.paper.summary import collect_headlines, commit_id, own_rows
from repro.statistics.intervals import Estimate

OVERVIEW_COLUMNS = ("section", "claim", "ours [95% CI]", "paper", "verdict", "figure")


def read_summary(results_dir: str | Path, *, backend: str = "", scale: str = "") -> pd.DataFrame:
    """A run's ``summary.csv``; where there is none (the notebooks run one by one, not by `repro paper`)
    the summary of the ``NN_headline.csv`` files found there. FileNotFoundError naming the folder when
    it has neither."""

    path = Path(results_dir) / "summary.csv"
    if path.exists():
        return pd.read_csv(path, keep_default_na=True)
    heads = sorted(Path(results_dir).glob("[0-9][0-9]_headline.csv"))
    if not heads:
        raise FileNotFoundError(f"{results_dir}: no summary.csv and no NN_headline.csv; run `repro paper` "
                                "(it writes results/<backend>-<scale>/)")
    names = [p.name.split("_", 1)[0] for p in heads]
    return collect_headlines(names, Path(results_dir), backend=backend, scale=scale, commit=commit_id())


def _figure_of(notebook: str, figures_dir: Path) -> str:
    nn = notebook.split("_", 1)[0]
    figs = sorted(figures_dir.glob(f"{nn}_*.png")) if figures_dir.is_dir() else []
    return ", ".join(f.name for f in figs)


def overview_table(summary: pd.DataFrame, figures_dir: str | Path = "") -> pd.DataFrame:
    """One row per claim of a run (repeats of a measurement under another key left out), in section order."""
    own = own_rows(summary)
    rows = []
    for r in own.itertuples():
        est = Estimate(float(r.ours), float(r.ours_lo), float(r.ours_hi))
        unit = "" if pd.isna(r.unit) or r.unit in ("", "fraction") else f" {r.unit}"
        meaning = "" if pd.isna(r.meaning) else f": {r.meaning}"
        rows.append({"section": str(r.notebook), "claim": f"{r.key}{meaning}", "ours [95% CI]": est.text(3) + unit,
                     "paper": "" if pd.isna(r.paper) else f"{r.paper:.4g}", "verdict": str(r.verdict),
                     "figure": _figure_of(str(r.notebook), Path(figures_dir)) if figures_dir else ""})
    return pd.DataFrame(rows, columns=list(OVERVIEW_COLUMNS))


def compare(results_root: str | Path = "results") -> pd.DataFrame:
    """Every run under ``results_root`` side by side: per key the paper's value, then per run
    (``<backend>-<scale>``) ours and the verdict. Empty when no run is there."""
    runs = sorted(p.parent for p in Path(results_root).glob("*-*/summary.csv"))
    table: pd.DataFrame | None = None
    for d in runs:
        s = read_summary(d)
        s = own_rows(s)
        part = pd.DataFrame({"key": s.key, "notebook": s.notebook, "paper": s.paper,
                             f"{d.name}": [Estimate(float(a), float(b), float(c)).text(3)
                                           for a, b, c in zip(s.ours, s.ours_lo, s.ours_hi, strict=True)],
                             f"{d.name} verdict": s.verdict})
        if table is None:
            table = part
        else:
            table = table.merge(part, on=["key", "notebook"], how="outer", suffixes=("", "_dup"))
            table["paper"] = table["paper"].fillna(table.pop("paper_dup"))
    if table is None:
        return pd.DataFrame(columns=["key", "notebook", "paper"])
    return table.sort_values(["notebook", "key"]).reset_index(drop=True)


def markdown(df: pd.DataFrame) -> str:
    """A frame as a Markdown table (``|`` in cells escaped; NaN shown empty)."""
    def cell(v: object) -> str:
        return "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v).replace("|", "\\|")

    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)
