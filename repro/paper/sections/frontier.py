"""§V-E, notebook 08 (Fig. 4): goodput vs provisioned GPUs over pool shapes of 3 to 8 GPUs.

The frontier takes, per (policy, GPU count), the best shape with that many GPUs (the one a
deployer would pick). The paper: the learned router leads the middle (5 GPUs 0.823, 6 GPUs
0.870), reaches at 6 GPUs what round-robin needs 7 for (~14% fewer GPUs), and collapses at the
starved 1p2d (0.292 vs round-robin's 0.680: the scarcity inversion). Goodput a fraction.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from repro.paper.grids import gpus, paper_value, policy_summary
from repro.statistics.intervals import Estimate, Outcomes

if TYPE_CHECKING:
    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Section

SHAPES = ("1p2d", "1p3d", "2p2d", "2p3d", "2p4d", "3p3d", "3p4d", "4p4d")


def frontier_table(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(shapes, frontier)``: per (shape, policy) summary; per (GPU count, policy) the best shape's goodput
    (the shape a deployer would pick for that policy), with the paper's value where stated."""
    runs = runs.assign(gpus=[gpus(t) for t in runs.topology])
    shapes = policy_summary(runs, ("topology", "gpus", "policy"))
    idx = shapes.groupby(["gpus", "policy"])["goodput"].idxmax()
    front = shapes.loc[idx, ["gpus", "policy", "topology", "goodput", "goodput_sd", "ttft_p99_s"]]
    front = front.rename(columns={"topology": "best_shape"}).sort_values(["policy", "gpus"]).reset_index(drop=True)
    paper = {(5, "marginal_cost"): "fig4_mc_5gpu", (6, "marginal_cost"): "fig4_mc_6gpu"}
    front["paper_goodput"] = [paper_value(paper[(g, p)]) if (g, p) in paper else np.nan
                              for g, p in zip(front.gpus, front.policy, strict=True)]
    sp = {("1p2d", "marginal_cost"): "fig4_mc_1p2d", ("1p2d", "round_robin"): "fig4_rr_1p2d"}
    shapes["paper_goodput"] = [paper_value(sp[(t, p)]) if (t, p) in sp else np.nan
                               for t, p in zip(shapes.topology, shapes.policy, strict=True)]
    return shapes, front


def gpus_needed(front: pd.DataFrame, policy: str, goodput: float, tol: float = 0.0) -> float:
    """Fewest GPUs at which ``policy``'s frontier reaches ``goodput - tol`` (NaN if it never does)."""
    f = front[(front.policy == policy) & (front.goodput >= goodput - tol)]
    return float(f.gpus.min()) if len(f) else float("nan")


def gpu_saving(front: pd.DataFrame, at_gpus: int = 6, policy: str = "marginal_cost",
               baseline: str = "round_robin", tol: float = 0.0) -> dict[str, float]:
    """The learned router's goodput at ``at_gpus``; the GPUs the baseline needs for it; the saving in %."""
    row = front[(front.policy == policy) & (front.gpus == at_gpus)]
    if row.empty:
        return {"goodput": np.nan, "baseline_gpus": np.nan, "saving_pct": np.nan}
    target = float(row.goodput.iloc[0])
    need = gpus_needed(front, baseline, target, tol)
    saving = 100.0 * (1.0 - at_gpus / need) if need == need and need > at_gpus else (0.0 if need == need else np.nan)
    return {"goodput": target, "baseline_gpus": need, "saving_pct": saving}


