"""Notebook 15 (`repro paper --policy`): a policy of yours against the paper's router and the best
baseline, claim by claim (the scorecard).

Each claim group (`GROUPS`) is one of the paper's comparisons of policies, made by its own section:
Table II (notebook 04), the miscalibration study (§V-B, 05), the workloads of Fig. 3 (06), the pool
widths of §V-D (07), the 1p2d scarcity of Fig. 4 (08), the load sweep and tails of Figs. 5-6 (09),
the predictor error of Fig. 9 (11), and for formulas of the paper's router the length ablation of
Fig. 8 (10). A group's runs are the section's specs, as the section makes them (the same traces,
rates, shapes and switches), plus for each policy of yours the learned router's runs with your
policy in its place (`contender_specs`). Three kinds of row come out per policy (`Scorecard.table`):

``as the router``
    the section's own headline rows for the group, computed with your policy's runs where the
    paper's router's were: the paper's claims about its router, asked of yours, judged by the
    same rule table (`repro.paper.rules.judge`). Key ``<section key>@<policy>``.
``vs the paper's router``
    your policy minus the paper's router in each setting of the group (a workload, a pool shape, a
    load, a noise level, a cost model), paired trace by trace (goodput paired by request:
    `repro.statistics.intervals.paired_difference`; P99 TTFT by trace), positive = yours is better.
``vs the best baseline``
    your policy minus the best of the paper's three baselines in that setting, picked after the
    fact (selection-aware: `repro.statistics.intervals.least_of`), positive = yours beats all three.

A comparison row's verdict (`repro.paper.rules.compare`): ``better`` / ``worse`` (the whole interval
beyond the tie margin, above / below zero), ``tie`` (the whole interval within it), ``within noise``
(with about how many traces would decide it). Goodput is a fraction, TTFT in seconds.

A group that turns on something a policy does not read is not run for it (`reads`: a short
simulation with 150 % predictor error, and one with the uncalibrated cost model; identical
decisions mean the policy does not read it), and the scorecard says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Required, TypedDict

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import figures
from repro.paper.contenders import (
    BASELINES,
    LEARNED,
    PolicyReads,
    as_router,
    check_policies,
    contender_specs,
    reads,
)
from repro.paper.grids import policy_summary, specs_grid
from repro.paper.headline import headline_frame
from repro.paper.rules import compare
from repro.routing.policies import PAPER_POLICIES, resolve_policy
from repro.statistics.intervals import Estimate
from repro.vocab import WORKLOADS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Labelled, Section

NOISE_LEVELS = (0.0, 1.5)
"""Fig. 9's ends: the predictor as shipped and 150 % injected error."""
AS_ROUTER, VS_ROUTER, VS_BASELINE = "as the router", "vs the paper's router", "vs the best baseline"
COMPARISONS = (AS_ROUTER, VS_ROUTER, VS_BASELINE)
"""The kinds of scorecard row, in the order shown."""
NOT_RUN = "not run"
"""The ``comparison`` (and ``verdict``) of a row saying a group was not run for a policy, and why (``reason``)."""
METRIC_UNITS = {"goodput": "fraction", "ttft_p99_s": "s"}
"""The metrics compared per setting, and their units."""
TABLE_COLUMNS = ("policy", "claim", "section", "comparison", "key", "setting", "metric", "ours", "ours_lo", "ours_hi",
                 "paper", "unit", "verdict", "reason", "rival", "interval", "traces", "requests", "runs")
"""The columns of `Scorecard.table` (and of ``scorecard.csv``)."""

Plan = Callable[["Section"], "list[RunSpec] | list[Labelled]"]
"""A group's specs with the paper's router, given a `Section`: plain specs, or ``(labels, spec)`` pairs."""
Headline = Callable[["Section", pd.DataFrame], "list[HeadlineRow]"]
"""A group's section's headline rows from the group's runs."""


class ScorecardRow(TypedDict, total=False):
    """One row of `Scorecard.table` (`TABLE_COLUMNS`): a ``comparison`` (`COMPARISONS`, or `NOT_RUN` with only
    the required keys and the ``reason``) of ``policy`` in ``claim``'s ``setting`` on ``metric``. ``ours`` with
    its 95 % interval ``ours_lo`` / ``ours_hi`` in ``unit`` (a paired difference, positive: the policy is
    better; as the router: the section's quantity), ``paper`` NaN for a comparison, ``rival`` the policy
    compared with, ``runs`` the run ids (space-separated)."""

    policy: Required[str]
    claim: Required[str]
    section: Required[str]
    comparison: Required[str]
    key: Required[str]
    setting: Required[str]
    metric: Required[str]
    verdict: Required[str]
    reason: Required[str]
    ours: float
    ours_lo: float
    ours_hi: float
    paper: float
    unit: str
    rival: str
    interval: str
    traces: int
    requests: int
    runs: str


