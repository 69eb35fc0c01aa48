"""`repro compare DIR_A DIR_B`: two `repro paper` results folders side by side (`repro.paper.compare`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import typer
from rich import box
from rich.console import Console
from rich.table import Table

VERDICT_COLOURS = {"reproduced": "green", "not reproduced": "red", "contradicted": "bold red",
                   "within noise": "yellow", "input": "dim", "context": "dim", "missing": "dim"}

NO_WRAP = ("claim", "policy")
"""Columns whose cells stay on one line (besides the values: `frame_table`'s ``keep``)."""


def frame_table(df: pd.DataFrame, title: str, verdicts: tuple[str, ...] = (), keep: tuple[str, ...] = ()) -> Table:
    """A frame of text as a Rich table; cells of the ``verdicts`` columns coloured by the verdict they start
    with (and wide enough for one); `NO_WRAP` and ``keep`` columns on one line; a ``key`` column folded
    beyond 44 characters (the values beside it stay whole on a 160-column log)."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for c in df.columns:
        t.add_column(str(c), overflow="fold", no_wrap=c in NO_WRAP or c in keep,
                     max_width=44 if c == "key" else None, min_width=14 if c in verdicts else None)
    for row in df.itertuples(index=False):
        cells = []
        for c, v in zip(df.columns, row, strict=True):
            text = "" if pd.isna(v) else str(v)
            colour = VERDICT_COLOURS.get(text.partition(" (")[0]) if c in verdicts else None
            cells.append(f"[{colour}]{text}[/]" if colour else text)
        t.add_row(*cells)
    return t


def _folder(path: Path) -> Path:
    """As given when it exists from here; else relative to the repository root (as `repro paper` writes)."""
    from repro.paths import resolve_dir

    return path if path.exists() else resolve_dir(path)


def compare_cli(
    dir_a: Path = typer.Argument(..., help="results folder A (e.g. results/sim-quick; relative: from here, else "
                                           "from the repo root)"),
    dir_b: Path = typer.Argument(..., help="results folder B (e.g. results/sim-full)"),
    out: Path | None = typer.Option(None, "--out", "-o",
                                    help="the HTML page (default results/compare-<A>-vs-<B>.html in the repo; "
                                         "its forest plot beside it in <stem>_figures/)"),
    all_rows: bool = typer.Option(False, "--all", help="print every row (default: the rows whose verdict changed)"),
    figures_a: Path | None = typer.Option(None, "--figures-a", help="A's figures (default: figures/<name of A> "
                                                                    "beside results/)"),
    figures_b: Path | None = typer.Option(None, "--figures-b", help="B's figures (default as A's)"),
) -> None:
    """Compare two `repro paper` runs: their conditions, the grouped tally side by side, the headline
    claims and the rows whose verdict changed (B - A, whether the 95% intervals overlap), and one
    self-contained HTML page with every row and the figures of both runs side by side."""
    from repro.paper.compare import compare
    from repro.paths import resolve_dir

    a, b = _folder(dir_a), _folder(dir_b)
    c = compare(a, b, figures_a=_folder(figures_a) if figures_a else None,
                figures_b=_folder(figures_b) if figures_b else None)
    path = c.to_html(out or resolve_dir(f"results/compare-{a.name}-vs-{b.name}.html"))
    console = Console(width=None if sys.stdout.isatty() else 160)
    la, lb = c.a.label, c.b.label
    cond = c.conditions_table()
    console.print(frame_table(cond.assign(same=cond["same"].map({True: "", False: "differs"})), "conditions"))
    console.print(frame_table(c.tally_table(), "the tally, each measurement once (A -> B where they differ)"))
    claims = c.claims_table(only_changed=True).drop(columns="changed")
    if len(claims):
        console.print(frame_table(claims, f"headline claims whose verdict changed ({len(claims)} of {len(c.claims)})",
                                  verdicts=(la, lb)))
    else:
        console.print(f"headline claims: none of {len(c.claims)} changed verdict")
    rows = c.rows if all_rows else c.changed
    what = "every row" if all_rows else "rows whose verdict changed"
    console.print(frame_table(c.rows_table(rows).drop(columns="notebook"), f"{what} ({len(rows)} of {len(c.rows)})",
                              verdicts=("verdict A", "verdict B"), keep=(la, lb, "B - A")))
    for side in ("A only", "B only"):
        keys = c.rows.loc[c.rows["side"] == side, "key"].tolist()
        if keys:
            console.print(f"{side} ({len(keys)}): {', '.join(keys)}", highlight=False, soft_wrap=True)
    if c.scorecard is not None:
        console.print(f"scorecard: {int(c.scorecard['changed'].sum())} of {len(c.scorecard)} rows changed verdict")
    for note in c.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
    console.print(f"compare (one page, opens offline): {path}", highlight=False, soft_wrap=True)
