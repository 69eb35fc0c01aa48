"""The search both fits use (`repro.identify.fit.identify`, `repro.identify.separation.search`): SciPy's
differential evolution over a box, each generation's vectors evaluated in parallel on the project's executor
(loky workers here, a Ray cluster when given), every evaluation appended to a journal so that an interrupted
search resumes where it stopped.

Differential evolution with a fixed seed visits the same vectors in the same order, so a resumed search
asks for the vectors it already evaluated first: they are read back from the journal (one JSON line per
vector: its internal coordinates and its numbers, flushed after each generation) instead of simulated again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import optimize

if TYPE_CHECKING:
    from repro.experiment.executor import Executor

Values = dict[str, float]


def _key(x: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in x)


def load_journal(path: Path | None) -> dict[tuple[float, ...], Values]:
    """The vectors a journal holds (internal coordinates -> numbers); empty without one. A torn last line (a
    search killed mid-write) is skipped."""
    out: dict[tuple[float, ...], Values] = {}
    if path is None or not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[tuple(float(v) for v in rec["x"])] = {k: float(v) for k, v in rec["values"].items()}
    return out


def evolve(bounds: Sequence[tuple[float, float]], fn: Callable[[np.ndarray], Values],
           record: Callable[[np.ndarray, Values], float], *, executor: Executor | None = None, popsize: int = 6,
           generations: int = 10, seed: int = 0, journal: Path | None = None, x0: Sequence[float] | None = None,
           after_batch: Callable[[], None] | None = None,
           seeds: Sequence[Sequence[float]] = ()) -> tuple[str, int]:
    """Minimise over ``bounds`` (internal coordinates): ``fn(x)`` gives a vector's numbers (run on the workers:
    a top-level function or a partial of one), ``record(x, numbers)`` keeps them and returns the objective.
    ``journal``: resume from, and append to, this file. ``x0``: a vector (internal coordinates) put in the
    initial population (a nested model's start at the simpler model's best). ``seeds``: vectors (internal
    coordinates) that replace the first members of the initial population (a Sobol sample of ``popsize x
    len(bounds)`` vectors, seeded), e.g. the best found by earlier searches. Returns SciPy's closing message and
    the vectors simulated in this call (those read back from the journal not counted)."""
    from repro.experiment.executor import shared_executor

    ex = executor or shared_executor()
    done = load_journal(journal)
    simulated = 0
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)

    def mapper(_func: Any, xs: Any) -> list[float]:
        nonlocal simulated
        xs = [np.asarray(x, dtype=float) for x in xs]
        results: list[Values | None] = [done.get(_key(x)) for x in xs]
        todo = [i for i, r in enumerate(results) if r is None]
        for j, vals in ex.imap_unordered(fn, [xs[i] for i in todo]):
            results[todo[j]] = vals or {}
        simulated += len(todo)
        if journal is not None and todo:
            with journal.open("a") as f:
                for i in todo:
                    f.write(json.dumps({"x": list(_key(xs[i])), "values": results[i]}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        out = [record(x, vals or {}) for x, vals in zip(xs, results, strict=True)]
        if after_batch is not None:
            after_batch()
        return out

    init: Any = "sobol"
    if seeds:
        from scipy.stats import qmc

        lo = np.asarray([b[0] for b in bounds], dtype=float)
        hi = np.asarray([b[1] for b in bounds], dtype=float)
        n = popsize * len(bounds)
        init = qmc.scale(qmc.Sobol(len(bounds), seed=seed).random_base2(max(0, (n - 1).bit_length()))[:n], lo, hi)
        for i, v in enumerate(seeds[: len(init)]):
            init[i] = np.clip(np.asarray(v, dtype=float), lo, hi)
    res = optimize.differential_evolution(
        _unused_objective, list(bounds), workers=mapper, updating="deferred", popsize=popsize,
        maxiter=generations, seed=seed, polish=False, init=init, tol=0.0, atol=0.0,
        x0=None if x0 is None else np.asarray(x0, dtype=float))
    return str(res.message), simulated


def _unused_objective(x: np.ndarray) -> float:  # the mapper evaluates; SciPy needs a callable
    raise AssertionError("evaluated through the workers mapper")
