"""Deterministic figures and result tables for the notebooks.

- `save(fig, name)` writes ``figures/<name>.png`` and ``.pdf`` with fixed dpi and no timestamps,
  so that rerunning a notebook in ``sim`` gives byte-identical files.
- `bar_with_paper(...)` draws our values as bars with the paper's value beside each as a marker.
- `write_results(df, name)` writes ``results/<name>.csv`` with deterministic float formatting.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd

from repro.paths import resolve_dir
from repro.routing.policies import PAPER_POLICIES

matplotlib.use("Agg")  # before pyplot; headless and deterministic

import matplotlib.pyplot as plt  # noqa: E402  (pyplot only after the backend is set)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 150
FLOAT_FORMAT = "%.6g"
PAPER_MARKER = dict(marker="D", s=46, color="black", zorder=5, edgecolors="white", linewidths=0.8)
# Nothing that changes from run to run: no dates, no version strings that vary within one environment.
PDF_METADATA = {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}
PNG_METADATA = {"Software": None}
POLICY_LABELS = {
    "round_robin": "round-robin",
    "least_loaded": "least-loaded (JSQ)",
    "length_threshold": "length threshold",
    "marginal_cost": "learned (marginal cost)",
    "marginal_cost+sampling": "learned + power-of-2 sampling",
    "marginal_cost+guard": "learned + admission guard",
    "marginal_cost_plus": "ours: learned + sampling + guard",
    "power_of_two": "power of two (vllm-router, SGLang)",
    "dynamo_kv": "Dynamo KV router",
    "llmd_weighted": "llm-d weighted scorer",
    "sglang_least_load": "SGLang least-load",
}
POLICY_ORDER = list(PAPER_POLICIES)


def set_style() -> None:
    """The house style: seaborn whitegrid, colour-blind palette, fixed sizes and fonts."""
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", palette="colorblind", font="DejaVu Sans")
    matplotlib.rcParams.update({
        "figure.dpi": DPI,
        "savefig.dpi": DPI,
        "figure.figsize": (6.4, 3.8),
        "axes.titlesize": 10,
        "axes.labelsize": 9,
        "legend.fontsize": 8,
        "svg.hashsalt": "repro",
        "pdf.compression": 6,
        "path.simplify": True,
    })


def save(fig: Figure, name: str, out_dir: str | Path = "figures", close: bool = True) -> list[Path]:
    """Write ``<out_dir>/<name>.png`` and ``.pdf`` deterministically; returns the two paths."""
    out = resolve_dir(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    old = os.environ.pop("SOURCE_DATE_EPOCH", None)
    try:
        fig.savefig(paths[0], format="png", dpi=DPI, metadata=PNG_METADATA, bbox_inches="tight")
        fig.savefig(paths[1], format="pdf", metadata=PDF_METADATA, bbox_inches="tight")
    finally:
        if old is not None:
            os.environ["SOURCE_DATE_EPOCH"] = old
    if close:
        plt.close(fig)
    return paths


def policy_label(name: str) -> str:
    """The display name of a policy (or variant) in figures; unknown names as they are."""
    return POLICY_LABELS.get(name, name)


def bar_with_paper(
    df: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None = None,
    paper: pd.DataFrame | None = None,
    *,
    err: str | None = None,
    order: Sequence[Any] | None = None,
    hue_order: Sequence[Any] | None = None,
    title: str = "",
    xlabel: str | None = None,
    ylabel: str | None = None,
    ax: Axes | None = None,
    ylim: tuple[float, float] | None = None,
) -> tuple[Figure, Axes]:
    """Bars of our ``y`` per ``x`` (and ``hue``) with the paper's value as a black diamond beside each.

    ``df`` has one row per bar (already aggregated; ``err`` names a column of half-widths drawn as
    error bars, e.g. the spread over seeds). ``paper`` has columns ``x`` (and ``hue``) and
    ``paper``: rows without a paper value are simply not marked.
    """
    set_style()
    if ax is None:
        fig, ax = plt.subplots()
    else:
        fig = ax.figure
    order = list(order) if order is not None else list(dict.fromkeys(df[x]))
    if hue is not None:
        hue_order = list(hue_order) if hue_order is not None else list(dict.fromkeys(df[hue]))
    else:
        hue_order = [None]
    palette = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    n_h = len(hue_order)
    width = 0.8 / n_h
    xs = np.arange(len(order), dtype=float)
    paper_drawn = False
    for j, h in enumerate(hue_order):
        sub = df if h is None else df[df[hue] == h]
        vals = [sub.loc[sub[x] == k, y] for k in order]
        heights = [float(v.iloc[0]) if len(v) else np.nan for v in vals]
        errs = None
        if err is not None:
            errs = [float(sub.loc[sub[x] == k, err].iloc[0]) if (sub[x] == k).any() else 0.0 for k in order]
        pos = xs - 0.4 + width * (j + 0.5)
        label = "ours" if h is None else f"{policy_label(h) if isinstance(h, str) else h}"
        ax.bar(pos, heights, width * 0.92, yerr=errs, capsize=2.5 if errs else 0, label=label,
               color=palette[j % len(palette)], edgecolor="white", linewidth=0.5)
        if paper is not None and len(paper):
            psub = paper if h is None else paper[paper[hue] == h]
            for p_i, k in zip(pos, order, strict=True):
                pv = psub.loc[psub[x] == k, "paper"]
                if len(pv) and not math.isnan(float(pv.iloc[0])):
                    ax.scatter([p_i], [float(pv.iloc[0])], label=None if paper_drawn else "paper", **PAPER_MARKER)
                    paper_drawn = True
    ax.set_xticks(xs)
    # wrapped so that four long policy names do not run into each other
    ax.set_xticklabels([textwrap.fill(policy_label(k), 14, break_long_words=False) if isinstance(k, str) else str(k)
                        for k in order])
    ax.set_xlabel(xlabel if xlabel is not None else x)
    ax.set_ylabel(ylabel if ylabel is not None else y)
    if ylim is not None:
        ax.set_ylim(*ylim)
    if title:
        ax.set_title(title)
    ax.legend(loc="best", frameon=True)
    return fig, ax


def _fmt(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return ""
        return FLOAT_FORMAT % float(v)
    return v


def write_results(df: pd.DataFrame, name: str, out_dir: str | Path = "results",
                  columns: Iterable[str] | None = None) -> Path:
    """Write ``<out_dir>/<name>.csv``: floats as ``%.6g``, ``\\n`` line ends, no index; returns the path."""
    out = resolve_dir(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.csv"
    frame = df if columns is None else df[list(columns)]
    frame = frame.reset_index(drop=True)
    tmp = path.with_suffix(".csv.tmp")
    frame.to_csv(tmp, index=False, float_format=FLOAT_FORMAT, lineterminator="\n", na_rep="")
    os.replace(tmp, path)
    return path


def plain_log_axis(ax: Axes, which: str = "y") -> None:
    """Label a log axis with plain numbers (0.2, 0.5, 1, 2, ...) instead of 2x10^-1."""
    from matplotlib import ticker

    axis = ax.yaxis if which == "y" else ax.xaxis
    axis.set_major_locator(ticker.LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def traces_label(seeds: Sequence[int]) -> str:
    """'1 trace' / '3 traces': how many arrival traces a figure averages."""
    return f"{len(seeds)} trace" + ("" if len(seeds) == 1 else "s")


HEADLINE_COLUMNS = ("notebook", "key", "ours", "paper", "unit", "meaning", "measured")


def write_headline(rows: list[dict[str, Any]], notebook: str, out_dir: str | Path = "results",
                   measured: str = "") -> Path:
    """``results/<nn>_headline.csv`` (key, ours, paper, unit, meaning): the numbers `repro paper` summarises.

    Each row: ``key`` (a paper_reference key when the paper states it, else our own name),
    ``ours``, ``paper`` (NaN when the paper gives none; filled from the reference by key if absent),
    ``unit``, ``meaning`` (what the number is, in the paper's sign convention; from the reference's
    ``quantity`` by key unless given), ``measured`` (how: ``sim``, or the live backend, its runs and
    whether they were all valid; `repro.paper.section.Section.measured`).
    """
    from repro.paper import reference as paper_reference

    ref = paper_reference.load().set_index("key")
    out = []
    for r in rows:
        key = r["key"]
        paper = r.get("paper")
        if paper is None:
            paper = float(ref.loc[key, "value"]) if key in ref.index else float("nan")
        unit = r.get("unit") or (str(ref.loc[key, "unit"]) if key in ref.index else "")
        meaning = r.get("meaning") or (str(ref.loc[key, "quantity"]) if key in ref.index else "")
        out.append({"notebook": notebook, "key": key, "ours": float(r["ours"]), "paper": float(paper), "unit": unit,
                    "meaning": meaning, "measured": r.get("measured", measured)})
    nn = notebook.split("_", 1)[0]
    return write_results(pd.DataFrame(out, columns=list(HEADLINE_COLUMNS)), f"{nn}_headline", out_dir)
