"""Two `repro paper` results folders side by side (`repro compare DIR_A DIR_B`).

`compare` reads each folder's ``summary.csv`` (`repro.paper.summary`) and joins the rows on ``key``
(a key on one side only is kept and marked ``A only`` / ``B only``). Per row: ours with its 95 %
interval on each side, the difference B - A (in the row's unit), whether the two intervals overlap,
each side's verdict and whether it changed. Beside the rows: the grouped tally of each side
(`repro.paper.claims.tally`), the paper's headline claims on each side
(`repro.paper.claims.claim_verdicts`), the conditions each side was measured under (backend, scale,
commit, traces per row, how it was measured), the ``scorecard.csv`` rows when both sides have one
(joined on `SCORECARD_ON`), and the figures both sides' figure folders hold under the same file
name. `Comparison.to_html` writes one self-contained page (figures embedded as report.py
embeds them, plus a forest plot of the rows that changed most, `Comparison.forest`);
`Comparison.text_lines` is the same in Markdown for a terminal or a log.

The two sides are separate runs, usually on different traces (quick and full scales differ in the
traces and requests per run), so B - A is not a paired difference and "overlap" is a rough check
that the two measurements agree, not a test.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.paper.claims import GROUP_TITLES, claim_verdicts, own_rows, tally
from repro.paper.findings import VERDICT_MARK
from repro.paper.overview import markdown
from repro.paper.report import SCRIPT, STYLE, figure_html
from repro.paper.rules import VERDICTS
from repro.statistics.intervals import Estimate

__all__ = ["Comparison", "Side", "compare", "figures_of", "join", "read_side"]

SUMMARY_ON = ("key",)
"""What joins two summary.csv files."""
SCORECARD_ON = ("policy", "claim", "comparison", "setting", "metric", "key")
"""What joins two scorecard.csv files: those of these columns both have (policy, comparison and key are
required; a full scorecard repeats a comparison's key across claim groups and settings), the key without
its " (now <policy>)" (the best baseline of each side, in its ``rival`` column)."""
SCORECARD_REQUIRED = ("policy", "comparison", "key", "ours", "verdict")
"""The columns a scorecard.csv must have to be compared."""
REQUIRED = ("key", "ours", "ours_lo", "ours_hi", "verdict")
"""The columns a summary.csv must have to be compared (a tally also needs ``group``, or ``kind`` and ``paper``)."""
VALUES = ("ours", "ours_lo", "ours_hi", "verdict", "reason")
"""Per side in a joined frame, suffixed ``_a`` / ``_b``."""
DESCRIBE = ("notebook", "claim", "group", "kind", "unit", "paper", "meaning")
"""What a joined row says about itself, taken from A (from B for a row on B's side only)."""
FOREST_NAME = "compare_forest"
FOREST_LIMIT = 16
"""The most rows the forest plot draws (`Comparison.forest_rows`)."""
A_COLOR, B_COLOR = "#4477AA", "#EE6677"
EXTRA_STYLE = ("body{max-width:1500px}.pair{display:grid;grid-template-columns:1fr 1fr;gap:1rem}"
               ".pair h3{font-size:1rem;margin:.4rem 0}tr.changed{background:#fff4e5}"
               "td:nth-child(-n+2){overflow-wrap:anywhere}td:first-child{min-width:14em}")
"""What the page adds to report.html's style: wider (two sides), pairs of figures, changed rows
highlighted, long keys broken anywhere so that the values beside them stay on one line."""


@dataclass(frozen=True)
class Side:
    """One results folder: its ``summary.csv``, its ``scorecard.csv`` (None without one) and its figures
    folder (None when none was found). ``label`` names it in tables and figures (``A: sim-full``)."""

    label: str
    results: Path
    figures: Path | None
    summary: pd.DataFrame
    scorecard: pd.DataFrame | None = None

    @property
    def pngs(self) -> dict[str, Path]:
        """The PNG figures of the side's figures folder, by file name."""
        if self.figures is None or not self.figures.is_dir():
            return {}
        return {p.name: p for p in sorted(self.figures.glob("*.png"))}

    def conditions(self) -> dict[str, str]:
        """What the side was measured under, as text: folder, backend, scale, commit (``-dirty`` with
        uncommitted changes), traces per row (min-max over rows with any), rows (and measurements, each
        once), how the rows were measured, its figures and its scorecard."""
        s = self.summary

        def values(col: str, most: int = 3) -> str:
            if col not in s.columns:
                return "?"
            seen = [str(v) for v in dict.fromkeys(s[col].dropna()) if str(v) != ""]
            return ", ".join(seen[:most]) + (f" (+{len(seen) - most} more)" if len(seen) > most else "") or "?"

        traces = pd.to_numeric(s.get("traces", pd.Series(dtype=float)), errors="coerce")
        lo, hi = traces[traces > 0].min(), traces[traces > 0].max()
        figures = f"{len(self.pngs)} PNG in {self.figures}" if self.pngs else f"none ({self.figures or 'no folder'})"
        return {
            "folder": str(self.results),
            "backend": values("backend"),
            "scale": values("scale"),
            "commit": values("commit"),
            "traces per row": "?" if pd.isna(lo) else str(int(lo)) if lo == hi else f"{int(lo)}-{int(hi)}",
            "rows": f"{len(s)} ({len(own_rows(s))} measurements)",
            "measured": values("measured"),
            "figures": figures,
            "scorecard.csv": "no" if self.scorecard is None else f"{len(self.scorecard)} rows",
        }


def figures_of(results: Path) -> Path | None:
    """The figures folder `repro paper` writes beside a results folder: ``<root>/results/<name>`` ->
    ``<root>/figures/<name>`` (`repro.paper.summary.default_dirs`); None for a folder elsewhere."""
    return results.parent.parent / "figures" / results.name if results.parent.name == "results" else None


def read_side(results: str | Path, figures: str | Path | None = None, *, label: str = "") -> Side:
    """One results folder read: ``summary.csv`` (required, with `REQUIRED` columns), ``scorecard.csv``
    (optional), and ``figures`` (default `figures_of`). ConfigError naming the folder and what is missing."""
    results = Path(results)
    path = results / "summary.csv"
    if not results.is_dir():
        raise ConfigError(f"compare: {results} is not a folder (a results folder of `repro paper`, "
                          "e.g. results/sim-full)")
    if not path.exists():
        raise ConfigError(f"compare: {results} has no summary.csv (run `repro paper` there first)")
    summary = _read(path, REQUIRED)
    if "group" not in summary.columns and not {"kind", "paper"} <= set(summary.columns):
        raise ConfigError(f"compare: {path} has neither 'group' nor 'kind' and 'paper' (written by an older "
                          "version): rerun `repro paper`")
    card = results / "scorecard.csv"
    scorecard = _read(card, SCORECARD_REQUIRED) if card.exists() else None
    return Side(label or results.name, results, Path(figures) if figures else figures_of(results), summary, scorecard)


def _read(path: Path, required: Sequence[str]) -> pd.DataFrame:
    df = pd.read_csv(path, keep_default_na=True)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ConfigError(f"compare: {path} has no column {missing}: rerun `repro paper`")
    return df


def join(a: pd.DataFrame, b: pd.DataFrame, on: Sequence[str] = SUMMARY_ON) -> pd.DataFrame:
    """Rows of ``a`` and ``b`` joined on ``on`` (outer; A's order, then B's rows not in A; a key repeated
    on one side: its first row). Columns: ``on``, `DESCRIBE` (those present), ``side`` (``both`` /
    ``A only`` / ``B only``), `VALUES` suffixed ``_a`` / ``_b``, ``diff`` (ours B - ours A, the row's
    unit; NaN unless both), ``rel_diff`` (|diff| / max(|A|, |B|), 0 when both are 0), ``shift``
    (|diff| in half-widths of the two intervals combined, sqrt(hw_A^2 + hw_B^2); a row without an interval
    has hw 0; inf when neither has one and the values differ), ``overlap``
    (the 95 % intervals overlap; a row without an interval is its value; NA unless both have a value)
    and ``changed`` (the verdicts differ; False unless both sides have the row)."""
    on = list(on)
    describe = [c for c in DESCRIBE if (c in a.columns or c in b.columns) and c not in on]

    def part(df: pd.DataFrame, s: str) -> pd.DataFrame:
        df = df.drop_duplicates(on).reset_index(drop=True)
        out = pd.DataFrame({c: df[c].astype(object).fillna("").astype(str) for c in on})
        for c in (*VALUES, *describe):
            out[f"{c}_{s}"] = df[c] if c in df.columns else np.nan
        out[f"order_{s}"] = range(len(out))
        return out

    m = part(a, "a").merge(part(b, "b"), on=on, how="outer", indicator=True)
    m = m.sort_values(["order_a", "order_b"], na_position="last", kind="stable").reset_index(drop=True)
    out = m[on].copy()
    for c in describe:
        out[c] = m[f"{c}_a"].where(m[f"{c}_a"].notna(), m[f"{c}_b"])
    out["side"] = m["_merge"].map({"both": "both", "left_only": "A only", "right_only": "B only"}).astype(str)
    for s in ("a", "b"):
        for c in VALUES:
            out[f"{c}_{s}"] = m[f"{c}_{s}"]
    va, vb = (pd.to_numeric(out[f"ours_{s}"], errors="coerce") for s in ("a", "b"))
    out["diff"] = vb - va
    scale = np.maximum(va.abs(), vb.abs())
    out["rel_diff"] = (out["diff"].abs() / scale.where(scale > 0)).where(scale > 0, 0.0).where(out["diff"].notna())
    ends, half = {}, {}
    for s, v in (("a", va), ("b", vb)):
        lo, hi = (pd.to_numeric(out[f"ours_{e}_{s}"], errors="coerce") for e in ("lo", "hi"))
        has = lo.notna() & hi.notna()
        ends[s] = (lo.where(has, v), hi.where(has, v))
        half[s] = ((hi - lo) / 2).where(has, 0.0)
    width = np.sqrt(half["a"] ** 2 + half["b"] ** 2)
    out["shift"] = (out["diff"].abs() / width.where(width > 0)).where(
        width > 0, np.where(out["diff"].abs() > 0, np.inf, 0.0)).where(out["diff"].notna())
    ok = va.notna() & vb.notna()
    overlap = np.maximum(ends["a"][0], ends["b"][0]) <= np.minimum(ends["a"][1], ends["b"][1])
    out["overlap"] = pd.array([bool(o) if k else pd.NA for o, k in zip(overlap, ok, strict=True)], dtype="boolean")
    out["changed"] = (out["side"] == "both") & (out["verdict_a"].astype(str) != out["verdict_b"].astype(str))
    return out


@dataclass
class Comparison:
    """Two results folders compared (`compare`). ``rows``: the summaries joined (`join`); ``scorecard``:
    the scorecards joined, None unless both sides have one; ``tally_a`` / ``tally_b``: each side's grouped
    tally (`repro.paper.claims.tally`: groups by verdicts, each measurement once, with totals);
    ``claims``: one row per headline claim with each side's verdict, the row it rests on and ``changed``;
    ``figures``: the PNG names both figure folders hold; ``notes``: what a reader must know (a key
    repeated, a scorecard or figure on one side only)."""

    a: Side
    b: Side
    rows: pd.DataFrame
    scorecard: pd.DataFrame | None
    tally_a: pd.DataFrame
    tally_b: pd.DataFrame
    claims: pd.DataFrame
    figures: list[str]
    notes: list[str] = field(default_factory=list)

    # ---- what changed ----------------------------------------------------------------------------
    @property
    def changed(self) -> pd.DataFrame:
        """The rows on both sides whose verdict changed."""
        return self.rows[self.rows["changed"]]

    @property
    def one_side(self) -> pd.DataFrame:
        """The rows on one side only."""
        return self.rows[self.rows["side"] != "both"]

    @property
    def claims_changed(self) -> pd.DataFrame:
        """The headline claims whose verdict changed (``missing``: the side does not measure it)."""
        return self.claims[self.claims["changed"]]

    def forest_rows(self, limit: int = FOREST_LIMIT) -> pd.DataFrame:
        """The rows the forest plot draws, at most ``limit``: on both sides with a value, changed verdicts
        first (rows of the paper's headline claims before the others), then by ``shift`` (`join`: the
        difference in interval half-widths, largest first); rows that did not move at all left out."""
        r = self.rows[(self.rows["side"] == "both") & self.rows["diff"].notna()]
        r = r[r["changed"] | (r["shift"] > 0)]
        headline = (r["group"] == "headline") if "group" in r.columns else pd.Series(False, index=r.index)
        order = r.assign(headline=headline)
        keep = order.sort_values(["changed", "headline", "shift"], ascending=False, kind="stable").index[:limit]
        return r.loc[keep]

    # ---- tables as text ---------------------------------------------------------------------------
    def conditions_table(self) -> pd.DataFrame:
        """condition | A | B | same (bool): each side's `Side.conditions`."""
        ca, cb = self.a.conditions(), self.b.conditions()
        return pd.DataFrame({"condition": list(ca), self.a.label: list(ca.values()),
                             self.b.label: [cb[k] for k in ca], "same": [ca[k] == cb[k] for k in ca]})

    def tally_table(self) -> pd.DataFrame:
        """group | one column per verdict and total: ``n`` when both sides count n, else ``a -> b``."""
        groups = [g for g in dict.fromkeys([*self.tally_a.index, *self.tally_b.index]) if g != "total"] + ["total"]
        cols = [*VERDICTS, "total"]
        ta = self.tally_a.reindex(index=groups, columns=cols, fill_value=0)
        tb = self.tally_b.reindex(index=groups, columns=cols, fill_value=0)
        out = pd.DataFrame({"group": ["all" if g == "total" else g for g in groups]})
        for c in cols:
            out[c] = [str(x) if x == y else f"{x} -> {y}" for x, y in zip(ta[c], tb[c], strict=True)]
        return out

    def claims_table(self, only_changed: bool = False) -> pd.DataFrame:
        """claim | A | B | changed: each side's verdict with the row it rests on (``key: ours [95% CI]``)."""
        c = self.claims_changed if only_changed else self.claims
        return pd.DataFrame({"claim": c["title"], self.a.label: c["text_a"], self.b.label: c["text_b"],
                             "changed": c["changed"].map({True: "yes", False: ""})})

    def rows_table(self, rows: pd.DataFrame | None = None) -> pd.DataFrame:
        """The joined rows (default: those whose verdict changed) as text: key, notebook, each side's
        ours [95% CI], B - A, overlap, each side's verdict."""
        return display_rows(self.changed if rows is None else rows, self.a.label, self.b.label)

    def text_lines(self, all_rows: bool = False) -> list[str]:
        """The comparison in Markdown, for a terminal or a log: conditions, the tally, the headline claims,
        the rows whose verdict changed (every row with ``all_rows``), rows on one side only, and notes."""
        rows = self.rows if all_rows else self.changed
        out = [f"# {self.a.label} vs {self.b.label}", "", markdown(self.conditions_table()), "",
               "## The tally, each measurement once (A -> B where they differ)", "", markdown(self.tally_table()), "",
               f"## Headline claims ({len(self.claims_changed)} changed)", "", markdown(self.claims_table()), "",
               f"## {'Every row' if all_rows else 'Rows whose verdict changed'} ({len(rows)})", "",
               markdown(self.rows_table(rows))]
        if len(self.one_side):
            out += ["", f"## Rows on one side only ({len(self.one_side)})", "",
                    markdown(self.one_side[[*SUMMARY_ON, "side"]])]
        if self.scorecard is not None:
            sc = self.scorecard if all_rows else self.scorecard[self.scorecard["changed"]]
            out += ["", f"## Scorecard rows {'' if all_rows else 'whose verdict changed '}({len(sc)})", "",
                    markdown(display_rows(sc, self.a.label, self.b.label, on=SCORECARD_ON))]
        return out + ([""] + [f"- {n}" for n in self.notes] if self.notes else [])

    # ---- figures and the page ----------------------------------------------------------------------
    def forest(self, out_dir: str | Path, limit: int = FOREST_LIMIT) -> list[Path]:
        """Draw `forest_rows` (one small panel per row, its own unit: A's and B's value with the 95 %
        interval side by side, the paper's value as its marker, the verdicts in the title) and save
        ``<out_dir>/compare_forest.png`` and ``.pdf`` (`repro.paper.figures.save`: byte-stable);
        returns the paths, none when no row moved."""
        import matplotlib.pyplot as plt

        from repro.paper.figures import draw_interval, mark_paper, save, set_style

        rows = self.forest_rows(limit)
        if rows.empty:
            return []
        ncols = min(4, len(rows))
        nrows = math.ceil(len(rows) / ncols)
        with plt.rc_context():
            set_style()
            fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols, 2.0 * nrows + 0.4), squeeze=False)
            for ax, r in zip(axes.flat, rows.itertuples(), strict=False):
                for x, s, color in ((0, "a", A_COLOR), (1, "b", B_COLOR)):
                    v, lo, hi = (float(getattr(r, f"{c}_{s}")) for c in ("ours", "ours_lo", "ours_hi"))
                    draw_interval(ax, [x], [v], [lo], [hi], color=color)
                    ax.plot([x], [v], "o", color=color, ms=5, zorder=5)
                paper = pd.to_numeric(pd.Series([getattr(r, "paper", np.nan)]), errors="coerce").iloc[0]
                if not math.isnan(paper):
                    mark_paper(ax, [0.5], [paper], label=None)
                unit = "" if pd.isna(getattr(r, "unit", "")) else str(getattr(r, "unit", ""))
                verdicts = (f"{r.verdict_a} -> {r.verdict_b}" if r.changed else f"{r.verdict_a} (both)")
                ax.set_title("\n".join(wrap_key(str(r.key))) + f"\n{verdicts}", fontsize=6.5,
                             color="#a61b1b" if r.changed else "#222222")
                ax.set_xticks([0, 1], [self.a.label, self.b.label], fontsize=6.5)
                ax.set_xlim(-0.6, 1.6)
                ax.set_ylabel(unit, fontsize=7)
                ax.tick_params(axis="y", labelsize=6.5)
            for ax in axes.flat[len(rows):]:
                ax.set_visible(False)
            fig.suptitle(f"{self.a.label} vs {self.b.label}: ours with 95% intervals (diamond: the paper)",
                         fontsize=8)
            fig.tight_layout()
            return list(save(fig, FOREST_NAME, out_dir))

    def to_html(self, path: str | Path, *, forest_dir: str | Path | None = None, title: str = "") -> Path:
        """Write the page (``path``): the conditions, the tally side by side, the headline claims side by
        side, the rows whose verdict changed, the forest plot (saved in ``forest_dir``, default
        ``<path's folder>/<path's stem>_figures``), the rows on one side only, every row, the scorecard,
        then the figures both sides hold, A left and B right. Self-contained (figures as data URIs, no
        clock time: the same inputs give the same bytes). Returns ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        forest = self.forest(forest_dir or path.parent / f"{path.stem}_figures")
        path.write_text(self.page(forest[0] if forest else None, title=title), encoding="utf-8")
        return path

    def page(self, forest_png: Path | None = None, *, title: str = "") -> str:
        """The page's HTML (`to_html`), with ``forest_png`` embedded where given."""
        a, b = self.a.label, self.b.label
        title = title or f"Calibrate, Then Route: {a} vs {b}"
        moved = len(self.forest_rows())
        cond = self.conditions_table()
        tally = self.tally_table()
        tally["group"] = [g if g == "all" else f"{g}: {GROUP_TITLES[g]}" for g in tally["group"]]
        verdicts = ("verdict A", "verdict B")
        values = (a, b, "B - A")
        parts = [
            f"<h1>{html.escape(title)}</h1><p class=ctx>{len(self.rows)} rows: {len(self.changed)} changed verdict, "
            f"{len(self.one_side)} on one side only; {len(self.claims_changed)} of {len(self.claims)} headline "
            "claims changed verdict. The two sides are separate runs (usually on different traces): B - A is "
            "not a paired difference, and overlapping intervals are a rough check, not a test.</p>",
            "<h2 id=conditions>Conditions</h2>" + html_frame(cond.drop(columns="same"), marked=~cond["same"]),
            "".join(f"<p class=reason>{html.escape(n)}</p>" for n in self.notes),
            "<h2 id=tally>The tally, each measurement once</h2><p class=ctx>Measurements per group and verdict, "
            f"<code>A -&gt; B</code> where the two differ (A = {html.escape(a)}, B = {html.escape(b)}).</p>"
            + html_frame(tally, marked=[any("->" in str(v) for v in r) for r in tally.itertuples(index=False)],
                         nowrap=tuple(tally.columns[1:])),
            "<h2 id=claims>The headline claims</h2>"
            + html_frame(self.claims_table(), verdicts=(a, b), marked=self.claims["changed"]),
            f"<h2 id=changed>Rows whose verdict changed ({len(self.changed)})</h2>"
            + html_frame(self.rows_table(), verdicts=verdicts, nowrap=values),
        ]
        if forest_png is not None:
            parts.append(f"<h2 id=forest>The rows that moved most</h2><p class=ctx>{moved} rows: those whose "
                         "verdict changed (the headline claims' first), then those that moved most in units of "
                         f"their intervals' widths; each in its own unit.</p>{figure_html(forest_png)}")
        if len(self.one_side):
            parts.append(f"<h2 id=one-side>Rows on one side only ({len(self.one_side)})</h2>"
                         + html_frame(self.rows_table(self.one_side), verdicts=verdicts, nowrap=values))
        parts.append(f"<h2 id=rows>Every row ({len(self.rows)})</h2>"
                     + html_frame(self.rows_table(self.rows), verdicts=verdicts, marked=self.rows["changed"],
                                    nowrap=values))
        if self.scorecard is not None:
            parts.append(f"<h2 id=scorecard>The scorecard ({int(self.scorecard['changed'].sum())} changed "
                         f"verdict)</h2>" + html_frame(display_rows(self.scorecard, a, b, on=SCORECARD_ON),
                                                       verdicts=verdicts, marked=self.scorecard["changed"],
                                                       nowrap=values))
        parts.append(f"<h2 id=figures>Figures side by side ({len(self.figures)})</h2>"
                     "<p id=figures-status>figures not checked (no script)</p>")
        pa, pb = self.a.pngs, self.b.pngs
        for name in self.figures:
            parts.append(f"<h3>{html.escape(name)}</h3>" + pair(figure_html(pa[name]), figure_html(pb[name]), a, b))
        for side, mine, other in ((a, pa, pb), (b, pb, pa)):
            alone = [n for n in mine if n not in other]
            if alone:
                parts.append(f"<p class=ctx>Only in {html.escape(side)}: {html.escape(', '.join(alone))}</p>")
        return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
                f"<style>{STYLE}{EXTRA_STYLE}</style></head><body>{''.join(parts)}<script>{SCRIPT}</script>"
                "</body></html>")


