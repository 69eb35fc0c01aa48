"""Verdicts with uncertainty: what a headline number says about the paper's claim.

Every headline row (`repro.paper.headline.write_headline`) carries our value with a 95 % interval,
the paper's value and one verdict of `VERDICTS`:

``reproduced``
    a value claim: the paper's value lies within our interval widened by the row's tolerance
    (`default_tolerance`: 0.05 absolute for fractions, 15 % relative otherwise and at least one
    point for goodput points, because the paper measured A40 GPUs and we measure a model of them);
    an ordering claim (ours is a paired difference A - B): the interval excludes zero on the
    paper's side.
``not reproduced``
    a value claim outside that band.
``contradicted``
    an ordering claim whose interval excludes zero on the other side.
``within noise``
    an ordering claim whose interval includes zero (or that has no interval): no ordering is shown.
    (A claimed tie is reproduced when the whole interval lies within `TIE_MARGIN` of zero.)
``input``
    a number the model was given (a constant from the paper, or one the code was tuned to hit):
    never counted as reproduced.
``context``
    a number the paper does not state (ours only): shown, not judged.

Intervals (`Estimate`), all deterministic (a fixed seed): goodput over several traces by a
two-level bootstrap (traces with replacement, then requests within each drawn trace); over one
trace by the requests alone; a paired difference the same way on per-request differences of two
runs of the same trace (the same requests, so pairing removes the trace's own variation); a
single proportion by Wilson's interval; any other per-trace statistic by a bootstrap over traces
(none with one trace); a statistic of several runs' per-request outcomes (a P99 over requests, a
range over traces, a GPU count read off a frontier) by `joint_bootstrap`, the same two levels with
the statistic recomputed on each resample; one of other independent units (held-out requests, time
windows of a trace) by `resample`. Units as the quantity's (goodput a fraction).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from repro.experiment.metrics import RequestOutcomes

VERDICTS = ("reproduced", "not reproduced", "contradicted", "within noise", "input", "context")
KINDS = ("value", "ordering", "input")
"""How a row is judged: ``value`` (ours vs the paper's number), ``ordering`` (ours is a paired
difference A - B and the paper's value says which side of zero), ``input`` (never judged)."""

TIE_MARGIN = 0.02
"""An ordering the paper calls a tie (``claim=0``) is reproduced when our whole interval lies within
this distance of zero (an equivalence test; goodput points / 100 unless the row gives a tolerance);
an interval that excludes zero is ``not reproduced``; one that is wider, ``within noise``."""

B_DEFAULT = 4000
"""Bootstrap resamples."""
SEED = 20240917
"""The bootstrap's seed (verdicts are deterministic)."""


@dataclass(frozen=True)
class Estimate:
    """A number with its 95 % interval (``lo``/``hi`` NaN: none), how the interval was made, and
    what it rests on (traces, requests per trace in total)."""

    value: float
    lo: float = math.nan
    hi: float = math.nan
    method: str = "none"
    traces: int = 0
    requests: int = 0

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.lo) or math.isnan(self.hi))

    def excludes_zero(self) -> int:
        """+1 when the interval lies above zero, -1 below, 0 when it includes zero or there is none."""
        if not self.has_interval:
            return 0
        return 1 if self.lo > 0 else -1 if self.hi < 0 else 0

    def scaled(self, k: float) -> Estimate:
        """The same estimate in another unit (value and interval times ``k > 0``; e.g. 100 for points)."""
        return Estimate(self.value * k, self.lo * k, self.hi * k, self.method, self.traces, self.requests)

    def text(self, digits: int = 3) -> str:
        """``0.812 [0.801, 0.823]`` (the value alone when there is no interval)."""
        if math.isnan(self.value):
            return "n/a"
        v = f"{self.value:.{digits}g}" if abs(self.value) >= 10 else f"{self.value:.{digits}f}"
        if not self.has_interval:
            return v
        fmt = (lambda x: f"{x:.{digits}g}") if abs(self.value) >= 10 else (lambda x: f"{x:.{digits}f}")
        return f"{v} [{fmt(self.lo)}, {fmt(self.hi)}]"


def wilson(k: int, n: int, z: float = 1.959964) -> Estimate:
    """Wilson's 95 % interval of a single proportion ``k / n``."""
    if n <= 0:
        return Estimate(math.nan)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return Estimate(p, max(0.0, mid - half), min(1.0, mid + half), "Wilson", 1, n)