@dataclass(frozen=True)
class ClaimGroup:
    """One of the paper's comparisons of policies, as its section makes and judges it."""

    name: str
    """The claim group's title (e.g. ``Table II``)."""
    section: str
    """The section notebook it comes from (``04_mixed_goodput``)."""
    keys: tuple[str, ...]
    """The section's headline keys that are claims about the learned router (asked of a contender)."""
    specs: Plan
    """The section's specs (or ``(labels, spec)`` pairs) with the paper's router, given a `Section`."""
    headline: Headline
    """The section's headline rows from the group's runs."""
    settings: tuple[str, ...] = ()
    """The run columns that tell the group's settings apart (a comparison per setting)."""
    metrics: tuple[str, ...] = ("goodput",)
    """What is compared per setting (`METRIC_UNITS`)."""
    reads: str = ""
    """What the group turns on: ``predictions`` (noise), ``cost_model`` (miscalibration), ``options`` (the
    router's own switches: only for a formula that takes them), or "" (every policy)."""


# ---- the groups: each section's specs and headline -------------------------------------------------
def _table2(ctx: Section) -> list[RunSpec] | list[Labelled]:
    from repro.paper.sections import mixed_goodput

    return mixed_goodput.table_two_specs(ctx, ctx.rate)


def _table2_rows(ctx: Section, runs: pd.DataFrame) -> list[HeadlineRow]:
    from repro.paper.sections import mixed_goodput

    return mixed_goodput.table_two_headline(mixed_goodput.table_two(runs), runs, ctx)


def _calibration(ctx: Section) -> list[RunSpec] | list[Labelled]:
    from repro.paper.sections import calibration_value

    return calibration_value.calibration_specs(ctx, ctx.rate)


def _calibration_rows(ctx: Section, runs: pd.DataFrame) -> list[HeadlineRow]:
    from repro.paper.sections import calibration_value

    return calibration_value.calibration_headline(runs, ctx)


def _workloads(ctx: Section) -> list[RunSpec] | list[Labelled]:
    return specs_grid(ctx, workloads=WORKLOADS, rates=dict(ctx.rates), policies=PAPER_POLICIES)


def _workloads_rows(ctx: Section, runs: pd.DataFrame) -> list[HeadlineRow]:
    from repro.paper.sections import heterogeneity

    return heterogeneity.heterogeneity_headline(heterogeneity.heterogeneity_table(runs), runs, ctx)


def _widths(ctx: Section) -> list[RunSpec] | list[Labelled]:
    from repro.paper.sections import pool_width

    return specs_grid(ctx, rates=ctx.rate, topologies=pool_width.width_topologies(), policies=PAPER_POLICIES)


def _widths_rows(ctx: Section, runs: pd.DataFrame) -> list[HeadlineRow]:
    from repro.paper.sections import pool_width

    return pool_width.width_headline(pool_width.width_table(runs), runs, ctx)


def _scarcity(ctx: Section) -> list[RunSpec] | list[Labelled]:
    return specs_grid(ctx, rates=ctx.rate, topologies=("1p2d",), policies=PAPER_POLICIES)


def _scarcity_rows(ctx: Section, runs: pd.DataFrame) -> list[HeadlineRow]:
    from repro.paper.sections import frontier

    shapes, front = frontier.frontier_table(runs)
    return frontier.frontier_headline(shapes, front, runs, ctx)


def _load(ctx: Section) -> list[RunSpec] | list[Labelled]:
    from repro.paper.sections import load_and_tails

    fractions = ctx.pick("rate_fractions", [], load_and_tails.RATE_FRACTIONS)
    return load_and_tails.load_sweep_specs(ctx, ctx.rate, fractions)


def _load_rows(ctx: Section, runs: pd.DataFrame) -> list[HeadlineRow]:
    from repro.paper.sections import load_and_tails as lt

    sweep, op = lt.load_sweep_table(runs, float(runs.rate.max())), lt.operating_point_table(runs)
    return lt.load_and_tails_headline(sweep, op, pd.DataFrame({"policy": []}), runs, ctx)


