"""Deterministic figures and result tables for the notebooks.

- `save(fig, name)` writes ``figures/<name>.png`` and ``.pdf`` with fixed dpi and no timestamps,
  so that rerunning a notebook in ``sim`` gives byte-identical files; inside a notebook it also
  shows the figure.
- One look for every figure: a policy has one colour and one marker everywhere (`policy_color`,
  `policy_marker`; `POLICY_COLORS`, a stable fallback for other names), the paper's values one
  marker (`PAPER_MARKER`, `mark_paper`), legends outside the data (`legend_outside`).
- Error bars say what they are (`with_interval`): ±1 sd over traces with two or more traces; with
  one trace a 95% bootstrap interval over the run's requests for goodput, else none.
- `bar_with_paper(...)` draws our values as bars with the paper's value beside each as a marker;
  `policy_line(...)` a policy's values over a sweep, joined only between adjacent measured points.
- `write_results(df, name)` writes ``results/<name>.csv`` with deterministic float formatting.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd

from repro.figure_style import (  # noqa: F401  (the house style, re-exported for the notebooks)
    DPI,
    FALLBACK_COLORS,
    POLICY_COLORS,
    POLICY_LABELS,
    POLICY_MARKERS,
    POLICY_ORDER,
    plt,
    policy_color,
    policy_label,
    policy_marker,
    set_style,
)
from repro.paths import resolve_dir

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend

FLOAT_FORMAT = "%.6g"
PAPER_MARKER = dict(marker="D", s=46, color="black", zorder=5, edgecolors="white", linewidths=0.8)
"""The one marker of a value the paper states, in every figure (a black diamond)."""
PAPER_LABEL = "paper"
# Nothing that changes from run to run: no dates, no version strings that vary within one environment.
PDF_METADATA = {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}
PNG_METADATA = {"Software": None}
POLICY_COLUMNS = ("policy", "variant")
"""Columns whose values are policy names: `bar_with_paper` colours bars by them."""
ERR_COLOR = "#222222"
SD_LABEL = "±1 sd over {n} traces"
CI_LABEL = "95% CI over requests (bootstrap), 1 trace"
NO_INTERVAL_LABEL = "1 trace: no interval"
CI_LEVEL = 0.95
BOOTSTRAP_DRAWS = 10_000
BOOTSTRAP_SEED = 0


class SavedFigure(list):
    """The paths `save` wrote (a plain list of `Path`), shown as nothing in a notebook: the figure
    itself is shown there, so a cell that ends in ``ctx.save(...)`` does not also echo the paths."""

    def _ipython_display_(self) -> None:  # IPython: the object displays itself, here as nothing
        return None


def in_notebook() -> bool:
    """True inside a Jupyter (IPython) kernel, where a figure can be shown inline; False in plain Python."""
    ipython = sys.modules.get("IPython")  # never imported here: plain Python has no kernel
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def save(fig: Figure, name: str, out_dir: str | Path = "figures", close: bool = True) -> SavedFigure:
    """Write ``<out_dir>/<name>.png`` and ``.pdf`` deterministically (``bbox_inches='tight'``: a legend
    outside the axes is kept); returns the two paths.

    In a notebook's kernel the PNG is also shown inline (before the figure is closed), and the
    returned paths display as nothing (`SavedFigure`); in plain Python nothing is shown.
    """
    out = resolve_dir(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = SavedFigure([out / f"{name}.png", out / f"{name}.pdf"])
    old = os.environ.pop("SOURCE_DATE_EPOCH", None)
    try:
        fig.savefig(paths[0], format="png", dpi=DPI, metadata=PNG_METADATA, bbox_inches="tight")
        fig.savefig(paths[1], format="pdf", metadata=PDF_METADATA, bbox_inches="tight")
    finally:
        if old is not None:
            os.environ["SOURCE_DATE_EPOCH"] = old
    if in_notebook():
        from IPython.display import Image, display

        display(Image(filename=str(paths[0])))  # exactly the saved PNG
    if close:
        plt.close(fig)
    return paths


def num(value: Any, spec: str = ".3f", na: str = "n/a") -> str:
    """``value`` formatted with ``spec``; ``na`` for a missing one (None or NaN), so that no sentence says 'nan'."""
    if value is None:
        return na
    try:
        if math.isnan(float(value)):
            return na
    except (TypeError, ValueError):
        return str(value)
    return format(value, spec)


# ---- intervals ---------------------------------------------------------------------------------
def request_interval(goodput: float, n_requests: int, level: float = CI_LEVEL, draws: int = BOOTSTRAP_DRAWS,
                     seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Bootstrap ``level`` interval of one run's goodput over its requests: ``(lo, hi)`` (fractions).

    Resampling the run's ``n_requests`` per-request good flags (0/1) with replacement makes the
    count of good requests Binomial(n, goodput) exactly, so the draws are binomial: the same
    bootstrap, without the journal. Requests of one run are not independent (they share queues),
    so this is narrower than the spread over traces; it says how much the number could move with
    the requests alone. Deterministic (seeded). NaN for a NaN goodput or no requests.
    """
    n = int(n_requests)
    if n <= 0 or goodput is None or math.isnan(float(goodput)):
        return float("nan"), float("nan")
    p = min(max(float(goodput), 0.0), 1.0)
    rng = np.random.default_rng(seed)
    boot = rng.binomial(n, p, size=int(draws)) / n
    a = (1.0 - level) / 2.0
    return float(np.quantile(boot, a)), float(np.quantile(boot, 1.0 - a))


