"""Metrics over a journal: goodput, latency tails, per-instance load and token-load skew.

- A request is *good* when it completed (status ``ok``) and both its TTFT and TPOT meet its SLO
  class's targets (a 1-token request has no TPOT and is judged on TTFT alone).
  ``goodput = good / all requests sent`` (failed and rejected count as not good).
- TPOT = (e2e - ttft) / (output_tokens - 1), as vLLM's benchmark defines it.
- Token-load skew across decode instances = max / mean of the tokens (prompt + output) each decode
  instance served; request-count skew likewise on request counts. 1.0 is perfectly even. This is
  the mechanism of §V-B (a miscalibrated router balances counts but skews tokens).
- Accounting: sent = ok + failed + rejected, checked on every summary (`AccountingError`).

Latencies in seconds, over completed requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple, NotRequired, TypedDict

import numpy as np
import pandas as pd

from repro.routing.cost_model import SLOTargets
from repro.statistics.percentile import percentile
from repro.vocab import ROLES


class Summary(TypedDict):
    """A run's headline numbers (`summarize`): counts of requests, ``goodput`` as a fraction of the requests
    sent, latency percentiles in seconds over completed requests (NaN when none), ``preempted_fraction``
    (NaN where the backend cannot tell), token and request skew across decode instances (max / mean). A live
    run's summary also says whether it was a valid measurement and at which time scale it ran
    (`repro.experiment.runner.run`)."""

    requests: int
    completed: int
    failed: int
    rejected: int
    goodput: float
    ttft_p50_s: float
    ttft_p95_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    tpot_p99_s: float
    preempted_fraction: float
    token_skew: float
    request_skew: float
    valid: NotRequired[bool]
    time_scale_used: NotRequired[float]


class DecisionTimeSummary(TypedDict):
    """A policy's decision times (`repro.routing.router.DecisionTimes.summary`, `repro.routing.router.Router.
    decision_time`): the median, P99 and largest wall time of a ``place`` call in microseconds (None without
    a decision) over ``n`` decisions, on the machine that ran it: a report, never an input to a result."""

    p50_us: float | None
    p99_us: float | None
    max_us: float | None
    n: int


class AccountingError(RuntimeError):
    """Requests sent != completed + failed + rejected."""


class SLOChecks(NamedTuple):
    """The three tests of `good_mask`, per request (boolean arrays in the journal's row order), and the
    targets they test against (seconds, by each request's SLO class)."""

    completed: np.ndarray
    """status ``ok``."""
    ttft_ok: np.ndarray
    """TTFT within its class's target (False where the journal has no TTFT)."""
    tpot_ok: np.ndarray
    """TPOT within its class's target (True where there is no TPOT: a 1-token request)."""
    ttft_target_s: np.ndarray
    """Each request's TTFT target: ``slo.ttft_tight_s``, times ``slo.loose_factor`` for a loose one."""


def slo_checks(journal: pd.DataFrame, slo: SLOTargets) -> SLOChecks:
    """Per request: completed, TTFT within target, TPOT within target (`SLOChecks`); a request is good when
    all three hold (`good_mask`). The one place the SLO targets are applied to a journal."""
    tight = journal["slo_class"].astype(str) == "tight"
    factor = np.where(tight, 1.0, slo.loose_factor)
    ttft_target = slo.ttft_tight_s * factor
    ttft_ok = journal["ttft_s"].to_numpy(dtype=float, na_value=np.nan) <= ttft_target
    tpot = journal["tpot_s"].to_numpy(dtype=float, na_value=np.nan)
    tpot_ok = np.isnan(tpot) | (tpot <= slo.tpot_tight_s * factor)
    ok = (journal["status"].astype(str) == "ok").to_numpy()
    return SLOChecks(ok, ttft_ok, tpot_ok, ttft_target)


def good_mask(journal: pd.DataFrame, slo: SLOTargets) -> pd.Series:
    """Boolean per request: completed and within both SLO targets of its class (`slo_checks`)."""
    c = slo_checks(journal, slo)
    return pd.Series(c.completed & c.ttft_ok & c.tpot_ok, index=journal.index)


def good_flags(journal: pd.DataFrame, slo: SLOTargets) -> np.ndarray:
    """`good_mask` as 0/1 floats in request-id order: the same trace gives the same order in every
    run, so two runs of one trace are paired request by request (`repro.statistics.intervals`)."""
    return request_outcomes(journal, slo).good


@dataclass(frozen=True)
class RequestOutcomes:
    """What each request of one run came to, in request-id order (the same trace gives the same
    order in every run, so two runs of one trace pair request by request: `repro.statistics.intervals`).

    ``good``: 0/1 floats (`good_mask`); ``ttft``: seconds, NaN for a request that produced no first
    token (the tails of `summarize` are percentiles over the non-NaN values).
    """

    good: np.ndarray
    ttft: np.ndarray

    def __post_init__(self) -> None:
        if len(self.good) != len(self.ttft):
            raise ValueError(f"RequestOutcomes: {len(self.good)} good flags but {len(self.ttft)} TTFTs")

    @cached_property
    def goodput(self) -> float:
        """The share of the run's requests that were good (0-1; NaN for a run of no requests), computed once:
        a bootstrap over traces asks it of the same run at every resample. ``good`` is never changed in place."""
        return float(self.good.mean()) if len(self.good) else float("nan")

    def take(self, index: np.ndarray) -> RequestOutcomes:
        """The outcomes at ``index`` (a bootstrap resample)."""
        return RequestOutcomes(self.good[index], self.ttft[index])

    @cached_property
    def _first_tokens(self) -> np.ndarray:
        return self.ttft[~np.isnan(self.ttft)]

    def ttft_percentile(self, q: float) -> float:
        """The ``q``-th percentile of TTFT (seconds) over the requests that produced a first token, as
        `summarize`'s tails; NaN when none did. Computed once per ``q`` (a bootstrap's statistics ask one
        resample's P99 more than once); ``ttft`` is never changed in place."""
        cache = self.__dict__.setdefault("_percentiles", {})
        if q not in cache:
            first = self._first_tokens
            cache[q] = percentile(first, q) if first.size else float("nan")
        return cache[q]


def request_outcomes(journal: pd.DataFrame, slo: SLOTargets) -> RequestOutcomes:
    """Per-request good flags and TTFTs of ``journal`` in request-id order (`RequestOutcomes`)."""
    order = np.argsort(journal["request_id"].astype(str).to_numpy(), kind="stable")
    good = good_mask(journal, slo).to_numpy(dtype=float)[order]
    return RequestOutcomes(good, journal["ttft_s"].to_numpy(dtype=float, na_value=np.nan)[order])


def check_accounting(journal: pd.DataFrame, sent: int | None = None) -> dict[str, int]:
    """Counts by status; raises AccountingError if they do not add up to ``sent``."""
    status = journal["status"].astype(str)
    counts = {s: int((status == s).sum()) for s in ("ok", "failed", "rejected")}
    other = len(journal) - sum(counts.values())
    total = len(journal) if sent is None else sent
    if other or sum(counts.values()) != total or journal["request_id"].duplicated().any():
        raise AccountingError(
            f"accounting: sent={total} but ok={counts['ok']} + failed={counts['failed']}"
            f" + rejected={counts['rejected']}"
            f" (+{other} with another status, {int(journal['request_id'].duplicated().sum())} duplicated ids)"
        )
    return counts


def _pct(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return percentile(values, q) if values.size else float("nan")


def summarize(journal: pd.DataFrame, slo: SLOTargets, sent: int | None = None) -> Summary:
    """Headline numbers of one run (goodput, tails, skew, counts). ``preempted_fraction``: the requests a
    decode engine preempted at least once, over the requests sent (NaN where the backend cannot tell:
    live engines journal -1); a run where it is above 0 filled a decode engine's KV budget."""
    counts = check_accounting(journal, sent)
    n = len(journal) if sent is None else sent
    good = good_mask(journal, slo)
    ttft = journal["ttft_s"].to_numpy(dtype=float, na_value=np.nan)
    tpot = journal["tpot_s"].to_numpy(dtype=float, na_value=np.nan)
    out: dict[str, Any] = {  # filled in `Summary`'s order (the manifests' bytes keep it)
        "requests": n,
        "completed": counts["ok"],
        "failed": counts["failed"],
        "rejected": counts["rejected"],
        "goodput": float(good.sum()) / n if n else float("nan"),
    }
    for q in (50, 95, 99):
        out[f"ttft_p{q}_s"] = _pct(ttft, q)
    for q in (50, 95, 99):
        out[f"tpot_p{q}_s"] = _pct(tpot, q)
    pre = journal["preemptions"].to_numpy(dtype=float, na_value=np.nan)
    known = pre[pre >= 0]  # -1: the backend cannot tell (live engines)
    told = n and len(pre) and known.size == len(pre)
    out["preempted_fraction"] = float((known > 0).sum()) / n if told else float("nan")
    load = decode_load(journal)
    out["token_skew"] = _skew(load["tokens"].to_numpy(dtype=float)) if len(load) else float("nan")
    out["request_skew"] = _skew(load["requests"].to_numpy(dtype=float)) if len(load) else float("nan")
    return out  # type: ignore[return-value]


def decode_load(journal: pd.DataFrame) -> pd.DataFrame:
    """Per decode instance: requests and tokens (prompt + output) routed to it."""
    where = journal["decode_instance"]
    placed = where.notna().to_numpy()
    names, index = np.unique(where[placed].astype(str).to_numpy(), return_inverse=True)  # sorted, as groupby
    tokens = (journal["prompt_tokens"].to_numpy(dtype=np.int64)[placed]
              + journal["output_tokens"].to_numpy(dtype=np.int64)[placed])
    return pd.DataFrame({"instance": names.astype(object),
                         "requests": np.bincount(index, minlength=len(names)).astype(np.int64),
                         "tokens": np.bincount(index, weights=tokens, minlength=len(names)).astype(np.int64)})


def instance_load(journal: pd.DataFrame) -> pd.DataFrame:
    """Per instance (prefill and decode): requests, prompt tokens and output tokens."""
    rows = []
    for role in ROLES:
        col = f"{role}_instance"
        placed = journal[journal[col].notna()]
        g = placed.groupby(placed[col].astype(str), sort=True)
        part = pd.DataFrame(
            {
                "requests": g.size(),
                "prompt_tokens": g["prompt_tokens"].sum().astype("int64"),
                "output_tokens": g["output_tokens"].sum().astype("int64"),
            }
        )
        part.insert(0, "role", role)
        rows.append(part.rename_axis("instance").reset_index())
    return pd.concat(rows, ignore_index=True)


def _skew(values: np.ndarray) -> float:
    mean = values.mean() if values.size else 0.0
    return float(values.max() / mean) if mean > 0 else float("nan")


def rolling(journal: pd.DataFrame, slo: SLOTargets, window_s: float = 10.0, q: float = 95) -> pd.DataFrame:
    """Goodput and TTFT percentile over arrival-time windows (for burst-train figures)."""
    df = journal.assign(good=good_mask(journal, slo).to_numpy())
    df = df.assign(window=(df["arrival_s"] // window_s) * window_s)
    g = df.groupby("window", sort=True)
    return pd.DataFrame(
        {
            "goodput": g["good"].mean(),
            f"ttft_p{int(q)}_s": g["ttft_s"].quantile(q / 100),
            "requests": g.size(),
        }
    ).reset_index()
