"""An independent queue bound on the documents gap: two FCFS prefill servers, no simulator.

`repro.identify.separation` searches the project's simulator for the widest documents gap between the paper's
baselines, ``min(least-loaded, length-threshold) - round-robin`` with round-robin's goodput within 2 sd of the
paper's 0.585 (§V-C), and `repro.identify.certificate` records that no model of the catalogue opens the paper's
+0.11 (less 2 sd: 0.068). This module asks the same question of a plain queue written here from the workload's
and the profile's numbers alone (it imports nothing of ``repro.sim``, ``repro.routing`` or ``repro.engine``):

- ``M`` = 2 prefill servers (2p4d), each FCFS, one request at a time (``serial``, the default; ``batched``:
  vLLM's steps, queued prompts sharing a step up to the token budget, `serve_batched`);
  Poisson arrivals at ``rate`` (req/s); prompt lengths ``L = clip(rint(lognormal(log median, sigma)), 512,
  8192)``, as `repro.workload.traces` draws documents.
- A request's service (the time it holds its server): ``ceil(L / budget) * share * base + per_token * L``
  (chunked by the token budget: each chunk is one more step of the step's base; ``base`` = 0.0667 s, stated in
  §VI; ``share`` = the step's share of it, mechanism ``request_path``).
- Its TTFT: ``wait + service + (1 - share) * base + d0 + L * kv_bytes / bandwidth``: after its step, the
  serving path (the rest of the base; it holds no server), then a decode-side first-token delay ``d0`` (the KV
  pull's setup, the decode engine's step boundary and its first step) and the KV cache's bytes over the link.
- Goodput: the share of requests whose TTFT meets their class's target, 0.175 s (tight) or 3 x 0.175 s
  (loose), each class with probability 1/2. A TPOT miss is taken to be zero for documents (outputs <= 512
  tokens on decode engines the prefill side does not load).
- Policies: ``round_robin`` (alternating from server 0), ``jsq_count`` (fewest requests in flight: queued, in
  service, or on their serving path, as the router counts them until the prefill answers; ties round-robin
  from a counter, as `least_loaded`) and ``jsq_work`` (least remaining service, ties alike). On the prefill
  pool `least_loaded` and `length_threshold` make the same choice (fewest in flight; the threshold picks
  only among decode engines), so the paper's load-aware minimum is ``jsq_count``: ``gap = jsq_count -
  round_robin``; ``gap_work`` (``jsq_work``, a router that knows every request's service) is reported
  beside it.

`bound` searches the prior box (`BOX`; the ranges of `repro.identify.space.PAPER_SPACE` and the catalogue's
mechanisms, a test checks them) with a scrambled Sobol sample and then SciPy's differential evolution on the
penalised objective of `repro.identify.separation` (minus the gap, plus 10 x round-robin's distance beyond 2 sd
of 0.585). Every vector is simulated on the same draws (common random numbers: ``reps`` traces of ``n_requests``
requests from an empty system, the simulator search's 2,000, seeded), so the search is deterministic. As
there, a search finds a lower bound on the widest gap the queue allows, never the maximum; and its widest is the
most favourable of many noisy draws, so `confirm` re-tunes the rate of the widest few to put round-robin at 0.585
on fresh traces and measures the gap there (the number to quote).

``python3 -m repro.identify.queue_bound [--budget N] [--seed N] [--service serial|batched]`` prints the bound;
``python3 -m repro.identify.queue_bound --out data/identify/queue_bound`` also writes the shipped ``bound.json``
(with ``--edges``, ``edges.csv`` instead: the gap as each prior's edge moves inward).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from repro.paths import HARDWARE_DIR

PAPER_RR = 0.585
"""Round-robin's documents goodput (§V-C; `repro.identify.separation.PAPER_RR`)."""
PAPER_FLOOR = 0.695
"""Every load-aware policy's least documents goodput (§V-C)."""
SD = 0.015
"""A three-trace mean's noise (`repro.identify.separation.SD`)."""
NEED = (PAPER_FLOOR - PAPER_RR) - 2 * SD * math.sqrt(2)
"""The gap a model must open to reach the paper's +0.11 within 2 sd (0.068; `repro.identify.certificate`)."""
OUT_DIR = "data/identify/queue_bound"
"""Where ``--out`` writes the shipped bound (``bound.json``) and edge table (``edges.csv``)."""


