"""§V-F, notebook 09 (Figs. 5-7): load and tails.

Fig. 5: a rate sweep up to the operating point (mixed, 2p4d); Fig. 6: P99 TTFT at the operating
point; Fig. 7: a burst train (`RunSpec.arrival`, a `repro.workload.arrivals` burst process,
mean rate = the operating point) with rolling P95 TTFT and goodput over arrival-time windows.
Rates in requests per second, times in seconds, goodput a fraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import reference as paper_reference
from repro.paper.grids import PAPER_POLICY_RANK, paper_value, policy_summary, specs_grid
from repro.routing.policies import PAPER_POLICIES
from repro.statistics.intervals import Estimate, over_traces, resample, wilson

if TYPE_CHECKING:
    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Section

RATE_FRACTIONS = (0.25, 0.4, 0.55, 0.7, 0.85, 1.0)
"""Fig. 5's rates as fractions of the operating point."""
BURST = {"process": "burst", "burst_factor": 3.0, "period_s": 30.0, "duty": 0.2}
"""Fig. 7's default burst train: 3x the mean rate for 20% of every 30 s."""
BURST_PERIODS = 3
"""A burst-train run spans at least this many burst periods."""
FIG6_KEYS = {"marginal_cost": "fig6_mc_ttft_p99", "round_robin": "fig6_rr_ttft_p99",
             "least_loaded": "fig6_ll_ttft_p99"}


def load_sweep_specs(ctx: Section, rate: float, rate_fractions: Sequence[float],
                     policies: Sequence[str] = PAPER_POLICIES) -> list[RunSpec]:
    """Fig. 5's runs: ``policies`` x traces at each fraction of the operating ``rate`` (req/s), lowest first.

    ``rate_fractions`` must be a non-empty list of fractions in (0, 4] (a `ValueError` otherwise).
    """
    if not rate_fractions or any(not 0 < f <= 4 for f in rate_fractions):
        raise ValueError(f"parameter 'rate_fractions' = {rate_fractions!r}: a non-empty list of fractions in (0, 4]")
    return [s for f in sorted(rate_fractions) for s in specs_grid(ctx, rates=rate * f, policies=policies)]


def load_sweep_table(runs: pd.DataFrame, operating_rate: float) -> pd.DataFrame:
    """Per (rate, policy): goodput and P99 TTFT over seeds; ``load`` = rate / operating rate; the paper's
    round-robin values at the lowest rate and at the operating point (Fig. 5)."""
    tab = policy_summary(runs, ("rate", "policy")).sort_values(["rate", "policy"]).reset_index(drop=True)
    tab.insert(1, "load", tab.rate / operating_rate)
    lo, hi = tab.rate.min(), tab.rate.max()
    pg, pt = [], []
    for r, p in zip(tab.rate, tab.policy, strict=True):
        key = "light" if r == lo else ("sat" if r == hi else None)
        pg.append(paper_value(f"fig5_rr_goodput_{key}") if key and p == "round_robin" else np.nan)
        pt.append(paper_value(f"fig5_rr_ttft_p99_{key}") if key and p == "round_robin" else np.nan)
    tab["paper_goodput"], tab["paper_ttft_p99_s"] = pg, pt
    return tab


