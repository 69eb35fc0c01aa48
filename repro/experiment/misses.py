"""Why a run's requests missed their SLO: the misses by cause, where the time went, which pool held them up.

`decompose` takes one run's journal (`repro.journal_schema`) and the SLO targets its goodput is scored
against (`repro.experiment.metrics.slo_checks`, the same test as `good_mask`), or the cost model they
come from (`repro.experiment.inputs.truth_cost_model`), and returns one row (`Decomposition`):

- **Misses by cause**, each a fraction of the requests sent, disjoint, and with ``goodput`` summing to 1:
  ``ttft_miss_tight`` / ``ttft_miss_loose`` (completed, TTFT over its class's target, TPOT within),
  ``tpot_miss`` (completed, TPOT over, TTFT within), ``both_miss`` (completed, both over; either class),
  ``failed`` (status failed or rejected).
- **Where the time went**, mean and P90 in seconds over the requests whose journal has both stamps:
  ``prefill_wait`` = ``prefill_start_s - arrival_s`` (the router's hold before it sent the prefill; the
  simulator stamps ``prefill_start_s`` at arrival, so there it is 0 and the prefill engine's queue is part
  of ``prefill_time``), ``prefill_time`` = ``prefill_end_s - prefill_start_s`` (queue and steps on the
  prefill engine), ``prefill_delay`` = ``prefill_end_s - arrival_s`` minus the request's unloaded prefill
  time (`CostModel.tau_pre` of its prompt, floored at 0: how long the prefill pool held it up, whichever
  way the backend stamps ``prefill_start_s``), ``decode_wait`` = ``decode_started_s - prefill_end_s``
  (KV transfer, the decode engine's admission queue for KV blocks and a sequence slot, and the step
  boundary it joins at; measured from ``prefill_end_s``, not ``decode_start_s``, so the proxy's hop
  between the two legs counts too; in the simulator the two stamps are equal).
- ``preempted``: the share of the requests sent that a decode engine preempted at least once (NaN where
  the backend cannot tell: live engines journal -1), as `repro.experiment.metrics.summarize`.
- **Which pool held up the TTFT misses.** Each TTFT miss (``ttft_miss_tight + ttft_miss_loose +
  both_miss``) is attributed by a counterfactual: its TTFT is the prefill pool's delay ``dp``
  (``prefill_delay``), the decode pool's delay ``dd`` (``decode_wait`` beyond the unloaded KV transfer,
  `CostModel.tau_xfer`, floored at 0) and the rest, its unloaded service time (prefill, transfer, first
  decode step, serving path). If the service time alone is over the target (``ttft - dp - dd > target``:
  it would miss with no waiting at all, or the journal cannot say), the miss is the service time's
  (``ttft_miss_service``); else the pool whose delay is larger holds it (``ttft_miss_prefill``,
  ``ttft_miss_decode``; a tie goes to prefill). The three are fractions of the requests sent and sum to
  the TTFT misses. ``bottleneck`` (`bottleneck`) names the largest of them: ``"prefill"``,
  ``"decode"``, ``"neither: service time"``, or ``"none"`` when nothing missed its TTFT.

Given bare `SLOTargets` instead of a cost model, the unloaded prefill and transfer times are taken as 0:
``prefill_delay`` is then the whole prefill leg and the attribution only calls a miss the service time's
when the first decode step alone is over the target. Pass the cost model.

`decomposition_table` averages the rows of many runs per (workload, policy): the mean over traces of each
number (a P90 column is the mean of the traces' P90s), ``seeds`` the traces, and ``bottleneck`` by the same
rule on the mean attribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import numpy as np
import pandas as pd

from repro.experiment.metrics import slo_checks
from repro.routing.cost_model import CostModel, SLOTargets
from repro.statistics.percentile import percentile

MISS_CAUSES = ("ttft_miss_tight", "ttft_miss_loose", "tpot_miss", "both_miss", "failed")
"""The disjoint causes of a request not being good; with ``goodput`` they sum to 1 (fractions of requests sent)."""
LEGS = ("prefill_wait", "prefill_time", "prefill_delay", "decode_wait")
"""The timed legs: each gives ``<leg>_mean_s`` and ``<leg>_p90_s`` (seconds)."""
ATTRIBUTION = ("ttft_miss_prefill", "ttft_miss_decode", "ttft_miss_service")
"""The TTFT misses by what held them up (fractions of requests sent), in `bottleneck`'s tie order."""
BOTTLENECKS = ("prefill", "decode", "neither: service time", "none")
"""`bottleneck`'s answers: one per `ATTRIBUTION` column, and ``none`` without a TTFT miss."""


class Decomposition(TypedDict):
    """One run's misses by cause (fractions of the requests sent), its legs (seconds), its preempted share and
    the pool that held up its TTFT misses (the module docstring defines each)."""

    requests: int
    goodput: float
    ttft_miss_tight: float
    ttft_miss_loose: float
    tpot_miss: float
    both_miss: float
    failed: float
    prefill_wait_mean_s: float
    prefill_wait_p90_s: float
    prefill_time_mean_s: float
    prefill_time_p90_s: float
    prefill_delay_mean_s: float
    prefill_delay_p90_s: float
    decode_wait_mean_s: float
    decode_wait_p90_s: float
    preempted: float
    ttft_miss_prefill: float
    ttft_miss_decode: float
    ttft_miss_service: float
    bottleneck: str