def simulator_widest() -> float:
    """The widest feasible gap the simulator's searches found over every model (data/identify/models/separation.csv;
    NaN without it)."""
    import pandas as pd

    from repro.paths import DATA_DIR

    path = DATA_DIR / "identify" / "models" / "separation.csv"
    if not path.exists():
        return math.nan
    return float(pd.read_csv(path)["widest_gap"].max())

PROFILE = "a40-identified"
PREFILL_ENGINES = 2
"""Prefill servers on 2p4d."""
LOOSE_FACTOR = 3.0
"""Loose targets are 3 x the tight (paper §IV-B)."""
TIGHT_SHARE = 0.5
"""Each request is tight with probability 1/2 (`repro.workload.traces.SLO_TIGHT_SHARE`)."""
DOC_MIN, DOC_MAX = 512, 8192
"""The documents' clip range (tokens; `repro.workload.traces.DOCUMENTS_MIN`, ``DOCUMENTS_MAX``)."""
POLICIES = ("round_robin", "jsq_count", "jsq_work")


@functools.cache
def profile_numbers(name: str = PROFILE) -> dict[str, float]:
    """The plain numbers this model reads from a hardware profile (``data/hardware/NAME.json``)."""
    raw = json.loads((HARDWARE_DIR / f"{name}.json").read_text())
    p = raw["params"]
    return {"prefill_base_s": float(p["prefill_base_s"]["value"]),
            "prefill_per_token_s": float(p["prefill_per_token_s"]["value"]),
            "max_num_batched_tokens": float(p["max_num_batched_tokens"]["value"]),
            "kv_bytes_per_token": float(p["kv_bytes_per_token"]["value"]),
            "ttft_tight_s": float(raw["slo"]["ttft_tight_s"]["value"])}


# ---- the prior box -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dim:
    """One unknown of the queue: its range ``[lo, hi]`` (natural units), scale and the reason for it."""

    name: str
    lo: float
    hi: float
    log: bool
    unit: str
    reason: str

    @property
    def bounds(self) -> tuple[float, float]:
        """The range in the search's coordinates (log10 for a log dimension)."""
        return (math.log10(self.lo), math.log10(self.hi)) if self.log else (self.lo, self.hi)

    def value(self, u: float) -> float:
        return float(10.0 ** u) if self.log else float(u)


BOX: tuple[Dim, ...] = (
    Dim("rate_documents", 2.0, 32.0, True, "req/s", "repro.identify.space.PAPER_SPACE's range"),
    Dim("documents_median_tokens", 512.0, 4096.0, True, "tokens", "PAPER_SPACE's range"),
    Dim("documents_sigma", 0.3, 1.5, False, "lognormal shape", "mechanism document_tail's prior"),
    Dim("prefill_per_token_s", 3.71e-5, 3.7e-4, True, "s/token", "PAPER_SPACE's range (100 % to 10 % MFU)"),
    Dim("prefill_step_share", 0.1329, 1.0, False, "share of 0.0667 s",
        "mechanism request_path's prior: one weights read (8.9 ms) to the whole stated base"),
    Dim("d0_s", 0.0133, 0.070, False, "s",
        "after the prefill leg: at least one decode step at batch 1 (13.2 ms, §VI) and the least KV setup "
        "(0.1 ms); at most the most KV setup of PAPER_SPACE (20 ms) and two decode steps of 25 ms (a step "
        "at a full 60,000-token KV budget and 256 sequences is 19.4 ms) waiting for and taking the first"),
    Dim("transfer_bandwidth_bytes_per_s", 2e9, 32e9, True, "bytes/s", "PAPER_SPACE's range"),
    Dim("budget_8192", 0.0, 1.0, False, "switch",
        "the token budget: 2,048 below 0.5 (vLLM's own on an A40, mechanism vllm_budget), 8,192 above"),
)
"""The queue's prior box: every unknown that bears on documents' TTFT (the stated prefill base 0.0667 s, the
SLO and the two prefill engines are fixed)."""


def setting(x: Sequence[float] | np.ndarray, box: Sequence[Dim] = BOX) -> dict[str, float]:
    """A search vector (search coordinates) -> its natural values by name."""
    return {d.name: d.value(float(u)) for d, u in zip(box, x, strict=True)}


