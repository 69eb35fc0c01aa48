"""Notebook 14: the paper's scorer beside its other readings and ours, claim by claim.

`marginal_cost` is the paper's scorer as §III describes it (every term in seconds, the decode
backlog at full weight), read as a deployed proxy runs it (its ledger counts decode work down from
the decode start; its TPOT is the per-token time of the batch it joins); the named readings
`marginal_cost_prefill_anchor`, `marginal_cost_backlog_tpot` and `marginal_cost_prior` are the
readings this harness used before (`repro.routing.policies.READINGS`): the sensitivity of each
verdict to them; `marginal_cost_batching` is our variant for continuously batching decode
engines (the decode backlog as the slowdown a newcomer shares; "beyond the paper"). Each claim the
paper makes about its learned router is measured for every formula with the claim's own section:
its specs (the formula takes the learned router's place), its headline function and so its
verdict rules (`repro.statistics.intervals`). The formula's runs are relabelled ``marginal_cost`` before
the section judges them, so a row here is exactly the section's row for that formula; the paper's
scorer's rows repeat the sections' own measurements (the simulation cache makes them free).

Keys: ``<section key>@<formula>``. Goodput a fraction, differences as the sections state them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import figures
from repro.paper import reference as paper_reference
from repro.paper.headline import headline_frame
from repro.paper.sections.scorecard import GROUPS, LEARNED, ClaimGroup
from repro.routing.policies import POLICIES
from repro.statistics.intervals import Estimate
from repro.vocab import WORKLOADS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Labelled, Section

FORMULAS = ("marginal_cost", "marginal_cost_prior", "marginal_cost_prefill_anchor", "marginal_cost_backlog_tpot",
            "marginal_cost_batching")
"""The formulas compared: the paper's scorer, its prior readings (both, then each alone) and our batching
variant."""
CLAIMS: dict[str, tuple[str, ...]] = {name: GROUPS[name].keys for name in (
    "Table II", "§V-B calibration", "Fig. 3 workloads", "§V-D pool width", "Fig. 4 scarcity (1p2d)", "Fig. 8 length",
    "Fig. 9 noise")}
"""Claim group -> the section headline keys measured per formula (the paper's mechanisms: the learned
router's lead, calibration's worth and its mechanism, the per-workload orderings, the width claims,
greedy concentration at 1p2d, length as the load-bearing feature, robustness to predictor noise); the
groups as the scorecard makes them (`repro.paper.sections.scorecard.GROUPS`)."""
ClaimPlan = tuple[Callable[[], "list[RunSpec] | list[Labelled]"], Callable[[pd.DataFrame], "list[HeadlineRow]"]]
"""A claim group's section specs with the learned router, and its headline rows from the runs (`claim_plans`)."""


def _check_formulas(formulas: Sequence[str]) -> list[str]:
    bad = [f for f in formulas if f not in POLICIES]
    if not formulas or bad:
        raise ConfigError(f"parameter 'formulas' = {list(formulas)!r}: each must be a registered policy; "
                          f"allowed: {sorted(POLICIES)}")
    return list(formulas)


def _swap(items: Sequence[RunSpec] | Sequence[Labelled], formula: str) -> list[RunSpec] | list[Labelled]:
    """The specs (or ``(labels, spec)`` pairs) with the learned router replaced by ``formula``, keeping its
    options (an ablation's switch) when the formula takes them."""
    def one(spec: RunSpec) -> RunSpec:
        return spec.replace(policy=formula) if spec.policy == LEARNED else spec

    return [(it[0], one(it[1])) if isinstance(it, tuple) else one(it) for it in items]


def _relabel(runs: pd.DataFrame, formula: str) -> pd.DataFrame:
    """``formula``'s rows under the learned router's name, so the section's own code judges them."""
    return runs.assign(policy=runs.policy.replace({formula: LEARNED})) if formula != LEARNED else runs


def claim_plans(ctx: Section) -> dict[str, ClaimPlan]:
    """Claim group -> (the section's specs with the learned router, its headline rows from the runs)
    (`repro.paper.sections.scorecard.GROUPS`). ``ctx`` set up with every workload's operating rate
    (``ctx.rates``; mixed's is ``ctx.rate``)."""
    missing = [w for w in WORKLOADS if w not in ctx.rates]
    if missing:
        raise ConfigError(f"{ctx.notebook}: no operating rate for {missing} (set the section up with every workload)")

    def plan(group: ClaimGroup) -> ClaimPlan:
        return (lambda: group.specs(ctx)), (lambda runs: group.headline(ctx, runs))

    return {name: plan(GROUPS[name]) for name in CLAIMS}


