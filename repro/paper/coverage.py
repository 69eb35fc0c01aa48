"""Does an interval cover as often as it claims? A Monte Carlo on synthetic traces with a known truth.

`synthetic_traces` draws traces like the simulator's at the operating point: each trace has its own
goodput level (between-trace spread ``between_sd``; normal, or with ``skew`` a lognormal whose long
tail runs downward: now and then a trace far below the rest), and inside a trace the good/bad flags
of successive requests are autocorrelated (load comes and goes): request ``t`` is good with
probability ``level_s + width * (2 * Phi(z_t) - 1)`` where ``z`` is a stationary AR(1) with
coefficient ``phi``. ``2 * Phi(z) - 1`` is uniform on [-1, 1], so the truth is known exactly: trace
``s``'s goodput is ``level_s`` (`goodput_truth` where the probability leaves [0, 1]), the goodput
over traces is ``mean`` (`population_goodput`). The defaults reproduce what the simulator shows on
Table II's learned router (lag-1 autocorrelation of the flags ~0.13, a block-bootstrap standard error
~3.5x the iid one on 10,000 requests; trace means spread ~0.02).

Every interval method the main job's rows use has a procedure here that calls the function the
sections call, and a coverage test in the default tier (tests/paper/test_coverage.py):

- `coverage`: the goodput over traces (`goodput_estimate`: t over traces) or one trace's own
  (`block_bootstrap_mean`), against a two-level bootstrap that no verdict uses, kept for comparison
  (`legacy_two_level`).
- `paired_coverage`: a paired difference (`paired_difference`) of two policies run on the same
  traces (`policy_runs`: every policy sees the trace's level and load).
- `least_difference_coverage`: "A minus the best of k" picked after the fact through
  `repro.paper.context.estimates.SectionEstimates.least_difference` (the main job's path; rows of
  runs built by `estimates_context`), its per-trace gaps normal or skewed as `paired_coverage`'s.
- `within_traces_coverage`: P99 TTFT statistics of given traces (`joint_bootstrap` with
  ``resample_traces=False`` on `repro.paper.sections.calibration_value.tail_statistics`), against the
  value of these traces and against the population's.
- `step_coverage`: an integer count off a frontier (`joint_bootstrap` over traces: the t interval with
  a bootstrap standard error; zero width when every resample agrees).
- `window_coverage`: Fig. 7's windows taken as independent units
  (`repro.paper.sections.load_and_tails.rolling_estimates`, `resample` over (trace, window) blocks)
  and the share of windows (`wilson`); `wilson_coverage`: Wilson's exact coverage over independent units.

`METHOD_COVERAGE` states, per interval method (`Estimate.method`), what its interval covers and at
what measured level; `coverage_note` gives the sentence a row shows. `benchmarks/bench_coverage.py`
prints every figure (docs/VERDICTS.md quotes them).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from repro.paper.interval_coverage import (  # noqa: F401  (the registry, re-exported for the tests)
    COVERS_POPULATION,
    MEASURED,
    METHOD_COVERAGE,
    NOMINAL_FLOOR,
    coverage_note,
    method_key,
)
from repro.statistics.intervals import Estimate, block_bootstrap_mean, goodput_estimate

if TYPE_CHECKING:
    import pandas as pd

    from repro.paper.context.estimates import SectionEstimates

Z99 = 2.3263478740408408
"""The standard normal's 99th percentile."""
Z80 = 0.8416212335729143
"""The standard normal's 80th percentile: `tail_runs`' TTFT SLO (80 % of an average trace's requests good)."""


@dataclass(frozen=True)
class TraceModel:
    """Synthetic traces: ``traces`` of ``requests`` flags, goodput ``mean`` over traces, each trace's
    level ``mean + between_sd * d`` with ``d`` of mean 0 and sd 1 (standard normal; with ``skew > 0``
    a lognormal of log-sd ``skew`` mirrored so that its long tail runs downward, `standard_spread`),
    within a trace a probability swing of ``width`` driven by an AR(1) of coefficient ``phi`` (its
    correlation time ``1 / (1 - phi)`` requests)."""

    traces: int = 3
    requests: int = 10_000
    mean: float = 0.65
    between_sd: float = 0.01
    width: float = 0.3
    phi: float = 0.98
    skew: float = 0.0

    def __post_init__(self) -> None:
        if self.skew < 0:
            raise ValueError(f"TraceModel: skew {self.skew} must be >= 0")
        if self.skew == 0:
            if not (0 < self.mean - self.width - 4 * self.between_sd
                    and self.mean + self.width + 4 * self.between_sd < 1):
                raise ValueError(f"TraceModel: mean {self.mean} +- width {self.width} +- 4 between_sd must stay "
                                 "in (0, 1)")
        elif not (0 < self.mean - self.width and self.mean + self.width < 1):
            # a skewed level may leave [0, 1] now and then: `goodput_truth` clips it exactly
            raise ValueError(f"TraceModel: mean {self.mean} +- width {self.width} must stay in (0, 1)")


