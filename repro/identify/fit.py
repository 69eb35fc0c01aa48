"""The fit: simulate the measured numbers' runs for a parameter vector, score them, search, keep an ensemble.

`evaluate` simulates every run a table of targets needs under one parameter vector (on a worker; no
cache: a fit visits thousands of vectors) and returns each target's simulated number. `identify`
searches the prior box with SciPy's differential evolution (Sobol initial population, deferred updates
so that each generation runs in parallel on the project's executor: loky workers on this machine, a Ray
cluster when given an address) and records every vector it visits. The objective is chi-square: the
sum over targets of ((simulated - measured) / sd)^2 (times on a log scale). The ensemble
(`Identification.ensemble`) is every visited vector whose chi-square is within
``chi2.ppf(level, k)`` of the best (k parameters), that threshold scaled by the best fit's
chi-square per degree of freedom when it exceeds 1 (the measured numbers then disagree with each
other or with the model by more than their stated noise, and the ensemble widens accordingly). Whether
the best fit is within the numbers' noise is said from its figures (`Identification.fit_quality`), never
assumed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pandas as pd
from scipy import stats

from repro.errors import ConfigError
from repro.identify import bounds as physical
from repro.identify.space import Parameter, settings
from repro.identify.targets import Target

if TYPE_CHECKING:
    from repro.experiment.executor import Executor
    from repro.experiment.spec import RunSpec

BAD_CHI2 = 1e6
"""The objective of a vector whose runs give no number (a run that serves nothing)."""

NARROW_SHARE = 1 / 3
"""A parameter is narrow when its ensemble spans at most this share of its prior (on its scale)."""

EDGE_SHARE = 0.02
"""The outer share of a prior, on each side, in which an ensemble's min (max) counts as cut by the prior's
lower (upper) bound."""

NOISE_CHI2_PER_DOF = 1.5
"""The best fit is within the numbers' stated noise when its chi-square per degree of freedom is at most this."""


class OptimizerRecord(TypedDict, total=False):
    """How `identify` searched (`Identification.optimizer`; empty for a fit made otherwise): the ``method``,
    its population size per parameter and generations, the seed, the vectors evaluated and SciPy's
    closing ``message``."""

    method: str
    popsize: int
    generations: int
    seed: int
    evaluations: int
    message: str


@dataclass(frozen=True)
class Problem:
    """What to identify: a base hardware profile (its stated constants stay), the measured numbers, the
    unknowns, whether the A40's physical bounds apply (`repro.identify.bounds`), and the rates the
    measurements state (``stated``: rate name -> req/s, e.g. ``rate_mixed`` 24.0; a mapping is stored as
    sorted pairs). A target's ``@name`` rate is either fitted (a parameter of kind ``rate``) or stated,
    never both."""

    profile: str
    targets: tuple[Target, ...]
    space: tuple[Parameter, ...]
    physical_bounds: bool = True
    stated: tuple[tuple[str, float], ...] = ()
    mechanisms: tuple[str, ...] = ()
    """The model's mechanisms (`repro.engine.mechanisms`): what they fix applies to every run; the parameters
    they free are the caller's to put in ``space`` (`repro.identify.space.mechanism_space`)."""

    def __post_init__(self) -> None:
        if isinstance(self.stated, Mapping):
            object.__setattr__(self, "stated", tuple(sorted((str(k), float(v)) for k, v in self.stated.items())))
        names = {p.name for p in self.space}
        if len(names) != len(self.space):
            raise ConfigError("identify: a parameter is listed twice")
        bad = [n for n, r in self.stated if not (math.isfinite(r) and r > 0)]
        if bad:
            raise ConfigError(f"identify: stated rate(s) {bad} must be > 0 (req/s)")
        fitted = {p.name for p in self.space if p.kind == "rate"}
        both = sorted(fitted & set(self.stated_rates))
        if both:
            raise ConfigError(f"identify: rate(s) {both} are both stated (--stated-rate) and fitted (--params); a "
                              "stated rate is not fitted: drop it from one of the two")
        needed = {n for t in self.targets for n in t.rate_names()}
        missing = sorted(needed - fitted - set(self.stated_rates))
        if missing:
            raise ConfigError(f"identify: the targets refer to rate(s) {missing} that no parameter of kind 'rate' "
                              "fits and no --stated-rate NAME=REQ_PER_S states")
        if self.physical_bounds:
            for p in self.space:
                b = physical.BOUNDS.get(p.name)
                if b is not None and (p.lo < b.lo or p.hi > b.hi):
                    raise ConfigError(f"identify: parameter {p.name!r}'s prior [{p.lo:g}, {p.hi:g}] leaves its "
                                      f"physical bound [{b.lo:g}, {b.hi:g}] ({b.reason})")

    @property
    def bounds(self) -> list[tuple[float, float]]:
        return [p.internal_bounds for p in self.space]

    @property
    def fixed(self) -> tuple[dict[str, float], dict[str, float]]:
        """The physics and workload overrides the model's mechanisms fix."""
        from repro.engine.mechanisms import fixed_overrides, resolve

        return fixed_overrides(resolve(self.mechanisms))

    @property
    def model(self) -> str:
        """The model's name (its mechanisms joined by ``+``; ``base`` for none)."""
        from repro.engine.mechanisms import model_name, resolve

        return model_name(resolve(self.mechanisms))

    def fingerprint(self) -> str:
        """A digest of what decides a vector's numbers (profile, targets, parameters, stated rates,
        mechanisms): a search journal is reused only by the same problem."""
        import hashlib

        space = tuple(_Decides(p) for p in self.space)  # a parameter's `off` (a search's start) decides no number
        text = repr((self.profile, self.targets, space, self.stated, tuple(sorted(self.mechanisms))))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def stated_rates(self) -> dict[str, float]:
        """Rate name -> the stated rate (req/s)."""
        return dict(self.stated)