def interval_label(n_traces: int, request_ci: bool = False) -> str:
    """What an error bar is: '±1 sd over N traces' (N >= 2), '95% CI over requests (bootstrap), 1 trace',
    or '1 trace: no interval'. Never '±1 sd' with one trace."""
    if n_traces >= 2:
        return SD_LABEL.format(n=int(n_traces))
    return CI_LABEL if request_ci else NO_INTERVAL_LABEL


def with_interval(tab: pd.DataFrame, y: str, sd: str | None, n_traces: int, *, n_requests: int | None = None,
                  lo: str = "lo", hi: str = "hi") -> tuple[pd.DataFrame, str]:
    """``tab`` with the ends of each row's error bar in columns ``lo`` / ``hi`` (NaN: no bar), and what they are.

    Two or more traces: ``y`` ± ``sd`` (the sd over traces). One trace: the sd over one trace is
    not a spread, so when ``y`` is a fraction of a run's requests (goodput; give ``n_requests``, the
    requests per run) the 95% bootstrap interval over those requests (`request_interval`), else no
    bar. The label (`interval_label`) goes into the legend or the axis label.
    """
    out = tab.copy()
    vals = out[y].to_numpy(dtype=float)
    if n_traces >= 2 and sd is not None:
        s = out[sd].to_numpy(dtype=float)
        out[lo], out[hi] = vals - s, vals + s
        return out, interval_label(n_traces)
    if n_traces == 1 and n_requests:
        ends = [request_interval(v, n_requests) for v in vals]
        out[lo], out[hi] = [e[0] for e in ends], [e[1] for e in ends]
        return out, interval_label(1, request_ci=True)
    out[lo], out[hi] = np.nan, np.nan
    return out, interval_label(n_traces)


def draw_interval(ax: Axes, x: Sequence[float], y: Sequence[float], lo: Sequence[float] | None,
                  hi: Sequence[float] | None, *, label: str | None = None, color: str = ERR_COLOR,
                  capsize: float = 2.5, zorder: float = 4) -> bool:
    """Error bars from ``lo`` to ``hi`` at ``x`` (absolute ends; rows with a NaN end get none). True if any drawn."""
    if lo is None or hi is None:
        return False
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(y)
    if not ok.any():
        return False
    yerr = np.vstack([np.maximum(y[ok] - lo[ok], 0.0), np.maximum(hi[ok] - y[ok], 0.0)])
    ax.errorbar(x[ok], y[ok], yerr=yerr, fmt="none", ecolor=color, elinewidth=1.0, capsize=capsize, zorder=zorder,
                label=label)
    return True


