"""Verdicts with uncertainty: what a headline number says about the paper's claim.

Every headline row (`repro.paper.headline.write_headline`) carries our value with a 95 % interval,
the paper's value and one verdict of `VERDICTS`, with the reason (`judge`). The rule table (also
docs/VERDICTS.md):

=================  ==========================================  ==========================================
verdict            a value (ours vs the paper's number)        an ordering (ours: a paired difference A - B)
=================  ==========================================  ==========================================
reproduced         our interval, widened by the row's          the interval excludes zero on the paper's
                   tolerance, holds the paper's number         side and reaches the paper's gap (within a
                   (`default_tolerance`; an integer count:     factor `GAP_FACTOR`, or the row's tolerance);
                   no tolerance, equal or inside the interval)  the paper's sign alone when it states no gap
not reproduced     the widened interval excludes it; also      the interval excludes the paper's gap band,
                   when we have no value where the paper       whether on the paper's side or around zero
                   states one (the reason says why)            (a precise null); no value of ours
contradicted       --                                          the interval excludes zero on the other side
within noise       the interval holds the paper's number and   the interval holds both zero and the paper's
                   zero, or is so wide (half-width above
                   |number| / `GAP_FACTOR`) that it cannot     gap: the data cannot decide (the reason says
                   tell the number from half of it
                                                               about how many traces would)
input              a number the model was given or aimed at (a constant of the paper, an operating point
                   searched to hit it): never counted as reproduced
context            the paper states no number and no ordering: shown, not judged
=================  ==========================================  ==========================================

A comparison of two policies where the paper states nothing (the scorecard, `repro.paper.sections.scorecard`:
a policy of yours against the paper's router or the best baseline) is judged by `compare`, one of
`COMPARISON_VERDICTS`: ``better`` / ``worse`` when the interval excludes zero, ``tie`` when the whole
interval lies within `tie_margin` of zero, ``within noise`` otherwise (with about how many traces would
decide it).

A claimed tie (``claim=0``) is reproduced when the whole interval lies within `tie_margin` of zero,
not reproduced when it excludes zero, within noise otherwise.

Intervals (`Estimate`), all deterministic (a fixed seed), their coverage measured by
`repro.paper.coverage` (docs/VERDICTS.md has the figures):

- a mean over traces of a per-trace quantity (goodput, a P99, a paired difference of either): a
  Student t interval over the traces (`t_interval`; ``S - 1`` degrees of freedom). A trace's mean
  already carries its requests' noise, so the requests are not resampled again.
- one trace (a per-trace quantity, or a live backend's single trace): a circular block bootstrap over
  its requests (`block_bootstrap_mean`, `arch.bootstrap.CircularBlockBootstrap`, blocks of Politis and
  White's length), because requests in a trace are autocorrelated (load comes and goes) and an iid
  bootstrap would be several times too narrow.
- paired differences stay paired: trace i of A and of B are runs of one trace, their per-request
  differences taken first.
- any other statistic of several groups of runs (a P99 over the pooled requests, a GPU count off a
  frontier): `joint_bootstrap`, the t interval with a standard error from resampling whole traces;
  within given traces (``resample_traces=False``) or one trace, block bootstrap over requests.
- "A minus the best (or worst) of k" picked after the fact: `least_difference`, simultaneous
  (Bonferroni) intervals over the k candidates, whose minimum covers the minimum of the true gaps.
- a single proportion of independent units: Wilson's interval; a statistic of other independent
  units (held-out requests, windows): `resample`.

Units as the quantity's (goodput a fraction).
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

LEVEL = 0.95
"""The confidence level of every interval."""
GAP_FACTOR = 2.0
"""An ordering whose gap the paper states is reproduced when our interval reaches the band
``[gap / GAP_FACTOR, gap * GAP_FACTOR]`` (and excludes zero): the same size within a factor of two.
The paper measured its gaps on three hardware traces and states no interval for them; a factor of
two is the loosest band that still tells a 0.03 lead from a 0.003 one."""
TIE_MARGIN = 0.02
"""A claimed tie (``claim=0``) in goodput fractions: reproduced when the whole interval lies within
this distance of zero (`tie_margin`: 2 points for goodput points)."""
COUNT_UNITS = ("GPUs", "runs", "traces", "requests", "instances", "count")
"""Units of integer counts: no tolerance; reproduced only when equal or inside our interval."""

B_DEFAULT = 2000
"""Bootstrap resamples (block bootstrap of one trace, `resample`, `joint_bootstrap`)."""
B_STATISTIC = 1000
"""Resamples of `resample` and `joint_bootstrap` (each evaluates a whole statistic, e.g. percentiles)."""
SEED = 20240917
"""The bootstrap's seed (verdicts are deterministic)."""
SMALL_SAMPLE = 30
"""`resample` over fewer independent units than this uses the t interval with the bootstrap's
standard error (a percentile interval over 3 traces is their [min, max], 75 % coverage)."""


