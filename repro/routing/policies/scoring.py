"""What the marginal-cost scorers share (`MarginalCostBase`, not registered itself): price every healthy
(prefill p, decode d) pair in seconds and place the request on the cheapest.

Here: the options common to the scorers, the candidate sets (every healthy instance in tie-rotation
order, or ``sample_d`` of them drawn at random), the admission guard and the post-admission
cache-pressure term, and the decision: the enumeration (`MarginalCostBase.place_enumerated`: the pair
loop and argmin on plain numbers are `repro.routing.policies.pricing`'s) with its tie-breaks (fewer
in-flight requests on p and d together, then round-robin) or the softmax draw; for large pools its
vectorised twin (`repro.routing.policies.vectorized`), which decides the same.

The scorers built on it: the paper's (`repro.routing.policies.marginal_cost`), its prior readings
(`repro.routing.policies.readings`) and ours (`repro.routing.policies.batching`). Times are seconds on the
router's clock, lengths tokens, priced with the router's `CostModel`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import (
    NO_HEALTHY,
    ClusterView,
    Decision,
    InstanceSignals,
    Placement,
    Policy,
    Rejection,
    RequestInfo,
)
from repro.routing.policies.pricing import Prices, cache_pressure_s, first_best, guard_prefill_s
from repro.routing.policies.vectorized import VectorizedPricing

_NUMBER = (int, float)


def _option(default: Any, help: str, lo: float | None = None, hi: float | None = None, hi_open: bool = False) -> Any:
    return field(default=default, metadata={"help": help, "lo": lo, "hi": hi, "hi_open": hi_open})


@dataclass(frozen=True)
class ScorerOptions:
    """The options the marginal-cost scorers share, typed (`MarginalCostBase`'s ``Options``; a spec's
    ``policy_options``, the command line's ``-o KEY=VALUE``). Each field's ``metadata`` holds its ``help``
    and its allowed range (``lo``, ``hi``); `make` checks types and ranges and names the bad option."""

    use_backlog: bool = _option(True, "the seconds-of-backlog term(s) (the ledger's backlog_s of p and d)")
    use_length: bool = _option(True, "price the predicted output length; false charges default_output_tokens "
                                     "instead, everywhere, the ledger's charges included")
    use_cache_pressure: bool = _option(True, "the post-admission cache-pressure term")
    use_slo: bool = _option(True, "the SLO hinge")
    cache_safe_fraction: float = _option(0.8, "u_safe, the KV fraction above which the cache term grows", 0.0, 1.0,
                                         hi_open=True)
    slo_weight: float = _option(1.0, "w_slo, seconds of score per second of predicted overrun", 0.0)
    default_output_tokens: float = _option(256.0, "the output estimate (tokens) when use_length is false", 1.0)
    sample_d: int = _option(0, "candidates priced per pool (power-of-d); 0 prices every healthy instance", 0)
    temperature_s: float = _option(0.0, "softmax temperature (seconds of score); 0 takes the argmin", 0.0)
    admission_guard: bool = _option(False, "reject requests predicted to miss their TTFT target everywhere")
    guard_margin: float = _option(3.0, "the guard's threshold, a multiple of the class's TTFT target", 1.0)
    random_state: int = _option(0, "seed of the sampling and softmax draws")

    @classmethod
    def make(cls, who: str, options: dict[str, Any]) -> ScorerOptions:
        """The options of policy ``who`` from ``options`` (names of this record's fields), checked: an unknown
        name, a value of the wrong type (a flag not a bool, a count not an integer) or out of its range is a
        `ConfigError` naming the option and what is allowed. Numbers are normalised (a float field holds a
        float)."""
        known = {f.name: f for f in fields(cls)}
        for key in options:
            if key not in known:
                raise ConfigError(f"{who}: unknown option {key!r}; allowed: {list(known)}")
        values: dict[str, Any] = {}
        for key, value in options.items():
            f = known[key]
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            if kind == "bool":
                if not isinstance(value, bool) and value not in (0, 1):
                    raise ConfigError(f"{who}: option {key!r} must be true or false, got {value!r}")
                value = bool(value)
            elif kind == "int":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"{who}: option {key!r} must be an integer, got {value!r}")
            elif kind == "float":
                if isinstance(value, bool) or not isinstance(value, _NUMBER):
                    raise ConfigError(f"{who}: option {key!r} must be a number, got {value!r}")
                value = float(value)
            lo, hi, hi_open = f.metadata.get("lo"), f.metadata.get("hi"), f.metadata.get("hi_open")
            if lo is not None or hi is not None:
                ok = (lo is None or value >= lo) and (hi is None or (value < hi if hi_open else value <= hi))
                if not ok:
                    where = (f"in [{lo:g}, {hi:g}{')' if hi_open else ']'}" if lo is not None and hi is not None
                             else f">= {lo:g}" if lo is not None else f"<= {hi:g}")
                    raise ConfigError(f"{who}: option {key!r} must be {where}, got {value!r}")
            values[key] = value
        return cls(**values)

    @classmethod
    def describe(cls) -> list[tuple[str, str, Any, str]]:
        """(name, type, default, help) of each option, in order: what ``repro policies`` shows."""
        return [(f.name, f.type if isinstance(f.type, str) else f.type.__name__, f.default, f.metadata.get("help", ""))
                for f in fields(cls)]


class MarginalCostBase(VectorizedPricing, Policy):
    """What the marginal-cost scorers share (not registered itself): price every healthy (prefill p,
    decode d) pair in seconds and place the request on the cheapest.

    A subclass implements ``_priced`` (its score); this class holds the options common to the
    scorers, the candidate sets, the tie-breaks (fewer in-flight requests on p and d together, from
    the ledger; then round-robin) and two additions beyond the paper, both off by default:

    - ``sample_d = d > 0`` prices only d randomly chosen instances per pool (power-of-d), and
      ``temperature_s = T > 0`` picks a pair with probability proportional to
      ``exp(-(score - min score) / T)`` instead of the argmin: either way load cannot pile onto the
      single momentarily cheapest instance (§V-E's scarcity inversion). Seeded by ``random_state``.
    - ``admission_guard`` rejects a request whose predicted TTFT exceeds ``guard_margin`` x its
      class's TTFT target on every candidate, with a retry-after of the excess: hopeless work is
      not queued in front of requests that can still make their SLO. A rejected request counts as
      not good. The guard predicts TTFT for a batching prefill engine, from the prompt tokens
      queued on p (ledger) plus its own, ``Q``: ``ceil(Q / max_num_batched_tokens) * tau_pre_base
      + Q * tau_pre_per_token + tau_xfer(L) + C_d + tau_dec(n_d)`` (``C_d`` the cache term when it
      is on; a serial workload process such as the ledger's prefill backlog overstates a batching
      engine's wait at high rates of short prompts).

    Everything a scorer reads is the `ClusterView` (the router's ledger and its KV polls), the
    request's admission-time facts and the router's `CostModel`: the same code runs in the
    simulator and the proxy.

    Parameters
    ----------
    use_backlog : the seconds-of-backlog term(s) (the ledger's ``backlog_s`` of p and d).
    use_length : price the predicted output length; False charges ``default_output_tokens`` instead,
        everywhere, the ledger's charges included (`output_estimate`).
    use_cache_pressure : the post-admission cache-pressure term.
    use_slo : the SLO hinge.
    cache_safe_fraction : u_safe, the KV fraction (in [0, 1)) above which the cache term grows.
    slo_weight : w_slo (>= 0, seconds of score per second of predicted overrun).
    default_output_tokens : the output estimate (tokens, >= 1) when ``use_length`` is False.
    sample_d : candidates priced per pool (power-of-d); 0 prices every healthy instance.
    temperature_s : softmax temperature (seconds of score, >= 0); 0 takes the argmin.
    admission_guard : reject requests predicted to miss their TTFT target everywhere.
    guard_margin : the guard's threshold, a multiple (>= 1) of the class's TTFT target.
    random_state : seed of the sampling and softmax draws.
    """

    name = "marginal_cost_base"

    _prices_made: Prices | None = None  # `_prices`' (set on the instance)

    Options: ClassVar[type[ScorerOptions]] = ScorerOptions
    """Its options' typed record (a subclass may extend it, or change defaults)."""

    def __init__(self, cost_model: CostModel | None = None, **options: Any) -> None:
        super().__init__(cost_model)
        self.options = self.Options.make(self.name, options)
        for f in fields(self.options):  # each option also an attribute (the hot paths read them)
            setattr(self, f.name, getattr(self.options, f.name))
        self._rng = random.Random(self.options.random_state)
        self._tick = 0

    def output_estimate(self, request: RequestInfo) -> float:
        return request.predicted_output_tokens if self.use_length else self.default_output_tokens

    def scores(self, request: RequestInfo, view: ClusterView) -> list[tuple[float, int, int, int]]:
        """All priced healthy pairs as (score in s, in-flight tiebreak, p, d), in tie-rotation order."""
        return [c[:4] for c in self._priced(request, view)]

    def _priced(self, request: RequestInfo, view: ClusterView) -> list[tuple[float, int, int, int, float]]:
        """(score in s, in-flight tiebreak, p, d, the guard's predicted TTFT in s) for every candidate pair."""
        return self._priced_pairs(request, self._candidates(view.prefill), self._candidates(view.decode))

    def _priced_pairs(self, request: RequestInfo, prefill: list[InstanceSignals],
                      decode: list[InstanceSignals]) -> list[tuple[float, int, int, int, float]]:
        """`_priced` over given candidates (in enumeration order): the scorer's formula."""
        raise NotImplementedError

    def _candidates(self, pool: list[InstanceSignals]) -> list[InstanceSignals]:
        """The healthy instances to price: all, or ``sample_d`` drawn at random (power-of-d)."""
        n = len(pool)
        t = self._tick % n if n else 0
        alive = [s for s in pool[t:] + pool[:t] if s.healthy]  # pool[(tick + k) % n] for k < n
        if self.sample_d and self.sample_d < len(alive):
            alive = self._rng.sample(alive, self.sample_d)
        return alive

    def _prices(self) -> Prices:
        """The cost model's prices as native numbers (`repro.routing.policies.pricing.Prices`), made once per
        cost model (again if ``cost_model`` is replaced)."""
        prices = self._prices_made
        if prices is None or prices.cost_model is not self.cost_model:
            prices = self._prices_made = Prices(self.cost_model)
        return prices

    def _guard_prefill_s(self, s: InstanceSignals, prompt_tokens: int) -> float:
        """The guard's prefill-side TTFT on p (s): a batching engine pays the base once per step of
        queued tokens, then the KV transfer (`repro.routing.policies.pricing.guard_prefill_s`)."""
        return guard_prefill_s(self._prices(), s.in_flight_tokens, prompt_tokens)

    def _cache_pressure_s(self, s: InstanceSignals, prompt_tokens: int, output_tokens: float,
                          ttft_target_s: float) -> float:
        """``T_ttft * max(0, u - u_safe) / (1 - u_safe)`` (s), ``u`` the post-admission KV fraction of d
        from the polled usage: ``(kv_usage * C + L + o) / C`` (`repro.routing.policies.pricing.cache_pressure_s`)."""
        return cache_pressure_s(s.kv_usage, prompt_tokens, output_tokens, ttft_target_s,
                                float(self.cost_model.kv_capacity_tokens), self.cache_safe_fraction)

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        """The argmin pair (exact): vectorised for large pools, enumerated for small ones or with a
        softmax temperature (its draw reads every score in enumeration order)."""
        if (self.temperature_s == 0 and type(self)._vector_parts is not MarginalCostBase._vector_parts
                and view.n_prefill * view.n_decode >= self.VECTOR_MIN_PAIRS
                and (not self.sample_d or view.n_prefill + view.n_decode >= self.SAMPLED_VECTOR_MIN_INSTANCES)):
            return self.place_vectorized(request, view)
        return self.place_enumerated(request, view)

    def place_enumerated(self, request: RequestInfo, view: ClusterView) -> Decision:
        """The reference: price every candidate pair in Python (`_priced`) and take the argmin
        (`first_best`), or the softmax draw."""
        self._tick += 1
        return self._decide(request, self._priced(request, view))

    def _decide(self, request: RequestInfo, priced: list[tuple[float, int, int, int, float]]) -> Decision:
        if not priced:
            return Rejection(NO_HEALTHY)
        if self.admission_guard:
            rejection = self._guard(request, min(c[4] for c in priced))
            if rejection is not None:
                return rejection
        if self.temperature_s > 0:
            low = min(c[0] for c in priced)
            weights = [math.exp(-(c[0] - low) / self.temperature_s) for c in priced]
            pick = self._rng.choices(priced, weights=weights)[0]
            return Placement(pick[2], pick[3])
        best = first_best(priced)
        return Placement(best[2], best[3])

    def _guard(self, request: RequestInfo, fastest: float) -> Rejection | None:
        """The admission guard's rejection when the ``fastest`` predicted TTFT (s) is hopeless."""
        target = self.cost_model.slo.ttft_s(request.slo_class)
        if fastest > self.guard_margin * target:
            return Rejection(
                f"admission guard: predicted TTFT {fastest:.3f} s exceeds {self.guard_margin:g} x the "
                f"{request.slo_class} target ({target:.3f} s) on every instance",
                retry_after_s=fastest - target,
            )
        return None

    def _request_terms(self, request: RequestInfo) -> tuple[int, float, float, float, float]:
        """(L tokens, o tokens, T_ttft s, T_tpot s, the own prefill work tau_pre(L) + tau_xfer(L) s)."""
        cm = self.cost_model
        L = request.prompt_tokens
        return (L, self.output_estimate(request), cm.slo.ttft_s(request.slo_class),
                cm.slo.tpot_s(request.slo_class), cm.tau_pre(L) + cm.tau_xfer(L))