def _two_level(per_trace: Sequence[np.ndarray], b: int, seed: int) -> np.ndarray:
    """Bootstrap distribution of the mean over traces of per-request values in {-1, 0, 1} (or {0, 1}):
    traces drawn with replacement, then each drawn trace's requests (a multinomial over its value counts)."""
    rng = np.random.default_rng(seed)
    s = len(per_trace)
    levels = np.array([-1.0, 0.0, 1.0])
    counts = [np.array([(v == x).sum() for x in levels], dtype=np.int64) for v in per_trace]
    n = [int(c.sum()) for c in counts]
    # draws[j, t, :]: the resampled mean of trace t in slot j, for each of the b resamples
    draws = np.empty((s, s, b))
    for j in range(s):
        for t in range(s):
            m = rng.multinomial(n[t], counts[t] / n[t], size=b)
            draws[j, t] = m @ levels / n[t]
    if s == 1:
        return draws[0, 0]
    pick = rng.integers(0, s, size=(s, b))
    return draws[np.arange(s)[:, None], pick, np.arange(b)[None, :]].mean(axis=0)


def _check_flags(arrays: Sequence[np.ndarray], what: str) -> list[np.ndarray]:
    out = [np.asarray(a, dtype=float) for a in arrays]
    if not out or any(len(a) == 0 for a in out):
        raise ValueError(f"{what}: needs at least one trace with at least one request")
    return out


def _bootstrapped(per_trace: list[np.ndarray], name: str, b: int, seed: int) -> Estimate:
    """The mean over traces of per-request values with its two-level bootstrap interval (`_two_level`)."""
    value = float(np.mean([v.mean() for v in per_trace]))
    lo, hi = np.quantile(_two_level(per_trace, b, seed), [0.025, 0.975])
    method = f"{name} over requests, 1 trace" if len(per_trace) == 1 else \
        f"{name} over {len(per_trace)} traces and their requests"
    return Estimate(value, float(lo), float(hi), method, len(per_trace), int(sum(len(v) for v in per_trace)))


def goodput_estimate(good_by_trace: Sequence[np.ndarray], *, b: int = B_DEFAULT, seed: int = SEED) -> Estimate:
    """Mean goodput over traces (each trace's per-request good flags, 0/1) with its 95 % interval:
    a two-level bootstrap over traces and requests (requests alone with one trace)."""
    return _bootstrapped(_check_flags(good_by_trace, "goodput_estimate"), "bootstrap", b, seed)


def paired_difference(a_by_trace: Sequence[np.ndarray], b_by_trace: Sequence[np.ndarray], *,
                      b: int = B_DEFAULT, seed: int = SEED) -> Estimate:
    """Goodput of A minus goodput of B, paired: trace i of A and of B are runs of the same trace, their
    flags in the same request order. The same two-level bootstrap on the per-request differences."""
    a = _check_flags(a_by_trace, "paired_difference")
    bb = _check_flags(b_by_trace, "paired_difference")
    if len(a) != len(bb) or any(len(x) != len(y) for x, y in zip(a, bb, strict=True)):
        raise ValueError("paired_difference: A and B need the same traces with the same requests "
                         f"(got {[len(x) for x in a]} vs {[len(y) for y in bb]})")
    return _bootstrapped([x - y for x, y in zip(a, bb, strict=True)], "paired bootstrap", b, seed)


def over_traces(values: Sequence[float], *, b: int = B_DEFAULT, seed: int = SEED) -> Estimate:
    """The mean of a per-trace statistic with a bootstrap interval over the traces (none with one)."""
    v = np.asarray([x for x in values if not math.isnan(x)], dtype=float)
    if len(v) == 0:
        return Estimate(math.nan)
    if len(v) == 1:
        return Estimate(float(v[0]), method="none: 1 trace", traces=1)
    rng = np.random.default_rng(seed)
    dist = v[rng.integers(0, len(v), size=(b, len(v)))].mean(axis=1)
    lo, hi = np.quantile(dist, [0.025, 0.975])
    return Estimate(float(v.mean()), float(lo), float(hi), f"bootstrap over {len(v)} traces", len(v))


B_STATISTIC = 1000
"""Resamples of `resample` and `joint_bootstrap` (each evaluates a whole statistic, e.g. percentiles)."""


def _percentile_estimates(value: Mapping[str, float], draws: list[Mapping[str, float]], method: str,
                          traces: int, requests: int) -> dict[str, Estimate]:
    """Each statistic of ``value`` with the 2.5/97.5 percentiles of its bootstrap ``draws`` (NaN draws, e.g.
    a ratio over an empty resample, left out; none when fewer than 95 % of the draws are numbers)."""
    out = {}
    for k, v in value.items():
        d = np.asarray([x[k] for x in draws], dtype=float)
        d = d[~np.isnan(d)]
        if math.isnan(v) or len(d) < 0.95 * len(draws):
            out[k] = Estimate(float(v), method=f"none: {method} gave too few numbers", traces=traces, requests=requests)
            continue
        lo, hi = np.quantile(d, [0.025, 0.975])
        out[k] = Estimate(float(v), float(lo), float(hi), method, traces, requests)
    return out


