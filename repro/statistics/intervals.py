"""Intervals: how far a number can be trusted (the verdict rules that read them are `repro.paper.rules`).

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
from typing import Protocol

import numpy as np

LEVEL = 0.95
"""The confidence level of every interval."""

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
    block bootstraps over its requests (`arch.bootstrap.CircularBlockBootstrap`'s, drawn at once: `_block_means`)
    at `block_length` ``L`` and ``2L``: ``mean +- t(n / 2L - 1) * se``, ``se`` extrapolated (`extrapolated_se`).
    Coverage on autocorrelated synthetic traces: docs/VERDICTS.md (`repro.paper.coverage`)."""
    x = np.asarray(x, dtype=float)
    m = float(x.mean())
    if float(np.var(x)) == 0.0:
        return Estimate(m, m, m, "constant over requests, 1 trace", 1, len(x))
    length = block_length(x)
    v1 = float(_block_means(x, length, b, seed).var())
    v2 = float(_block_means(x, 2 * length, b, seed + 1).var())
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


class Resamplable(Protocol):
    """One run's per-request outcomes in arrival order (e.g. `repro.experiment.metrics.RequestOutcomes`):
    ``good`` holds one entry per request, ``take`` the outcomes of the requests at ``index``."""

    @property
    def good(self) -> np.ndarray: ...

    def take(self, index: np.ndarray) -> Resamplable: ...


Outcomes = Mapping[str, Sequence[Resamplable]]
"""Groups of runs: a name -> its runs' per-request outcomes, one per trace, the traces in the same order
in every group."""


def _block_index_draws(n: int, length: int, b: int, seed: int) -> np.ndarray:
    """``b`` circular-block-bootstrap resamples of the indices ``0..n-1`` (arrival order), one per row: the
    very indices ``arch.bootstrap.CircularBlockBootstrap(length, np.arange(n), seed=seed).bootstrap(b)``
    draws (``update_indices``: ``ceil(n / length)`` uniform block starts per resample, each block wrapping
    around the end, cut to ``n``), drawn in one call instead of ``b`` (tests/test_intervals.py checks they
    are arch's)."""
    return _BlockDraws(n, length, b, seed).all()


class _BlockDraws:
    """`_block_index_draws`' resamples, row ``j`` made when asked (``draws[j]``): the same starts drawn in one
    call, without holding ``b x n`` indices at once (at 2,000 resamples of 10,000 requests, 160 MB)."""

    def __init__(self, n: int, length: int, b: int, seed: int) -> None:
        self.n, self.length = n, max(1, length)
        blocks = -(-n // self.length)
        self.starts = np.random.default_rng(seed).integers(n, size=(b, blocks), dtype=np.int64)
        self._offsets = np.arange(self.length, dtype=np.int64)

    def __getitem__(self, j: int) -> np.ndarray:
        return (self.starts[j][:, None] + self._offsets).reshape(-1)[:self.n] % self.n

    def all(self) -> np.ndarray:
        return _blocks_at(self.starts, self.length, self.n)


def _blocks_at(starts: np.ndarray, length: int, n: int) -> np.ndarray:
    """The resamples' indices from their block starts (one row of starts per resample)."""
    return (starts[:, :, None] + np.arange(length, dtype=np.int64)).reshape(len(starts), -1)[:, :n] % n


def _block_means(x: np.ndarray, length: int, b: int, seed: int) -> np.ndarray:
    """The means of ``b`` circular-block-bootstrap resamples of ``x``, the resamples `_block_index_draws`' (arch's):
    each resample's sum is its blocks' sums, read off one cumulative sum of ``x`` wrapped around its end, so a
    resample costs its blocks, not its requests. For 0/1 flags (goodput) the sums are whole numbers and the means
    are ``CircularBlockBootstrap(length, x, seed=seed).apply(np.mean, b)[:, 0]``'s bit for bit; for other values
    within a few units of the last place of the cumulative sum (tests/test_intervals.py)."""
    n, length = len(x), max(1, length)
    blocks = -(-n // length)
    starts = np.random.default_rng(seed).integers(n, size=(b, blocks), dtype=np.int64)
    wrapped = np.concatenate([x] * (1 + -(-length // n)))
    cum = np.concatenate([[0.0], np.cumsum(wrapped)])
    last = n - (blocks - 1) * length  # the last block is cut to the resample's n values
    whole = (cum[starts[:, :-1] + length] - cum[starts[:, :-1]]).sum(axis=1)
    return (whole + (cum[starts[:, -1] + last] - cum[starts[:, -1]])) / n


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
        idx = [_BlockDraws(n[t], mult * lengths[t], b, seed + salt + t) for t in range(s)]
        own: dict[tuple[str, int], _BlockDraws] = {}
        for g in names:
            for t in range(s):
                m = len(groups[g][t].good)
                if m != n[t]:  # not a run of this very trace's requests: its own blocks
                    own[(g, t)] = _BlockDraws(m, mult * block_length(groups[g][t].good), b,
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