@dataclass(frozen=True)
class Estimate:
    """A number with its 95 % interval (``lo``/``hi`` NaN: none), how the interval was made, and
    what it rests on (traces, requests in total); ``spread`` is the standard deviation of one trace's
    value when the interval is over traces (NaN otherwise): how many traces would narrow it."""

    value: float
    lo: float = math.nan
    hi: float = math.nan
    method: str = "none"
    traces: int = 0
    requests: int = 0
    spread: float = math.nan

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
        return Estimate(self.value * k, self.lo * k, self.hi * k, self.method, self.traces, self.requests,
                        self.spread * abs(k))

    def text(self, digits: int = 3) -> str:
        """``0.812 [0.801, 0.823]`` (the value alone when there is no interval)."""
        if math.isnan(self.value):
            return "n/a"
        v = f"{self.value:.{digits}g}" if abs(self.value) >= 10 else f"{self.value:.{digits}f}"
        if not self.has_interval:
            return v
        fmt = (lambda x: f"{x:.{digits}g}") if abs(self.value) >= 10 else (lambda x: f"{x:.{digits}f}")
        return f"{v} [{fmt(self.lo)}, {fmt(self.hi)}]"


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The two-sided critical value of Student's t with ``df`` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, df))


def wilson(k: int, n: int, z: float = 1.959964) -> Estimate:
    """Wilson's 95 % interval of a single proportion ``k / n`` of independent units."""
    if n <= 0:
        return Estimate(math.nan)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return Estimate(p, max(0.0, mid - half), min(1.0, mid + half), "Wilson", 1, n)


def t_interval(values: Sequence[float], *, level: float = LEVEL, requests: int = 0, unit: str = "trace") -> Estimate:
    """The mean of independent per-trace values with its Student t interval (``n - 1`` degrees of
    freedom); NaN values left out; no interval with a single value."""
    v = np.asarray([x for x in values if not math.isnan(x)], dtype=float)
    if len(v) == 0:
        return Estimate(math.nan)
    if len(v) == 1:
        return Estimate(float(v[0]), method=f"none: 1 {unit}", traces=1, requests=requests)
    m, s = float(v.mean()), float(v.std(ddof=1))
    half = t_quantile(len(v) - 1, level) * s / math.sqrt(len(v))
    pct = f" at {level:.1%}" if level != LEVEL else ""
    return Estimate(m, m - half, m + half, f"t interval over {len(v)} {unit}s{pct}", len(v), requests, s)