# ---- legends and paper values ------------------------------------------------------------------
def legend_outside(ax: Axes, where: str = "right", handles: Sequence[Artist] | None = None,
                   labels: Sequence[str] | None = None, **kw: Any) -> Legend:
    """A legend outside the axes, so that it covers no data: to the ``right`` (top-aligned) or ``below``
    (under the x tick labels and x label). ``save`` keeps it (``bbox_inches='tight'``).

    ``below`` measures the axes' decorations: call it after ``fig.tight_layout()``.
    """
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    kw.setdefault("frameon", False)
    if where == "right":
        return ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)
    if where == "below":
        fig = ax.figure
        fig.canvas.draw()
        bottom = ax.get_tightbbox(fig.canvas.get_renderer()).y0  # display units: under the tick labels and x label
        y = ax.transAxes.inverted().transform((0.0, bottom))[1]
        return ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, y - 0.02), borderaxespad=0.0, **kw)
    raise ValueError(f"legend_outside: where={where!r}; allowed: 'right', 'below'")


def merged_handles(axes: Iterable[Axes], last: Sequence[str | None] = ()) -> tuple[list[Artist], list[str]]:
    """The legend entries of several axes, each label once (first seen first; those in ``last`` at the
    end, in that order, e.g. the paper's marker and the interval): for one shared legend."""
    seen: dict[str, Artist] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, h)
    tail = [lab for lab in dict.fromkeys(last) if lab in seen]
    labels = [lab for lab in seen if lab not in tail] + tail
    return [seen[lab] for lab in labels], labels


def mark_paper(ax: Axes, x: Sequence[Any], y: Sequence[float], *, notes: Sequence[str] | None = None,
               label: str | None = PAPER_LABEL) -> None:
    """The paper's values as `PAPER_MARKER` at (``x``, ``y``); ``notes`` (one per point) say whose value
    each is where the figure does not (small text above the marker)."""
    xs, ys = list(x), [float(v) for v in y]
    if not xs:
        return
    ax.scatter(xs, ys, label=label, **PAPER_MARKER)
    for xi, yi, note in zip(xs, ys, notes or [], strict=False):
        if note:
            ax.annotate(note, (xi, yi), xytext=(0, 5), textcoords="offset points", fontsize=6.5, ha="center",
                        va="bottom")


# ---- lines and bars ----------------------------------------------------------------------------
def contiguous_groups(values: Sequence[float], step: float = 1.0) -> list[int]:
    """A group id per value (sorted ascending): a new group wherever the gap to the previous value exceeds
    ``step``. Points of one group are a contiguous sweep that a line may join (e.g. GPUs 3, 4, 5; not 3, 6)."""
    ids, g, prev = [], 0, None
    for v in values:
        if prev is not None and float(v) - float(prev) > step + 1e-9:
            g += 1
        ids.append(g)
        prev = v
    return ids


