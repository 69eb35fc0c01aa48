"""§VI's anchoring: the arrival rate at which one policy's simulated goodput, or P99 TTFT, equals a
value measured elsewhere (on hardware, or on another simulator).

The paper re-anchored each workload's simulator rate on the measured round-robin goodput, "so that
its verdict on the other three policies is a prediction rather than a fit". `anchor_rate` finds that
rate for any registered policy and either metric; `repro.experiment.anchoring.predict` then runs the other
policies there (with intervals), and ``repro anchor`` does both from the command line.

Metrics (`ANCHOR_METRICS`) and their bands:

``goodput``
    a fraction in (0, 1]; falls as the rate rises. The band is **absolute** (0.01 = one goodput point).
``ttft_p99_s``
    P99 TTFT in seconds; rises with the rate. The band is **relative** (0.05 = within 5 % of the target).

Rates in requests/s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from repro.errors import ConfigError, check_choice, check_int, check_number
from repro.experiment.runner import simulated_summary
from repro.experiment.saturation import rate_band
from repro.experiment.spec import RunSpec

AnchorMetric = Literal["goodput", "ttft_p99_s"]
ANCHOR_METRICS: tuple[str, ...] = ("goodput", "ttft_p99_s")
"""What an anchor matches: a run summary's key (`repro.experiment.metrics.summarize`)."""
DEFAULT_BANDS: dict[str, float] = {"goodput": 0.01, "ttft_p99_s": 0.05}
"""Default band per metric: goodput absolute (one point), P99 TTFT relative (5 %)."""
TARGET_RANGES: dict[str, tuple[float, float]] = {"goodput": (0.0, 1.0), "ttft_p99_s": (0.0, 3600.0)}
"""The allowed target per metric, open below: goodput a fraction, P99 TTFT in seconds (an hour at most)."""
METRIC_LABELS: dict[str, str] = {"goodput": "goodput", "ttft_p99_s": "P99 TTFT"}


@dataclass(frozen=True)
class Anchor:
    """One anchoring (`anchor_rate`): the rate at which ``policy``'s simulated ``metric`` reaches
    ``target`` within ``band``, or why none was found.

    ``target`` and ``value`` in the metric's unit (goodput a fraction, P99 TTFT seconds); ``band``
    absolute for goodput, relative for P99 TTFT (`DEFAULT_BANDS`). ``rate`` (req/s) and ``value``
    (the metric there) are NaN when not ``found``, and ``reason`` says why (no bracket within the
    rate bounds or the probes allowed, or a bisection that never entered the band). ``probes``: every
    (rate, value) tried, in order. ``rate_lo``/``rate_hi`` (req/s, derived from the probes): the
    anchored rate's interval, the rates at which the probes' curve (linear in log-rate between
    neighbouring probes) crosses the band's edges (`repro.experiment.saturation.rate_band`): any rate
    in it meets the search's own criterion. NaN when not found or when the probes cannot say.
    """

    target: float
    metric: AnchorMetric
    band: float
    found: bool
    rate: float
    value: float
    probes: tuple[tuple[float, float], ...]
    reason: str = ""
    policy: str = "round_robin"

    @property
    def rate_interval(self) -> tuple[float, float]:
        """(``rate_lo``, ``rate_hi``) in req/s: where the probes' curve crosses the band's edges, NaN
        when not found or when the probes cannot say (`rate_band`)."""
        if not self.found:
            return math.nan, math.nan
        score = _falling(self.metric, self.target)
        return rate_band([(r, score(v)) for r, v in self.probes], score(self.target), self.band)

    @property
    def rate_lo(self) -> float:
        """The anchored rate interval's lower end (req/s; `rate_interval`)."""
        return self.rate_interval[0]

    @property
    def rate_hi(self) -> float:
        """The anchored rate interval's upper end (req/s; `rate_interval`)."""
        return self.rate_interval[1]

    @property
    def closest(self) -> tuple[float, float]:
        """The probe (rate, value) nearest the target, found or not (for reporting a failure)."""
        return closest_probe(self.probes, self.target)

    def describe(self) -> str:
        """One line: ``round_robin goodput 0.733 +- 0.01`` or ``round_robin P99 TTFT 0.9 s +- 5%``."""
        return f"{self.policy} {METRIC_LABELS[self.metric]} {target_text(self.metric, self.target, self.band)}"


def closest_probe(probes: Sequence[tuple[float, float]], target: float) -> tuple[float, float]:
    """The (rate, value) of ``probes`` whose value is nearest ``target`` (a NaN value never is)."""
    return min(probes, key=lambda p: math.inf if math.isnan(p[1]) else abs(p[1] - target))


def target_text(metric: str, target: float, band: float) -> str:
    """The target with its band in the metric's own terms (absolute goodput, relative P99 TTFT)."""
    if metric == "goodput":
        return f"{target:.3f} +- {band:g}"
    return f"{target:.3g} s +- {band:.0%}"


def _falling(metric: str, target: float) -> Callable[[float], float]:
    """The metric as a score that falls with the rate and whose target is ``target`` (goodput) or -1
    (P99 TTFT relative to the target, negated; a run without any first token is -inf), so that one
    search serves both and ``|score - its target| <= band`` is the band's own test."""
    if metric == "goodput":
        return lambda v: v
    return lambda v: -math.inf if math.isnan(v) else -v / target