DEFAULTS: dict[str, float] = {
    "rate_documents": 18.24, "documents_median_tokens": 580.0, "documents_sigma": 0.5,
    "prefill_per_token_s": 6.25e-5, "prefill_step_share": 1.0, "d0_s": 0.02,
    "transfer_bandwidth_bytes_per_s": 9.7e9, "budget_8192": 0.0}
"""The base model's best fit, rounded (``rate_documents``, ``documents_median_tokens``, ``prefill_per_token_s``,
``transfer_bandwidth_bytes_per_s``: `data/identify/models/base/parameters.csv`), not `PROFILE`'s identified
values; ``documents_sigma`` the workload's estimate (`repro.workload.params.WorkloadParams`);
``prefill_step_share`` 1 (the whole step holds the server, as in the base model, which has no ``request_path``);
``budget_8192`` 0 (2,048, mechanism ``vllm_budget``, as `PROFILE`); ``d0_s`` an estimate inside its range."""


# ---- the draws ------------------------------------------------------------------------------------------------
@functools.cache
def draws(n_requests: int, reps: int, seed: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]:
    """Per trace: unit-rate exponential gaps, standard normals (the lengths) and the tight mask; every vector is
    simulated on the same draws."""
    out = []
    for rng in np.random.default_rng(seed).spawn(reps):
        gaps, z, slo = (np.random.default_rng(s) for s in rng.spawn(3))
        out.append((gaps.exponential(1.0, n_requests), z.standard_normal(n_requests),
                    slo.random(n_requests) < TIGHT_SHARE))
    return tuple(out)