@dataclass(frozen=True)
class _Decides:
    """What of a `Parameter` decides a vector's numbers, written as the fingerprint has always read it."""

    p: Parameter

    def __repr__(self) -> str:
        p = self.p
        return (f"Parameter(name={p.name!r}, kind={p.kind!r}, lo={p.lo!r}, hi={p.hi!r}, unit={p.unit!r}, "
                f"reason={p.reason!r}, log={p.log!r})")


def target_specs(problem: Problem, s: Mapping[str, Mapping[str, float]], targets: Sequence[Target] | None = None,
                 rates: Mapping[str, float] | None = None) -> dict[tuple[str, str, int], RunSpec]:
    """(target key, policy, seed) -> the simulated run that measures it under settings ``s``
    (`repro.identify.space.settings`); ``rates`` adds rates not in ``s`` (e.g. searched ones), and the
    problem's stated rates fill the rest."""
    from repro.experiment.spec import RunSpec

    all_rates = {**problem.stated_rates, **(rates or {}), **s.get("rate", {})}
    fixed_p, fixed_w = problem.fixed
    physics = {**fixed_p, **s.get("physics", {})}
    workloads = {**fixed_w, **s.get("workloads", {})}
    out: dict[tuple[str, str, int], RunSpec] = {}
    for t in targets if targets is not None else problem.targets:
        rate = t.rate_of(all_rates)
        for pol in t.policies:
            for seed in t.seeds:
                out[(t.key, pol, seed)] = RunSpec(
                    backend="sim", workload=t.workload, topology=t.topology, profile=problem.profile, seed=seed,
                    rate=rate, n_requests=t.n_requests, policy=pol, physics=dict(physics) or None,
                    workloads=dict(workloads) or None)
    return out


def simulate_values(targets: Sequence[Target], specs: Mapping[tuple[str, str, int], RunSpec]) -> dict[str, float]:
    """Each target's number from its runs (simulated here, once per distinct spec; nothing cached)."""
    from repro.experiment.runner import SimTask, simulate_output

    done: dict[str, dict[str, Any]] = {}
    out: dict[str, float] = {}
    for t in targets:
        per_policy = []
        for pol in t.policies:
            vals = []
            for seed in t.seeds:
                spec = specs[(t.key, pol, seed)]
                rid = spec.run_id
                if rid not in done:
                    done[rid] = simulate_output(SimTask(spec, journal=False)).summary
                v = done[rid].get(t.metric)
                vals.append(float(v) if v is not None else math.nan)
            per_policy.append(vals)
        out[t.key] = t.combine(per_policy)
    return out


