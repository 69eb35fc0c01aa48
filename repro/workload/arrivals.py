"""Arrival processes: Poisson, gamma (``vllm bench serve --burstiness``) and burst trains.

Every sampler takes ``rate`` (mean requests per second, > 0), ``n`` (number of arrivals) and a
``numpy.random.Generator`` and returns ``n`` sorted float64 arrival times in seconds. Time 0 is
the start of the run; the first arrival comes one inter-arrival gap after it (never exactly at 0).
Each sampler draws ``n`` variates in one vectorized call, so the first ``k`` arrivals of a trace
of ``n`` are the arrivals of a trace of ``k`` from the same generator state.

- `poisson`: exponential gaps with mean ``1/rate``.
- `gamma`: gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)), exactly what
  ``vllm bench serve --burstiness`` draws. Mean gap 1/rate, coefficient of variation
  1/sqrt(burstiness): burstiness 1 is Poisson, below 1 is burstier, above 1 is smoother.
- `burst_train`: a Poisson process whose rate is piecewise constant over each period of
  ``period_s`` seconds: ``rate*burst_factor`` during the first ``duty*period_s`` seconds (the
  burst), and ``rate*(1 - burst_factor*duty)/(1 - duty)`` for the rest, so the long-run mean is
  exactly ``rate``. Allowed: ``burst_factor >= 1``, ``0 < duty < 1``, ``burst_factor*duty <= 1``
  (at equality the process is silent between bursts). Sampling is exact (no thinning): unit-rate
  exponential epochs are mapped through the inverse of the cumulative intensity.

`ArrivalSpec` bundles a process with its parameters, validates them (`ConfigError` naming the
field and the allowed range) and samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from repro.errors import ConfigError

PROCESSES = ("poisson", "gamma", "burst")


def _check_rate_n(rate: float, n: int) -> None:
    if not (isinstance(rate, (int, float, np.floating, np.integer)) and math.isfinite(rate)
            and rate > 0):
        raise ConfigError(f"rate must be a finite number > 0 (requests/s), got {rate!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError(f"n must be an integer >= 0, got {n!r}")


def poisson(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson arrivals at ``rate`` per second (exponential gaps)."""
    _check_rate_n(rate, n)
    return np.cumsum(rng.exponential(1.0 / rate, size=n)).astype(np.float64, copy=False)


def gamma(rate: float, n: int, rng: np.random.Generator, burstiness: float = 1.0) -> np.ndarray:
    """Gamma-renewal arrivals, as ``vllm bench serve --burstiness`` (see module docstring)."""
    _check_rate_n(rate, n)
    _check_burstiness(burstiness)
    theta = 1.0 / (rate * burstiness)
    return np.cumsum(rng.gamma(shape=burstiness, scale=theta, size=n)).astype(np.float64,
                                                                              copy=False)


def burst_rates(rate: float, burst_factor: float, duty: float) -> tuple[float, float]:
    """(rate inside a burst, rate between bursts) of a burst train with long-run mean ``rate``."""
    _check_burst(burst_factor, 1.0, duty)
    high = rate * burst_factor
    low = rate * (1.0 - burst_factor * duty) / (1.0 - duty)
    return high, max(low, 0.0)


def burst_train(rate: float, n: int, rng: np.random.Generator, burst_factor: float = 3.0,
                period_s: float = 30.0, duty: float = 0.2) -> np.ndarray:
    """Piecewise-constant-rate Poisson arrivals (bursts at the start of every period)."""
    _check_rate_n(rate, n)
    _check_burst(burst_factor, period_s, duty)
    high, low = burst_rates(rate, burst_factor, duty)
    # Cumulative intensity over one period is rate*period_s; inside it, the burst holds `a`.
    per_period = rate * period_s
    a = high * duty * period_s
    y = np.cumsum(rng.exponential(1.0, size=n))
    k = np.floor(y / per_period)
    r = y - k * per_period
    in_burst = r < a
    t_in = r / high
    if low > 0:
        t_out = duty * period_s + (r - a) / low
    else:  # silent between bursts: every epoch lands in a burst (r < a up to rounding)
        t_out = np.full_like(r, duty * period_s)
    t = k * period_s + np.where(in_burst, t_in, np.minimum(t_out, period_s))
    # Rounding at segment edges can swap two arrivals by an ulp; keep the contract (sorted).
    return np.maximum.accumulate(t).astype(np.float64, copy=False)


def _check_burstiness(burstiness: float) -> None:
    if not (isinstance(burstiness, (int, float, np.floating, np.integer))
            and math.isfinite(burstiness) and 0 < burstiness <= 1000):
        raise ConfigError(f"burstiness must be in (0, 1000] (1 = Poisson, < 1 burstier), "
                          f"got {burstiness!r}")


def _check_burst(burst_factor: float, period_s: float, duty: float) -> None:
    if not (isinstance(burst_factor, (int, float, np.floating, np.integer))
            and math.isfinite(burst_factor) and burst_factor >= 1):
        raise ConfigError(f"burst_factor must be a finite number >= 1, got {burst_factor!r}")
    if not (isinstance(period_s, (int, float, np.floating, np.integer))
            and math.isfinite(period_s) and period_s > 0):
        raise ConfigError(f"period_s must be a finite number > 0 (seconds), got {period_s!r}")
    if not (isinstance(duty, (int, float, np.floating, np.integer)) and 0 < duty < 1):
        raise ConfigError(f"duty must be in (0, 1) (fraction of each period in a burst), "
                          f"got {duty!r}")
    if burst_factor * duty > 1 + 1e-12:
        raise ConfigError(
            f"burst_factor * duty must be <= 1 so the mean rate can be kept outside bursts "
            f"(burst_factor={burst_factor!r}, duty={duty!r}: product {burst_factor * duty:.3g})")


@dataclass(frozen=True)
class ArrivalSpec:
    """An arrival process and its parameters (only the ones of ``process`` are used).

    ``process``: ``poisson`` | ``gamma`` | ``burst``. ``burstiness`` (gamma): shape, in
    (0, 1000]. ``burst_factor`` (burst, >= 1), ``period_s`` (burst, > 0), ``duty`` (burst,
    in (0, 1)), with ``burst_factor*duty <= 1``.
    """

    process: str = "poisson"
    burstiness: float = 1.0
    burst_factor: float = 3.0
    period_s: float = 30.0
    duty: float = 0.2

    def __post_init__(self) -> None:
        if self.process not in PROCESSES:
            raise ConfigError(f"process must be one of {', '.join(PROCESSES)}; "
                              f"got {self.process!r}")
        _check_burstiness(self.burstiness)
        _check_burst(self.burst_factor, self.period_s, self.duty)
        # Normalise numeric types so equality and serialisation are stable.
        for f in ("burstiness", "burst_factor", "period_s", "duty"):
            object.__setattr__(self, f, float(getattr(self, f)))

    def sample(self, rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.process == "poisson":
            return poisson(rate, n, rng)
        if self.process == "gamma":
            return gamma(rate, n, rng, self.burstiness)
        return burst_train(rate, n, rng, self.burst_factor, self.period_s, self.duty)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ArrivalSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown arrival field(s) {unknown}; allowed: {sorted(known)}")
        return cls(**dict(d))

    def describe(self) -> str:
        if self.process == "poisson":
            return "Poisson"
        if self.process == "gamma":
            return f"gamma (burstiness {self.burstiness:g})"
        return (f"burst train (x{self.burst_factor:g} for {self.duty:.0%} of every "
                f"{self.period_s:g} s)")


POISSON = ArrivalSpec("poisson")