def saving_statistics(groups: Outcomes, at_gpus: int = 6, tol: float = 0.0, policy: str = "marginal_cost",
                      baseline: str = "round_robin") -> dict[str, float]:
    """`gpu_saving` from per-request outcomes: groups named ``"<topology>|<policy>"`` (one per pool shape
    and policy, each a list of per-trace outcomes); the frontier is each policy's best shape per GPU
    count by mean goodput over traces. For `joint_bootstrap`, which calls it once per resample: the same
    numbers as `frontier_table` and `gpu_saving` give, without a table per call."""
    front: dict[tuple[int, str], float] = {}  # (GPUs, policy) -> the best shape's goodput (NaN: none has one)
    for name, runs in groups.items():
        shape, pol = name.split("|")
        g = float(np.mean([o.goodput for o in runs]))
        key = (_gpus(shape), pol)
        best = front.get(key)
        if best is None or math.isnan(best) or g > best:  # a maximum that skips NaN, as pandas' does
            front[key] = g
    if (at_gpus, policy) not in front:
        return {"baseline_gpus": np.nan, "saving_pct": np.nan}
    target = front[(at_gpus, policy)]
    reach = [n for (n, p), g in front.items() if p == baseline and g >= target - tol]
    need = float(min(reach)) if reach else float("nan")
    saving = 100.0 * (1.0 - at_gpus / need) if need == need and need > at_gpus else (0.0 if need == need else np.nan)
    return {"baseline_gpus": need, "saving_pct": saving}


@functools.lru_cache(maxsize=64)
def _gpus(shape: str) -> int:
    return gpus(shape)


def frontier_headline(shapes: pd.DataFrame, front: pd.DataFrame, runs: pd.DataFrame, ctx: Section,
                      tol: float = 0.0) -> list[HeadlineRow]:
    """Headline rows: the frontier at 5 and 6 GPUs (the best shape's runs, with their 95 % interval), the
    GPU saving over round-robin (its interval: the frontier recomputed on each resample), the 1p2d
    goodputs and the scarcity inversion as round-robin minus the learned router at 1p2d, paired by
    trace (an ordering; the paper: positive)."""
    def of(topology: str, policy: str) -> pd.DataFrame:
        return runs[(runs.topology == topology) & (runs.policy == policy)]

    f = front.set_index(["gpus", "policy"])
    out: list[HeadlineRow] = []
    for g, key in ((5, "fig4_mc_5gpu"), (6, "fig4_mc_6gpu")):
        if (g, "marginal_cost") in f.index:
            best = of(str(f.loc[(g, "marginal_cost"), "best_shape"]), "marginal_cost")
            out.append({"key": key, "ours": ctx.goodput(best), "runs": ctx.run_ids(best)})
    both = runs[runs.policy.isin(["marginal_cost", "round_robin"])]
    groups = {f"{t}|{p}": g for (t, p), g in both.groupby(["topology", "policy"], sort=True)}
    if all(ctx.outcomes(g) for g in groups.values()):
        saving = ctx.bootstrap(groups, lambda data: saving_statistics(data, 6, tol=tol))
    else:  # rows without their per-request outcomes (e.g. read back from a CSV): the value alone
        sv = gpu_saving(front, 6, tol=tol)
        saving = {k: Estimate(sv[k], method="none: no per-request outcomes") for k in ("baseline_gpus", "saving_pct")}
    ids = ctx.run_ids(*groups.values())
    out.append({"key": "fig4_gpu_saving", "ours": saving["saving_pct"], "unit": "%", "runs": ids,
                "meaning": "GPUs saved by the learned router at 6 GPUs against round-robin's frontier, % "
                           "(interval: the whole frontier recomputed on each resample)"})
    out.append({"key": "fig4_rr_gpus_for_mc_6gpu", "ours": saving["baseline_gpus"], "paper": 7.0, "unit": "GPUs",
                "runs": ids, "meaning": "GPUs round-robin needs for the learned router's goodput at 6 GPUs"})
    mc, rr = of("1p2d", "marginal_cost"), of("1p2d", "round_robin")
    if len(mc) and len(rr):
        out += [{"key": "fig4_mc_1p2d", "ours": ctx.goodput(mc), "runs": ctx.run_ids(mc)},
                {"key": "fig4_rr_1p2d", "ours": ctx.goodput(rr), "runs": ctx.run_ids(rr)},
                {"key": "fig4_rr_minus_mc_1p2d", "ours": ctx.difference(rr, mc), "kind": "ordering",
                 "paper": paper_value("fig4_rr_1p2d") - paper_value("fig4_mc_1p2d"), "unit": "fraction",
                 "runs": ctx.run_ids(mc, rr),
                 "meaning": "the scarcity inversion: round-robin minus the learned router at 1p2d, paired by trace"}]
    return out
