"""§V-A, notebook 04: Table II, goodput under mixed bursty load.

The paper's four policies on the mixed workload, 2p4d, three arrival traces at the saturation
rate. The paper: the learned router posts 0.860/0.877/0.855 (mean 0.864), the highest mean and
smallest spread; least-loaded drops to 0.795 on its worst trace. Goodput is a fraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.experiment.spec import RunSpec
from repro.paper import reference as paper_reference
from repro.routing.policies import PAPER_POLICIES

if TYPE_CHECKING:
    from repro.paper.section import Section


def table_two_specs(ctx: Section, rate: float, *, topology: str = "2p4d",
                    policies: Sequence[str] = PAPER_POLICIES) -> list[RunSpec]:
    """The runs of Table II: every policy on every trace (``ctx.seeds``), mixed workload, ``rate`` req/s."""
    return [RunSpec.from_flat(backend=ctx.backend, workload="mixed", topology=topology, seed=int(s), rate=float(rate),
                              n_requests=int(ctx.n_requests), policy=p, cluster=ctx.cluster,
                              time_scale=ctx.time_scale)
            for p in policies for s in ctx.seeds]


def table_two(runs: pd.DataFrame) -> pd.DataFrame:
    """Per policy: per-trace goodput, mean, spread (max - min), sd, worst trace, mean P99 TTFT (s), paper values."""
    ref = paper_reference.load()
    ref = ref[ref["figure_or_table"] == "Table II"]
    rows = []
    for pol in [p for p in PAPER_POLICIES if p in set(runs.policy)] + sorted(set(runs.policy) - set(PAPER_POLICIES)):
        g = runs[runs.policy == pol].sort_values("seed")
        row: dict[str, Any] = {"policy": pol}
        for i, val in enumerate(g.goodput, start=1):
            row[f"trace{i}_goodput"] = float(val)
        vals = g.goodput.to_numpy(float)
        row.update(mean_goodput=float(vals.mean()), spread=float(vals.max() - vals.min()),
                   sd=float(vals.std(ddof=1)) if len(vals) > 1 else 0.0, worst=float(vals.min()),
                   mean_ttft_p99_s=float(g.ttft_p99_s.mean()))
        pref = ref[ref["policy"] == pol].set_index("key")["value"]
        row["paper_mean_goodput"] = float(pref["table2_mc_mean"]) if "table2_mc_mean" in pref else np.nan
        traces = [k for k in pref.index if "trace" in k]
        if "table2_ll_worst" in pref:
            row["paper_worst"] = float(pref["table2_ll_worst"])
        else:
            row["paper_worst"] = float(min(pref[traces])) if traces else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def table_two_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    """Headline rows: the learned router's mean and per-trace goodput, JSQ's worst trace, whether ours is best."""
    mc = tab.set_index("policy").loc["marginal_cost"]
    out = [{"key": "table2_mc_mean", "ours": mc["mean_goodput"]}]
    for i in (1, 2, 3):
        if f"trace{i}_goodput" in mc and not pd.isna(mc[f"trace{i}_goodput"]):
            out.append({"key": f"table2_mc_trace{i}", "ours": mc[f"trace{i}_goodput"]})
    if "least_loaded" in set(tab.policy):
        out.append({"key": "table2_ll_worst", "ours": tab.set_index("policy").loc["least_loaded", "worst"]})
    best = tab.sort_values("mean_goodput", ascending=False).iloc[0]
    out.append({"key": "table2_best_is_marginal_cost", "ours": float(best.policy == "marginal_cost"),
                "paper": 1.0, "unit": "bool"})
    return out