def _length(ctx: Section) -> list[RunSpec] | list[Labelled]:
    from repro.paper.sections import feature_ablation

    return feature_ablation.ablation_specs(ctx, feature_ablation.ablation_rates(ctx.rate), uncalibrated_features=(),
                                           features=["length"])


def _length_rows(ctx: Section, runs: pd.DataFrame) -> list[HeadlineRow]:
    from repro.paper.sections import feature_ablation

    return feature_ablation.ablation_headline(feature_ablation.ablation_table(runs), runs, ctx)


def _noise(ctx: Section) -> list[RunSpec] | list[Labelled]:
    from repro.paper.sections import predictor_noise

    return predictor_noise.noise_specs(ctx, ctx.rate, noise_levels=NOISE_LEVELS)


def _noise_rows(ctx: Section, runs: pd.DataFrame) -> list[HeadlineRow]:
    from repro.paper.sections import predictor_noise

    return predictor_noise.noise_headline(predictor_noise.noise_table(runs), runs, ctx)


GROUPS: dict[str, ClaimGroup] = {g.name: g for g in (
    ClaimGroup("Table II", "04_mixed_goodput", ("table2_mc_minus_best_baseline", "table2_mc_mean"),
               _table2, _table2_rows),
    ClaimGroup("§V-B calibration", "05_calibration_value",
               ("calib_goodput_gain", "calib_simderived_token_skew_minus_jsq"), _calibration, _calibration_rows,
               settings=("cost_model",), reads="cost_model"),
    ClaimGroup("Fig. 3 workloads", "06_heterogeneity",
               ("fig3_mc_minus_best_other_reasoning", "fig3_lt_minus_mc_chat",
                "fig3_worst_loadaware_minus_rr_documents"),
               _workloads, _workloads_rows, settings=("workload",)),
    ClaimGroup("§V-D pool width", "07_pool_width", ("width3_mc_margin", "width6_mc_margin"), _widths, _widths_rows,
               settings=("topology",)),
    ClaimGroup("Fig. 4 scarcity (1p2d)", "08_frontier", ("fig4_rr_minus_mc_1p2d",), _scarcity, _scarcity_rows,
               settings=("topology",)),
    ClaimGroup("Figs. 5-6 load and tails", "09_load_and_tails",
               ("fig6_best_other_minus_mc_ttft_p99", "fig6_mc_ttft_p99"),
               _load, _load_rows, settings=("rate",), metrics=("goodput", "ttft_p99_s")),
    ClaimGroup("Fig. 8 length", "10_feature_ablation", ("fig8_no_length_steady", "fig8_no_length_sat"),
               _length, _length_rows, settings=("operating_point",), reads="options"),
    ClaimGroup("Fig. 9 noise", "11_predictor_noise", ("fig9_mc_minus_lt_worst_noise",), _noise, _noise_rows,
               settings=("predictor_noise",), reads="predictions"),
)}
"""Claim group -> how its section makes and judges it, in the paper's order."""


# ---- which groups a policy is run in ----------------------------------------------------------------
def applies(group: ClaimGroup, policy: str, read: PolicyReads) -> tuple[bool, str]:
    """Whether ``group`` is run for ``policy`` (``read``: `reads`), and if not, why."""
    if group.reads == "options":
        need = {"use_length"}
        if need <= set(resolve_policy(policy).params):
            return True, ""
        return False, "ablates the paper's router's own switch (use_length), which this policy has not"
    if group.reads and not read.get(group.reads, True):
        what = {"predictions": "the predicted length (its decisions are identical under 150 % predictor error)",
                "cost_model": "the router's cost model (its decisions are identical with the uncalibrated one)"}
        return False, f"does not read {what[group.reads]}"
    return True, ""