def block_length(x: np.ndarray) -> int:
    """The block length (requests) of a circular block bootstrap of ``x``: Politis and White's
    (2004, with Patton's correction; `arch.bootstrap.optimal_block_length`), at least 1 and at most
    a quarter of the series."""
    from arch.bootstrap import optimal_block_length

    x = np.asarray(x, dtype=float)
    if len(x) < 8 or float(np.var(x)) == 0.0:
        return 1
    b = float(optimal_block_length(x)["circular"].iloc[0])
    if not math.isfinite(b):
        return 1
    return int(min(max(1, math.ceil(b)), max(1, len(x) // 4)))


def extrapolated_se(v1: float, v2: float) -> float:
    """The standard error from bootstrap variances at block lengths ``L`` (``v1``) and ``2L`` (``v2``),
    extrapolated to long blocks: a circular block bootstrap's variance of a mean falls short of the
    truth by about ``c / L`` (Kuensch 1989), so ``2 v2 - v1`` removes that term (Richardson); never
    below ``v2``."""
    return math.sqrt(max(2.0 * v2 - v1, v2, 0.0))


def block_bootstrap_mean(x: np.ndarray, *, level: float = LEVEL, b: int = B_DEFAULT, seed: int = SEED) -> Estimate:
    """The mean of one trace's per-request values (in arrival order) with its interval from circular
    block bootstraps over its requests (`arch.bootstrap.CircularBlockBootstrap`) at `block_length`
    ``L`` and ``2L``: ``mean +- t(n / 2L - 1) * se``, ``se`` extrapolated (`extrapolated_se`).
    Coverage on autocorrelated synthetic traces: docs/VERDICTS.md (`repro.paper.coverage`)."""
    from arch.bootstrap import CircularBlockBootstrap

    x = np.asarray(x, dtype=float)
    m = float(x.mean())
    if float(np.var(x)) == 0.0:
        return Estimate(m, m, m, "constant over requests, 1 trace", 1, len(x))
    length = block_length(x)
    v1 = float(CircularBlockBootstrap(length, x, seed=seed).apply(np.mean, b)[:, 0].var())
    v2 = float(CircularBlockBootstrap(2 * length, x, seed=seed + 1).apply(np.mean, b)[:, 0].var())
    half = t_quantile(max(1, len(x) // (2 * length) - 1), level) * extrapolated_se(v1, v2)
    pct = f" at {level:.1%}" if level != LEVEL else ""
    return Estimate(m, m - half, m + half, f"block bootstrap over requests (blocks of {length} and {2 * length}), "
                    f"1 trace{pct}", 1, len(x))


def _check_flags(arrays: Sequence[np.ndarray], what: str) -> list[np.ndarray]:
    out = [np.asarray(a, dtype=float) for a in arrays]
    if not out or any(len(a) == 0 for a in out):
        raise ValueError(f"{what}: needs at least one trace with at least one request")
    return out


def _mean_estimate(per_trace: list[np.ndarray], level: float, b: int, seed: int) -> Estimate:
    """The mean over traces of per-request values: t over traces (two or more), else a block bootstrap."""
    if len(per_trace) == 1:
        return block_bootstrap_mean(per_trace[0], level=level, b=b, seed=seed)
    return t_interval([float(v.mean()) for v in per_trace], level=level, requests=int(sum(len(v) for v in per_trace)))


def goodput_estimate(good_by_trace: Sequence[np.ndarray], *, level: float = LEVEL, b: int = B_DEFAULT,
                     seed: int = SEED) -> Estimate:
    """Mean goodput over traces (each trace's per-request good flags, 0/1, in arrival order) with its
    interval: t over the traces' goodputs, or with one trace a block bootstrap over its requests."""
    return _mean_estimate(_check_flags(good_by_trace, "goodput_estimate"), level, b, seed)


def _paired(a_by_trace: Sequence[np.ndarray], b_by_trace: Sequence[np.ndarray], what: str) -> list[np.ndarray]:
    a = _check_flags(a_by_trace, what)
    bb = _check_flags(b_by_trace, what)
    if len(a) != len(bb) or any(len(x) != len(y) for x, y in zip(a, bb, strict=True)):
        raise ValueError(f"{what}: A and B need the same traces with the same requests "
                         f"(got {[len(x) for x in a]} vs {[len(y) for y in bb]})")
    return [x - y for x, y in zip(a, bb, strict=True)]


def paired_difference(a_by_trace: Sequence[np.ndarray], b_by_trace: Sequence[np.ndarray], *, level: float = LEVEL,
                      b: int = B_DEFAULT, seed: int = SEED) -> Estimate:
    """Goodput of A minus goodput of B, paired: trace i of A and of B are runs of the same trace, their
    flags in the same request order. The per-request differences, then `goodput_estimate`'s interval."""
    est = _mean_estimate(_paired(a_by_trace, b_by_trace, "paired_difference"), level, b, seed)
    return Estimate(est.value, est.lo, est.hi, "paired " + est.method, est.traces, est.requests, est.spread)


def least_of(per: Mapping[str, Estimate]) -> tuple[Estimate, str]:
    """The minimum of ``k`` estimates made at level ``1 - (1 - LEVEL) / k`` each (Bonferroni): when every
    interval covers its own value (probability >= `LEVEL`), the minimum of the values lies in
    ``[min lo, min hi]``, whichever candidate is smallest; so it is the interval of "A minus the best
    of k" with the best picked after the fact. Returns it with the candidate whose point value is
    smallest (named in the method)."""
    if not per:
        raise ValueError("least_of: needs at least one estimate")
    best = min(per, key=lambda n: (per[n].value, n))
    e = per[best]
    how = f"min over {len(per)} rivals (now {best}), simultaneous (Bonferroni) {e.method.split(' at ')[0]}"
    return Estimate(e.value, min(x.lo for x in per.values()), min(x.hi for x in per.values()), how, e.traces,
                    e.requests, e.spread), best


def least_difference(a_by_trace: Sequence[np.ndarray], rivals: Mapping[str, Sequence[np.ndarray]], *,
                     level: float = LEVEL, b: int = B_DEFAULT, seed: int = SEED) -> tuple[Estimate, str]:
    """A minus its best rival, when the rival is picked after the fact: ``min_j (A - B_j)`` over the
    ``k`` rivals, each difference paired (`paired_difference`) at level ``1 - (1 - level) / k``, their
    minimum by `least_of` (selection-aware)."""
    if not rivals:
        raise ValueError("least_difference: needs at least one rival")
    k = len(rivals)
    return least_of({name: paired_difference(a_by_trace, r, level=1 - (1 - level) / k, b=b, seed=seed)
                     for name, r in rivals.items()})


def over_traces(values: Sequence[float], *, level: float = LEVEL) -> Estimate:
    """The mean of a per-trace statistic with its t interval over the traces (none with one)."""
    return t_interval(values, level=level)


def _small_sample_t(value: float, draws: np.ndarray, n: int, level: float) -> tuple[float, float]:
    """``value +- t(n-1) * sqrt(n / (n-1)) * sd(draws)``: the t interval with a bootstrap standard error
    over ``n`` units (for a mean it is exactly the t interval: the bootstrap variance of a mean is the
    sample variance times ``(n - 1) / n``, over ``n``)."""
    se = float(np.std(draws, ddof=0)) * math.sqrt(n / (n - 1))
    half = t_quantile(n - 1, level) * se
    return value - half, value + half


def _estimates(value: Mapping[str, float], draws: list[Mapping[str, float]], method: str, traces: int,
               requests: int, small_n: int = 0) -> dict[str, Estimate]:
    """Each statistic of ``value`` with its interval from bootstrap ``draws``: the 2.5/97.5 percentiles,
    or with ``small_n`` units `_small_sample_t` (NaN draws, e.g. a ratio over an empty resample, left
    out; none when fewer than 95 % of the draws are numbers)."""
    out = {}
    for k, v in value.items():
        d = np.asarray([x[k] for x in draws], dtype=float)
        d = d[~np.isnan(d)]
        if math.isnan(v) or len(d) < 0.95 * len(draws):
            out[k] = Estimate(float(v), method=f"none: {method} gave too few numbers", traces=traces, requests=requests)
            continue
        if small_n:
            lo, hi = _small_sample_t(float(v), d, small_n, LEVEL)
            # a statistic that moves in steps (a GPU count off a frontier) may have no spread near its value and
            # still jump on some resamples: the interval also holds the resamples' central 95 %
            q_lo, q_hi = np.quantile(d, [0.025, 0.975])
            lo, hi = min(lo, float(q_lo)), max(hi, float(q_hi))
            spread = float(np.std(d)) * math.sqrt(small_n)  # one unit's sd, as a mean's would be
        else:
            lo, hi = np.quantile(d, [0.025, 0.975])
            spread = math.nan
        out[k] = Estimate(float(v), float(lo), float(hi), method, traces, requests, spread)
    return out


def resample(n: int, stat: Callable[[np.ndarray], Mapping[str, float]], *, unit: str, b: int = B_STATISTIC,
             seed: int = SEED, traces: int = 0, requests: int = 0) -> dict[str, Estimate]:
    """Statistics of ``n`` independent units (traces, held-out requests, time windows) with a bootstrap
    over the units (`arch.bootstrap.IIDBootstrap`): ``stat(index)`` computes every statistic from
    the units at ``index`` (``np.arange(n)``: the value itself). From `SMALL_SAMPLE` units a percentile
    interval, below it the t interval with the bootstrap's standard error. None with a single unit."""
    from arch.bootstrap import IIDBootstrap

    value = stat(np.arange(n))
    if n < 2:
        return {k: Estimate(float(v), method=f"none: 1 {unit}", traces=traces, requests=requests)
                for k, v in value.items()}
    bs = IIDBootstrap(np.arange(n), seed=seed)
    draws = [stat(np.asarray(data[0][0])) for data in bs.bootstrap(b)]
    small = n if n < SMALL_SAMPLE else 0
    how = f"t interval over {n} {unit}s (bootstrap standard error)" if small else f"bootstrap over {n} {unit}s"
    return _estimates(value, draws, how, traces, requests, small)


Outcomes = Mapping[str, Sequence[RequestOutcomes]]
"""Groups of runs: a name -> its runs' per-request outcomes, one per trace, the traces in the same order
in every group."""


def _block_index_draws(n: int, length: int, b: int, seed: int) -> list[np.ndarray]:
    """``b`` circular-block-bootstrap resamples of the indices ``0..n-1`` (arrival order)."""
    from arch.bootstrap import CircularBlockBootstrap

    bs = CircularBlockBootstrap(max(1, length), np.arange(n), seed=seed)
    return [np.asarray(data[0][0]) for data in bs.bootstrap(b)]


def joint_bootstrap(groups: Outcomes, stat: Callable[[Outcomes], Mapping[str, float]], *,
                    resample_traces: bool = True, b: int = B_STATISTIC, seed: int = SEED) -> dict[str, Estimate]:
    """Statistics of several groups of runs at once, each with a 95 % interval.

    Over two or more traces (``resample_traces``): whole traces are resampled, the same traces in
    every group (`arch.bootstrap.IIDBootstrap` over trace indices), and the interval is the t
    interval with that bootstrap's standard error (`_small_sample_t`: for a mean over traces exactly
    `t_interval`), widened to hold the resamples' central 95 % (a statistic that moves in steps).
    Within the given traces (``resample_traces=False``, e.g. a range over these very traces) or with
    one trace: circular block bootstraps over each trace's requests at block lengths ``L`` and
    ``2L`` (`block_length`), one set of block indices per trace shared by every group whose run of it
    has as many requests (runs of one trace stay paired request by request), and ``value +- t * se``
    with ``se`` extrapolated (`extrapolated_se`)."""
    from arch.bootstrap import IIDBootstrap

    names = list(groups)
    if not names or not groups[names[0]]:
        raise ValueError("joint_bootstrap: needs at least one group with at least one trace")
    s = len(groups[names[0]])
    if any(len(groups[g]) != s for g in names):
        raise ValueError(f"joint_bootstrap: every group needs the same traces (got {[len(groups[g]) for g in names]})")
    n = [len(groups[names[0]][t].good) for t in range(s)]
    value = stat(groups)
    if resample_traces and s > 1:
        bs = IIDBootstrap(np.arange(s), seed=seed)
        draws = []
        for data in bs.bootstrap(b):
            pick = np.asarray(data[0][0])
            draws.append(stat({g: [groups[g][t] for t in pick] for g in names}))
        return _estimates(value, draws, f"t interval over {s} traces (bootstrap standard error)", s,
                          int(sum(n)), small_n=s)
    lengths = [block_length(groups[names[0]][t].good) for t in range(s)]

    def draws_at(mult: int, salt: int) -> list[Mapping[str, float]]:
        idx = [_block_index_draws(n[t], mult * lengths[t], b, seed + salt + t) for t in range(s)]
        own: dict[tuple[str, int], list[np.ndarray]] = {}
        for g in names:
            for t in range(s):
                m = len(groups[g][t].good)
                if m != n[t]:  # not a run of this very trace's requests: its own blocks
                    own[(g, t)] = _block_index_draws(m, mult * block_length(groups[g][t].good), b,
                                                     seed + salt + 7919 * (t + 1))
        return [stat({g: [groups[g][t].take(own[(g, t)][j] if (g, t) in own else idx[t][j]) for t in range(s)]
                      for g in names}) for j in range(b)]

    d1, d2 = draws_at(1, 0), draws_at(2, 104729)
    blocks = max(1, min(n[t] // (2 * lengths[t]) for t in range(s)) * s - 1)
    where = "requests, 1 trace" if s == 1 else f"requests within each of {s} traces"
    method = f"block bootstrap over {where} (blocks of L and 2L, extrapolated)"
    out = {}
    for k, v in value.items():
        x1 = np.asarray([x[k] for x in d1], dtype=float)
        x2 = np.asarray([x[k] for x in d2], dtype=float)
        x1, x2 = x1[~np.isnan(x1)], x2[~np.isnan(x2)]
        if math.isnan(v) or min(len(x1), len(x2)) < 0.95 * b:
            out[k] = Estimate(float(v), method=f"none: {method} gave too few numbers", traces=s, requests=int(sum(n)))
            continue
        half = t_quantile(blocks) * extrapolated_se(float(x1.var()), float(x2.var()))
        out[k] = Estimate(float(v), float(v) - half, float(v) + half, method, s, int(sum(n)))
    return out


def traces_to_decide(est: Estimate, paper: float, *, level: float = LEVEL, most: int = 10_000,
                     value: bool = False) -> int | None:
    """About how many traces would make an inconclusive row decide (its interval exclude zero or the
    paper's gap band; a value's: exclude zero or the paper's number), if the mean stayed where it is
    and one trace's spread (``est.spread``) held: the smallest ``n`` with ``t(n-1) * spread / sqrt(n)``
    below the distance from our value to the farther of the two. None without a spread (no interval
    over traces) or beyond ``most``."""
    if math.isnan(est.spread) or est.spread <= 0 or math.isnan(est.value):
        return None
    if value:
        dist = max(abs(est.value), abs(est.value - paper))
    elif math.isnan(paper) or paper == 0:
        dist = abs(est.value)
    else:
        lo, hi = sorted((paper / GAP_FACTOR, paper * GAP_FACTOR))
        to_band = 0.0 if lo <= est.value <= hi else min(abs(est.value - lo), abs(est.value - hi))
        dist = max(abs(est.value), to_band)
    if dist <= 0:
        return None
    for n in range(max(2, est.traces), most + 1):
        if t_quantile(n - 1, level) * est.spread / math.sqrt(n) < dist:
            return n
    return None


def default_tolerance(unit: str, paper: float) -> float:
    """The band around the paper's value within which ours counts as reproduced (same unit): 0.05 for
    a fraction (the paper measured A40 GPUs and we a model of them), 15 % of the paper's value but at
    least 1 point for goodput points, none for an integer count (`COUNT_UNITS`), else 15 % of the
    paper's value."""
    if unit in COUNT_UNITS:
        return 0.0
    if unit in ("fraction", "goodput", ""):
        return 0.05
    if unit == "points":
        return max(1.0, 0.15 * abs(paper))
    return 0.15 * abs(paper)


def tie_margin(unit: str) -> float:
    """How close to zero a claimed tie's whole interval must lie (`TIE_MARGIN`, in the row's unit)."""
    return TIE_MARGIN * 100 if unit == "points" else TIE_MARGIN


@dataclass(frozen=True)
class Judgement:
    """A verdict (`VERDICTS`) and why, in one sentence a reader can check against the row."""

    verdict: str
    reason: str


def _num(x: float) -> str:
    return f"{x:.4g}"


def judge(kind: str, ours: Estimate, paper: float, *, unit: str = "", tolerance: float | None = None,
          claim: int | None = None) -> Judgement:
    """The verdict of one row with its reason; the rules are the module's table. An ordering's ``claim``
    is the side of zero the paper puts it on (+1: A better, -1: B better, 0: a tie; default: the sign
    of ``paper``); ``paper`` NaN with a claim: the paper states the ordering, not the gap.
    ``tolerance`` replaces the default band (a value: `default_tolerance`; an ordering with a gap:
    ``paper +- tolerance`` instead of the factor `GAP_FACTOR`; a tie: `tie_margin`)."""
    if kind not in KINDS:
        raise ValueError(f"verdict: kind {kind!r}; allowed: {list(KINDS)}")
    if kind == "input":
        return Judgement("input", "a number the model was given or aimed at, not a measurement")
    paper = math.nan if paper is None else float(paper)
    if kind == "ordering" and claim is None and not math.isnan(paper):
        claim = 1 if paper > 0 else -1 if paper < 0 else 0
    stated = not math.isnan(paper) or (kind == "ordering" and claim is not None)
    if math.isnan(ours.value):
        if not stated:
            return Judgement("context", "neither the paper nor we have a number")
        why = ours.method[len("none: "):] if ours.method.startswith("none: ") else "no value measured"
        return Judgement("not reproduced", f"the paper states it; we have no value ({why})")
    if not stated:
        return Judgement("context", "the paper states no number for it")
    lo, hi = (ours.lo, ours.hi) if ours.has_interval else (ours.value, ours.value)
    if kind == "value":
        tol = default_tolerance(unit, paper) if tolerance is None else float(tolerance)
        band = f"our interval [{_num(lo)}, {_num(hi)}]" + (f" +- {_num(tol)}" if tol else "")
        if lo - tol <= paper <= hi + tol:
            if ours.has_interval and lo <= 0.0 <= hi and abs(paper) > tol:  # as wide as the number itself
                n = traces_to_decide(ours, paper, value=True)
                more = f"; about {n} traces would decide it" if n else "; more traces would decide it"
                return Judgement("within noise", f"{band} holds the paper's {_num(paper)} but also zero{more}")
            if ours.has_interval and abs(paper) > tol and (hi - lo) / 2 > abs(paper) / GAP_FACTOR:
                n = traces_to_decide(ours, paper, value=True)
                more = f"; about {n} traces would decide it" if n else "; more traces would decide it"
                return Judgement("within noise", f"{band} holds the paper's {_num(paper)} but is too wide to tell "
                                                 f"it from {_num(paper / GAP_FACTOR)}{more}")
            return Judgement("reproduced", f"{band} holds the paper's {_num(paper)}")
        off = paper - (hi + tol) if paper > hi + tol else (lo - tol) - paper
        return Judgement("not reproduced", f"{band} misses the paper's {_num(paper)} by {_num(off)}")
    side = ours.excludes_zero()
    if claim == 0:
        margin = tie_margin(unit) if tolerance is None else float(tolerance)
        if ours.has_interval and -margin <= lo and hi <= margin:
            return Judgement("reproduced", f"a tie: the whole interval lies within +-{_num(margin)} of zero")
        if side:
            return Judgement("not reproduced", f"the paper reports a tie; our interval excludes zero "
                                               f"({'A' if side > 0 else 'B'} better)")
        return Judgement("within noise", f"the paper reports a tie; our interval is wider than +-{_num(margin)}")
    if not ours.has_interval:
        return Judgement("within noise", f"no interval ({ours.method}): no ordering can be shown")
    if side == -claim:
        return Judgement("contradicted", "our interval excludes zero on the other side from the paper's")
    if math.isnan(paper):
        if side == claim:
            return Judgement("reproduced", "our interval excludes zero on the paper's side (the paper states "
                                           "the ordering, not the gap)")
        n = traces_to_decide(ours, paper)
        more = f"; about {n} traces would decide it" if n else ""
        return Judgement("within noise", f"our interval holds zero (the paper states the ordering, not the gap){more}")
    if tolerance is None:
        b_lo, b_hi = sorted((paper / GAP_FACTOR, paper * GAP_FACTOR))
        band = f"the paper's gap {_num(paper)} within a factor {GAP_FACTOR:g} [{_num(b_lo)}, {_num(b_hi)}]"
    else:
        b_lo, b_hi = paper - float(tolerance), paper + float(tolerance)
        band = f"the paper's gap {_num(paper)} +- {_num(float(tolerance))}"
    reaches = lo <= b_hi and hi >= b_lo
    if reaches and side == claim:
        return Judgement("reproduced", f"our interval excludes zero and reaches {band}")
    if reaches:
        n = traces_to_decide(ours, paper)
        more = f"; about {n} traces would decide it" if n else "; more traces would decide it"
        return Judgement("within noise", f"our interval holds both zero and {band}{more}")
    if side == 0:
        return Judgement("not reproduced", f"a precise null: our interval holds zero and excludes {band}")
    size = "smaller" if max(abs(lo), abs(hi)) < min(abs(b_lo), abs(b_hi)) else "larger"
    return Judgement("not reproduced", f"the paper's side, but {size} than {band}")


def verdict(kind: str, ours: Estimate, paper: float, *, unit: str = "", tolerance: float | None = None,
            claim: int | None = None) -> str:
    """The verdict of one row (`VERDICTS`); `judge` gives it with its reason."""
    return judge(kind, ours, paper, unit=unit, tolerance=tolerance, claim=claim).verdict


COMPARISON_VERDICTS = ("better", "worse", "tie", "within noise")
"""The verdicts of `compare` (a comparison the paper states nothing about)."""


def compare(est: Estimate, unit: str = "") -> Judgement:
    """The verdict of a paired difference A - B the paper states nothing about (positive: A better), one of
    `COMPARISON_VERDICTS`: ``better`` / ``worse`` when the interval excludes zero, ``tie`` when it lies
    within `tie_margin` of zero, else ``within noise`` (about how many traces would decide it, from
    `traces_to_decide`). Without an interval nothing is decided."""
    if math.isnan(est.value):
        return Judgement("within noise", f"no value ({est.method})")
    if not est.has_interval:
        return Judgement("within noise", f"no interval ({est.method}): no difference can be shown")
    side = est.excludes_zero()
    span = f"[{_num(est.lo)}, {_num(est.hi)}]"
    if side:
        return Judgement("better" if side > 0 else "worse", f"the interval {span} excludes zero")
    margin = tie_margin(unit)
    if -margin <= est.lo and est.hi <= margin:
        return Judgement("tie", f"the interval {span} lies within +-{_num(margin)} of zero")
    n = traces_to_decide(est, math.nan)
    more = f"; about {n} traces would decide it" if n else "; more traces would decide it"
    return Judgement("within noise", f"the interval {span} holds zero and is wider than +-{_num(margin)}{more}")