def compare(dir_a: str | Path, dir_b: str | Path, *, figures_a: str | Path | None = None,
            figures_b: str | Path | None = None) -> Comparison:
    """Compare two `repro paper` results folders (each with ``summary.csv``; ConfigError naming the
    folder otherwise). ``figures_a`` / ``figures_b``: their figure folders (default `figures_of`)."""
    a = read_side(dir_a, figures_a, label=f"A: {Path(dir_a).name}")
    b = read_side(dir_b, figures_b, label=f"B: {Path(dir_b).name}")
    notes = []
    for side in (a, b):
        dup = sorted(set(side.summary["key"][side.summary["key"].duplicated()].astype(str)))
        if dup:
            notes.append(f"{side.label}: keys given twice, the first row compared: {', '.join(dup)}")
        if side.figures is None or not side.figures.is_dir():
            notes.append(f"{side.label}: no figures folder ({side.figures or 'none beside the results folder'})")
    scorecard = None
    if a.scorecard is not None and b.scorecard is not None:
        on = [c for c in SCORECARD_ON if c in a.scorecard.columns and c in b.scorecard.columns]
        scorecard = join(*(card.assign(key=card["key"].astype(object).fillna("").astype(str).str.replace(
            r" \(now [^)]*\)$", "", regex=True)) for card in (a.scorecard, b.scorecard)), on)
    elif a.scorecard is not None or b.scorecard is not None:
        notes.append(f"scorecard.csv only in {(a if a.scorecard is not None else b).label}: not compared")
    claims = claim_verdicts(a.summary).merge(claim_verdicts(b.summary), on=["claim", "title"], suffixes=("_a", "_b"))
    for s, side in (("a", a), ("b", b)):
        by_key = side.summary.drop_duplicates("key").set_index("key")
        claims[f"text_{s}"] = [v if not k else f"{v} ({k}: {estimate(by_key.loc[k], '')})"
                               for v, k in zip(claims[f"verdict_{s}"], claims[f"key_{s}"], strict=True)]
    claims["changed"] = claims["verdict_a"] != claims["verdict_b"]
    figures = [n for n in a.pngs if n in b.pngs]
    return Comparison(a, b, join(a.summary, b.summary), scorecard, tally(a.summary), tally(b.summary), claims,
                      figures, notes)