# ---- the servers ----------------------------------------------------------------------------------------------
def serve(arrival: np.ndarray, service: np.ndarray, policy: str, servers: int = PREFILL_ENGINES,
          hold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Each request's service end (s) and server on ``servers`` FCFS servers under ``policy`` (`POLICIES`).
    ``arrival`` sorted; ``hold``: seconds a request still counts in flight after its service (``jsq_count``)."""
    n = len(arrival)
    if policy == "round_robin":
        where = np.arange(n) % servers
        end = np.empty(n)
        for m in range(servers):
            idx = where == m
            a, s = arrival[idx], service[idx]
            c = np.cumsum(s)
            # Lindley: end_n = max_{k<=n} (a_k + s_k + ... + s_n) = c_n + max_{k<=n} (a_k - c_{k-1})
            end[idx] = c + np.maximum.accumulate(a - (c - s))
        return end, where
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}; allowed: {list(POLICIES)}")
    a_list, s_list = arrival.tolist(), service.tolist()
    end_l = [0.0] * n
    where_l = [0] * n
    free = [0.0] * servers  # when each server's accepted work ends
    tick = 0
    if policy == "jsq_work":
        for i in range(n):
            a = a_list[i]
            tick += 1
            best, best_w = 0, math.inf
            for k in range(servers):
                m = (tick + k) % servers
                w = free[m] - a
                if w < 0.0:
                    w = 0.0
                if w < best_w:
                    best, best_w = m, w
            e = (a if free[best] < a else free[best]) + s_list[i]
            free[best] = e
            end_l[i], where_l[i] = e, best
    else:  # jsq_count
        releases: list[deque[float]] = [deque() for _ in range(servers)]
        for i in range(n):
            a = a_list[i]
            for q in releases:
                while q and q[0] <= a:
                    q.popleft()
            tick += 1
            best, best_n = 0, n + 1
            for k in range(servers):
                m = (tick + k) % servers
                if len(releases[m]) < best_n:
                    best, best_n = m, len(releases[m])
            e = (a if free[best] < a else free[best]) + s_list[i]
            free[best] = e
            releases[best].append(e + hold)
            end_l[i], where_l[i] = e, best
    return np.asarray(end_l), np.asarray(where_l)


def serve_batched(arrival: np.ndarray, length: np.ndarray, policy: str, step_base: float, per_token: float,
                  budget: int, servers: int = PREFILL_ENGINES, hold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """`serve` with vLLM's steps instead of one request at a time: a server's step takes the queued prompts in
    order up to ``budget`` tokens (the last one chunked; its rest leads the next step) and lasts ``step_base +
    per_token x tokens``; every prompt whose last chunk it ran ends with it. A prompt arriving at an idle server
    starts a step; at a busy one, it waits for the next. ``jsq_work`` counts the running step's rest and each
    queued prompt's steps and tokens as if alone."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}; allowed: {list(POLICIES)}")
    n = len(arrival)
    a_list, rem = arrival.tolist(), [int(v) for v in length.tolist()]
    end_l = [0.0] * n
    where_l = [0] * n
    queue: list[deque[int]] = [deque() for _ in range(servers)]
    step_end = [math.inf] * servers  # the running step's end (inf: idle)
    ending: list[list[int]] = [[] for _ in range(servers)]
    releases: list[deque[float]] = [deque() for _ in range(servers)]
    pending = [0] * servers  # assigned, not yet ended
    queued_tokens = [0] * servers  # tokens not yet scheduled into a step

    def start(m: int, t0: float) -> None:
        q, take, tokens, done = queue[m], budget, 0, ending[m]
        while q and take > 0:
            i = q[0]
            c = rem[i] if rem[i] < take else take
            rem[i] -= c
            take -= c
            tokens += c
            if rem[i] == 0:
                q.popleft()
                done.append(i)
        queued_tokens[m] -= tokens
        step_end[m] = t0 + step_base + per_token * tokens

    def advance(m: int, t: float) -> None:
        while step_end[m] <= t and step_end[m] < math.inf:
            e = step_end[m]
            for i in ending[m]:
                end_l[i] = e
                releases[m].append(e + hold)
            pending[m] -= len(ending[m])
            ending[m] = []
            if queue[m]:
                start(m, e)
            else:
                step_end[m] = math.inf

    tick = 0
    for i in range(n):
        a = a_list[i]
        for m in range(servers):
            advance(m, a)
            q = releases[m]
            while q and q[0] <= a:
                q.popleft()
        tick += 1
        best, best_k = i % servers, math.inf
        for k in range(servers if policy != "round_robin" else 0):
            m = (tick + k) % servers
            if policy == "jsq_count":
                key: float = pending[m] + len(releases[m])
            else:
                rest = step_end[m] - a if step_end[m] < math.inf else 0.0
                key = rest + per_token * queued_tokens[m] + step_base * (len(queue[m]) + queued_tokens[m] // budget)
            if key < best_k:
                best, best_k = m, key
        queue[best].append(i)
        queued_tokens[best] += rem[i]
        pending[best] += 1
        where_l[i] = best
        if step_end[best] == math.inf:
            start(best, a)
    for m in range(servers):
        advance(m, math.inf)
    return np.asarray(end_l), np.asarray(where_l)


# ---- one vector -----------------------------------------------------------------------------------------------
def lengths(z: np.ndarray, median: float, sigma: float) -> np.ndarray:
    """Documents' prompt lengths from standard normals, as `repro.workload.traces` draws them."""
    return np.clip(np.rint(np.exp(math.log(median) + sigma * z)), DOC_MIN, DOC_MAX)


def budget_of(values: dict[str, float]) -> int:
    """The token budget the switch ``budget_8192`` picks."""
    return 8192 if values["budget_8192"] >= 0.5 else 2048


def request_times(values: dict[str, float], length: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(service s, non-queueing delay after the service s, the serving path s) per request for ``values``."""
    base = profile_numbers()["prefill_base_s"]
    kv = profile_numbers()["kv_bytes_per_token"]
    share = values["prefill_step_share"]
    service = np.ceil(length / budget_of(values)) * share * base + values["prefill_per_token_s"] * length
    path = (1.0 - share) * base
    after = path + values["d0_s"] + length * kv / values["transfer_bandwidth_bytes_per_s"]
    return service, after, path


SERVICES = ("serial", "batched")
"""``serial``: one request at a time (`serve`); ``batched``: vLLM's steps (`serve_batched`)."""


def evaluate(x: Sequence[float] | np.ndarray, n_requests: int = 2000, reps: int = 5, seed: int = 0,
             servers: int = PREFILL_ENGINES, box: Sequence[Dim] = BOX, service: str = "serial") -> dict[str, float]:
    """Each policy's goodput (mean over ``reps`` traces), the gaps, round-robin's P99 TTFT (s) and the load
    (offered service, one request at a time, over the servers' capacity) at the search vector ``x`` (a
    top-level function: workers run it)."""
    if service not in SERVICES:
        raise ValueError(f"service {service!r}; allowed: {list(SERVICES)}")
    v = setting(x, box)
    tight_s = profile_numbers()["ttft_tight_s"]
    good = {p: [] for p in POLICIES}
    p99, load = [], []
    for gaps, z, tight in draws(n_requests, reps, seed):
        arrival = np.cumsum(gaps) / v["rate_documents"]
        length = lengths(z, v["documents_median_tokens"], v["documents_sigma"])
        alone, after, path = request_times(v, length)
        target = np.where(tight, tight_s, LOOSE_FACTOR * tight_s)
        load.append(v["rate_documents"] * float(alone.mean()) / servers)
        for pol in POLICIES:
            if service == "serial":
                end, _ = serve(arrival, alone, pol, servers, hold=path)
            else:
                end, _ = serve_batched(arrival, length, pol, v["prefill_step_share"] * profile_numbers()[
                    "prefill_base_s"], v["prefill_per_token_s"], budget_of(v), servers, hold=path)
            ttft = end + after - arrival
            good[pol].append(float(np.mean(ttft <= target)))
            if pol == "round_robin":
                p99.append(float(np.quantile(ttft, 0.99)))
    out = {p: float(np.mean(g)) for p, g in good.items()}
    out["gap"] = out["jsq_count"] - out["round_robin"]
    out["gap_work"] = out["jsq_work"] - out["round_robin"]
    out["rr_ttft_p99_s"] = float(np.mean(p99))
    out["load"] = float(np.mean(load))
    return out


def feasible(rr: float) -> bool:
    """Round-robin within 2 sd of the paper's 0.585 (`repro.identify.separation.search`'s rule)."""
    return abs(rr - PAPER_RR) <= 2 * SD


def penalised(values: dict[str, float], key: str = "gap") -> float:
    """The objective (minimised): minus the gap, plus 10 x how far round-robin lies beyond 2 sd of 0.585
    (`repro.identify.separation.penalised`)."""
    return -values[key] + 10.0 * max(0.0, abs(values["round_robin"] - PAPER_RR) - 2 * SD)


# ---- the search -----------------------------------------------------------------------------------------------
@dataclass
class Bound:
    """A search's record: every vector visited (natural values and results), the confirmation of the widest
    (`confirm`) and how it was run."""

    rows: list[dict[str, Any]]
    confirmed: list[dict[str, Any]]
    budget: int
    seed: int
    n_requests: int
    reps: int
    service: str
    wall_s: float

    def widest(self, key: str = "gap") -> dict[str, Any] | None:
        """The feasible row with the widest ``key`` (``gap`` or ``gap_work``), None when none is feasible."""
        feas = [r for r in self.rows if r["feasible"]]
        return max(feas, key=lambda r: r[key]) if feas else None

    def widest_confirmed(self, key: str = "gap") -> dict[str, Any] | None:
        """The confirmed row (round-robin at 0.585 on fresh traces) with the widest ``key``."""
        ok = [r for r in self.confirmed if r["feasible"]]
        return max(ok, key=lambda r: r[key]) if ok else None

    @property
    def n_feasible(self) -> int:
        return sum(r["feasible"] for r in self.rows)


def _job(x: np.ndarray, n_requests: int, reps: int, seed: int, service: str) -> dict[str, float]:
    return evaluate(x, n_requests, reps, seed, service=service)


def tune_rate(x: Sequence[float] | np.ndarray, n_requests: int, reps: int, seed: int,
              service: str = "serial") -> dict[str, float]:
    """``x`` with its rate moved (Brent's method on log10 rate, inside the box) until round-robin's goodput is
    the paper's 0.585 on the draws of ``seed``: the vector's values there (``rate_documents`` added), or its
    values at ``x`` when no rate of the box brings round-robin to 0.585."""
    from scipy.optimize import brentq

    lo, hi = BOX[0].bounds
    memo: dict[float, dict[str, float]] = {}

    def at(u: float) -> dict[str, float]:
        if u not in memo:
            memo[u] = evaluate(np.concatenate([[u], np.asarray(x)[1:]]), n_requests, reps, seed, service=service)
        return memo[u]

    def f(u: float) -> float:
        return at(u)["round_robin"] - PAPER_RR

    u0 = float(x[0])
    out = at(u0)
    if f(lo) > 0 > f(hi):
        u0 = brentq(f, lo, hi, xtol=1e-4)
        out = at(u0)
    return {**out, "rate_documents": BOX[0].value(u0)}


def confirm(rows: Sequence[dict[str, Any]], *, top: int, n_requests: int, reps: int, seed: int, service: str,
            mapper: Callable[[Callable[[np.ndarray], Any], Iterable[Any]], list[Any]],
            key: str = "gap") -> list[dict[str, Any]]:
    """The ``top`` widest feasible vectors of a search, each with its rate re-tuned (`tune_rate`) to put
    round-robin at 0.585 on ``reps`` fresh traces (``seed``): a search's widest is the most favourable of many
    noisy draws; its confirmation is not."""
    feas = sorted((r for r in rows if r["feasible"]), key=lambda r: -r[key])[:top]
    xs = [np.array([math.log10(r[d.name]) if d.log else r[d.name] for d in BOX])
          for r in feas]
    job = functools.partial(tune_rate, n_requests=n_requests, reps=reps, seed=seed, service=service)
    out = []
    for r, res in zip(feas, mapper(job, xs), strict=True):
        row = {**{d.name: r[d.name] for d in BOX}, **res, "search_gap": r[key], "search_rr": r["round_robin"],
               "feasible": feasible(res["round_robin"])}
        out.append(row)
    return out


def bound(box: Sequence[Dim] = BOX, *, budget: int = 8000, seed: int = 0, n_requests: int = 2000, reps: int = 5,
          workers: int = 1, key: str = "gap", service: str = "serial", top: int = 8,
          confirm_reps: int = 20) -> Bound:
    """The widest feasible gap found in ``box`` with about ``budget`` simulated vectors: a scrambled Sobol
    sample (a quarter of the budget, a power of 2), then differential evolution (``best1bin``, Latin hypercube
    start, deferred updating, no polish) on `penalised` for the rest; then the ``top`` widest confirmed on
    ``confirm_reps`` fresh traces (`confirm`; 0: none). Deterministic given ``seed`` (and independent of
    ``workers``, the processes evaluating a batch)."""
    from scipy.optimize import differential_evolution
    from scipy.stats import qmc

    if list(box) != list(BOX):
        raise ValueError("bound: the queue's box is BOX (evaluate's workers read it)")
    if service not in SERVICES:
        raise ValueError(f"service {service!r}; allowed: {list(SERVICES)}")
    t0 = time.perf_counter()
    dim = len(box)
    lo = np.array([d.bounds[0] for d in box])
    hi = np.array([d.bounds[1] for d in box])
    rows: list[dict[str, Any]] = []
    job = functools.partial(_job, n_requests=n_requests, reps=reps, seed=seed, service=service)
    pool = None
    if workers > 1:
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(workers)
    mapper: Callable[[Callable[[np.ndarray], Any], Iterable[Any]], list[Any]] = (
        pool.map if pool is not None else lambda f, xs: [f(x) for x in xs])

    def run(xs: list[np.ndarray], stage: str) -> list[float]:
        objs = []
        for x, res in zip(xs, mapper(job, xs), strict=True):
            rows.append({"stage": stage, **setting(x, box), **res, "feasible": feasible(res["round_robin"])})
            objs.append(penalised(res, key))
        return objs

    confirmed: list[dict[str, Any]] = []
    try:
        n_sobol = 2 ** max(1, int(math.log2(max(2, budget // 4))))
        u = qmc.Sobol(dim, scramble=True, rng=np.random.default_rng(seed)).random(n_sobol)
        run(list(lo + u * (hi - lo)), "sobol")
        left = budget - n_sobol
        popsize = max(2, min(6, left // (4 * dim)))
        generations = max(1, left // (popsize * dim) - 1)
        differential_evolution(
            lambda x: 0.0, list(zip(lo, hi, strict=True)), rng=np.random.default_rng(seed + 1), popsize=popsize,
            maxiter=generations, tol=0.0, polish=False, init="latinhypercube", updating="deferred",
            workers=lambda _f, xs: run([np.asarray(x) for x in xs], "de"))
        if top and confirm_reps:
            confirmed = confirm(rows, top=top, n_requests=n_requests, reps=confirm_reps, seed=seed + 1000,
                                service=service, mapper=mapper, key=key)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return Bound(rows, confirmed, budget, seed, n_requests, reps, service, time.perf_counter() - t0)


def _where(row: dict[str, Any]) -> str:
    return ", ".join(f"{d.name}={row[d.name]:.4g}" for d in BOX)


def describe(b: Bound) -> str:
    """The bound in words: the widest feasible gaps, where, how many vectors, the wall time."""
    lines = [f"queue bound ({PREFILL_ENGINES} FCFS prefill servers, {b.service} service; search: {b.reps} traces x "
             f"{b.n_requests} requests, seed {b.seed}, budget {b.budget}): {len(b.rows)} vectors, {b.n_feasible} "
             f"feasible (round-robin within {2 * SD:.2f} of {PAPER_RR}); {b.wall_s:.1f} s wall",
             f"  need {NEED:.3f} (the paper's +{PAPER_FLOOR - PAPER_RR:.2f} less 2 sd); the simulator searches' "
             f"widest {simulator_widest():+.3f}"]
    for key, what in (("gap", "jsq_count - round_robin (least-loaded = length-threshold on prefill)"),
                      ("gap_work", "jsq_work - round_robin (a router that knows each request's service)")):
        best = b.widest(key)
        if best is None:
            lines.append(f"  widest feasible {what}: none feasible")
            continue
        lines.append(f"  widest feasible {what}, search: {best[key]:+.3f} at round_robin {best['round_robin']:.3f}, "
                     f"jsq_count {best['jsq_count']:.3f}, jsq_work {best['jsq_work']:.3f}, rr P99 TTFT "
                     f"{best['rr_ttft_p99_s']:.2f} s, load {best['load']:.2f}")
        lines.append(f"    at {_where(best)}")
    if b.confirmed:
        conf = b.widest_confirmed("gap")
        n_ok = sum(r["feasible"] for r in b.confirmed)
        head = (f"  confirmed ({len(b.confirmed)} widest, rate re-tuned to round-robin 0.585 on fresh traces; "
                f"{n_ok} there)")
        if conf is None:
            lines.append(head + ": none")
        else:
            lines.append(head + f": widest gap {conf['gap']:+.3f} (gap_work {conf['gap_work']:+.3f}; its search "
                         f"gap {conf['search_gap']:+.3f}) at round_robin {conf['round_robin']:.3f}, jsq_count "
                         f"{conf['jsq_count']:.3f}, rr P99 TTFT {conf['rr_ttft_p99_s']:.2f} s, load {conf['load']:.2f}")
            lines.append(f"    at {_where(conf)}")
            lines.append(f"  verdict: the queue {'OPENS' if conf['gap'] >= NEED else 'does not open'} the paper's gap "
                         f"({conf['gap']:+.3f} {'>=' if conf['gap'] >= NEED else '<'} {NEED:.3f})")
    lines.append(f"  widest gap over every vector (feasible or not): {max(r['gap'] for r in b.rows):+.3f}")
    return "\n".join(lines)


CORNER: dict[str, float] = {
    "rate_documents": 27.24, "documents_median_tokens": 541.9, "documents_sigma": 1.318,
    "prefill_per_token_s": 3.786e-05, "prefill_step_share": 0.1347, "d0_s": 0.01345,
    "transfer_bandwidth_bytes_per_s": 2.549e10, "budget_8192": 0.09972}
"""The widest confirmed vector of the default search (`bound`, seed 0): the corner the gap opens in."""
EDGE_MOVES: dict[str, tuple[float, ...]] = {
    "prefill_per_token_s": (3.786e-05, 4.7e-5, 5.7e-5, 7.6e-5),
    "prefill_step_share": (0.1347, 0.2, 0.3, 0.5),
    "d0_s": (0.01345, 0.02, 0.03, 0.045),
    "documents_sigma": (1.318, 1.2, 1.0, 0.8)}
"""From `CORNER`, each parameter that sits at (or near) a bound of its prior moved inward, one at a time."""


def edge_table(corner: dict[str, float] = CORNER, moves: dict[str, Sequence[float]] = EDGE_MOVES, *,
               n_requests: int = 2000, reps: int = 20, seed: int = 777) -> list[dict[str, float | str]]:
    """How the gap at ``corner`` depends on where each prior ends: each parameter of ``moves`` set to each of its
    values (the others at the corner), the rate re-tuned so round-robin is at 0.585 (`tune_rate`), the gap there.
    A row whose round-robin stays away from 0.585 is infeasible at every rate of the box."""
    out: list[dict[str, float | str]] = []
    for name, values in moves.items():
        for val in values:
            v = {**corner, name: float(val)}
            x = np.array([math.log10(v[d.name]) if d.log else v[d.name] for d in BOX])
            r = tune_rate(x, n_requests, reps, seed)
            out.append({"parameter": name, "value": float(val), "rate_documents": r["rate_documents"],
                        "round_robin": r["round_robin"], "jsq_count": r["jsq_count"], "gap": r["gap"],
                        "feasible": float(feasible(r["round_robin"]))})
    return out


def summary(b: Bound) -> dict[str, Any]:
    """The bound's record as shipped (``bound.json``): how it was searched, the widest confirmed gap and where,
    and whether it reaches `NEED`."""
    conf = b.widest_confirmed("gap")
    best = b.widest("gap")
    out: dict[str, Any] = {"service": b.service, "budget": b.budget, "seed": b.seed, "n_requests": b.n_requests,
                           "reps": b.reps, "vectors": len(b.rows), "feasible": b.n_feasible, "wall_s": round(b.wall_s),
                           "need": NEED, "search_gap": None if best is None else float(best["gap"]),
                           "confirmed": len(b.confirmed), "confirmed_gap": None, "at": None, "opens": False}
    if conf is not None:
        out.update(confirmed_gap=float(conf["gap"]), confirmed_gap_work=float(conf["gap_work"]),
                   round_robin=float(conf["round_robin"]), jsq_count=float(conf["jsq_count"]),
                   rr_ttft_p99_s=float(conf["rr_ttft_p99_s"]), at={d.name: float(conf[d.name]) for d in BOX},
                   opens=bool(conf["gap"] >= NEED))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m repro.identify.queue_bound", description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=int, default=8000, help="vectors to simulate (default 8000; bound.json's "
                                                              "wall_s is the shipped run's time)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-requests", type=int, default=2000, help="requests per trace (the simulator search's)")
    ap.add_argument("--reps", type=int, default=5, help="traces per vector in the search")
    ap.add_argument("--service", choices=SERVICES, default="serial", help="one request at a time, or vLLM's steps")
    ap.add_argument("--top", type=int, default=8, help="widest vectors to confirm on fresh traces (0: none)")
    ap.add_argument("--confirm-reps", type=int, default=20, help="fresh traces per confirmed vector")
    ap.add_argument("--workers", type=int, default=2, help="processes")
    ap.add_argument("--key", choices=("gap", "gap_work"), default="gap", help="what the evolution maximises")
    ap.add_argument("--csv", default="", help="write every visited vector to this CSV")
    ap.add_argument("--edges", action="store_true", help="the gap as each prior's edge moves inward (edge_table)")
    ap.add_argument("--out", default="", help=f"write bound.json (or, with --edges, edges.csv) here (the shipped: "
                                              f"{OUT_DIR})")
    args = ap.parse_args(argv)
    if args.edges:
        rows = edge_table(n_requests=args.n_requests)
        if args.out:
            from pathlib import Path

            import pandas as pd

            Path(args.out).mkdir(parents=True, exist_ok=True)
            pd.DataFrame(rows).to_csv(Path(args.out) / "edges.csv", index=False)
        print("| parameter | value | rate (RR at 0.585) | round-robin | jsq_count | gap |\n|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['parameter']} | {r['value']:.4g} | {r['rate_documents']:.2f} | {r['round_robin']:.3f} | "
                  f"{r['jsq_count']:.3f} | {r['gap']:+.3f}{'' if r['feasible'] else ' (infeasible)'} |")
        return 0
    b = bound(budget=args.budget, seed=args.seed, n_requests=args.n_requests, reps=args.reps, workers=args.workers,
              key=args.key, service=args.service, top=args.top, confirm_reps=args.confirm_reps)
    print(describe(b))
    if args.out:
        from pathlib import Path

        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bound.json").write_text(json.dumps(summary(b), indent=2) + "\n")
    if args.csv:
        import pandas as pd

        pd.DataFrame(b.rows).to_csv(args.csv, index=False)
        if b.confirmed:
            pd.DataFrame(b.confirmed).to_csv(args.csv.removesuffix(".csv") + "-confirmed.csv", index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