def scorer_rows(ctx: Section, formulas: Sequence[str] = FORMULAS,
                claims: Sequence[str] | None = None) -> tuple[list[HeadlineRow], pd.DataFrame]:
    """Every claim of `CLAIMS` (or ``claims``) measured for every formula: ``(headline rows, runs)``.

    A row is the section's own row for the formula's runs, keyed ``<key>@<formula>``, with the
    paper's value, unit and meaning of the section key (the same claim, judged the same way).
    ``runs``: every run (its real policy name), with ``claim`` and ``formula`` columns.
    """
    formulas = _check_formulas(formulas)
    groups = list(CLAIMS) if claims is None else list(claims)
    unknown = [c for c in groups if c not in CLAIMS]
    if unknown:
        raise ConfigError(f"parameter 'claims' = {unknown!r} unknown; allowed: {list(CLAIMS)}")
    plans = claim_plans(ctx)
    ref = paper_reference.load().set_index("key")
    rows: list[HeadlineRow] = []
    frames = []
    # every formula's runs of every group at once (then each grid below reads them from the cache)
    ctx.prefetch([item for group in groups for formula in formulas for item in _swap(plans[group][0](), formula)])
    for group in groups:
        make_specs, headline = plans[group]
        specs = make_specs()
        for formula in formulas:
            runs = ctx.run(_swap(specs, formula))
            frames.append(runs.assign(claim=group, formula=formula))
            got = {str(r["key"]): r for r in headline(_relabel(runs, formula))}
            for key in CLAIMS[group]:
                if key not in got:
                    continue
                r = dict(got[key])
                r["key"] = f"{key}@{formula}"
                r.setdefault("paper", float(ref.loc[key, "value"]) if key in ref.index else np.nan)
                r["unit"] = r.get("unit") or (str(ref.loc[key, "unit"]) if key in ref.index else "")
                meaning = r.get("meaning") or (str(ref.loc[key, "quantity"]) if key in ref.index else key)
                r["meaning"] = f"{formula}: {meaning}"
                rows.append(r)
    return rows, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _judged(rows: list[HeadlineRow], notebook: str = "14_scorers") -> pd.DataFrame:
    """The rows judged (`repro.paper.headline.headline_frame`), their keys split into section key and formula."""
    judged = headline_frame(rows, notebook)
    judged[["section_key", "formula"]] = judged.key.str.split("@", n=1, expand=True)
    return judged


def scorer_table(rows: list[HeadlineRow], notebook: str = "14_scorers") -> pd.DataFrame:
    """The judged rows side by side: one row per (claim group, section key), per formula its value
    with its interval and its verdict (`repro.paper.headline.headline_frame`)."""
    judged = _judged(rows, notebook)
    group_of = {k: g for g, keys in CLAIMS.items() for k in keys}
    judged["claim"] = judged.section_key.map(group_of)
    judged["estimate"] = [Estimate(r.ours, r.ours_lo, r.ours_hi).text() for r in judged.itertuples()]
    out = []
    for key in dict.fromkeys(k for keys in CLAIMS.values() for k in keys):
        g = judged[judged.section_key == key]
        if g.empty:
            continue
        row: dict[str, Any] = {"claim": group_of[key], "section_key": key, "paper": g.paper.iloc[0],
                               "unit": g.unit.iloc[0]}
        for r in g.itertuples():
            row[f"{r.formula} estimate"], row[f"{r.formula} verdict"] = r.estimate, r.verdict
        out.append(row)
    return pd.DataFrame(out)


def scorer_figure(rows: list[HeadlineRow], title: str) -> Figure:
    """A forest plot: per claim row that is a difference (an ordering, or the calibration gain), each
    formula's value with its 95 % interval (goodput differences in points), zero marked, the paper's
    value as a black cross where it states one. Absolute goodputs are left to the table."""
    import matplotlib.pyplot as plt

    judged = _judged(rows)
    judged = judged[(judged.kind == "ordering") | (judged.unit == "points")]
    scale = np.where(judged.unit.isin(["fraction", "goodput"]), 100.0, 1.0)  # everything in points
    judged = judged.assign(v=judged.ours * scale, lo=judged.ours_lo * scale, hi=judged.ours_hi * scale,
                           p=judged.paper * scale)
    keys = list(dict.fromkeys(k for keys in CLAIMS.values() for k in keys if k in set(judged.section_key)))
    formulas = list(dict.fromkeys(judged.formula))
    fig, ax = plt.subplots(figsize=(8.5, 0.45 * len(keys) + 1.4))
    step = 0.8 / max(len(formulas), 1)
    for j, f in enumerate(formulas):
        g = judged[judged.formula == f].set_index("section_key")
        y = [keys.index(k) + (j - (len(formulas) - 1) / 2) * step for k in g.index]
        err = np.vstack([g.v - g.lo, g.hi - g.v])
        ax.errorbar(g.v, y, xerr=np.where(np.isnan(err), 0.0, err), fmt="o", ms=4, capsize=2,
                    color=figures.policy_color(f), label=f)
    paper = judged.drop_duplicates("section_key").set_index("section_key").p
    shown = paper.dropna()
    ax.scatter(shown.values, [keys.index(k) for k in shown.index], marker="x", color="black", zorder=3,
               label=figures.PAPER_LABEL)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(range(len(keys)), keys, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ours with its 95% interval (goodput differences in points; the skew row in max/mean)")
    ax.set_title(title, fontsize=9)
    figures.legend_outside(ax)
    fig.tight_layout()
    return fig


def mechanisms(table: pd.DataFrame, formulas: Sequence[str] = FORMULAS) -> pd.DataFrame:
    """Which of the paper's mechanisms each formula shows: per claim group and formula, how many of its
    rows are reproduced, and their verdicts."""
    out = []
    for group, g in table.groupby("claim", sort=False):
        for f in formulas:
            col = f"{f} verdict"
            if col not in g.columns:
                continue
            v = g[col].fillna("").tolist()
            out.append({"claim": group, "formula": f, "reproduced": sum(x == "reproduced" for x in v),
                        "rows": len(v), "verdicts": ", ".join(x for x in v if x)})
    return pd.DataFrame(out)
