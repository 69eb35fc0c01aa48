"""The saturation search: the rate at which round-robin is mid-collapse (the paper's operating point)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from repro.errors import ConfigError
from repro.experiment.inputs import truth_cost_model
from repro.experiment.runner import simulated_summaries, simulated_summary
from repro.experiment.spec import RunSpec

if TYPE_CHECKING:
    from repro.experiment.executor import Executor

# ---- saturation search ----------------------------------------------------------------------
PAPER_COLLAPSE_FRACTION = 0.733 / 0.880  # Fig. 5: round-robin's goodput at the operating point / at light load


@dataclass(frozen=True)
class SaturationResult:
    """The rate at which round-robin is mid-collapse, and the probes that found it. ``converged``: a probe's
    goodput came within the search's band of the target (``rate`` is that probe's); else the probes ran out and
    ``rate`` is the target's crossing interpolated in the search's last bracket (`saturation_search`)."""

    workload: str
    rate: float
    light_goodput: float
    target_goodput: float
    probes: list[tuple[float, float]]  # (rate, round-robin goodput)
    converged: bool = True


def estimated_capacity(spec: RunSpec, max_concurrency: int = 256) -> float:
    """A rough capacity (req/s) of ``spec``'s cluster for its workload, from the cluster's own
    calibration (`truth_cost_model`) and the trace's mean lengths: the smaller of the prefill pool's
    rate (prefill time of a mean prompt) and the decode pool's (output tokens per second of each
    decode engine at the concurrency where its per-token time has doubled, ``1 / slope``, at most
    ``max_concurrency``, over a mean output). It prices each engine alone: engines that share CPU
    cores, or a proxy on the same machine, make the real capacity smaller, which is why a search
    starts well below it (`light_rate_for`)."""
    from repro.experiment.inputs import build_trace

    cm = truth_cost_model(spec)
    trace = build_trace(spec.replace(rate=1.0))
    prompt = float(trace.df["prompt_tokens"].mean())
    output = max(float(trace.df["output_tokens"].mean()), 1.0)
    topo = spec.topology_parsed()
    n_p, n_d = max(len(topo.prefill), 1), max(len(topo.decode), 1)
    prefill = n_p / cm.tau_pre(prompt)
    n = max_concurrency if cm.dec_concurrency_slope <= 0 else min(max_concurrency, 1.0 / cm.dec_concurrency_slope)
    decode = n_d * n / (cm.tau_dec(n) * output)
    return min(prefill, decode)


def light_rate_for(spec: RunSpec, fraction: float = 0.1) -> float:
    """The first (light-load) rate of a search on engines whose speed is not the paper's: ``fraction``
    of `estimated_capacity`, rounded down to a power of two (req/s), at most 1."""
    cap = estimated_capacity(spec)
    if not math.isfinite(cap) or cap <= 0:
        return 1.0
    return min(1.0, 2.0 ** math.floor(math.log2(fraction * cap)))


SATURATION_BAND = 0.02
"""The search's tolerance: a probe within this (absolute goodput) of the target ends it."""


def rate_band(probes: list[tuple[float, float]], target: float, band: float = SATURATION_BAND) -> tuple[float, float]:
    """The rates (req/s) between which round-robin's goodput falls from ``target + band`` to ``target - band``:
    where the probes' curve, linear in log-rate between neighbouring probes (sorted by rate) and
    extended along its end segment past the last probe, crosses each edge of the band. This is the
    interval of a searched saturation rate: any rate in it meets the search's own criterion. NaN
    where the probes cannot say (fewer than two rates, or a curve that never falls through an edge)."""
    pts = sorted(dict(probes).items())
    if len(pts) < 2:
        return math.nan, math.nan
    x = [math.log2(r) for r, _ in pts]
    y = [g for _, g in pts]

    def crossing(level: float) -> float:
        for i in range(len(pts) - 1):  # the first fall through ``level`` between neighbouring probes
            if y[i] >= level >= y[i + 1] and y[i] > y[i + 1]:
                return 2.0 ** (x[i] + (y[i] - level) / (y[i] - y[i + 1]) * (x[i + 1] - x[i]))
        i = len(pts) - 2  # past the last probe: along the end segment, when it falls
        if y[-1] > level and y[i] > y[-1]:
            return 2.0 ** (x[-1] + (y[-1] - level) / (y[i] - y[-1]) * (x[-1] - x[i]))
        return math.nan

    return crossing(target + band), crossing(target - band)


def bisection_ahead(lo: float, hi: float, workers: int, left: int, high_first: bool = False) -> list[float]:
    """The rates a geometric bisection of ``(lo, hi)`` may probe next, breadth first: its next
    midpoint, then both midpoints of the level below, and so on, at most ``workers`` (and at most
    ``left``, the probes the search has left) rates; within a level, the upper half's first when
    ``high_first`` (where the search expects to go). Computed exactly as the search computes them
    (``sqrt(lo * hi)``), so they match its probes bit for bit."""
    level, out = [(lo, hi)], []
    while level and len(out) < min(workers, left):
        below = []
        for a, b in level:
            mid = math.sqrt(a * b)
            out.append(mid)
            below += [(mid, b), (a, mid)] if high_first else [(a, mid), (mid, b)]
        level = below
    return out[:min(workers, left)]