def evaluate(problem: Problem, x: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Target key -> its simulated number under the internal vector ``x`` (a top-level function: the
    executor's workers run it)."""
    s = settings(problem.space, x)
    return simulate_values(problem.targets, target_specs(problem, s))


def chi_square(targets: Sequence[Target], values: Mapping[str, float]) -> float:
    """Sum of squared residuals (`repro.identify.targets.Target.residual`), capped at `BAD_CHI2`."""
    total = sum(t.residual(values.get(t.key, math.nan)) ** 2 for t in targets)
    return float(min(total, BAD_CHI2)) if math.isfinite(total) else BAD_CHI2


@dataclass
class Identification:
    """A finished fit: every visited vector (``history``: internal coordinates, natural values, each
    target's simulated number, chi-square), the best, and the ensemble rule's threshold."""

    problem: Problem
    history: pd.DataFrame
    level: float = 0.9
    optimizer: OptimizerRecord = field(default_factory=dict)

    @property
    def k(self) -> int:
        return len(self.problem.space)

    @property
    def dof(self) -> int:
        return max(len(self.problem.targets) - self.k, 1)

    @property
    def best(self) -> pd.Series:
        return self.history.loc[self.history["chi2"].idxmin()]

    def best_settings(self) -> dict[str, dict[str, float]]:
        """The best vector in natural units (`repro.identify.space.settings`), with the model's fixed physics
        and workload parameters under it: what a run on the best testbed sets."""
        space = self.problem.space
        best = settings(space, [p.to_internal(float(self.best[p.name])) for p in space])
        fixed_physics, fixed_workloads = self.problem.fixed
        best["physics"] = {**fixed_physics, **best["physics"]}
        best["workloads"] = {**fixed_workloads, **best["workloads"]}
        return best

    @property
    def birge(self) -> float:
        """The best chi-square per degree of freedom, at least 1: how far the numbers disagree beyond their sd."""
        return max(1.0, float(self.best["chi2"]) / self.dof)

    @property
    def threshold(self) -> float:
        """The ensemble's chi-square ceiling: best + chi2.ppf(level, k) x `birge`."""
        return float(self.best["chi2"]) + float(stats.chi2.ppf(self.level, self.k)) * self.birge

    def ensemble(self, size: int = 24) -> pd.DataFrame:
        """The visited vectors within `threshold` (distinct), at most ``size`` of them spread evenly over
        their chi-square ranking (the best first); every one a plausible testbed."""
        h = self.history.drop_duplicates(subset=[p.name for p in self.problem.space])
        within = h[h["chi2"] <= self.threshold].sort_values("chi2", kind="stable")
        if len(within) > size:
            idx = np.unique(np.round(np.linspace(0, len(within) - 1, size)).astype(int))
            within = within.iloc[idx]
        return within.reset_index(drop=True)

    def parameters(self, size: int = 24) -> pd.DataFrame:
        """Per parameter: prior range, best value, the ensemble's range, the share of the prior it spans
        (``prior_share``, on the parameter's scale), ``at_bound`` (the ensemble is cut by a prior bound: its
        min within the lowest `EDGE_SHARE` of the prior, or its max within the highest; ``cut``: ``low``,
        ``high``, ``both`` or empty) and what the numbers say of it (``status``): ``identified`` when the
        ensemble is narrow (spans at most `NARROW_SHARE` of the prior) and not cut; ``at a bound`` when it
        is narrow but cut (the prior, not the numbers, decides where it stops); ``loose`` when it is wide
        (``at_bound`` still says whether it is also cut)."""
        ens = self.ensemble(size)
        rows = []
        for p in self.problem.space:
            best = float(self.best[p.name])
            lo, hi = float(ens[p.name].min()), float(ens[p.name].max())
            span = p.position(hi) - p.position(lo)
            cut_lo, cut_hi = p.position(lo) <= EDGE_SHARE, p.position(hi) >= 1 - EDGE_SHARE
            cut = "both" if cut_lo and cut_hi else "low" if cut_lo else "high" if cut_hi else ""
            status = "loose" if span > NARROW_SHARE else "at a bound" if cut else "identified"
            b = physical.BOUNDS.get(p.name) if self.problem.physical_bounds else None
            rows.append({"parameter": p.name, "kind": p.kind, "unit": p.unit, "prior_lo": p.lo, "prior_hi": p.hi,
                         "best": best, "ensemble_lo": lo, "ensemble_hi": hi, "prior_share": span,
                         "status": status, "at_bound": bool(cut), "cut": cut,
                         "bound_lo": b.lo if b else math.nan, "bound_hi": b.hi if b else math.nan,
                         "bound": b.reason if b else "", "prior_reason": p.reason})
        return pd.DataFrame(rows)

    def fit_quality(self) -> str:
        """One sentence, from the best fit's figures, on whether it is within the numbers' stated noise:
        within when its chi-square per degree of freedom is at most `NOISE_CHI2_PER_DOF`; otherwise it says
        it is not, by what factor (chi-square per degree of freedom) and about how many sd each number is off
        (its square root)."""
        chi2 = float(self.best["chi2"])
        ratio = chi2 / self.dof
        figures = f"chi-square {chi2:.1f} on {self.dof} degree{'s' if self.dof != 1 else ''} of freedom"
        if ratio <= NOISE_CHI2_PER_DOF:
            return f"the best fit is within the numbers' noise ({figures}, {ratio:.2f} per degree of freedom)"
        return (f"the best fit is not within the numbers' noise: {figures} is {ratio:.1f}x what the noise allows "
                f"(each number about {math.sqrt(ratio):.1f} sd off on average)")

    def residuals(self, size: int = 24) -> pd.DataFrame:
        """Per target: measured, simulated at the best fit, the residual (simulated - measured; a ratio's
        log for times), in sd, and the ensemble's range of the simulated number."""
        ens = self.ensemble(size)
        rows = []
        for t in self.problem.targets:
            sim = float(self.best[f"sim:{t.key}"])
            rows.append({"key": t.key, "metric": t.metric, "measured": t.value, "simulated": sim,
                         "residual": (math.log(sim / t.value) if t.log_scale and sim > 0 else sim - t.value),
                         "residual_sd": t.residual(sim), "sd": t.sd,
                         "ensemble_lo": float(ens[f"sim:{t.key}"].min()),
                         "ensemble_hi": float(ens[f"sim:{t.key}"].max()), "source": t.source})
        return pd.DataFrame(rows)


def status_words(status: str, cut: str) -> str:
    """A parameter's status for a reader (`Identification.parameters`): a loose parameter whose ensemble is
    also cut by a prior bound says which end."""
    if status == "loose" and cut:
        return f"loose, cut at the prior's {'ends' if cut == 'both' else cut + ' end'}"
    return status


def history_row(problem: Problem, x: Sequence[float], values: Mapping[str, float]) -> dict[str, Any]:
    row: dict[str, Any] = {f"u:{p.name}": float(u) for p, u in zip(problem.space, x, strict=True)}
    row.update({p.name: p.to_value(float(u)) for p, u in zip(problem.space, x, strict=True)})
    row.update({f"sim:{k}": float(v) for k, v in values.items()})
    row["chi2"] = chi_square(problem.targets, values)
    return row


Progress = Callable[[int, float], None]
"""Called after each batch of evaluations with (vectors evaluated so far, best chi-square so far)."""


def identify(problem: Problem, *, executor: Executor | None = None, popsize: int = 6, generations: int = 10,
             seed: int = 0, level: float = 0.9, progress: Progress | None = None,
             journal: Path | None = None, x0: Sequence[float] | None = None) -> Identification:
    """Search ``problem``'s prior box (differential evolution: ``popsize`` x k vectors per generation,
    ``generations`` after the initial Sobol population; deterministic in ``seed``) and return every
    visited vector with its numbers (`Identification`). ``journal``: resume from and append to this file
    (`repro.identify.search.evolve`): an interrupted fit, rerun with the same arguments, simulates only
    what it had not. ``x0``: a start put in the initial population (internal coordinates)."""
    from repro.identify.search import evolve

    history: list[dict[str, Any]] = []

    def record(x: np.ndarray, vals: dict[str, float]) -> float:
        row = history_row(problem, x, vals)
        history.append(row)
        return float(row["chi2"])

    def report() -> None:
        if progress is not None:
            progress(len(history), min(r["chi2"] for r in history))

    message, _ = evolve(problem.bounds, functools.partial(evaluate, problem), record, executor=executor,
                        popsize=popsize, generations=generations, seed=seed, journal=journal, x0=x0,
                        after_batch=report)
    return Identification(problem, pd.DataFrame(history), level=level,
                          optimizer={"method": "scipy.optimize.differential_evolution", "popsize": popsize,
                                     "generations": generations, "seed": seed, "evaluations": len(history),
                                     "message": message})