def standard_spread(rng: np.random.Generator, n: int, skew: float = 0.0) -> np.ndarray:
    """``n`` draws of mean 0 and sd 1: standard normal (``skew`` 0), else ``-(L - E L) / sd(L)`` with
    ``L`` lognormal of log-sd ``skew`` (skewness ``-(e^s2 + 2) sqrt(e^s2 - 1)``: -6.2 at ``skew`` 1)."""
    z = rng.standard_normal(n)
    if skew == 0:
        return z
    s2 = skew * skew
    return -(np.exp(skew * z) - math.exp(s2 / 2)) / math.sqrt((math.exp(s2) - 1) * math.exp(s2))


def goodput_truth(levels: np.ndarray, width: float) -> np.ndarray:
    """Each trace's true goodput, ``E clip(level + width * U, 0, 1)`` with ``U`` uniform on [-1, 1]
    (`synthetic_traces`' flags): the level itself where ``level +- width`` stays in [0, 1]."""
    lv = np.asarray(levels, dtype=float)
    if width <= 0:
        return np.clip(lv, 0.0, 1.0)

    def g(x: np.ndarray) -> np.ndarray:  # an antiderivative of clip(x, 0, 1)
        return np.where(x < 0, 0.0, np.where(x <= 1, x * x / 2, x - 0.5))

    inside = (lv - width >= 0) & (lv + width <= 1)
    return np.where(inside, lv, (g(lv + width) - g(lv - width)) / (2 * width))


@functools.lru_cache(maxsize=64)
def population_goodput(model: TraceModel) -> float:
    """The goodput over the population of traces: ``model.mean``, or with ``skew`` the mean of
    `goodput_truth` over the level distribution (quadrature; it differs from ``mean`` only where a
    level leaves [width, 1 - width])."""
    if model.skew == 0:
        return model.mean
    from scipy import integrate, stats

    s, s2 = model.skew, model.skew ** 2
    sd_l = math.sqrt((math.exp(s2) - 1) * math.exp(s2))

    def f(z: float) -> float:
        level = model.mean - model.between_sd * (math.exp(s * z) - math.exp(s2 / 2)) / sd_l
        return float(goodput_truth(np.asarray([level]), model.width)[0]) * float(stats.norm.pdf(z))

    return float(integrate.quad(f, -12, 12, limit=400, points=[0.0])[0])


def _load(model: TraceModel, rng: np.random.Generator, traces: int) -> np.ndarray:
    """The latent load of ``traces`` traces: stationary AR(1) paths of ``model.phi``, unit variance."""
    from scipy.signal import lfilter

    shocks = rng.standard_normal((traces, model.requests)) * math.sqrt(1 - model.phi ** 2)
    shocks[:, 0] = rng.standard_normal(traces)  # start in the stationary distribution
    return lfilter([1.0], [1.0, -model.phi], shocks, axis=1)


