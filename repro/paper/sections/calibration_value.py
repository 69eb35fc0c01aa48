"""§V-B, notebook 05: what calibration is worth.

The learned router with calibrated vs simulator-derived cost constants, on the same mixed traces
at the 2p4d operating point, least-loaded (JSQ) and round-robin alongside. The mechanism is read
off per-decode-instance load: request-count skew vs token-load skew (max/mean across decode
instances, 1.0 = even; `repro.experiment.metrics`). Goodput a fraction, times in seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.experiment.spec import RunSpec
from repro.paper.grids import paper_value, policy_summary

if TYPE_CHECKING:
    from repro.paper.section import Section

CALIBRATION_CONDITIONS = (
    ("marginal_cost", "calibrated", "learned, calibrated"),
    ("marginal_cost", "sim_derived", "learned, simulator-derived"),
    ("least_loaded", "calibrated", "least-loaded (JSQ)"),
    ("round_robin", "calibrated", "round-robin"),
)
"""(policy, cost model, label) of each condition, in the order shown."""


def calibration_specs(ctx: Section, rate: float, *, topology: str = "2p4d") -> list[RunSpec]:
    """Every condition of `CALIBRATION_CONDITIONS` on every trace, mixed workload, ``rate`` req/s."""
    return [RunSpec.from_flat(backend=ctx.backend, workload="mixed", topology=topology, seed=int(s), rate=float(rate),
                              n_requests=int(ctx.n_requests), policy=p, cost_model=cm, cluster=ctx.cluster,
                              time_scale=ctx.time_scale)
            for p, cm, _ in CALIBRATION_CONDITIONS for s in ctx.seeds]


def condition_label(policy: str, cost_model: str) -> str:
    """The label of a (policy, cost model) condition; ``policy (cost_model)`` when it is not one of ours."""
    for p, cm, label in CALIBRATION_CONDITIONS:
        if (p, cm) == (policy, cost_model):
            return label
    return f"{policy} ({cost_model})"


def calibration_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per condition: goodput, P99 TTFT range over traces, skews, and the paper's values."""
    runs = runs.assign(condition=[condition_label(p, c) for p, c in zip(runs.policy, runs.cost_model, strict=True)])
    tab = policy_summary(runs, ("condition", "policy", "cost_model"))
    order = [label for _, _, label in CALIBRATION_CONDITIONS]
    tab["_o"] = [order.index(c) if c in order else len(order) for c in tab.condition]
    tab = tab.sort_values(["_o", "condition"]).drop(columns="_o").reset_index(drop=True)
    paper = {
        "learned, calibrated": ("calib_calibrated_goodput", "calib_calibrated_ttft_p99_lo",
                                "calib_calibrated_ttft_p99_hi"),
        "learned, simulator-derived": ("calib_simderived_goodput", "calib_simderived_ttft_p99_lo",
                                       "calib_simderived_ttft_p99_hi"),
    }
    for col, i in (("paper_goodput", 0), ("paper_ttft_p99_lo_s", 1), ("paper_ttft_p99_hi_s", 2)):
        tab[col] = [paper_value(paper[c][i]) if c in paper else np.nan for c in tab.condition]
    tab["skew_gap"] = tab.token_skew - tab.request_skew
    return tab


def calibration_load(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy skews for the mechanism figure: one row per (condition, seed, kind) with kind
    'request count' or 'token load' and its max/mean skew across decode instances."""
    rows = []
    for r in runs.itertuples():
        for kind, col in (("request count", "request_skew"), ("token load", "token_skew")):
            rows.append({"condition": condition_label(r.policy, r.cost_model), "seed": int(r.seed), "kind": kind,
                         "skew": float(getattr(r, col))})
    return pd.DataFrame(rows)


def calibration_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    """Goodput and P99 TTFT with each cost model, the gain in points, the share of the tail advantage
    (over round-robin) that calibration buys, and the mechanism (token skew vs JSQ's)."""
    t = tab.set_index("condition")
    cal, sim = t.loc["learned, calibrated"], t.loc["learned, simulator-derived"]
    out = [
        {"key": "calib_calibrated_goodput", "ours": cal.goodput},
        {"key": "calib_simderived_goodput", "ours": sim.goodput},
        {"key": "calib_goodput_gain", "ours": 100.0 * (cal.goodput - sim.goodput)},
        {"key": "calib_calibrated_ttft_p99_lo", "ours": cal.ttft_p99_min_s},
        {"key": "calib_calibrated_ttft_p99_hi", "ours": cal.ttft_p99_max_s},
        {"key": "calib_simderived_ttft_p99_lo", "ours": sim.ttft_p99_min_s},
        {"key": "calib_simderived_ttft_p99_hi", "ours": sim.ttft_p99_max_s},
    ]
    if "round-robin" in t.index:
        adv = t.loc["round-robin", "ttft_p99_s"] - cal.ttft_p99_s
        share = 100.0 * (sim.ttft_p99_s - cal.ttft_p99_s) / adv if adv > 0 else float("nan")
        out.append({"key": "calib_tail_share", "ours": share})
    if "least-loaded (JSQ)" in t.index:
        out.append({"key": "calib_simderived_token_skew_worse_than_jsq",
                    "ours": float(sim.token_skew > t.loc["least-loaded (JSQ)", "token_skew"]),
                    "paper": 1.0, "unit": "bool"})
    out.append({"key": "calib_simderived_token_minus_request_skew", "ours": sim.token_skew - sim.request_skew,
                "unit": "max/mean"})
    return out