# ---- rendering helpers ---------------------------------------------------------------------------
def estimate(r: pd.Series, suffix: str = "") -> str:
    """``ours [lo, hi] unit`` of a row (``suffix`` ``_a`` / ``_b`` in a joined frame); "" without a value."""
    v = pd.to_numeric(pd.Series([r.get(f"ours{c}{suffix}") for c in ("", "_lo", "_hi")]), errors="coerce")
    if math.isnan(v[0]):
        return ""
    unit = r.get("unit", "")
    unit = "" if pd.isna(unit) or unit in ("", "fraction") else f" {unit}"
    return Estimate(float(v[0]), float(v[1]), float(v[2])).text(3) + unit


def wrap_key(key: str, width: int = 30) -> list[str]:
    """A key in lines of at most about ``width`` characters, broken after an underscore or before an ``@``."""
    lines, line = [], ""
    for part in re.split(r"(?<=_)|(?=@)", key):
        if line and len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    return [*lines, line] if line else lines


def display_rows(rows: pd.DataFrame, label_a: str, label_b: str, on: Sequence[str] = SUMMARY_ON) -> pd.DataFrame:
    """Joined rows (`join`) as text: ``on``, notebook (or claim), each side's ours [95% CI] (columns
    ``label_a`` / ``label_b``), B - A, overlap, ``verdict A``, ``verdict B``."""
    on = [c for c in on if c in rows.columns]
    where = next((c for c in ("notebook", "claim") if c in rows.columns and c not in on), None)
    out = rows[on].copy()
    if where:
        out[where] = rows[where].astype(object).fillna("").astype(str)
    out[label_a] = [estimate(r, "_a") for _, r in rows.iterrows()]
    out[label_b] = [estimate(r, "_b") for _, r in rows.iterrows()]
    out["B - A"] = [("" if pd.isna(d) else f"{d:+.3g}") for d in rows["diff"]]
    out["overlap"] = ["" if pd.isna(o) else "yes" if o else "no" for o in rows["overlap"]]
    out["verdict A"] = rows["verdict_a"].astype(object).fillna("").astype(str)
    out["verdict B"] = rows["verdict_b"].astype(object).fillna("").astype(str)
    return out.reset_index(drop=True)


