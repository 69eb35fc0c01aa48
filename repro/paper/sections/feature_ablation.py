"""§V-G, notebook 10 (Fig. 8): which feature does the work.

The marginal-cost router with one term switched off, at a steady-load and a saturation operating
point, as the change in goodput against the full router on the same trace (paired by seed), in
goodput *points* (1 point = 0.01). The paper: removing predicted length costs 3.2 points at steady
load and 4.7 under saturation (the largest loss in both); cache pressure changes nothing
measurable; removing the SLO term costs 1.7 points at moderate load, gains 3.7 under deep
saturation, and cost 12 points with simulator-derived constants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import reference as paper_reference

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Labelled, Section

ABLATION_FEATURES = (
    ("backlog", "use_backlog"),
    ("length", "use_length"),
    ("cache_pressure", "use_cache_pressure"),
    ("slo", "use_slo"),
)
"""(term, the marginal-cost router's switch that turns it off)."""
FEATURE_LABELS = {"backlog": "seconds of backlog", "length": "predicted output length",
                  "cache_pressure": "cache pressure", "slo": "SLO tightness"}
OPERATING_POINTS = ("steady", "saturation")
FORMULAS = ("marginal_cost", "marginal_cost_batching")
"""The learned router's formulas whose terms are left out (`term_contributions`): the paper's scorer and
our batching variant (notebook 14 compares them claim by claim)."""
# (operating point, cost model, feature) -> (paper key, sign): our "change" = without - full (points);
# the paper states the length losses as positive losses, hence the sign.
ABLATION_PAPER = {
    ("steady", "calibrated", "length"): ("fig8_no_length_steady", -1.0),
    ("saturation", "calibrated", "length"): ("fig8_no_length_sat", -1.0),
    ("steady", "calibrated", "cache_pressure"): ("fig8_cache_pressure", 1.0),
    ("saturation", "calibrated", "cache_pressure"): ("fig8_cache_pressure", 1.0),
    ("steady", "calibrated", "slo"): ("fig8_slo_moderate", 1.0),
    ("saturation", "calibrated", "slo"): ("fig8_slo_sat", 1.0),
    ("steady", "sim_derived", "slo"): ("fig8_slo_uncalibrated", 1.0),
}


def ablation_rates(saturation_rate: float, steady_fraction: float = 0.75) -> dict[str, float]:
    """The two operating points of §V-G (req/s): steady load (``steady_fraction`` of the saturation rate)
    and saturation."""
    if not saturation_rate > 0:
        raise ConfigError(f"saturation rate must be > 0 req/s, got {saturation_rate!r}")
    if not 0 < steady_fraction < 1:
        raise ConfigError(f"parameter 'steady_fraction' = {steady_fraction!r} must be in (0, 1)")
    return {"steady": float(saturation_rate) * steady_fraction, "saturation": float(saturation_rate)}


def ablation_specs(ctx: Section, rates: Mapping[str, float] | None = None, *, topology: str = "2p4d",
                   workload: str = "mixed", uncalibrated_features: Sequence[str] = ("slo",),
                   features: Sequence[str] | None = None, formula: str = "marginal_cost") -> list[Labelled]:
    """``(labels, spec)`` for Fig. 8: the full router and each term off, per operating point and trace.

    ``rates``: operating point -> req/s (default `ablation_rates` of 16 req/s). With the calibrated
    cost model every term of ``features`` is ablated (default: every term of `ABLATION_FEATURES`);
    with the simulator-derived constants (``sim_derived``) the terms in ``uncalibrated_features``
    are (the paper's -12-point SLO case). Labels: operating_point, variant ('full' or the term).
    ``formula``: the learned router's formula (the paper's ``marginal_cost``, or a variant with the
    same four switches, e.g. ``marginal_cost_batching``).
    """
    rates = rates or ablation_rates(16.0)
    known = {f for f, _ in ABLATION_FEATURES}
    features = list(features) if features else [f for f, _ in ABLATION_FEATURES]
    bad = [f for f in [*uncalibrated_features, *features] if f not in known]
    if bad:
        raise ConfigError(f"ablation: unknown feature(s) {bad}; allowed: {sorted(known)}")
    out = []
    for op, rate in rates.items():
        for cm, feats in (("calibrated", features), ("sim_derived", list(uncalibrated_features))):
            if not feats:
                continue
            for variant in ["full", *feats]:
                opts = {} if variant == "full" else {dict(ABLATION_FEATURES)[variant]: False}
                for s in ctx.seeds:
                    spec = RunSpec.from_flat(backend=ctx.backend, workload=workload, topology=topology, seed=int(s),
                                             rate=float(rate), n_requests=int(ctx.n_requests), policy=formula,
                                             policy_options=opts, cost_model=cm, cluster=ctx.cluster,
                                             time_scale=ctx.time_scale)
                    out.append(({"operating_point": op, "variant": variant}, spec))
    return out


def ablation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (operating point, cost model, feature): goodput with and without, the paired change (points).

    ``change_points`` = mean over seeds of (goodput without the term - goodput of the full router on
    the same trace) x 100; ``change_sd`` its standard deviation over seeds; ``paper_change_points``
    the paper's value in the same sign convention (negative = the term helps).
    """
    rows = []
    for (op, cm), g in runs.groupby(["operating_point", "cost_model"], sort=False):
        full = g[g.variant == "full"].set_index("seed")
        for feat, _ in ABLATION_FEATURES:
            w = g[g.variant == feat].set_index("seed")
            if w.empty:
                continue
            seeds = sorted(set(full.index) & set(w.index))
            d = (w.loc[seeds, "goodput"].to_numpy(float) - full.loc[seeds, "goodput"].to_numpy(float)) * 100.0
            key, sign = ABLATION_PAPER.get((op, cm, feat), (None, 1.0))
            rows.append({"operating_point": op, "cost_model": cm, "feature": feat, "rate": float(full.rate.iloc[0]),
                         "full_goodput": float(full.loc[seeds, "goodput"].mean()),
                         "without_goodput": float(w.loc[seeds, "goodput"].mean()),
                         "change_points": float(d.mean()), "change_sd": float(d.std(ddof=1)) if len(d) > 1 else 0.0,
                         "seeds": len(seeds), "paper_key": key or "",
                         "paper_change_points": sign * paper_reference.lookup(key) if key else np.nan})
    return pd.DataFrame(rows)


def term_contributions(ctx: Section, runs: pd.DataFrame) -> pd.DataFrame:
    """Leave-one-term-out per formula: per (policy = formula, operating point, cost model,
    term) the paired change in goodput without the term (points; negative: the term helps) with its
    95 % interval (`Section.difference`: over traces and requests) and `ablation_table`'s columns."""
    out = []
    for formula, g in runs.groupby("policy", sort=False):
        tab = ablation_table(g)
        lo, hi = [], []
        for r in tab.itertuples():
            here = g[(g.operating_point == r.operating_point) & (g.cost_model == r.cost_model)]
            e = ctx.difference(here[here.variant == r.feature], here[here.variant == "full"]).scaled(100.0)
            lo.append(e.lo)
            hi.append(e.hi)
        out.append(tab.assign(formula=formula, change_lo=lo, change_hi=hi))
    if not out:
        return pd.DataFrame()
    tab = pd.concat(out, ignore_index=True)
    return tab[["formula", *[c for c in tab.columns if c != "formula"]]]


def term_figure(terms: pd.DataFrame, point_labels: Mapping[str, str], *, title: str) -> Figure:
    """`term_contributions` as bars: one panel per operating point, the terms on x, one bar per formula
    (its colour in every figure) with its 95 % interval, zero marked."""
    import matplotlib.pyplot as plt

    from repro.paper import figures

    points = [op for op in OPERATING_POINTS if op in set(terms.operating_point)]
    formulas = list(dict.fromkeys(terms.formula))
    fig, axes = plt.subplots(1, max(len(points), 1), figsize=(5.2 * max(len(points), 1), 3.8), sharey=True,
                             squeeze=False)
    width = 0.8 / max(len(formulas), 1)
    for ax, op in zip(axes[0], points, strict=False):
        g = terms[terms.operating_point == op]
        feats = [f for f, _ in ABLATION_FEATURES if f in set(g.feature)]
        for j, f in enumerate(formulas):
            h = g[g.formula == f].set_index("feature").reindex(feats)
            x = np.arange(len(feats)) + (j - (len(formulas) - 1) / 2) * width
            err = np.vstack([h.change_points - h.change_lo, h.change_hi - h.change_points])
            ax.bar(x, h.change_points, width, color=figures.policy_color(f), label=f,
                   yerr=np.where(np.isnan(err), 0.0, err), capsize=2, error_kw={"lw": 0.8})
        ax.set_xticks(range(len(feats)), [FEATURE_LABELS[f] for f in feats], rotation=15, fontsize=8)
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_title(point_labels.get(op, op), fontsize=9)
        ax.set_xlabel("term removed")
    axes[0][0].set_ylabel("goodput change vs the full formula (points)")
    figures.legend_outside(axes[0][-1])
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def ablation_headline(tab: pd.DataFrame, runs: pd.DataFrame, ctx: Section) -> list[HeadlineRow]:
    """Headline rows in the reference's own conventions (the length rows are *losses*, positive; the others
    the change without the term), in goodput points, each a paired difference over the same traces with its
    95 % interval (an ordering on the paper's side; "nothing measurable" is a claimed tie within 2 points);
    and per operating point whether dropping the predicted length costs more than dropping any other term
    (the next-largest loss minus the length loss, paired)."""
    def of(op: str, cm: str, variant: str) -> pd.DataFrame:
        return runs[(runs.operating_point == op) & (runs.cost_model == cm) & (runs.variant == variant)]

    t = tab.set_index(["operating_point", "cost_model", "feature"])
    out: list[HeadlineRow] = []

    def change(op: str, cm: str, feat: str, loss: bool = False) -> dict[str, Any] | None:
        if (op, cm, feat) not in t.index:
            return None
        full, without = of(op, cm, "full"), of(op, cm, feat)
        a, b = (full, without) if loss else (without, full)
        return {"ours": ctx.difference(a, b).scaled(100.0), "kind": "ordering", "runs": ctx.run_ids(full, without)}

    for op, key in (("steady", "fig8_no_length_steady"), ("saturation", "fig8_no_length_sat")):
        row = change(op, "calibrated", "length", loss=True)
        if row:
            out.append({"key": key, **row})
    cp = [(op, change(op, "calibrated", "cache_pressure")) for op in OPERATING_POINTS]
    cp = [(op, r) for op, r in cp if r]
    if cp:  # "nothing measurable": the larger-magnitude change of the two regimes
        op, row = max(cp, key=lambda x: abs(x[1]["ours"].value))
        out.append({"key": "fig8_cache_pressure", **row, "claim": 0, "tolerance": 2.0,
                    "meaning": f"goodput change without cache pressure ({op}; the larger of the two regimes)"})
    for op, key in (("steady", "fig8_slo_moderate"), ("saturation", "fig8_slo_sat")):
        row = change(op, "calibrated", "slo")
        if row:
            out.append({"key": key, **row})
    row = change("steady", "sim_derived", "slo")
    if row:
        out.append({"key": "fig8_slo_uncalibrated", **row})
    for op in OPERATING_POINTS:
        g = tab[(tab.cost_model == "calibrated") & (tab.operating_point == op)]
        others = g[g.feature != "length"].sort_values("change_points")
        if "length" not in set(g.feature) or others.empty:
            continue
        nxt = str(others.iloc[0].feature)
        a, b = of(op, "calibrated", nxt), of(op, "calibrated", "length")
        out.append({"key": f"fig8_length_loss_minus_next_{op}", "ours": ctx.difference(a, b).scaled(100.0),
                    "kind": "ordering", "claim": 1, "paper": np.nan, "unit": "points", "runs": ctx.run_ids(a, b),
                    "meaning": f"{op}: goodput without {nxt} (the next-largest loss) minus goodput without the "
                               "predicted length, paired by trace (the paper: length is the largest loss: positive)"})
    return out
