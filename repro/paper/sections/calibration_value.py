"""§V-B, notebook 05: what calibration is worth.

The learned router with calibrated vs simulator-derived cost constants, on the same mixed traces
at the 2p4d operating point, least-loaded (JSQ) and round-robin alongside. The mechanism is read
off per-decode-instance load: request-count skew vs token-load skew (max/mean across decode
instances, 1.0 = even; `repro.experiment.metrics`). Goodput a fraction, times in seconds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from repro.experiment.spec import RunSpec
from repro.paper.grids import paper_value, policy_summary
from repro.statistics.intervals import Outcomes, over_traces

if TYPE_CHECKING:
    from repro.paper.headline import HeadlineRow
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


def tail_statistics(groups: Outcomes) -> dict[str, float]:
    """P99 TTFT statistics of the calibration conditions (groups ``cal``, ``sim``, optionally ``rr``; each
    a list of per-trace outcomes): each learned router's lowest and highest P99 TTFT over the traces,
    and with ``rr`` the share (%) of the calibrated router's advantage over round-robin in mean P99 TTFT
    that the simulator-derived constants give away (NaN when there is no advantage)."""
    p99 = {g: [o.ttft_percentile(99) for o in runs] for g, runs in groups.items()}
    out = {f"{g}_p99_{f.__name__}": float(f(p99[g])) for g in ("cal", "sim") for f in (min, max)}
    if "rr" in groups:
        adv = float(np.mean(p99["rr"]) - np.mean(p99["cal"]))
        out["tail_share"] = 100.0 * float(np.mean(p99["sim"]) - np.mean(p99["cal"])) / adv if adv > 0 else math.nan
    return out


def calibration_headline(runs: pd.DataFrame, ctx: Section) -> list[HeadlineRow]:
    """Goodput with each cost model and the paired gain in points (each with its 95 % interval), P99 TTFT
    ranges over traces, the share of the tail advantage (over round-robin) that calibration buys, and the
    mechanism (the simulator-derived router's token skew vs JSQ's, paired by trace)."""

    def of(policy: str, cost_model: str) -> pd.DataFrame:
        return runs[(runs.policy == policy) & (runs.cost_model == cost_model)]

    r_cal, r_sim = of("marginal_cost", "calibrated"), of("marginal_cost", "sim_derived")
    out: list[HeadlineRow] = [
        {"key": "calib_calibrated_goodput", "ours": ctx.goodput(r_cal), "runs": ctx.run_ids(r_cal)},
        {"key": "calib_simderived_goodput", "ours": ctx.goodput(r_sim), "runs": ctx.run_ids(r_sim)},
        {"key": "calib_goodput_gain", "ours": ctx.difference(r_cal, r_sim).scaled(100.0), "kind": "ordering",
         "claim": 1, "runs": ctx.run_ids(r_cal, r_sim),
         "meaning": "goodput gain from calibration in points (calibrated minus simulator-derived, paired by trace; "
                    "an ordering judged by its size: the paper's 4.5 points within a factor of two)"},
    ]
    r_rr = of("round_robin", "calibrated")
    groups = {"cal": r_cal, "sim": r_sim, **({"rr": r_rr} if len(r_rr) else {})}
    tails = ctx.bootstrap(groups, tail_statistics, resample_traces=False)
    for key, g in (("calib_calibrated_ttft_p99", "cal"), ("calib_simderived_ttft_p99", "sim")):
        ids = ctx.run_ids(groups[g])
        out += [{"key": f"{key}_lo", "ours": tails[f"{g}_p99_min"], "unit": "s", "runs": ids,
                 "meaning": "lowest P99 TTFT over the traces (interval: its requests resampled, these traces kept)"},
                {"key": f"{key}_hi", "ours": tails[f"{g}_p99_max"], "unit": "s", "runs": ids,
                 "meaning": "highest P99 TTFT over the traces (interval: its requests resampled, these traces kept)"}]
    if "tail_share" in tails:
        share = tails["tail_share"]
        if math.isnan(share.value):  # no advantage to give away: the share is undefined, not missing
            share = dataclasses.replace(share, method="none: the calibrated router's mean P99 TTFT is not below "
                                                       "round-robin's here, so there is no advantage to share")
        out.append({"key": "calib_tail_share", "ours": share, "unit": "%",
                    "runs": ctx.run_ids(r_cal, r_sim, r_rr),
                    "meaning": "share of the calibrated router's P99 TTFT advantage over round-robin lost with "
                               "simulator-derived constants, % (mean P99 over traces)"})
    r_jsq = of("least_loaded", "calibrated")
    if len(r_jsq):
        out.append({"key": "calib_simderived_token_skew_minus_jsq", "ours": ctx.difference(r_sim, r_jsq, "token_skew"),
                    "kind": "ordering", "claim": 1, "paper": np.nan, "unit": "max/mean",
                    "runs": ctx.run_ids(r_sim, r_jsq),
                    "meaning": "token-load skew of the simulator-derived router minus JSQ's (the paper: worse "
                               "than JSQ's, so positive)"})
    gap = r_sim.sort_values("seed")
    out.append({"key": "calib_simderived_token_minus_request_skew",
                "ours": over_traces((gap.token_skew - gap.request_skew).to_list()), "unit": "max/mean",
                "runs": ctx.run_ids(r_sim),
                "meaning": "token-load skew minus request-count skew, simulator-derived router (per trace)"})
    return out