def anchor_rate(base: RunSpec, target: float, *, metric: AnchorMetric = "goodput", policy: str = "round_robin",
                start_rate: float | None = None, band: float | None = None, step: float = 10.0,
                max_probes: int = 24, min_rate: float = 1e-4, max_rate: float = 1e4,
                probe: Callable[[RunSpec], float] | None = None) -> Anchor:
    """The arrival rate (req/s) at which ``policy`` on ``base`` (its workload, topology, seed,
    requests, cost model, simulator) reaches ``target`` for ``metric`` on the simulator.

    ``metric``: ``goodput`` (a fraction; ``band`` absolute, default 0.01) or ``ttft_p99_s`` (seconds;
    ``band`` relative, default 0.05), `DEFAULT_BANDS`. ``policy`` runs with its default options.
    From ``start_rate`` (default ``base.rate``): while the metric says the load is too light (goodput
    above the band, P99 TTFT below it) the rate steps up by ``step``; while too heavy, down; a probe
    within the band ends the search. A bracket (one rate on each side of the target) is then bisected
    in log-rate until a probe falls within the band. Rates are bounded by ``[min_rate, max_rate]``
    (each bound is probed once before giving up) and probes by ``max_probes``.

    Never raises for a search that fails: the `Anchor` says ``found=False`` and why. Bad arguments
    raise `ConfigError` naming the field and its range. ``probe`` (a function of the policy's spec at
    a rate, returning the metric there) replaces the default, `simulated_summary` of a ``sim`` spec
    (cached, deterministic), e.g. in tests or to probe a live backend.
    """
    check_choice("anchor", "metric", metric, ANCHOR_METRICS)
    lo_t, hi_t = TARGET_RANGES[metric]
    check_number("anchor", metric, target, lo_t, hi_t, lo_open=True)
    band = DEFAULT_BANDS[metric] if band is None else band
    check_number("anchor", "band", band, 0.0, 1.0, lo_open=True)
    check_number("anchor", "step", step, 1.0, 1e3, lo_open=True)
    check_int("anchor", "max_probes", max_probes, 1, 10_000)
    check_number("anchor", "min_rate", min_rate, 0.0, 1e6, lo_open=True)
    check_number("anchor", "max_rate", max_rate, min_rate, 1e6, lo_open=True)
    start = float(start_rate or base.rate)
    check_number("anchor", "start_rate", start, min_rate, max_rate)
    if probe is None and base.backend != "sim":
        raise ConfigError(f"anchor: field 'backend' = {base.backend!r}: the default probe simulates; "
                          "anchor a 'sim' spec, or pass a probe")
    spec = base.replace(policy=policy, policy_options={})

    def default_probe(s: RunSpec) -> float:
        return float(simulated_summary(s)[0][metric])

    probe = probe or default_probe
    score = _falling(metric, target)
    goal = score(target)
    probes: list[tuple[float, float]] = []
    label = METRIC_LABELS[metric]

    def g(rate: float) -> float:
        v = float(probe(spec.replace(rate=float(rate))))
        probes.append((float(rate), v))
        return score(v)

    def within(y: float) -> bool:
        return abs(y - goal) <= band

    def found(rate: float, y: float) -> Anchor:
        return Anchor(target, metric, band, True, rate, probes[-1][1], tuple(probes), policy=policy)

    def failed(reason: str) -> Anchor:
        return Anchor(target, metric, band, False, math.nan, math.nan, tuple(probes),
                      f"{base.workload}, {policy} {label} target {target_text(metric, target, band)}: {reason}",
                      policy=policy)

    rate = start
    y = g(rate)
    if within(y):
        return found(rate, y)
    up = y > goal  # the load is too light (goodput above the band, P99 TTFT below): step up (else down)
    while True:  # bracket: lo, a rate whose score is above the target, and hi, one below
        bound = max_rate if up else min_rate
        if rate == bound:
            side = "above" if up == (metric == "goodput") else "below"
            return failed(f"{label} stays {side} the band {'up' if up else 'down'} to the rate bound {bound:g} "
                          f"req/s (last {probes[-1][1]:.3f} at {rate:.4g} req/s)")
        if len(probes) >= max_probes:
            return failed(f"no bracket within {max_probes} probes (last {probes[-1][1]:.3f} at {rate:.4g} req/s)")
        rate = min(rate * step, max_rate) if up else max(rate / step, min_rate)
        y = g(rate)
        if within(y):
            return found(rate, y)
        if (y > goal) != up:  # crossed the target
            lo, hi = (probes[-2][0], rate) if up else (rate, probes[-2][0])
            break
    while len(probes) < max_probes:  # bisect in log-rate
        mid = math.sqrt(lo * hi)
        y = g(mid)
        if within(y):
            return found(mid, y)
        if y > goal:
            lo = mid
        else:
            hi = mid
    return failed(f"bisection between {lo:.4g} and {hi:.4g} req/s did not enter the band in {max_probes} probes "
                  f"(closest {closest_probe(probes, target)[1]:.3f})")