def bottleneck(prefill: float, decode: float, service: float) -> str:
    """The largest of the TTFT-miss shares held up by the prefill pool, the decode pool and the service time
    (`ATTRIBUTION`): ``"prefill"``, ``"decode"`` or ``"neither: service time"``, ties in that order; ``"none"``
    when all are 0 or NaN (no TTFT miss)."""
    shares = np.nan_to_num(np.array([prefill, decode, service], dtype=float), nan=0.0)
    return BOTTLENECKS[int(np.argmax(shares))] if shares.max() > 0 else BOTTLENECKS[-1]


def _col(journal: pd.DataFrame, name: str) -> np.ndarray:
    return journal[name].to_numpy(dtype=float, na_value=np.nan)


def _stats(values: np.ndarray) -> tuple[float, float]:
    """Mean and P90 over the non-NaN ``values`` (NaN, NaN without any)."""
    values = values[~np.isnan(values)]
    return (float(values.mean()), percentile(values, 90)) if values.size else (float("nan"), float("nan"))


def decompose(journal: pd.DataFrame, slo: SLOTargets | CostModel) -> Decomposition:
    """One run's misses by cause, its legs and the pool that held up its TTFT misses (`Decomposition`; the
    module docstring defines every number). ``slo``: the cost model the run's SLO targets come from
    (`repro.experiment.inputs.truth_cost_model`: the targets goodput uses, and each request's unloaded prefill
    and transfer time), or the targets alone (`SLOTargets`: unloaded times taken as 0). Fractions are of the
    journal's rows (the requests sent); times in seconds."""
    targets = slo.slo if isinstance(slo, CostModel) else slo
    n = len(journal)
    c = slo_checks(journal, targets)
    tight = (journal["slo_class"].astype(str) == "tight").to_numpy()
    done = c.completed
    ttft_miss = done & ~c.ttft_ok
    tpot_miss = done & ~c.tpot_ok
    cause = {
        "ttft_miss_tight": ttft_miss & c.tpot_ok & tight,
        "ttft_miss_loose": ttft_miss & c.tpot_ok & ~tight,
        "tpot_miss": tpot_miss & c.ttft_ok,
        "both_miss": ttft_miss & tpot_miss,
        "failed": ~done,
    }

    def share(mask: np.ndarray) -> float:
        return float(mask.sum()) / n if n else float("nan")

    arrival, joined = _col(journal, "arrival_s"), _col(journal, "decode_started_s")
    pre_start, pre_end = _col(journal, "prefill_start_s"), _col(journal, "prefill_end_s")
    prompt = journal["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)
    if isinstance(slo, CostModel):
        unloaded_pre = np.array([np.nan if np.isnan(p) else slo.tau_pre(p) for p in prompt], dtype=float)
        unloaded_xfer = np.array([np.nan if np.isnan(p) else slo.tau_xfer(p) for p in prompt], dtype=float)
    else:
        unloaded_pre = unloaded_xfer = np.zeros(n)
    with np.errstate(invalid="ignore"):
        legs = {
            "prefill_wait": pre_start - arrival,
            "prefill_time": pre_end - pre_start,
            "prefill_delay": np.maximum(pre_end - arrival - unloaded_pre, 0.0),
            "decode_wait": joined - pre_end,
        }
        dp = np.nan_to_num(legs["prefill_delay"], nan=0.0)
        dd = np.nan_to_num(np.maximum(legs["decode_wait"] - unloaded_xfer, 0.0), nan=0.0)
        # the waits explain a miss when without them it would have met its target (False where the TTFT is unknown)
        waits_explain = _col(journal, "ttft_s") - dp - dd <= c.ttft_target_s
    attributed = {
        "ttft_miss_prefill": ttft_miss & waits_explain & (dp >= dd),
        "ttft_miss_decode": ttft_miss & waits_explain & (dd > dp),
        "ttft_miss_service": ttft_miss & ~waits_explain,
    }
    out: dict[str, object] = {"requests": n, "goodput": share(done & c.ttft_ok & c.tpot_ok)}
    out.update({k: share(m) for k, m in cause.items()})
    for leg, values in legs.items():
        out[f"{leg}_mean_s"], out[f"{leg}_p90_s"] = _stats(values)
    pre = _col(journal, "preemptions")
    out["preempted"] = share(pre > 0) if n and (pre >= 0).all() else float("nan")
    out.update({k: share(m) for k, m in attributed.items()})
    out["bottleneck"] = bottleneck(*(float(out[k]) for k in ATTRIBUTION))  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


NUMBERS = ("requests", "goodput", *MISS_CAUSES, *(f"{leg}_{s}_s" for leg in LEGS for s in ("mean", "p90")),
           "preempted", *ATTRIBUTION)
"""The numeric columns of a `Decomposition`, in its order (`decomposition_table` averages them over traces)."""


def decomposition_table(runs: pd.DataFrame, by: Sequence[str] = ("workload", "policy")) -> pd.DataFrame:
    """Per group of ``by`` (in the order first seen): the mean over its runs (one per trace) of every number
    of `decompose` (`NUMBERS`; a P90 column is the mean of the traces' P90s; NaN values skipped),
    ``seeds`` (the runs, or the distinct ``seed`` values where ``runs`` has that column) and ``bottleneck``
    by `bottleneck`'s rule on the mean attribution. ``runs``: one row per run, ``by`` columns and the
    `Decomposition` of its journal."""
    by = list(by)
    g = runs.groupby(by, sort=False)
    tab = g[list(NUMBERS)].mean()
    tab.insert(0, "seeds", g["seed"].nunique() if "seed" in runs.columns else g.size())
    tab["bottleneck"] = [bottleneck(*row) for row in tab[list(ATTRIBUTION)].itertuples(index=False, name=None)]
    return tab.reset_index()
