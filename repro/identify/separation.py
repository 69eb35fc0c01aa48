"""How far apart can the paper's baselines be on a model? The documents gap, searched for.

The paper states of its baselines on documents (§V-C): round-robin "collapses to 0.585 with 1.1 s tails while
every load-aware policy holds >= 0.695", a gap of at least +0.11 between baselines. A model of the testbed
(a set of mechanisms, `repro.engine.mechanisms`) that cannot open that gap anywhere inside its physical
bounds, with round-robin where the paper has it, cannot reproduce the paper's routing results, however its
constants are fitted. `search` looks for the widest gap a model allows: SciPy's differential evolution over
the model's whole prior box (the unstated constants of `repro.identify.space.PAPER_SPACE` that bear on
documents, the documents' rate, and the mechanisms' free parameters), maximising

    gap = min(load-aware baselines' goodput) - round-robin's goodput

among the vectors whose round-robin goodput lies within ``2 x sd`` of the paper's 0.585 (a vector outside
is penalised by its distance). Every visited vector is kept; `summary` reports the widest feasible gap and
where it was found. A search finds a lower bound on what a model allows, never the maximum: the report says
how many vectors it visited.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from repro.engine.mechanisms import Mechanism, fixed_overrides, model_name
from repro.identify.space import PAPER_SPACE, Parameter, settings

PAPER_RR = 0.585
"""Round-robin's documents goodput (§V-C)."""
PAPER_FLOOR = 0.695
"""The least goodput of a load-aware policy on documents (§V-C: "every load-aware policy holds >= 0.695")."""
PAPER_RR_TAIL_S = 1.1
"""Round-robin's P99 TTFT on documents (s, §V-C)."""
SD = 0.015
"""A three-trace mean's noise (the training table's)."""
LOAD_AWARE = ("least_loaded", "length_threshold")
"""The paper's load-aware baselines (the router is left out: it is what the testbed predicts)."""


@dataclass(frozen=True)
class GapProblem:
    """A model and what to search: its mechanisms, the base profile, the runs' size."""

    mechanisms: tuple[Mechanism, ...]
    profile: str
    topology: str = "2p4d"
    seeds: tuple[int, ...] = (1, 2, 3)
    n_requests: int = 2000

    @property
    def space(self) -> tuple[Parameter, ...]:
        keep = ("prefill_per_token_s", "transfer_bandwidth_bytes_per_s", "transfer_latency_s",
                "documents_median_tokens", "rate_documents")
        out = [p for p in PAPER_SPACE if p.name in keep]
        for m in self.mechanisms:
            out += [Parameter(f.name, f.kind, f.lo, f.hi, f.unit, f.reason, f.log) for f in m.free]
        return tuple(out)

    @property
    def name(self) -> str:
        return model_name(self.mechanisms)