def saturation_search(
    base: RunSpec,
    light_rate: float = 1.0,
    collapse_fraction: float = PAPER_COLLAPSE_FRACTION,
    band: float = SATURATION_BAND,
    max_rate: float = 512.0,
    max_probes: int = 16,
    probe: Callable[[RunSpec], float] | None = None,
    executor: Executor | None = None,
) -> SaturationResult:
    """Find the arrival rate where round-robin's goodput is ``collapse_fraction`` of its light-load
    goodput (within ``band``, absolute), by doubling then bisection on the rate. When ``max_probes`` run out
    before a probe comes within the band, the rate is the target's crossing in the last bracket
    (`bracket_crossing`; ``converged`` False), not the probe nearest the target in goodput: on a live
    cluster's noisy goodput that probe can lie far outside the bracket (a 1p1d search: 0.850 at 2 req/s
    against a target of 0.805, while the bracket was 3.36-3.67 req/s).

    ``probe(spec) -> goodput`` runs one short probe; the default simulates ``base`` with
    ``policy=round_robin`` (backends other than sim pass a probe that runs the live harness).

    With the default probe, the probes the search may need next are simulated ahead on ``executor``'s
    workers (default: the environment's; `repro.experiment.executor`): the next doublings while
    doubling, the next levels of the bisection tree while bisecting (as many as there are workers).
    The search itself is unchanged: it takes the same steps and returns the same probes and rate as
    with one worker; a probe simulated ahead and not needed is only kept in the simulation cache.
    """
    if not 0 < collapse_fraction < 1:
        raise ConfigError(f"saturation: field 'collapse_fraction' must be in (0, 1), got {collapse_fraction!r}")
    if not 0 < band < 0.5:
        raise ConfigError(f"saturation: field 'band' must be in (0, 0.5), got {band!r}")
    rr = base.replace(policy="round_robin", policy_options={})

    ahead: dict[float, float] = {}  # rate -> goodput simulated ahead of the search
    workers = 1
    if probe is None:
        from repro.experiment.executor import shared_executor

        ex = executor or shared_executor()
        workers = ex.jobs

        def default_probe(spec: RunSpec) -> float:
            return simulated_summary(spec)[0]["goodput"]

        def prefetch(rates: list[float]) -> None:
            rates = [r for r in dict.fromkeys(rates) if r not in ahead and r <= max_rate]
            if len(rates) > 1:
                found = simulated_summaries([rr.replace(rate=r) for r in rates], ex)
                ahead.update({r: float(sm["goodput"]) for r, (sm, _) in zip(rates, found, strict=True)})

        probe = default_probe
    probes: list[tuple[float, float]] = []

    def g(rate: float) -> float:
        value = ahead[rate] if rate in ahead else float(probe(rr.replace(rate=rate)))
        probes.append((rate, value))
        return value

    if workers > 1:  # the light probe and the first doublings at once
        prefetch([light_rate * 2.0 ** k for k in range(workers)])
    light = g(light_rate)
    target = light * collapse_fraction
    lo, hi = light_rate, light_rate * 2
    while True:
        if workers > 1 and hi not in ahead:
            prefetch([hi * 2.0 ** k for k in range(workers)])
        if g(hi) <= target + band:
            break
        lo, hi = hi, hi * 2
        if hi > max_rate:
            raise ConfigError(
                f"saturation: round-robin does not collapse below rate {max_rate} req/s for {base.workload}"
            )
    best = min(probes, key=lambda p: abs(p[1] - target))
    while abs(best[1] - target) > band and len(probes) < max_probes:
        mid = math.sqrt(lo * hi)
        if workers > 1 and mid not in ahead:
            seen = dict(probes)  # where the target lies, by the line through (lo, g(lo)) and (hi, g(hi)) in log rate
            g_lo, g_hi = seen.get(lo, math.nan), seen.get(hi, math.nan)
            high = g_lo > g_hi and (g_lo - target) / (g_lo - g_hi) > 0.5
            prefetch(bisection_ahead(lo, hi, workers, max_probes - len(probes), high_first=high))
        value = g(mid)
        if value > target:
            lo = mid
        else:
            hi = mid
        best = min(probes, key=lambda p: abs(p[1] - target))
    if abs(best[1] - target) <= band:
        return SaturationResult(base.workload, best[0], light, target, probes)
    # the probes ran out outside the band: the target lies in the last bracket (goodput above it at ``lo``, below
    # at ``hi``), never at a probe outside it whose goodput a noisy machine put near the target
    return SaturationResult(base.workload, bracket_crossing(lo, hi, dict(probes), target), light, target, probes,
                            converged=False)


def bracket_crossing(lo: float, hi: float, goodput: dict[float, float], target: float) -> float:
    """Where the line through ``(lo, goodput[lo])`` and ``(hi, goodput[hi])``, in log rate, crosses ``target``
    (req/s): the saturation rate of a search whose probes ran out before one came within its band. The
    bisection's invariant (goodput above the target at ``lo``, at or below it at ``hi``) puts it in
    ``[lo, hi]``; clipped there should a probe repeated at an end have moved it."""
    g_lo, g_hi = goodput[lo], goodput[hi]
    if not g_lo > g_hi:
        return math.sqrt(lo * hi)
    share = min(max((g_lo - target) / (g_lo - g_hi), 0.0), 1.0)
    return 2.0 ** (math.log2(lo) + share * (math.log2(hi) - math.log2(lo)))