def operating_point_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Fig. 6: P99 TTFT per policy at the operating point (the highest rate of the sweep)."""
    at = runs[runs.rate == runs.rate.max()]
    tab = policy_summary(at, ("policy",))
    tab["paper_ttft_p99_s"] = [paper_value(FIG6_KEYS[p]) if p in FIG6_KEYS else np.nan for p in tab.policy]
    return tab


def burst_requests(rate: float, period_s: float, n_requests: int, periods: int = BURST_PERIODS) -> int:
    """Requests of a burst-train run: ``n_requests``, or more when that would not span ``periods``
    burst periods at the mean ``rate`` (a train of one burst shows nothing)."""
    if not rate > 0 or not period_s > 0:
        raise ConfigError(f"burst: rate ({rate!r} req/s) and period ({period_s!r} s) must be > 0")
    return max(int(n_requests), int(np.ceil(rate * period_s * periods)))


def burst_specs(ctx: Section, rate: float, *, n_requests: int | None = None,
                policies: Sequence[str] = PAPER_POLICIES, burst: dict[str, Any] | None = None) -> list[RunSpec]:
    """The burst-train runs of Fig. 7: mixed, 2p4d, mean rate ``rate`` (req/s), arrivals the burst
    process ``burst`` (`BURST` by default); ``n_requests`` per run (default ``ctx.n_requests``)."""
    return specs_grid(ctx, rates=rate, policies=policies, n_requests=n_requests, arrival=dict(burst or BURST))


def burst_timeline(ctx: Section, specs: Sequence[RunSpec], window_s: float = 10.0, q: float = 95) -> pd.DataFrame:
    """Rolling goodput and P``q`` TTFT per arrival window of ``window_s`` seconds, per run (columns: policy,
    seed, window_s, goodput, ttft_p95_s, requests). Windows after the last full arrival window are dropped."""
    from repro.experiment.inputs import truth_cost_model
    from repro.experiment.metrics import rolling

    frames = []
    for spec, journal in zip(specs, ctx.run_journals(specs), strict=True):
        r = rolling(journal, truth_cost_model(spec).slo, window_s=window_s, q=q)
        last_full = float(np.floor(journal["arrival_s"].max() / window_s) * window_s)
        r = r[r.window < last_full].rename(columns={"window": "window_s"})
        r.insert(0, "seed", int(spec.seed))
        r.insert(0, "policy", spec.policy)
        frames.append(r)
    return pd.concat(frames, ignore_index=True)


def burst_table(timeline: pd.DataFrame, q: float = 95) -> pd.DataFrame:
    """Per policy: mean and max of the rolling P``q`` TTFT, mean rolling goodput, and the share of windows
    in which it holds goodput at or above round-robin (same seed and window)."""
    col = f"ttft_p{int(q)}_s"
    g = timeline.groupby("policy", sort=False)
    tab = pd.DataFrame({f"rolling_{col}_mean": g[col].mean(), f"rolling_{col}_max": g[col].max(),
                        "rolling_goodput_mean": g["goodput"].mean(), "windows": g.size()}).reset_index()
    if "round_robin" in set(timeline.policy):
        rr = timeline[timeline.policy == "round_robin"].set_index(["seed", "window_s"])["goodput"]
        share = {}
        for pol, grp in timeline.groupby("policy"):
            mine = grp.set_index(["seed", "window_s"])["goodput"]
            both = mine.index.intersection(rr.index)
            share[pol] = float((mine.loc[both] >= rr.loc[both]).mean()) if len(both) else np.nan
        tab["windows_at_or_above_rr"] = tab.policy.map(share)
    tab = tab.sort_values("policy", key=lambda s: s.map(lambda p: PAPER_POLICY_RANK.get(p, 99))).reset_index(drop=True)
    tab["paper_rolling_ttft_p95_s"] = [paper_value("fig7_mc_ttft_p95_rolling") if p == "marginal_cost" else np.nan
                                       for p in tab.policy]
    return tab


def rolling_estimates(timeline: pd.DataFrame, q: float = 95) -> dict[str, Estimate]:
    """The burst train's rolling P``q`` TTFT with 95 % intervals from a block bootstrap: the blocks are the
    (trace, window) cells every policy has (consecutive windows of one trace are nearly independent
    at the window lengths used; a request belongs to one window), drawn with replacement, the same
    draw for every policy (paired). Statistics: ``mc`` (the learned router's mean over windows),
    ``others_lo``/``others_hi`` (the lowest and highest other policy's mean) and ``reduction`` (%:
    1 - mc / the others' mean). Empty without the learned router or another policy."""
    col = f"ttft_p{int(q)}_s"
    wide = timeline.pivot_table(index=["seed", "window_s"], columns="policy", values=col, aggfunc="first").dropna()
    if "marginal_cost" not in wide.columns or wide.shape[1] < 2 or len(wide) == 0:
        return {}
    m = wide.to_numpy(float)
    j = list(wide.columns).index("marginal_cost")
    rest = [i for i in range(m.shape[1]) if i != j]

    def stat(idx: np.ndarray) -> dict[str, float]:
        means = m[idx].mean(axis=0)
        others = means[rest]
        return {"mc": float(means[j]), "others_lo": float(others.min()), "others_hi": float(others.max()),
                "reduction": 100.0 * (1.0 - float(means[j]) / float(others.mean()))}

    seeds = int(wide.index.get_level_values("seed").nunique())
    return resample(len(m), stat, unit="(trace, window) block", traces=seeds)


def load_and_tails_headline(sweep: pd.DataFrame, op: pd.DataFrame, burst: pd.DataFrame, runs: pd.DataFrame,
                            ctx: Section, timeline: pd.DataFrame | None = None) -> list[HeadlineRow]:
    """Headline rows of Figs. 5-7: round-robin's goodput (with its 95 % interval) and P99 TTFT at light load
    and at the operating point, P99 TTFT per policy there, whether the learned router has the lowest P99
    TTFT (the best other policy's minus ours, paired by trace: an ordering), and the burst train's rolling
    P95 TTFT and the share of windows held at or above round-robin (Wilson's interval over windows)."""
    out: list[HeadlineRow] = []
    rr_runs = runs[runs.policy == "round_robin"]
    if len(rr_runs):
        light, sat = rr_runs[rr_runs.rate == rr_runs.rate.min()], rr_runs[rr_runs.rate == rr_runs.rate.max()]
        out += [{"key": "fig5_rr_goodput_light", "ours": ctx.goodput(light), "runs": ctx.run_ids(light)},
                {"key": "fig5_rr_goodput_sat", "ours": ctx.goodput(sat), "runs": ctx.run_ids(sat), "kind": "input",
                 "meaning": "round-robin's goodput at the operating point: the saturation search aims at it, so an "
                            "input, not a result"},
                {"key": "fig5_rr_ttft_p99_light", "ours": over_traces(light.sort_values("seed").ttft_p99_s.to_list()),
                 "runs": ctx.run_ids(light)},
                {"key": "fig5_rr_ttft_p99_sat", "ours": over_traces(sat.sort_values("seed").ttft_p99_s.to_list()),
                 "runs": ctx.run_ids(sat)}]
    at_op = runs[runs.rate == runs.rate.max()]

    def of(policy: str) -> pd.DataFrame:
        return at_op[at_op.policy == policy]

    o = op.set_index("policy")
    out += [{"key": k, "ours": over_traces(of(p).sort_values("seed").ttft_p99_s.to_list()), "runs": ctx.run_ids(of(p))}
            for p, k in FIG6_KEYS.items() if p in o.index]
    if {"marginal_cost", "round_robin", "least_loaded"} <= set(o.index):
        ref = paper_reference.load().set_index("key")["value"]
        gap = float(min(ref["fig6_rr_ttft_p99"], ref["fig6_ll_ttft_p99"]) - ref["fig6_mc_ttft_p99"])
        rivals = {p: of(p) for p in ("round_robin", "least_loaded")}
        est, best = ctx.least_difference(of("marginal_cost"), rivals, "ttft_p99_s", worst=True)
        out.append({"key": "fig6_best_other_minus_mc_ttft_p99", "ours": est, "kind": "ordering",
                    "claim": 1, "paper": gap, "unit": "s", "runs": ctx.run_ids(*rivals.values(), of("marginal_cost")),
                    "meaning": f"P99 TTFT of the lower of round-robin and JSQ (now {best}) minus the learned router's, "
                               "paired by trace, selection-aware (the paper: 0.337 - 0.321 s, the learned router's "
                               "is lowest)"})
    b = burst.set_index("policy")
    if "marginal_cost" in b.index:
        rolled = rolling_estimates(timeline) if timeline is not None else {}
        out.append({"key": "fig7_mc_ttft_p95_rolling", "unit": "s",
                    "ours": rolled.get("mc", Estimate(float(b.loc["marginal_cost", "rolling_ttft_p95_s_mean"])))})
        if len(b) > 1:
            others = b.drop(index="marginal_cost")["rolling_ttft_p95_s_mean"]
            mc = float(b.loc["marginal_cost", "rolling_ttft_p95_s_mean"])
            plain = {"others_lo": others.min(), "others_hi": others.max(),
                     "reduction": 100.0 * (1.0 - mc / others.mean())}
            est = {k: rolled.get(k, Estimate(float(v))) for k, v in plain.items()}
            out += [{"key": "fig7_other_ttft_p95_rolling_lo", "ours": est["others_lo"], "unit": "s"},
                    {"key": "fig7_other_ttft_p95_rolling_hi", "ours": est["others_hi"], "unit": "s"},
                    {"key": "fig7_tail_reduction", "ours": est["reduction"], "unit": "%",
                     "meaning": "reduction of the mean rolling P95 TTFT against the other policies' mean, %"}]
        if "windows_at_or_above_rr" in b.columns:
            n = int(b.loc["marginal_cost", "windows"])
            share = float(b.loc["marginal_cost", "windows_at_or_above_rr"])
            out.append({"key": "fig7_mc_windows_at_or_above_rr", "ours": wilson(round(share * n), n), "paper": 1.0,
                        "unit": "fraction", "meaning": f"share of {n} burst-train windows in which the learned "
                                                       "router's goodput is at or above round-robin's"})
    return out