# ---- the scorecard -----------------------------------------------------------------------------------
def _setting_text(settings: Sequence[str], values: Sequence[Any]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{s}={fmt(v)}" for s, v in zip(settings, values, strict=True)) or "the section's setting"


def _comparisons(ctx: Section, group: ClaimGroup, runs: pd.DataFrame, policy: str) -> list[ScorecardRow]:
    """Per setting of ``group`` and metric: ``policy`` vs the paper's router and vs the best baseline."""
    rows: list[ScorecardRow] = []
    plain = runs[runs.policy.isin((*PAPER_POLICIES, policy))]
    if "variant" in plain.columns:  # an ablation's variants of the router: its full form only
        plain = plain[plain.variant.fillna("full") == "full"]
    keys = list(group.settings)
    grouped = plain.groupby(keys, sort=True, dropna=False) if keys else [((), plain)]
    for values, at in grouped:
        values = values if isinstance(values, tuple) else (values,)
        mine, router = at[at.policy == policy], at[at.policy == LEARNED]
        rivals = {p: at[at.policy == p] for p in BASELINES if p != policy and (at.policy == p).any()}
        if mine.empty:
            continue
        setting = _setting_text(keys, values)
        for metric in group.metrics:
            unit = METRIC_UNITS[metric]
            lower_better = metric != "goodput"
            if not router.empty and set(router.seed) == set(mine.seed):
                est = ctx.difference(router, mine, metric) if lower_better else ctx.difference(mine, router, metric)
                rows.append(_row(group, policy, VS_ROUTER, metric, setting, est, unit, LEARNED,
                                 ctx.run_ids(mine, router)))
            rivals = {p: r for p, r in rivals.items() if set(r.seed) == set(mine.seed)}
            if rivals:
                est, best = ctx.least_difference(mine, rivals, metric, worst=lower_better)
                rows.append(_row(group, policy, VS_BASELINE, metric, setting, est, unit, best,
                                 ctx.run_ids(mine, *rivals.values())))
    return rows


def _row(group: ClaimGroup, policy: str, comparison: str, metric: str, setting: str, est: Estimate, unit: str,
         rival: str, runs: Sequence[str]) -> ScorecardRow:
    j = compare(est, unit)
    versus = "the paper's router" if comparison == VS_ROUTER else f"the best baseline (now {rival})"
    better = "lower" if metric != "goodput" else "higher"
    return {"policy": policy, "claim": group.name, "section": group.section, "comparison": comparison,
            "key": f"{metric}: {policy} vs {versus}", "setting": setting, "metric": metric, "ours": est.value,
            "ours_lo": est.lo, "ours_hi": est.hi, "paper": math.nan, "unit": unit, "verdict": j.verdict,
            "reason": f"{j.reason} (positive: {policy}'s {metric} is {better})", "rival": rival,
            "interval": est.method, "traces": est.traces, "requests": est.requests, "runs": " ".join(runs)}


def _as_router_rows(ctx: Section, group: ClaimGroup, runs: pd.DataFrame, policy: str) -> list[ScorecardRow]:
    from repro.paper import reference as paper_reference

    ref = paper_reference.load().set_index("key")
    got = {str(r["key"]): r for r in group.headline(ctx, as_router(runs, policy))}
    rows = []
    for key in group.keys:
        if key in got:  # the section's row, with the paper's number, unit and meaning of its key
            r = dict(got[key])
            r["key"] = f"{key}@{policy}"
            r.setdefault("paper", float(ref.loc[key, "value"]) if key in ref.index else math.nan)
            r["unit"] = r.get("unit") or (str(ref.loc[key, "unit"]) if key in ref.index else "")
            r["meaning"] = r.get("meaning") or (str(ref.loc[key, "quantity"]) if key in ref.index else key)
            rows.append(r)
    if not rows:
        return []
    judged = headline_frame(rows, ctx.notebook, ctx.measured(), ctx.testbed)
    return [{"policy": policy, "claim": group.name, "section": group.section, "comparison": AS_ROUTER,
             "setting": "", "metric": "", "rival": "", **{c: getattr(r, c) for c in
             ("key", "ours", "ours_lo", "ours_hi", "paper", "unit", "verdict", "reason", "interval", "traces",
              "requests", "runs")}} for r in judged.itertuples()]


@dataclass
class Scorecard:
    """The scorecard of some policies: every row (`TABLE_COLUMNS`), the runs, what each policy reads, and
    the groups skipped for a policy (policy -> group -> why)."""

    table: pd.DataFrame
    runs: pd.DataFrame
    policies: list[str]
    read: dict[str, PolicyReads]
    skipped: dict[str, dict[str, str]]
    conditions: str = ""
    """Backend, scale, traces and requests of the runs (one line)."""

    def summary(self) -> pd.DataFrame:
        """Per policy and claim group (`summarize`)."""
        return summarize(self.table)

    def markdown(self) -> str:
        """The scorecard as Markdown: per policy a heading ``### Scorecard of <policy>``, the summary table,
        the comparisons with their intervals, and the groups not run."""
        parts = []
        for p in self.policies:
            s = self.summary()
            s = s[s.policy == p].drop(columns="policy")
            parts.append(f"### Scorecard of `{p}`\n\n{self.conditions}. Reads the predicted length: "
                         f"{_yes(self.read.get(p, {}).get('predictions'))}; reads the cost model: "
                         f"{_yes(self.read.get(p, {}).get('cost_model'))}. {self.decision_text(p)}\n\n"
                         + _md_table(s))
            rows = self.table[(self.table.policy == p) & self.table.comparison.isin([VS_ROUTER, VS_BASELINE])]
            if len(rows):
                shown = pd.DataFrame({
                    "claim": rows.claim, "setting": rows.setting, "comparison": rows.key,
                    "ours [95% CI]": [Estimate(r.ours, r.ours_lo, r.ours_hi).text(3) + f" {r.unit}"
                                      for r in rows.itertuples()],
                    "verdict": rows.verdict})
                parts.append("Paired differences, positive: yours is better.\n\n" + _md_table(shown))
            claims = self.table[(self.table.policy == p) & (self.table.comparison == AS_ROUTER)]
            if len(claims):
                shown = pd.DataFrame({
                    "claim": claims.claim, "key": claims.key.str.split("@").str[0],
                    "ours [95% CI]": [Estimate(r.ours, r.ours_lo, r.ours_hi).text(3) + f" {r.unit}"
                                      for r in claims.itertuples()],
                    "paper": [figures.num(v, ".4g") for v in claims.paper], "verdict": claims.verdict})
                parts.append("The paper's claims about its router, asked of yours (the same rule table).\n\n"
                             + _md_table(shown))
        return "\n\n".join(parts)

    def figure(self, title: str = "") -> Figure:
        """A forest plot, one panel per metric (goodput in points, P99 TTFT in ms): per claim group and
        setting, each policy's paired difference with the paper's router (filled) and with the best
        baseline (open), with its 95 % interval; zero marked, right of it yours is better."""
        import matplotlib.pyplot as plt

        rows = self.table[self.table.comparison.isin([VS_ROUTER, VS_BASELINE])]
        rows = rows.assign(label=[f"{r.claim}: {r.setting}" for r in rows.itertuples()])
        labels = list(dict.fromkeys(rows.label))
        metrics = [m for m in METRIC_UNITS if (rows.metric == m).any()] or ["goodput"]
        fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics) + 3.2, 0.3 * len(labels) + 1.6),
                                 sharey=True, squeeze=False)
        series = [(p, c) for p in self.policies for c in (VS_ROUTER, VS_BASELINE)]
        step = 0.8 / max(len(series), 1)
        for ax, metric in zip(axes[0], metrics, strict=True):
            k = 100.0 if metric == "goodput" else 1000.0
            for j, (p, c) in enumerate(series):
                g = rows[(rows.policy == p) & (rows.comparison == c) & (rows.metric == metric)]
                if g.empty:
                    continue
                y = [labels.index(x) + (j - (len(series) - 1) / 2) * step for x in g.label]
                v, lo, hi = g.ours.to_numpy(float) * k, g.ours_lo.to_numpy(float) * k, g.ours_hi.to_numpy(float) * k
                err = np.vstack([v - lo, hi - v])
                color = figures.policy_color(p)
                ax.errorbar(v, y, xerr=np.where(np.isnan(err), 0.0, err), fmt="o" if c == VS_ROUTER else "s", ms=3.5,
                            capsize=2, color=color, mfc=color if c == VS_ROUTER else "white", label=f"{p} {c}")
            ax.axvline(0.0, color="black", lw=0.8)
            ax.set_xlabel("goodput difference (points)" if metric == "goodput" else "P99 TTFT difference (ms)")
        axes[0][0].set_yticks(range(len(labels)), labels, fontsize=7)
        axes[0][0].invert_yaxis()
        fig.suptitle(title or f"Scorecard: yours minus the rival, 95% intervals; right of zero: yours better\n"
                              f"({self.conditions})", fontsize=9)
        figures.legend_outside(axes[0][-1])
        fig.tight_layout()
        return fig

    def decision_text(self, policy: str) -> str:
        """One sentence on ``policy``'s decision times beside the paper's router's (`reads`' probe run)."""
        def fmt(p: str) -> str:
            t = self.read.get(p, {}).get("decision_time") or {}
            if t.get("p50_us") is None:
                return "unknown"
            return f"p50 {t['p50_us']:.0f} us, p99 {t['p99_us']:.0f} us, max {t['max_us']:.0f} us"

        return (f"Decision time (this machine, {self.read.get(policy, {}).get('decision_time', {}).get('n', 0)} "
                f"decisions of the probe run): {fmt(policy)}; the paper's router: {fmt(LEARNED)}.")

    def group_table(self, name: str) -> pd.DataFrame:
        """The group's runs summarised per setting and policy (goodput and P99 TTFT over traces), the
        section's own view of it with the contenders beside the paper's policies."""
        group = GROUPS[name]
        runs = self.runs[self.runs.claim == name]
        if runs.empty:
            return pd.DataFrame()
        return policy_summary(runs, (*group.settings, "policy"))


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per policy and claim group of a scorecard's rows (`Scorecard.table`, or ``scorecard.csv`` read back):
    the claims asked of the policy as the router (reproduced of rows), the comparisons with the paper's
    router and with the best baseline (verdict counts over the group's settings), or why the group was
    not run for it."""
    out = []
    for p in dict.fromkeys(table.policy):
        for name in [g for g in GROUPS if g in set(table.claim)]:
            mine = table[(table.policy == p) & (table.claim == name)]
            if mine.empty:
                continue
            if (mine.comparison == NOT_RUN).any():
                out.append({"policy": p, "claim": name, AS_ROUTER: f"not run: {mine.reason.iloc[0]}",
                            VS_ROUTER: "", VS_BASELINE: ""})
                continue
            row: dict[str, str] = {"policy": p, "claim": name}
            for kind in COMPARISONS:
                v = mine[mine.comparison == kind].verdict.tolist()
                if kind == AS_ROUTER:
                    row[kind] = f"{sum(x == 'reproduced' for x in v)} of {len(v)} reproduced" if v else ""
                else:
                    row[kind] = ", ".join(f"{n} {w}" for w, n in pd.Series(v, dtype=str).value_counts().items())
            out.append(row)
    return pd.DataFrame(out, columns=["policy", "claim", *COMPARISONS])


def _yes(v: bool | None) -> str:
    return "unknown" if v is None else ("yes" if v else "no")


def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(x).replace("|", "/").replace("\n", " ") for x in r) + " |")
    return "\n".join(lines)


def check_claims(claims: Sequence[str]) -> list[str]:
    """The claim groups asked for (`GROUPS`; empty: all), in the paper's order; an unknown one is a `ConfigError`."""
    unknown = [c for c in claims if c not in GROUPS]
    if unknown:
        raise ConfigError(f"parameter 'claims' = {unknown!r} unknown; allowed: {list(GROUPS)}")
    return [g for g in GROUPS if not claims or g in claims]


def score_section(ctx: Section, policies: Sequence[str], claims: Sequence[str] = ()) -> Scorecard:
    """The scorecard of ``policies`` on ``ctx``'s backend and plan (its traces, requests and operating
    rates; ``ctx.rates`` must hold every workload's): each claim group of ``claims`` (default all) run
    with the paper's four policies and each contender on the same traces, then judged (module docstring)."""
    policies = check_policies(policies)
    groups = check_claims(claims)
    missing = [w for w in WORKLOADS if w not in ctx.rates]
    if missing:
        raise ConfigError(f"{ctx.notebook}: no operating rate for {missing} (Section.setup(..., "
                          "workloads=WORKLOADS, rate=0.0) finds them)")
    read = {p: reads(p, rate=ctx.rate) for p in (*policies, LEARNED)}
    skipped: dict[str, dict[str, str]] = {p: {} for p in policies}
    rows: list[ScorecardRow] = []
    frames = []
    for name in groups:
        group = GROUPS[name]
        base = group.specs(ctx)
        items = list(base)
        who = []
        for p in policies:
            ok, why = applies(group, p, read[p])
            if ok:
                items += contender_specs(base, p)
                who.append(p)
            else:
                skipped[p][name] = why
                rows.append({"policy": p, "claim": name, "section": group.section, "comparison": NOT_RUN,
                             "key": "", "setting": "", "metric": "", "verdict": NOT_RUN, "reason": why})
        if not who:
            continue
        runs = ctx.run(items)
        frames.append(runs.assign(claim=name))
        for p in who:
            rows += _as_router_rows(ctx, group, runs, p)
            rows += _comparisons(ctx, group, runs, p)
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    conditions = (f"{ctx.backend}, {ctx.scale} scale, {len(ctx.seeds)} traces x {ctx.n_requests} requests, "
                  f"mixed at {ctx.rate:.3g} req/s, testbed {ctx.testbed or 'the cluster'}")
    return Scorecard(table, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), policies, read,
                     skipped, conditions)