def evaluate(problem: GapProblem, x: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Each baseline's documents goodput (mean over the seeds) and round-robin's P99 TTFT under ``x`` (a
    top-level function: the executor's workers run it)."""
    s = settings(problem.space, x)
    out: dict[str, float] = {}
    for pol in ("round_robin", *LOAD_AWARE):
        g, p99 = _policy_goodput(problem, s, pol, s["rate"]["rate_documents"])
        out[pol] = g
        if pol == "round_robin":
            out["rr_ttft_p99_s"] = p99
    out["gap"] = min(out[p] for p in LOAD_AWARE) - out["round_robin"]
    return out


RATE = "rate_documents"
RATE_TRIES = 6
"""The most round-robin evaluations the aimed search spends finding a vector's rate (`evaluate_at_paper_rr`)."""


def _policy_goodput(problem: GapProblem, s: dict[str, dict[str, float]], policy: str,
                    rate: float) -> tuple[float, float]:
    """One baseline's documents goodput and P99 TTFT (s), means over the problem's seeds, at ``rate`` (req/s)."""
    from repro.experiment.runner import SimTask, simulate_output
    from repro.experiment.spec import RunSpec

    fixed_p, fixed_w = fixed_overrides(problem.mechanisms)
    physics = {**fixed_p, **s["physics"]}
    workloads = {**fixed_w, **s["workloads"]}
    runs = [simulate_output(SimTask(RunSpec(
        backend="sim", workload="documents", topology=problem.topology, profile=problem.profile, seed=seed,
        rate=rate, n_requests=problem.n_requests, policy=policy, physics=physics or None,
        workloads=workloads or None), journal=False)).summary for seed in problem.seeds]
    return float(np.mean([r["goodput"] for r in runs])), float(np.mean([r["ttft_p99_s"] for r in runs]))


def aimed_space(problem: GapProblem) -> tuple[Parameter, ...]:
    """The aimed search's box: the model's gap space without the documents' rate (each vector finds its own)."""
    return tuple(p for p in problem.space if p.name != RATE)


def evaluate_at_paper_rr(problem: GapProblem, x: Sequence[float] | np.ndarray,
                         start_rate: float | None = None) -> dict[str, float]:
    """The documents gap at the paper's round-robin: ``x`` (internal coordinates of `aimed_space`) with the
    documents' rate at which round-robin's goodput (mean over the seeds) is nearest 0.585, found by bracketing
    and interpolation in log rate (at most `RATE_TRIES` round-robin evaluations inside the rate's prior); the
    load-aware baselines are simulated there only when round-robin lies within 2 sd of 0.585 (``feasible`` 1).
    ``start_rate`` (req/s): where the bracketing starts (default: above the prior's geometric middle). A top-level
    function: the executor's workers run it."""
    space = aimed_space(problem)
    rate_p = next(p for p in problem.space if p.name == RATE)
    s = settings(space, x)
    lo, hi = rate_p.lo, rate_p.hi
    tries: list[tuple[float, float, float]] = []
    r = min(max(start_rate, lo), hi) if start_rate is not None else math.sqrt(lo * hi) * 1.5
    for _ in range(RATE_TRIES):
        g, p99 = _policy_goodput(problem, s, "round_robin", r)
        tries.append((r, g, p99))
        if abs(g - PAPER_RR) <= SD:
            break
        above = [t for t in tries if t[1] > PAPER_RR]  # too light: more rate
        below = [t for t in tries if t[1] < PAPER_RR]
        if above and below:
            a = max(above, key=lambda t: t[0])
            b = min(below, key=lambda t: t[0])
            la, lb = math.log(a[0]), math.log(b[0])
            nxt = math.exp(la + (a[1] - PAPER_RR) * (lb - la) / (a[1] - b[1]))
        elif above:
            nxt = min(hi, max(t[0] for t in tries) * 2.0)
        else:
            nxt = max(lo, min(t[0] for t in tries) / 2.0)
        if any(abs(nxt - t[0]) <= 1e-9 * nxt for t in tries):
            break
        r = nxt
    rate, g, p99 = min(tries, key=lambda t: abs(t[1] - PAPER_RR))
    out = {RATE: rate, "round_robin": g, "rr_ttft_p99_s": p99, "rr_evals": float(len(tries))}
    if abs(g - PAPER_RR) > 2 * SD:
        out.update({pol: math.nan for pol in LOAD_AWARE}, gap=math.nan, feasible=0.0)
        return out
    for pol in LOAD_AWARE:
        out[pol] = _policy_goodput(problem, s, pol, rate)[0]
    out["gap"] = min(out[p] for p in LOAD_AWARE) - g
    out["feasible"] = 1.0
    return out


def _at_paper_rr_rows(hist: pd.DataFrame, model: str, origin: str) -> pd.DataFrame:
    """Rows of vectors evaluated at the paper's round-robin (`evaluate_at_paper_rr`) with their ``model``, boolean
    ``feasible``, the searches' ``objective`` (minus the gap when feasible, else 1 + round-robin's distance from
    0.585) and ``origin``."""
    hist.insert(0, "model", model)
    hist["feasible"] = hist["feasible"] >= 1.0
    hist["objective"] = [-g if f else 1.0 + abs(rr - PAPER_RR)
                         for g, f, rr in zip(hist["gap"], hist["feasible"], hist["round_robin"], strict=True)]
    hist["origin"] = origin
    return hist


def aimed_search(problem: GapProblem, *, executor: Any = None, popsize: int = 10, feasible_target: int = 2000,
                 max_generations: int = 60, seed: int = 0, journal: Path | None = None,
                 seeds: Sequence[dict[str, float]] = ()) -> pd.DataFrame:
    """A search aimed at the widest gap where the paper's round-robin holds: differential evolution over
    `aimed_space` (every vector at its own rate, `evaluate_at_paper_rr`), maximising the gap among feasible
    vectors (an infeasible one scores 1 + its distance from 0.585), its initial population seeded with
    ``seeds`` (vectors by name, e.g. `KNOWN_VECTORS` and the best of earlier searches), run generation after
    generation until ``feasible_target`` feasible vectors were evaluated (or ``max_generations``). Journaled:
    rerun with the same arguments, it resumes. Rows like `search`'s, ``origin`` ``aimed``."""
    from repro.identify.search import evolve

    space = aimed_space(problem)
    names = [p.name for p in space]
    init = []
    for v in seeds:
        init.append([p.to_internal(min(max(v[p.name], p.lo), p.hi)) if p.name in v else sum(p.internal_bounds) / 2
                     for p in space])
    per_gen = popsize * len(space)
    generations = max(0, math.ceil(feasible_target / per_gen) - 1)
    rows: list[dict[str, Any]] = []

    def record(x: np.ndarray, vals: dict[str, float]) -> float:
        row: dict[str, Any] = {p.name: p.to_value(float(u)) for p, u in zip(space, x, strict=True)}
        row.update(vals)
        rows.append(row)
        if vals.get("feasible", 0.0) >= 1.0 and math.isfinite(vals.get("gap", math.nan)):
            return -vals["gap"]
        return 1.0 + abs(vals.get("round_robin", 0.0) - PAPER_RR)

    while True:
        rows.clear()
        evolve([p.internal_bounds for p in space], functools.partial(evaluate_at_paper_rr, problem), record,
               executor=executor, popsize=popsize, generations=generations, seed=seed, journal=journal,
               seeds=init)
        hist = pd.DataFrame(rows)
        feasible = int((hist["feasible"] >= 1.0).sum())
        if feasible >= feasible_target or generations >= max_generations:
            break
        share = max(feasible / len(hist), 0.05)
        generations = min(max_generations, math.ceil(feasible_target / (per_gen * share)) - 1)
    hist = hist.drop_duplicates(subset=names).reset_index(drop=True)
    return _at_paper_rr_rows(hist, problem.name, "aimed")


EDGE_STEPS = (0.25, 0.5)
"""How far `edge_table` moves each parameter from the widest vector toward its prior's middle (fractions of the way,
in the search's internal coordinates: log10 for log parameters)."""


def edge_table(problem: GapProblem, vector: dict[str, float], *, executor: Any = None,
               steps: Sequence[float] = EDGE_STEPS) -> pd.DataFrame:
    """How the widest gap rests on each prior's edge: from ``vector`` (by name, e.g. a model's widest confirmed
    one), each parameter of `aimed_space` alone moved ``steps`` of the way toward its prior's middle, every moved
    vector evaluated at the paper's round-robin (`evaluate_at_paper_rr`, the problem's seeds). Rows: ``parameter``,
    ``step`` (0 for the vector itself), ``value``, ``at_edge`` (the vector's value within 5 % of the prior's width
    from an end), the documents' ``rate_documents``, ``round_robin``, the load-aware baselines, ``gap`` and
    ``feasible``. A gap that falls below the need when one parameter moves in says the widest gap rests on that
    edge."""
    space = aimed_space(problem)
    base = np.asarray([p.to_internal(min(max(vector[p.name], p.lo), p.hi)) for p in space])
    jobs: list[tuple[str, float, float, np.ndarray]] = [("(the vector)", 0.0, math.nan, base)]
    for k, p in enumerate(space):
        lo, hi = p.internal_bounds
        mid = (lo + hi) / 2
        for f in steps:
            x = base.copy()
            x[k] = base[k] + f * (mid - base[k])
            jobs.append((p.name, f, p.to_value(float(x[k])), x))
    from repro.experiment.executor import shared_executor

    ex = executor or shared_executor()
    vals: list[dict[str, float]] = [{} for _ in jobs]
    for i, v in ex.imap_unordered(functools.partial(evaluate_at_paper_rr, problem), [j[3] for j in jobs]):
        vals[i] = v
    rows = []
    for (name, f, value, _), v in zip(jobs, vals, strict=True):
        if name != "(the vector)":
            p = next(q for q in space if q.name == name)
            width = p.hi - p.lo
            edge = min(vector[name] - p.lo, p.hi - vector[name]) <= 0.05 * width
        else:
            edge = False
        rows.append({"parameter": name, "step": f, "value": value, "at_edge": edge,
                     **{k: v.get(k, math.nan) for k in (RATE, "round_robin", *LOAD_AWARE, "gap", "feasible")}})
    return pd.DataFrame(rows)


def best_feasible(hist: pd.DataFrame, space: Sequence[Parameter], k: int = 5) -> list[dict[str, float]]:
    """The ``k`` widest-gap feasible vectors of a search, by name (seeds for an aimed search)."""
    if hist is None or not len(hist) or "feasible" not in hist:
        return []
    feas = hist[hist["feasible"].astype(bool)].sort_values("gap", ascending=False).head(k)
    return [{p.name: float(r[p.name]) for p in space if p.name in r and pd.notna(r[p.name])}
            for r in feas.to_dict("records")]


def penalised(values: dict[str, float]) -> float:
    """The objective (minimised): minus the gap, plus 10 x how far round-robin lies beyond 2 sd of 0.585."""
    off = max(0.0, abs(values["round_robin"] - PAPER_RR) - 2 * SD)
    return -values["gap"] + 10.0 * off


def search(problem: GapProblem, *, executor: Any = None, popsize: int = 5, generations: int = 6,
           seed: int = 0, journal: Path | None = None) -> pd.DataFrame:
    """Differential evolution over the model's box (`repro.identify.search.evolve`; ``journal``: resume from
    and append to it); every visited vector with its numbers (``feasible``: round-robin within 2 sd of the
    paper's)."""
    from repro.identify.search import evolve

    space = problem.space
    rows: list[dict[str, Any]] = []

    def record(x: np.ndarray, vals: dict[str, float]) -> float:
        v = vals or {"round_robin": math.nan, "gap": math.nan}
        row: dict[str, Any] = {p.name: p.to_value(float(u)) for p, u in zip(space, x, strict=True)}
        row.update(v)
        obj = penalised(v) if all(math.isfinite(v.get(k, math.nan)) for k in ("round_robin", "gap")) else 1e6
        row["objective"] = obj
        rows.append(row)
        return obj

    evolve([p.internal_bounds for p in space], functools.partial(evaluate, problem), record, executor=executor,
           popsize=popsize, generations=generations, seed=seed, journal=journal)
    hist = pd.DataFrame(rows)
    hist.insert(0, "model", problem.name)
    hist["feasible"] = (hist["round_robin"] - PAPER_RR).abs() <= 2 * SD
    return hist


KNOWN_VECTORS: tuple[dict[str, float], ...] = (
    {"prefill_per_token_s": 3.786e-05, "transfer_bandwidth_bytes_per_s": 2.549e10, "transfer_latency_s": 1e-4,
     "documents_median_tokens": 541.9, "rate_documents": 25.0, "prefill_step_share": 0.1347,
     "serving_path_sigma": 0.0, "documents_sigma": 1.318},
)
"""The widest-gap vectors found outside the model searches, re-checked on every model that can express them
(`confirm_known`): the corner an independent queue's search found (`repro.identify.queue_bound`, docs/IDENTIFY.md:
the cheapest prefill, the least of the base inside the step, the widest documents' tail), its rate re-tuned for
the simulator's round-robin."""
CONFIRM_SEEDS = tuple(range(1, 61))
"""The traces a known vector is confirmed on: its gap on two halves of 30 differed by 0.006 there."""


def confirm_known(problem: GapProblem, vectors: Sequence[dict[str, float]] = KNOWN_VECTORS,
                  seeds: Sequence[int] = CONFIRM_SEEDS) -> pd.DataFrame:
    """Each known vector the model can express (every name it sets is a parameter of the model's space, within
    its bounds, or a mechanism's parameter the model lacks at its ``off`` value; the model's other parameters at
    their prior's geometric or plain middle), evaluated on ``seeds``:
    rows like `search`'s, with ``origin`` ``known`` (empty when the model can express none)."""
    from repro.engine.mechanisms import CATALOGUE

    space = problem.space
    names = {p.name for p in space}
    off = {f.name: f.off for m in CATALOGUE for f in m.free if f.off is not None}
    confirm = GapProblem(problem.mechanisms, problem.profile, problem.topology, tuple(seeds), problem.n_requests)
    rows = []
    for v in vectors:
        # a name the model lacks is fine at the value that leaves a model as without its mechanism
        if any(n not in names and off.get(n) != val for n, val in v.items()) \
                or any(not (p.lo <= v[p.name] <= p.hi) for p in space if p.name in v):
            continue
        x = [p.to_internal(v[p.name]) if p.name in v else sum(p.internal_bounds) / 2 for p in space]
        vals = evaluate(confirm, x)
        row: dict[str, Any] = {p.name: p.to_value(float(u)) for p, u in zip(space, x, strict=True)}
        row.update(vals)
        row["objective"] = penalised(vals)
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    hist = pd.DataFrame(rows)
    hist.insert(0, "model", problem.name)
    hist["feasible"] = (hist["round_robin"] - PAPER_RR).abs() <= 2 * SD
    hist["origin"] = "known"
    return hist


def _evaluate_from(problem: GapProblem, item: tuple[list[float], float]) -> dict[str, float]:
    return evaluate_at_paper_rr(problem, item[0], start_rate=item[1])


def confirm_at_paper_rr(problem: GapProblem, vectors: Sequence[dict[str, float]], *, executor: Any = None,
                        seeds: Sequence[int] = CONFIRM_SEEDS) -> pd.DataFrame:
    """Each vector (by name, e.g. an aimed search's widest) on fresh traces, ``seeds``, at the rate where
    round-robin's mean over those traces is nearest 0.585 (`evaluate_at_paper_rr`, its bracketing started at the
    vector's own rate): a vector whose 3-trace rate put round-robin near 0.585 by luck is moved to the rate where it
    holds there on the fresh traces, or found infeasible. Rows like `aimed_search`'s, ``origin`` ``confirmed``."""
    from repro.experiment.executor import shared_executor

    if not vectors:
        return pd.DataFrame()
    space = aimed_space(problem)
    confirm = GapProblem(problem.mechanisms, problem.profile, problem.topology, tuple(seeds), problem.n_requests)
    items = [([p.to_internal(min(max(v[p.name], p.lo), p.hi)) for p in space], float(v.get(RATE, math.nan)))
             for v in vectors]
    items = [(x, r if math.isfinite(r) else None) for x, r in items]
    ex = executor or shared_executor()
    vals: list[dict[str, float]] = [{} for _ in items]
    for i, v in ex.imap_unordered(functools.partial(_evaluate_from, confirm), items):
        vals[i] = v
    rows = []
    for (x, _), v in zip(items, vals, strict=True):
        row: dict[str, Any] = {p.name: p.to_value(float(u)) for p, u in zip(space, x, strict=True)}
        row.update(v)
        rows.append(row)
    hist = pd.DataFrame(rows)
    return _at_paper_rr_rows(hist, problem.name, "confirmed")


def summary(hist: pd.DataFrame) -> dict[str, Any]:
    """The widest feasible gap a model's searches found, and where (NaN when no vector was feasible). The aimed
    search's own rows (``origin`` ``aimed``: the most favourable of many 3-trace evaluations) count only through
    their widest few re-checked on fresh traces (``origin`` ``confirmed``)."""
    feas = hist[hist["feasible"].astype(bool)]
    if "origin" in feas.columns:
        feas = feas[feas["origin"] != "aimed"]
    out: dict[str, Any] = {"model": hist["model"].iloc[0], "vectors": len(hist), "feasible": len(feas),
                           "widest_gap": math.nan, "rr": math.nan, "load_aware_min": math.nan,
                           "rr_ttft_p99_s": math.nan, "at": ""}
    if len(feas):
        best = feas.loc[feas["gap"].idxmax()]
        out.update(widest_gap=float(best["gap"]), rr=float(best["round_robin"]),
                   load_aware_min=float(min(best[p] for p in LOAD_AWARE)),
                   rr_ttft_p99_s=float(best["rr_ttft_p99_s"]),
                   at="; ".join(f"{c}={best[c]:.4g}" for c in hist.columns
                                if c not in ("model", "round_robin", "gap", "objective", "feasible", "rr_ttft_p99_s",
                                             "origin", "rr_evals", *LOAD_AWARE)))
    out["widest_gap_any"] = float(hist["gap"].max())
    out["reaches_paper"] = bool(out["widest_gap"] >= (PAPER_FLOOR - PAPER_RR) - 2 * SD * math.sqrt(2))
    return out