def verdict_html(verdict: str) -> str:
    """A verdict as report.html shows it (its mark and its colour class)."""
    return (f"<span class='v-{html.escape(verdict.replace(' ', '-'))}'>"
            f"{html.escape(VERDICT_MARK.get(verdict, verdict))}</span>")


def html_frame(df: pd.DataFrame, *, verdicts: Sequence[str] = (), marked: Sequence[bool] = (),
               nowrap: Sequence[str] = ()) -> str:
    """A frame of text as an HTML table: cells escaped; a cell of the ``verdicts`` columns that starts
    with a verdict shown as `verdict_html`; the rows flagged in ``marked`` (one bool per row) marked
    ``changed`` (highlighted); the cells of ``nowrap`` columns on one line (other cells break anywhere,
    so that a long key does not push the numbers off the page)."""
    head = "<tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns) + "</tr>"
    marks = list(marked) or [False] * len(df)
    rows = []
    for mark, (_, r) in zip(marks, df.iterrows(), strict=True):
        cells = []
        for c in df.columns:
            text = "" if pd.isna(r[c]) else str(r[c])
            verdict, sep, rest = text.partition(" (")
            td = "<td class=num>" if c in nowrap else "<td>"
            cells.append(f"{td}{verdict_html(verdict)}{html.escape(sep + rest)}</td>"
                         if c in verdicts and verdict in (*VERDICTS, "missing") else f"{td}{html.escape(text)}</td>")
        rows.append(f"<tr{' class=changed' if mark else ''}>{''.join(cells)}</tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def pair(left: str, right: str, label_a: str, label_b: str) -> str:
    """Two HTML blocks side by side, A left and B right, each under its label."""
    return (f"<div class=pair><div><h3>{html.escape(label_a)}</h3>{left}</div>"
            f"<div><h3>{html.escape(label_b)}</h3>{right}</div></div>")