def resample(n: int, stat: Callable[[np.ndarray], Mapping[str, float]], *, unit: str, b: int = B_STATISTIC,
             seed: int = SEED, traces: int = 0, requests: int = 0) -> dict[str, Estimate]:
    """Statistics of ``n`` independent units (traces, held-out requests, time windows of a trace) with a
    percentile bootstrap over the units: ``stat(index)`` computes every statistic from the units at
    ``index`` (``np.arange(n)``: the value itself; a resample draws ``n`` with replacement). ``unit``
    names them for the interval's method ("bootstrap over 3 traces"). None with a single unit."""
    value = stat(np.arange(n))
    if n < 2:
        return {k: Estimate(float(v), method=f"none: 1 {unit}", traces=traces, requests=requests)
                for k, v in value.items()}
    rng = np.random.default_rng(seed)
    draws = [stat(rng.integers(0, n, size=n)) for _ in range(b)]
    return _percentile_estimates(value, draws, f"bootstrap over {n} {unit}s", traces, requests)


Outcomes = Mapping[str, Sequence[RequestOutcomes]]
"""Groups of runs: a name -> its runs' per-request outcomes, one per trace, the traces in the same order
in every group."""


def joint_bootstrap(groups: Outcomes, stat: Callable[[Outcomes], Mapping[str, float]], *,
                    resample_traces: bool = True, b: int = B_STATISTIC, seed: int = SEED) -> dict[str, Estimate]:
    """Statistics of several groups of runs at once, each with a 95 % percentile interval from one
    two-level bootstrap: a resample draws the traces with replacement (``resample_traces``; else keeps
    them, e.g. for a range over these very traces), then in each drawn trace one set of request
    indices, shared by every group whose run of that trace has as many requests (so runs of one trace
    stay paired request by request), and evaluates ``stat`` on the resampled groups."""
    names = list(groups)
    if not names or not groups[names[0]]:
        raise ValueError("joint_bootstrap: needs at least one group with at least one trace")
    s = len(groups[names[0]])
    if any(len(groups[g]) != s for g in names):
        raise ValueError(f"joint_bootstrap: every group needs the same traces (got {[len(groups[g]) for g in names]})")
    n = [len(groups[names[0]][t].good) for t in range(s)]
    rng = np.random.default_rng(seed)

    def draw() -> Outcomes:
        pick = rng.integers(0, s, size=s) if resample_traces and s > 1 else np.arange(s)
        idx = [rng.integers(0, n[t], size=n[t]) for t in pick]
        return {g: [groups[g][t].take(i if len(groups[g][t].good) == n[t]
                                      else rng.integers(0, len(groups[g][t].good), size=len(groups[g][t].good)))
                    for t, i in zip(pick, idx, strict=True)] for g in names}

    value = stat(groups)
    draws = [stat(draw()) for _ in range(b)]
    levels = f"{s} traces and their requests" if resample_traces and s > 1 else \
        ("requests, 1 trace" if s == 1 else f"requests within each of {s} traces")
    return _percentile_estimates(value, draws, f"bootstrap over {levels}", s, int(sum(n)))


def default_tolerance(unit: str, paper: float) -> float:
    """The band around the paper's value within which ours counts as reproduced (same unit):
    0.05 for a fraction, 15 % of the paper's value but at least 1 point for goodput points, else
    15 % of the paper's value."""
    if unit in ("fraction", "goodput", ""):
        return 0.05
    if unit == "points":
        return max(1.0, 0.15 * abs(paper))
    return 0.15 * abs(paper)


def verdict(kind: str, ours: Estimate, paper: float, *, unit: str = "", tolerance: float | None = None,
            claim: int | None = None) -> str:
    """The verdict of one row (`VERDICTS`); see the module's docstring for the rules. An ordering's
    ``claim`` is the side of zero the paper puts it on (+1: A better; default: the sign of ``paper``,
    which may then be NaN when the paper states the ordering but not the gap)."""
    if kind not in KINDS:
        raise ValueError(f"verdict: kind {kind!r}; allowed: {list(KINDS)}")
    if kind == "input":
        return "input"
    if math.isnan(ours.value):
        return "context"
    if kind == "ordering":
        if claim is None:
            if paper is None or math.isnan(paper):
                return "context"
            claim = 1 if paper > 0 else -1 if paper < 0 else 0
        side = ours.excludes_zero()
        if claim == 0:  # the paper says "a tie": shown only when the whole interval is within the margin
            margin = TIE_MARGIN if tolerance is None else tolerance
            if ours.has_interval and -margin <= ours.lo and ours.hi <= margin:
                return "reproduced"
            return "not reproduced" if side else "within noise"
        if side == 0:
            return "within noise"
        return "reproduced" if side == claim else "contradicted"
    if paper is None or math.isnan(paper):
        return "context"
    tol = default_tolerance(unit, paper) if tolerance is None else tolerance
    lo, hi = (ours.lo, ours.hi) if ours.has_interval else (ours.value, ours.value)
    return "reproduced" if lo - tol <= paper <= hi + tol else "not reproduced"