def policy_line(ax: Axes, x: Sequence[float], y: Sequence[float], policy: str, *, lo: Sequence[float] | None = None,
                hi: Sequence[float] | None = None, groups: Sequence[Any] | None = None, label: str | None = None,
                ms: float = 4.0, lw: float = 1.2, ls: str = "-", **kw: Any) -> None:
    """One policy's values over a sweep in its colour and marker: a marker at every measured point, a
    line only between neighbours of the same group (``groups``: e.g. `contiguous_groups`; None: one
    group, a contiguous sweep), error bars from ``lo`` to ``hi`` where given (`with_interval`)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    color = kw.pop("color", policy_color(policy))
    marker = kw.pop("marker", policy_marker(policy))
    label = policy_label(policy) if label is None else label
    groups = [0] * len(x) if groups is None else list(groups)
    ax.plot([], [], ls=ls, lw=lw, marker=marker, ms=ms, color=color, label=label, **kw)  # the legend's entry
    ax.plot(x, y, ls="none", marker=marker, ms=ms, color=color, zorder=3, **kw)
    for g in dict.fromkeys(groups):
        idx = [i for i, gi in enumerate(groups) if gi == g]
        if len(idx) > 1:
            ax.plot(x[idx], y[idx], ls=ls, lw=lw, color=color, zorder=2, **kw)
    draw_interval(ax, x, y, lo, hi, color=color, capsize=2.0, zorder=2.5)


def bar_with_paper(
    df: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None = None,
    paper: pd.DataFrame | None = None,
    *,
    err: str | tuple[str, str] | None = None,
    err_label: str | None = None,
    order: Sequence[Any] | None = None,
    hue_order: Sequence[Any] | None = None,
    color_by: str | None = None,
    palette: Sequence[str] | None = None,
    value_fmt: str | None = None,
    title: str = "",
    xlabel: str | None = None,
    ylabel: str | None = None,
    ax: Axes | None = None,
    ylim: tuple[float, float] | None = None,
    legend: str | None = "right",
) -> tuple[Figure, Axes]:
    """Bars of our ``y`` per ``x`` (and ``hue``) with the paper's value as `PAPER_MARKER` beside each.

    ``df`` has one row per bar (already aggregated). ``err``: a column of half-widths, or a pair of
    columns ``(lo, hi)`` with the ends of each bar's interval (`with_interval`); NaN means no bar;
    ``err_label`` says in the legend what the bars are (`interval_label`). ``paper`` has columns
    ``x`` (and ``hue``) and ``paper``: rows without a paper value are simply not marked.

    Colours: a bar's policy has its one colour (`policy_color`) when ``color_by`` names a column of
    policy names (default: ``hue``, else ``x``, if it is ``policy`` or ``variant``); other hues take
    ``palette`` (default: the style's) in plot order. ``value_fmt`` (e.g. ``"{:+.1f}"``) writes each
    bar's value beyond the end of its bar or interval. ``legend``: ``right`` / ``below`` of the axes
    (`legend_outside`), or None for none (a panel of a figure with one shared legend).
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
    if color_by is None:
        color_by = hue if hue in POLICY_COLUMNS else (x if hue is None and x in POLICY_COLUMNS else None)
    palette = list(palette) if palette is not None else matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    n_h = len(hue_order)
    width = 0.8 / n_h
    xs = np.arange(len(order), dtype=float)
    paper_drawn = err_drawn = False
    for j, h in enumerate(hue_order):
        sub = df if h is None else df[df[hue] == h]
        rows = [sub[sub[x] == k] for k in order]
        heights = np.array([float(r[y].iloc[0]) if len(r) else np.nan for r in rows])
        pos = xs - 0.4 + width * (j + 0.5)
        if color_by is not None:
            colors = [policy_color(str(r[color_by].iloc[0])) if len(r) else "none" for r in rows]
        else:
            colors = [palette[j % len(palette)]] * len(order)
        per_bar = color_by is not None and color_by != hue  # colours vary along x: the tick labels name them
        label = None if per_bar else ("ours" if h is None else (policy_label(h) if isinstance(h, str) else str(h)))
        ax.bar(pos, heights, width * 0.92, label=label, color=colors, edgecolor="white", linewidth=0.5)
        lo = hi = np.full(len(order), np.nan)
        if err is not None:
            if isinstance(err, str):
                half = np.array([float(r[err].iloc[0]) if len(r) else np.nan for r in rows])
                lo, hi = heights - half, heights + half
            else:
                lo = np.array([float(r[err[0]].iloc[0]) if len(r) else np.nan for r in rows])
                hi = np.array([float(r[err[1]].iloc[0]) if len(r) else np.nan for r in rows])
            err_drawn |= draw_interval(ax, pos, heights, lo, hi, label=None if err_drawn else err_label)
        if value_fmt is not None:  # beyond the bar's end and its whisker, so that neither hides the number
            for p_i, v, l_i, h_i in zip(pos, heights, lo, hi, strict=True):
                if np.isfinite(v):
                    up = v >= 0
                    end = np.nanmax([v, h_i]) if up else np.nanmin([v, l_i])
                    ax.annotate(value_fmt.format(v), (p_i, end), xytext=(0, 2 if up else -2),
                                textcoords="offset points", ha="center", va="bottom" if up else "top", fontsize=7)
        if paper is not None and len(paper):
            psub = paper if h is None else paper[paper[hue] == h]
            for p_i, k in zip(pos, order, strict=True):
                pv = psub.loc[psub[x] == k, "paper"]
                if len(pv) and not math.isnan(float(pv.iloc[0])):
                    ax.scatter([p_i], [float(pv.iloc[0])], label=None if paper_drawn else PAPER_LABEL,
                               **PAPER_MARKER)
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
    if legend is not None and ax.get_legend_handles_labels()[0]:
        handles, labels = merged_handles([ax], last=(PAPER_LABEL, err_label))  # the bars first
        legend_outside(ax, legend, handles=handles, labels=labels)
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




VERDICT_COLORS = {"reproduced": "#1a9850", "not reproduced": "#d73027", "contradicted": "#7f0000",
                  "within noise": "#fdae61"}
"""One colour per judged verdict, everywhere a verdict is drawn."""


def claims_forest(summary: pd.DataFrame, *, width_in: float = 9.0, per_claim: int = 3) -> Figure:
    """The conclusion's forest plot: for each headline claim (`repro.paper.claims.HEADLINE_CLAIMS`), its deciding
    rows (those whose verdict is the claim's, at most ``per_claim``, with a paper number not zero) as ours / the
    paper's (1 = the paper; the interval scaled the same; a negative ratio: the other side of zero), coloured by
    verdict, the first deciding row in bold."""
    from repro.paper.claims import HEADLINE_CLAIMS, claim_verdicts

    by_key = summary.drop_duplicates("key").set_index("key")
    verdicts = claim_verdicts(summary).set_index("claim")
    items: list[tuple[str, str, float, float, float, str, bool]] = []
    for c in HEADLINE_CLAIMS:
        if c.id not in verdicts.index:
            continue
        claim_verdict, main = str(verdicts.loc[c.id, "verdict"]), str(verdicts.loc[c.id, "key"])
        shown = 0
        for k in c.keys:  # the deciding rows: those as weak as the claim (its verdict), at most `per_claim`
            if k not in by_key.index or shown >= per_claim:
                continue
            r = by_key.loc[k]
            paper = float(r["paper"])
            if str(r["verdict"]) != claim_verdict or not math.isfinite(paper) or paper == 0:
                continue
            items.append((c.title, k, float(r["ours"]) / paper, float(r["ours_lo"]) / paper,
                          float(r["ours_hi"]) / paper, str(r["verdict"]), k == main))
            shown += 1
    fig, ax = plt.subplots(figsize=(width_in, 0.28 * max(len(items), 4) + 1.4))
    y = 0.0
    ticks, labels = [], []
    last = None
    for title, key, v, lo, hi, verdict, main in items:
        if title != last:
            y -= 0.6
            ax.text(-0.02, y, title, transform=ax.get_yaxis_transform(), ha="right", va="center",
                    fontsize=8, fontweight="bold")
            y -= 0.8
            last = title
        lo, hi = sorted((lo, hi))
        colour = VERDICT_COLORS[verdict]
        if math.isfinite(lo) and math.isfinite(hi):
            ax.plot([lo, hi], [y, y], color=colour, lw=2.5 if main else 1.5)
        ax.plot([v], [y], "o", color=colour, ms=6 if main else 4, mec="black" if main else colour)
        ticks.append(y)
        labels.append(key + ("  (deciding)" if main else ""))
        y -= 1.0
    ax.axvline(1.0, color="black", lw=1, ls="--")
    ax.axvline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set_xlabel("ours / the paper's number (1 = the paper's; 0 = no effect)")
    finite = [x for it in items for x in it[2:5] if math.isfinite(x)]
    if finite:
        span_lo, span_hi = max(min(finite), -3.0), min(max(finite), 4.0)
        ax.set_xlim(min(span_lo, -0.1) - 0.1, max(span_hi, 1.1) + 0.1)
    handles = [plt.Line2D([0], [0], color=c, marker="o", lw=2, label=v) for v, c in VERDICT_COLORS.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=7, frameon=True)
    ax.set_title("The paper's claims: each row ours / the paper's, with its interval", fontsize=9)
    fig.tight_layout()
    return fig
