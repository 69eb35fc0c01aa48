"""§V-E, notebook 08 (Fig. 4): goodput vs provisioned GPUs over pool shapes of 3 to 8 GPUs.

The frontier takes, per (policy, GPU count), the best shape with that many GPUs (the one a
deployer would pick). The paper: the learned router leads the middle (5 GPUs 0.823, 6 GPUs
0.870), reaches at 6 GPUs what round-robin needs 7 for (~14% fewer GPUs), and collapses at the
starved 1p2d (0.292 vs round-robin's 0.680: the scarcity inversion). Goodput a fraction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from repro.paper.grids import gpus, paper_value, policy_summary

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


def frontier_headline(shapes: pd.DataFrame, front: pd.DataFrame, tol: float = 0.0) -> list[dict[str, Any]]:
    """Headline rows: the frontier at 5 and 6 GPUs, the GPU saving over round-robin, the 1p2d inversion."""
    f = front.set_index(["gpus", "policy"])
    out = []
    for g, key in ((5, "fig4_mc_5gpu"), (6, "fig4_mc_6gpu")):
        if (g, "marginal_cost") in f.index:
            out.append({"key": key, "ours": f.loc[(g, "marginal_cost"), "goodput"]})
    sv = gpu_saving(front, 6, tol=tol)
    out.append({"key": "fig4_gpu_saving", "ours": sv["saving_pct"]})
    out.append({"key": "fig4_rr_gpus_for_mc_6gpu", "ours": sv["baseline_gpus"], "paper": 7.0, "unit": "GPUs"})
    s = shapes.set_index(["topology", "policy"])
    if ("1p2d", "marginal_cost") in s.index and ("1p2d", "round_robin") in s.index:
        mc, rr = s.loc[("1p2d", "marginal_cost"), "goodput"], s.loc[("1p2d", "round_robin"), "goodput"]
        out += [{"key": "fig4_mc_1p2d", "ours": mc}, {"key": "fig4_rr_1p2d", "ours": rr},
                {"key": "fig4_inversion_at_1p2d", "ours": float(rr > mc), "paper": 1.0, "unit": "bool"}]
    return out