def synthetic_traces(model: TraceModel, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """One draw: ``(flags per trace, each trace's true goodput)``."""
    from scipy.special import ndtr

    levels = model.mean + model.between_sd * standard_spread(rng, model.traces, model.skew)
    z = _load(model, rng, model.traces)
    p = levels[:, None] + model.width * (2 * ndtr(z) - 1)
    flags = (rng.random(p.shape) < p).astype(float)
    return list(flags), (levels if model.skew == 0 else goodput_truth(levels, model.width))


def policy_runs(model: TraceModel, offsets: Mapping[str, float], rng: np.random.Generator, *,
                interaction_sd: float | Mapping[str, float] = 0.0, interaction_skew: float = 0.0
                ) -> tuple[dict[str, list[np.ndarray]], dict[str, np.ndarray]]:
    """Runs of several policies on one draw of ``model.traces`` traces, paired as the simulator's are:
    every policy sees the trace's level and its load (one AR(1) path per trace), shifted by its own
    ``offsets[name]`` plus a policy-by-trace interaction of sd ``interaction_sd`` (one for all, or per
    policy; normal, or with ``interaction_skew`` the lognormal of `standard_spread`: a policy's edge
    now and then far smaller on one trace), and has its own luck per request. Returns each policy's
    flags per trace and its true goodput per trace (`goodput_truth`); a policy's goodput over the
    population is ``model.mean + offsets[name]`` (normal trace levels only; with normal interactions
    every level stays in [width, 1 - width] within 4 sd; skewed ones may leave it: at the benchmark's
    settings with a probability below 1e-3 per trace, moving the population's gap by less than 1e-4)."""
    from scipy.special import ndtr

    if model.skew:
        raise ValueError("policy_runs: normal trace levels only (skew 0)")
    if not offsets:
        raise ValueError("policy_runs: needs at least one policy")
    sd = {name: float(interaction_sd if isinstance(interaction_sd, (int, float)) else interaction_sd.get(name, 0.0))
          for name in offsets}
    for name, o in offsets.items():
        reach = model.width + (4 * math.hypot(model.between_sd, sd[name]) if interaction_skew == 0 else 0.0)
        if not (0 < model.mean + o - reach and model.mean + o + reach < 1):
            raise ValueError(f"policy_runs: {name}: mean + offset +- width (+- 4 sd) must stay in (0, 1)")
    levels = model.mean + model.between_sd * rng.standard_normal(model.traces)
    swing = model.width * (2 * ndtr(_load(model, rng, model.traces)) - 1)
    flags, truth = {}, {}
    for name, off in offsets.items():
        own = levels + off + sd[name] * standard_spread(rng, model.traces, interaction_skew)
        flags[name] = list((rng.random(swing.shape) < own[:, None] + swing).astype(float))
        truth[name] = goodput_truth(own, model.width)
    return flags, truth


def legacy_two_level(per_trace: Sequence[np.ndarray], b: int = 4000, seed: int = 20240917) -> Estimate:
    """A two-level percentile bootstrap (traces with replacement, then each drawn trace's requests iid), an
    interval no verdict uses, kept to measure its coverage against the ones they use."""
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
    and their mean width; ``zero_width``: how many of the intervals had none."""

    procedure: str
    reps: int
    covered: int
    mean_width: float
    zero_width: int = 0

    @property
    def rate(self) -> float:
        return self.covered / self.reps

    @property
    def sd(self) -> float:
        """The Monte Carlo's binomial sd of ``rate`` at a true 0.95: ``sqrt(0.95 * 0.05 / reps)``."""
        return math.sqrt(0.95 * 0.05 / self.reps)

    def text(self) -> str:
        from repro.statistics.intervals import wilson

        w = wilson(self.covered, self.reps)
        zero = f", {self.zero_width} of zero width" if self.zero_width else ""
        return (f"{self.procedure}: coverage {self.rate:.3f} [{w.lo:.3f}, {w.hi:.3f}] over {self.reps} draws, "
                f"mean width {self.mean_width:.4g}{zero}")


def _tally(name: str, pairs: Sequence[tuple[Estimate, float]]) -> Coverage:
    """`Coverage` of ``(estimate, truth)`` pairs (an interval ``[lo, hi]`` holds the truth)."""
    covered = sum(int(e.lo <= t <= e.hi) for e, t in pairs)
    widths = [e.hi - e.lo for e, _ in pairs]
    finite = [w for w in widths if not math.isnan(w)]  # an estimate without an interval: not covered
    return Coverage(name, len(pairs), covered, float(np.mean(finite)) if finite else math.nan,
                    sum(int(w == 0) for w in finite))


def coverage(procedure: Procedure, model: TraceModel, *, reps: int = 1000, seed: int = 0, name: str = "",
             per_trace: bool = False) -> Coverage:
    """The share of ``reps`` synthetic draws (`synthetic_traces`) whose interval holds the truth: the
    goodput over traces (`population_goodput`), or with ``per_trace`` the first trace's own goodput."""
    rng = np.random.default_rng(seed)
    truth = population_goodput(model)
    pairs = []
    for _ in range(reps):
        flags, levels = synthetic_traces(model, rng)
        pairs.append((procedure(flags[:1] if per_trace else flags), float(levels[0]) if per_trace else truth))
    return _tally(name or getattr(procedure, "__name__", "procedure"), pairs)


def paired_coverage(model: TraceModel, *, gap: float = 0.01, interaction_sd: float = 0.005, skew: float = 0.0,
                    reps: int = 1000, seed: int = 0, per_trace: bool = False) -> Coverage:
    """`repro.statistics.intervals.paired_difference` of A minus B run on the same traces (`policy_runs`, A
    ``gap`` above B over the population, each trace's own gap spread by ``interaction_sd``; with ``skew``
    the spread of A's edge alone, skewed: most traces show a little more than ``gap``, a few far less): how
    often it holds the gap over the population (with ``per_trace``: one trace, its own gap)."""
    from repro.statistics.intervals import paired_difference

    rng = np.random.default_rng(seed)
    sd: float | dict[str, float] = {"A": interaction_sd, "B": 0.0} if skew else interaction_sd
    pairs = []
    for _ in range(reps):
        runs, truth = policy_runs(model, {"A": gap / 2, "B": -gap / 2}, rng, interaction_sd=sd, interaction_skew=skew)
        if per_trace:
            pairs.append((paired_difference(runs["A"][:1], runs["B"][:1]), float(truth["A"][0] - truth["B"][0])))
        else:
            pairs.append((paired_difference(runs["A"], runs["B"]), gap))
    where = "1 trace, its own gap" if per_trace else f"{model.traces} traces"
    spread = f", skewed per-trace gaps (sd {interaction_sd:g})" if skew else ""
    return _tally(f"paired difference ({where}{spread})", pairs)


def estimates_context(runs: Mapping[str, Sequence[np.ndarray]], *, column: Mapping[str, Sequence[float]] | None = None
                      ) -> tuple[SectionEstimates, dict[str, pd.DataFrame]]:
    """A `SectionEstimates` holding the per-request outcomes of ``runs`` (name -> good flags per trace, the
    same traces in every group) and each group's rows of `run` (``seed``, ``run_id``, ``goodput``, and
    ``column[name]`` per trace as column ``value`` when given): what a section hands its estimates."""
    import pandas as pd

    from repro.experiment.metrics import RequestOutcomes
    from repro.paper.context.estimates import SectionEstimates

    ctx = SectionEstimates()
    ctx.notebook, ctx.seeds, ctx.n_requests = "coverage", tuple(range(len(next(iter(runs.values()))))), 0
    ctx.request_outcomes = {}
    frames = {}
    for name, flags in runs.items():
        ids = [f"{name}-{s}" for s in range(len(flags))]
        for rid, f in zip(ids, flags, strict=True):
            ctx.request_outcomes[rid] = RequestOutcomes(np.asarray(f, dtype=float), np.full(len(f), np.nan))
        rows = {"seed": list(range(len(flags))), "run_id": ids, "goodput": [float(np.mean(f)) for f in flags]}
        if column is not None:
            rows["value"] = list(column[name])
        frames[name] = pd.DataFrame(rows)
    return ctx, frames


def least_difference_coverage(model: TraceModel, *, rivals: int = 3, reps: int = 1000, seed: int = 0,
                              interaction_sd: float = 0.005, skew: float = 0.0, by_trace: bool = False,
                              selection_aware: bool = True) -> Coverage:
    """How often "A minus the best of ``rivals``", the best picked after the fact, holds its truth: A and
    every rival tie over the population (all gaps zero, so is their minimum), run on the same traces
    (`policy_runs`), each policy's level on a trace spread by ``interaction_sd``; with ``skew`` (as
    `paired_coverage`'s) the spread of A's edge alone, skewed (`standard_spread`): on most traces A shows a
    little more than its rivals, on a few far less, the same on every rival's gap (the gaps' long tail runs
    down; with ``by_trace``, each rival minus A, up). ``selection_aware``: the main job's path,
    `repro.paper.context.estimates.SectionEstimates.least_difference` (goodput paired by request; with
    ``by_trace`` a per-trace column, t over the traces' differences, the other way round: ``worst``); else
    the naive way: the rival with the highest mean and its own 95 % paired interval."""
    from repro.statistics.intervals import paired_difference

    rng = np.random.default_rng(seed)
    names = ["A"] + [f"r{i}" for i in range(rivals)]
    sd: float | dict[str, float] = ({"A": interaction_sd, **dict.fromkeys(names[1:], 0.0)} if skew else
                                    interaction_sd)
    pairs = []
    for _ in range(reps):
        runs, _ = policy_runs(model, dict.fromkeys(names, 0.0), rng, interaction_sd=sd, interaction_skew=skew)
        if not selection_aware:
            best = max(names[1:], key=lambda k: float(np.mean([t.mean() for t in runs[k]])))
            pairs.append((paired_difference(runs["A"], runs[best]), 0.0))
            continue
        col = {k: [float(f.mean()) for f in v] for k, v in runs.items()} if by_trace else None
        ctx, frames = estimates_context(runs, column=col)
        rest = {k: frames[k] for k in names[1:]}
        est, _ = (ctx.least_difference(frames["A"], rest, "value", worst=True) if by_trace else
                  ctx.least_difference(frames["A"], rest))
        pairs.append((est, 0.0))
    how = ("SectionEstimates.least_difference" + (" (a per-trace column, worst)" if by_trace else "")
           if selection_aware else "the best rival by point, its own interval")
    tail = "up" if by_trace and selection_aware else "down"
    spread = f", skewed per-trace gaps (sd {interaction_sd:g}, long tail {tail}), {model.traces} traces" if skew else ""
    return _tally(f"A minus the best of {rivals}{spread}: {how}", pairs)


def best_of_coverage(model: TraceModel, *, rivals: int = 3, reps: int = 1000, seed: int = 0,
                     selection_aware: bool = True) -> Coverage:
    """`least_difference_coverage` (kept under its former name)."""
    return least_difference_coverage(model, rivals=rivals, reps=reps, seed=seed, selection_aware=selection_aware)


def tail_runs(model: TraceModel, offsets: Mapping[str, float], rng: np.random.Generator, *, trace_sd: float = 0.05,
              load_sd: float = 0.3, noise_sd: float = 0.3, scale: float = 0.1
              ) -> tuple[dict[str, list], dict[str, np.ndarray]]:
    """TTFTs of several policies on one draw of ``model.traces`` traces of ``model.requests`` requests:
    ``scale * exp(trace_s + offsets[name] + load_sd * z_t + noise_sd * e_t)``, ``trace_s ~ N(0, trace_sd)``
    (trace to trace), ``z`` the trace's load (the AR(1) of ``model.phi``, shared by every policy on the
    trace: runs pair request by request), ``e`` iid per request; a request is good when its TTFT is
    within the SLO ``scale * exp(Z80 * sqrt(load_sd^2 + noise_sd^2))`` (`joint_bootstrap` takes its block
    length from the good flags). A run's TTFT is lognormal, so its true P99 is known:
    ``scale * exp(trace_s + offset + Z99 * sqrt(load_sd^2 + noise_sd^2))``. Returns each policy's
    `RequestOutcomes` per trace and its true P99 per trace."""
    from repro.experiment.metrics import RequestOutcomes

    trace = trace_sd * rng.standard_normal(model.traces)
    z = _load(model, rng, model.traces)
    q = Z99 * math.hypot(load_sd, noise_sd)
    runs, truth = {}, {}
    for name, off in offsets.items():
        lt = trace[:, None] + off + load_sd * z + noise_sd * rng.standard_normal(z.shape)
        ttft = scale * np.exp(lt)
        good = (ttft <= scale * math.exp(Z80 * math.hypot(load_sd, noise_sd))).astype(float)
        runs[name] = [RequestOutcomes(g, t) for g, t in zip(good, ttft, strict=True)]
        truth[name] = scale * np.exp(trace + off + q)
    return runs, truth


def within_traces_coverage(model: TraceModel, *, trace_sd: float = 0.05, reps: int = 200, b: int = 200,
                           seed: int = 0, tail_share: bool = True) -> dict[str, Coverage]:
    """`joint_bootstrap(..., resample_traces=False)` on
    `repro.paper.sections.calibration_value.tail_statistics` (groups ``cal``, ``sim``, ``rr``: each
    learned router's lowest and highest P99 TTFT over the traces, and the tail share) plus the mean P99
    over the traces of ``cal``, with ``b`` resamples, on `tail_runs`. Coverage of each statistic's value
    on these traces (its truth computed from each trace's true P99), and of the mean P99's value over
    the population (``cal_p99_mean (population)``: the traces' own levels are not resampled, so it
    misses once ``trace_sd`` dominates)."""
    from repro.paper.sections.calibration_value import tail_statistics
    from repro.statistics.intervals import joint_bootstrap

    offsets = {"cal": 0.0, "sim": 0.04, **({"rr": 0.12} if tail_share else {})}

    def stat(groups: Mapping[str, Sequence]) -> dict[str, float]:
        out = tail_statistics(groups)
        cal = groups["cal"]  # one trace: its P99 is the min (no second percentile)
        out["cal_p99_mean"] = (out["cal_p99_min"] if len(cal) == 1 else
                               float(np.mean([o.ttft_percentile(99) for o in cal])))
        return out

    def of(p: Mapping[str, np.ndarray]) -> dict[str, float]:  # the statistics of the true P99s
        out = {f"{g}_p99_{f.__name__}": float(f(p[g])) for g in ("cal", "sim") for f in (min, max)}
        if tail_share:
            out["tail_share"] = 100.0 * float(np.mean(p["sim"]) - np.mean(p["cal"])) / float(np.mean(p["rr"]) -
                                                                                               np.mean(p["cal"]))
        out["cal_p99_mean"] = float(np.mean(p["cal"]))
        return out

    rng = np.random.default_rng(seed)
    q = Z99 * math.hypot(0.3, 0.3)
    population = 0.1 * math.exp(q + trace_sd ** 2 / 2)  # E over traces of cal's true P99
    pairs: dict[str, list[tuple[Estimate, float]]] = {}
    for _ in range(reps):
        runs, truth = tail_runs(model, offsets, rng, trace_sd=trace_sd)
        est = joint_bootstrap(runs, stat, resample_traces=False, b=b)
        for k, v in of(truth).items():
            pairs.setdefault(k, []).append((est[k], v))
        pairs.setdefault("cal_p99_mean (population)", []).append((est["cal_p99_mean"], population))
    return {k: _tally(f"within {model.traces} traces, {k}", v) for k, v in pairs.items()}


def step_coverage(*, gap_sd: float, traces: int = 10, trace_sd: float = 0.01, requests: int = 2000, reps: int = 300,
                  b: int = 200, seed: int = 0) -> Coverage:
    """An integer count off a frontier through `joint_bootstrap` over traces (the t interval with a
    bootstrap standard error, widened to the resamples' central 95 %; Fig. 4's GPU count): round-robin's
    goodput at 5, 6, 7, 8 GPUs on the same ``traces`` traces, the count the fewest GPUs at which its mean
    over traces reaches the learned router's at 6. Round-robin at 7 GPUs falls short of the target by
    ``gap_sd`` standard errors of that difference (the truth: 8 GPUs; ``gap_sd`` 0: exactly on the
    step, the truth 7); every other shape is far from it. Iid requests, each (policy, trace) level
    ``N(0, trace_sd)`` around its shape's."""
    from repro.experiment.metrics import RequestOutcomes
    from repro.statistics.intervals import joint_bootstrap

    se = math.sqrt(2 * (trace_sd ** 2 + 0.6 * 0.4 / requests) / traces)  # of rr@7 - mc@6, per trace independent
    target = 0.6
    levels = {"mc6": target, "rr5": target - 0.15, "rr6": target - 0.08, "rr7": target - gap_sd * se,
              "rr8": target + 0.05}
    gpus = {"rr5": 5, "rr6": 6, "rr7": 7, "rr8": 8}
    truth = float(min(g for k, g in gpus.items() if levels[k] >= target))

    def stat(groups: Mapping[str, Sequence]) -> dict[str, float]:
        mean = {k: float(np.mean([o.goodput for o in v])) for k, v in groups.items()}
        reach = [g for k, g in gpus.items() if mean[k] >= mean["mc6"]]
        return {"gpus": float(min(reach)) if reach else math.nan}

    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(reps):
        groups = {k: [RequestOutcomes((rng.random(requests) < lv + trace_sd * rng.standard_normal()).astype(float),
                                      np.full(requests, np.nan)) for _ in range(traces)]
                  for k, lv in levels.items()}
        pairs.append((joint_bootstrap(groups, stat, b=b)["gpus"], truth))
    return _tally(f"GPU count over {traces} traces, round-robin at 7 GPUs {gap_sd:g} se short of the target", pairs)


def window_timeline(rng: np.random.Generator, *, traces: int = 10, windows: int = 40, between_sd: float = 0.0,
                    window_sd: float = 0.05, phi: float = 0.0, lead: float = 0.01) -> tuple[pd.DataFrame, np.ndarray]:
    """A burst train's timeline as Fig. 7's (policy, seed, window_s, ``ttft_p95_s``, ``goodput``): per trace
    a level ``N(0, between_sd)`` shared by both policies, per window an AR(1) of ``phi`` with sd
    ``window_sd`` per policy; the learned router's rolling P95 TTFT ``0.25 + level + ...``, round-robin's
    ``lead`` seconds above, goodput ``0.6 + ...`` for both (so the learned router holds round-robin's goodput
    in a window with probability 0.5 over the population). Returns it with each trace's level."""
    import pandas as pd

    level = between_sd * rng.standard_normal(traces)
    rows = []

    def ar() -> np.ndarray:
        e = rng.standard_normal((traces, windows))
        x = np.empty_like(e)
        x[:, 0] = e[:, 0]
        for w in range(1, windows):
            x[:, w] = phi * x[:, w - 1] + math.sqrt(1 - phi ** 2) * e[:, w]
        return window_sd * x

    for policy, base in (("marginal_cost", 0.25), ("round_robin", 0.25 + lead)):
        p95, good = base + level[:, None] + ar(), 0.6 + level[:, None] + ar()
        for s in range(traces):
            rows.append(pd.DataFrame({"policy": policy, "seed": s, "window_s": 10.0 * np.arange(windows),
                                      "ttft_p95_s": p95[s], "goodput": good[s]}))
    return pd.concat(rows, ignore_index=True), level


def window_coverage(*, traces: int = 10, windows: int = 40, between_sd: float = 0.0, phi: float = 0.0,
                    reps: int = 200, b: int = 200, seed: int = 0) -> dict[str, Coverage]:
    """Fig. 7's windows taken as independent units (`window_timeline`): the learned router's mean rolling P95
    TTFT through `repro.paper.sections.load_and_tails.rolling_estimates` (`resample` over the (trace,
    window) blocks, here with ``b`` resamples), against its population mean (``mc``) and its mean on
    these traces (``mc (these traces)``); and the share of windows in which it holds round-robin's goodput
    (`burst_table`) with Wilson's interval over the windows, against the population's 0.5 (``share``)."""
    from repro.paper.sections import load_and_tails
    from repro.statistics.intervals import resample, wilson

    rng = np.random.default_rng(seed)
    pairs: dict[str, list[tuple[Estimate, float]]] = {"mc": [], "mc (these traces)": [], "share": []}
    original = load_and_tails.resample
    load_and_tails.resample = functools.partial(resample, b=b)  # the same function, fewer resamples
    try:
        for _ in range(reps):
            timeline, level = window_timeline(rng, traces=traces, windows=windows, between_sd=between_sd, phi=phi)
            est = load_and_tails.rolling_estimates(timeline)["mc"]
            pairs["mc"].append((est, 0.25))
            pairs["mc (these traces)"].append((est, 0.25 + float(level.mean())))
            tab = load_and_tails.burst_table(timeline).set_index("policy")
            n = int(tab.loc["marginal_cost", "windows"])
            share = float(tab.loc["marginal_cost", "windows_at_or_above_rr"])
            pairs["share"].append((wilson(round(share * n), n), 0.5))
    finally:
        load_and_tails.resample = original
    where = f"{traces} traces x {windows} windows, between-trace sd {between_sd:g}, window phi {phi:g}"
    return {k: _tally(f"{where}: {k}", v) for k, v in pairs.items()}


def wilson_coverage(n: int, p: float) -> float:
    """Wilson's exact coverage of ``p`` from ``n`` independent units: the binomial probability of the
    counts whose interval holds ``p``."""
    from scipy import stats

    from repro.statistics.intervals import wilson

    k = np.arange(n + 1)
    hold = np.asarray([(lambda e: e.lo <= p <= e.hi)(wilson(int(i), n)) for i in k])
    return float(stats.binom.pmf(k, n, p)[hold].sum())

