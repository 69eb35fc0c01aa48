"""Does an interval cover as often as it claims? A Monte Carlo on synthetic traces with a known truth.

`synthetic_traces` draws traces like the simulator's at the operating point: each trace has its own
goodput level (between-trace spread ``between_sd``), and inside a trace the good/bad flags of
successive requests are autocorrelated (load comes and goes): request ``t`` is good with probability
``level_s + width * (2 * Phi(z_t) - 1)`` where ``z`` is a stationary AR(1) with coefficient ``phi``.
``2 * Phi(z) - 1`` is uniform on [-1, 1], so the truth is known exactly: trace ``s``'s goodput is
``level_s``, the goodput over traces is ``mean``. The defaults reproduce what the simulator shows on
Table II's learned router (lag-1 autocorrelation of the flags ~0.13, a block-bootstrap standard error
~3.5x the iid one on 10,000 requests; trace means spread ~0.02).

`coverage` runs a procedure (traces -> `repro.paper.verdicts.Estimate`) on ``reps`` independent
draws and counts how often its interval holds the truth. `PROCEDURES` names the ones the verdicts use
and the ones they replaced (`legacy_two_level`: traces with replacement, then requests iid, as
before issue 28), so that a test and `benchmarks/bench_coverage.py` set them side by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from repro.paper.verdicts import Estimate, block_bootstrap_mean, goodput_estimate


@dataclass(frozen=True)
class TraceModel:
    """Synthetic traces: ``traces`` of ``requests`` flags, goodput ``mean`` over traces, each trace's
    level ``N(mean, between_sd)``, within a trace a probability swing of ``width`` driven by an AR(1)
    of coefficient ``phi`` (its correlation time ``1 / (1 - phi)`` requests)."""

    traces: int = 3
    requests: int = 10_000
    mean: float = 0.65
    between_sd: float = 0.01
    width: float = 0.3
    phi: float = 0.98

    def __post_init__(self) -> None:
        if not (0 < self.mean - self.width - 4 * self.between_sd and self.mean + self.width + 4 * self.between_sd < 1):
            raise ValueError(f"TraceModel: mean {self.mean} +- width {self.width} +- 4 between_sd must stay in (0, 1)")


def synthetic_traces(model: TraceModel, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """One draw: ``(flags per trace, each trace's true goodput)``."""
    from scipy.signal import lfilter
    from scipy.special import ndtr

    levels = model.mean + model.between_sd * rng.standard_normal(model.traces)
    shocks = rng.standard_normal((model.traces, model.requests)) * math.sqrt(1 - model.phi ** 2)
    shocks[:, 0] = rng.standard_normal(model.traces)  # start in the stationary distribution
    z = lfilter([1.0], [1.0, -model.phi], shocks, axis=1)
    p = levels[:, None] + model.width * (2 * ndtr(z) - 1)
    flags = (rng.random(p.shape) < p).astype(float)
    return list(flags), levels


def legacy_two_level(per_trace: Sequence[np.ndarray], b: int = 4000, seed: int = 20240917) -> Estimate:
    """The interval the verdicts used before issue 28, kept to measure it: a two-level percentile
    bootstrap (traces with replacement, then each drawn trace's requests iid)."""
    rng = np.random.default_rng(seed)
    s = len(per_trace)
    means = np.empty((s, b))
    for t, v in enumerate(per_trace):
        k = int(v.sum())
        means[t] = rng.binomial(len(v), k / len(v), size=b) / len(v)
    pick = rng.integers(0, s, size=(s, b)) if s > 1 else np.zeros((1, b), dtype=int)
    dist = means[pick, np.arange(b)[None, :]].mean(axis=0)
    lo, hi = np.quantile(dist, [0.025, 0.975])
    return Estimate(float(np.mean([v.mean() for v in per_trace])), float(lo), float(hi), "legacy two-level", s)


Procedure = Callable[[Sequence[np.ndarray]], Estimate]

PROCEDURES: dict[str, Procedure] = {
    "t over traces (goodput_estimate)": goodput_estimate,
    "legacy two-level bootstrap": legacy_two_level,
}
"""Procedures for the goodput over traces."""

ONE_TRACE_PROCEDURES: dict[str, Procedure] = {
    "block bootstrap (goodput_estimate, 1 trace)": lambda t: block_bootstrap_mean(t[0], b=500),
    "legacy iid bootstrap over requests": legacy_two_level,
}
"""Procedures for one trace's goodput (the truth: that trace's level)."""


@dataclass(frozen=True)
class Coverage:
    """How often ``procedure``'s intervals held the truth in ``reps`` draws, with a Wilson interval,
    and their mean width."""

    procedure: str
    reps: int
    covered: int
    mean_width: float

    @property
    def rate(self) -> float:
        return self.covered / self.reps

    def text(self) -> str:
        from repro.paper.verdicts import wilson

        w = wilson(self.covered, self.reps)
        return (f"{self.procedure}: coverage {self.rate:.3f} [{w.lo:.3f}, {w.hi:.3f}] over {self.reps} draws, "
                f"mean width {self.mean_width:.4f}")


def coverage(procedure: Procedure, model: TraceModel, *, reps: int = 1000, seed: int = 0, name: str = "",
             per_trace: bool = False) -> Coverage:
    """The share of ``reps`` synthetic draws (`synthetic_traces`) whose interval holds the truth: the
    goodput over traces (``model.mean``), or with ``per_trace`` the first trace's own level."""
    rng = np.random.default_rng(seed)
    covered, widths = 0, []
    for _ in range(reps):
        flags, levels = synthetic_traces(model, rng)
        truth = float(levels[0]) if per_trace else model.mean
        est = procedure(flags[:1] if per_trace else flags)
        covered += int(est.lo <= truth <= est.hi)
        widths.append(est.hi - est.lo)
    return Coverage(name or getattr(procedure, "__name__", "procedure"), reps, covered, float(np.mean(widths)))


def best_of_coverage(model: TraceModel, *, rivals: int = 3, reps: int = 1000, seed: int = 0,
                     selection_aware: bool = True) -> Coverage:
    """How often "A minus the best of ``rivals``", the best picked after the fact, covers its truth: A and
    every rival are independent draws of the same ``model`` (all gaps are zero, so is their minimum).
    ``selection_aware``: `repro.paper.verdicts.least_difference` (simultaneous intervals); else the
    naive way, the rival with the highest mean and its own 95 % paired interval."""
    from repro.paper.verdicts import least_difference, paired_difference

    rng = np.random.default_rng(seed)
    covered, widths = 0, []
    for _ in range(reps):
        a, _ = synthetic_traces(model, rng)
        rs = {f"r{i}": synthetic_traces(model, rng)[0] for i in range(rivals)}
        if selection_aware:
            est, _ = least_difference(a, rs)
        else:
            best = max(rs, key=lambda k: float(np.mean([t.mean() for t in rs[k]])))
            est = paired_difference(a, rs[best])
        covered += int(est.lo <= 0.0 <= est.hi)
        widths.append(est.hi - est.lo)
    name = "least_difference (simultaneous)" if selection_aware else "best rival by point, its own interval"
    return Coverage(f"A minus the best of {rivals}: {name}", reps, covered, float(np.mean(widths)))
