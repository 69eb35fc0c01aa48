"""The paper's routing policies (§IV): round-robin, least-loaded, the predicted-length threshold and the
marginal-cost router, plus `MarginalCostPlus` (the marginal-cost router with our two additions on).

Each implements the `repro.routing.policies.base.Policy` contract; options are keyword arguments
of the constructor (units in each class's docstring). Register new ones in `repro.routing.policies`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

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


class RoundRobin(Policy):
    """Cyclic assignment over each pool independently, skipping unhealthy instances. No options."""

    name = "round_robin"

    def __init__(self, cost_model: CostModel | None = None) -> None:
        super().__init__(cost_model)
        self._next_p = 0
        self._next_d = 0

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        p = self._pick(view.prefill, "_next_p")
        d = self._pick(view.decode, "_next_d")
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return Placement(p, d)

    def _pick(self, pool: list[InstanceSignals], attr: str) -> int | None:
        n = len(pool)
        start = getattr(self, attr)
        for k in range(n):
            i = (start + k) % n
            if pool[i].healthy:
                setattr(self, attr, (i + 1) % n)
                return i
        return None


def _argmin(pool: list[InstanceSignals], key: Callable[[InstanceSignals], Any], offset: int) -> int | None:
    """Index of the healthy instance minimising ``key``; ties go round-robin from ``offset``."""
    best = None
    best_key = None
    n = len(pool)
    for k in range(n):
        s = pool[(offset + k) % n]
        if not s.healthy:
            continue
        kv = key(s)
        if best_key is None or kv < best_key:
            best, best_key = s.index, kv
    return best


class LeastLoaded(Policy):
    """Join-the-shortest-queue on the router's in-flight request counts, in each pool (ties go
    round-robin). No options."""

    name = "least_loaded"

    def __init__(self, cost_model: CostModel | None = None) -> None:
        super().__init__(cost_model)
        self._tick = 0

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        self._tick += 1
        p = _argmin(view.prefill, lambda s: s.in_flight, self._tick)
        d = _argmin(view.decode, lambda s: s.in_flight, self._tick)
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return Placement(p, d)


class LengthThreshold(Policy):
    """The paper's predicted-length threshold heuristic.

    Prefill: fewest in-flight requests. Decode: a request predicted long
    (``predicted_output_tokens >= threshold_tokens``) goes to the instance with the fewest in-flight
    tokens (so long requests spread by size); a short one to the fewest in-flight requests (JSQ).

    Parameters
    ----------
    threshold_tokens : predicted output length (tokens, > 0) from which a request counts as long.
    """

    name = "length_threshold"

    def __init__(self, cost_model: CostModel | None = None, *, threshold_tokens: float = 512.0) -> None:
        super().__init__(cost_model)
        if not threshold_tokens > 0:
            raise ConfigError(f"length_threshold: option 'threshold_tokens' must be > 0, got {threshold_tokens!r}")
        self.threshold_tokens = float(threshold_tokens)
        self._tick = 0

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        self._tick += 1
        p = _argmin(view.prefill, lambda s: s.in_flight, self._tick)
        if request.predicted_output_tokens >= self.threshold_tokens:
            d = _argmin(view.decode, lambda s: (s.in_flight_tokens, s.in_flight), self._tick)
        else:
            d = _argmin(view.decode, lambda s: s.in_flight, self._tick)
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return Placement(p, d)


class MarginalCost(Policy):
    r"""The paper's router: score every (prefill p, decode d) pair by the completion time the
    request would see there, and take the argmin (ties: fewer in-flight requests, then round-robin).

    With ``L`` = prompt tokens, ``o`` = output estimate (tokens), ``n_d`` = in-flight on d, the
    cost model's prices ``tau_pre(L)``, ``tau_xfer(L)``, ``tau_dec(n)`` (s, ``tau_dec_s`` at n=0,
    growing by ``slope`` per co-running sequence), and per-class targets ``T_ttft``, ``T_tpot`` (s)::

        score(p, d) = [backlog]  B_p + slope * min(R_d, n_d * o * tau_dec_s)      seconds
                    + own work   tau_pre(L) + tau_xfer(L) + o * tau_dec(n_d)        seconds
                    + [cache]    W_d = T_ttft * max(0, u_d - u_safe) / (1 - u_safe)  seconds
                    + [slo]      w_slo * (T_ttft,loose / T_ttft) * max(0, ttft_hat - T_ttft)
                                 + w_slo * o * max(0, tau_dec(n_d) - T_tpot)        seconds

        B_p      = seconds of priced prefill work queued on p (ledger): a FCFS prefill engine
                   makes the request wait for all of it
        R_d      = seconds of priced decode work outstanding on d (ledger). A continuously
                   batching decode engine does not queue a newcomer behind R_d; instead every
                   step it shares with the d's in-flight sequences is ``slope`` slower, for it and
                   for them, for min(its length, theirs): the marginal cost of joining d
        u_d      = post-admission KV fraction of d: (kv_usage_d * C + L + o) / C, from the
                   polled usage (measured, not the ledger's predicted tokens: with a noisy
                   predictor those would inflate the pressure), C = KV capacity (tokens)
        ttft_hat = B_p + tau_pre(L) + tau_xfer(L) + W_d + tau_dec(n_d)

    The cache term prices the expected KV-admission wait; the SLO hinge weighs a tight request's
    predicted TTFT overrun by the loose/tight ratio (3x). Each bracketed term is a switch (the
    ablation of §V-G); ``use_length=False`` replaces the predicted output by
    ``default_output_tokens`` everywhere, including the ledger's charges. With a miscalibrated cost
    model the ledger's backlog decays as if work finished ``tau_dec`` x faster than it does, so the
    size-aware terms fade and the score falls back to the in-flight tie-break: queue counting (§V-B).

    Beyond the paper (both off by default, so the default is the paper's router):

    - ``sample_d = d > 0`` prices only d randomly chosen instances per pool (power-of-d), and
      ``temperature_s = T > 0`` picks a pair with probability proportional to
      ``exp(-(score - min score) / T)`` instead of the argmin: either way load cannot pile onto the
      single momentarily cheapest instance (§V-E's scarcity inversion). Seeded by ``random_state``.
    - ``admission_guard`` rejects a request whose predicted TTFT exceeds ``guard_margin`` x its
      class's TTFT target on every candidate, with a retry-after of the excess: hopeless work is
      not queued in front of requests that can still make their SLO. A rejected request counts as
      not good. The guard predicts TTFT for a batching prefill engine, from the prompt tokens
      queued on p (ledger) plus its own, ``Q``: ``ceil(Q / max_num_batched_tokens) * tau_pre_base
      + Q * tau_pre_per_token + tau_xfer(L) + W_d + tau_dec(n_d)`` (the score's B_p, a serial
      workload process, overstates a batching engine's wait at high rates of short prompts).

    Parameters
    ----------
    use_backlog : the [backlog] term (B_p and the decode sharing cost).
    use_length : price the predicted output length; False charges ``default_output_tokens`` instead.
    use_cache_pressure : the [cache] term.
    use_slo : the [slo] hinges.
    cache_safe_fraction : u_safe, the KV fraction (in [0, 1)) above which the cache term grows.
    slo_weight : w_slo (>= 0, seconds of score per second of predicted overrun).
    default_output_tokens : the output estimate (tokens, >= 1) when ``use_length`` is False.
    sample_d : candidates priced per pool (power-of-d); 0 prices every healthy instance.
    temperature_s : softmax temperature (seconds of score, >= 0); 0 takes the argmin.
    admission_guard : reject requests predicted to miss their TTFT target everywhere.
    guard_margin : the guard's threshold, a multiple (>= 1) of the class's TTFT target.
    random_state : seed of the sampling and softmax draws.
    """

    name = "marginal_cost"

    def __init__(
        self,
        cost_model: CostModel | None = None,
        *,
        use_backlog: bool = True,
        use_length: bool = True,
        use_cache_pressure: bool = True,
        use_slo: bool = True,
        cache_safe_fraction: float = 0.8,
        slo_weight: float = 1.0,
        default_output_tokens: float = 256.0,
        sample_d: int = 0,
        temperature_s: float = 0.0,
        admission_guard: bool = False,
        guard_margin: float = 3.0,
        random_state: int = 0,
    ) -> None:
        super().__init__(cost_model)
        if isinstance(sample_d, bool) or not isinstance(sample_d, int) or sample_d < 0:
            raise ConfigError(
                f"marginal_cost: option 'sample_d' must be an integer >= 0 (0 = price every instance), got {sample_d!r}"
            )
        if not temperature_s >= 0:
            raise ConfigError(f"marginal_cost: option 'temperature_s' must be >= 0, got {temperature_s!r}")
        if not guard_margin >= 1.0:
            raise ConfigError(f"marginal_cost: option 'guard_margin' must be >= 1, got {guard_margin!r}")
        self.sample_d = sample_d
        self.temperature_s = float(temperature_s)
        self.admission_guard = bool(admission_guard)
        self.guard_margin = float(guard_margin)
        self.random_state = random_state
        self._rng = random.Random(random_state)
        if not 0.0 <= cache_safe_fraction < 1.0:
            raise ConfigError(
                f"marginal_cost: option 'cache_safe_fraction' must be in [0, 1), got {cache_safe_fraction!r}"
            )
        if not slo_weight >= 0:
            raise ConfigError(f"marginal_cost: option 'slo_weight' must be >= 0, got {slo_weight!r}")
        if not default_output_tokens >= 1:
            raise ConfigError(
                f"marginal_cost: option 'default_output_tokens' must be >= 1, got {default_output_tokens!r}"
            )
        self.use_backlog = bool(use_backlog)
        self.use_length = bool(use_length)
        self.use_cache_pressure = bool(use_cache_pressure)
        self.use_slo = bool(use_slo)
        self.cache_safe_fraction = float(cache_safe_fraction)
        self.slo_weight = float(slo_weight)
        self.default_output_tokens = float(default_output_tokens)
        self._tick = 0

    def output_estimate(self, request: RequestInfo) -> float:
        return request.predicted_output_tokens if self.use_length else self.default_output_tokens

    def scores(self, request: RequestInfo, view: ClusterView) -> list[tuple[float, int, int, int]]:
        """All priced healthy pairs as (score, in-flight tiebreak, p, d), in tie-rotation order."""
        return [c[:4] for c in self._priced(request, view)]

    def _candidates(self, pool: list[InstanceSignals]) -> list[InstanceSignals]:
        """The healthy instances to price: all, or ``sample_d`` drawn at random (power-of-d)."""
        n = len(pool)
        ordered = [pool[(self._tick + k) % n] for k in range(n)]
        alive = [s for s in ordered if s.healthy]
        if self.sample_d and self.sample_d < len(alive):
            alive = self._rng.sample(alive, self.sample_d)
        return alive

    def _priced(self, request: RequestInfo, view: ClusterView) -> list[tuple[float, int, int, int, float]]:
        """(score, in-flight tiebreak, p, d, predicted TTFT in s) for every candidate pair."""
        cm = self.cost_model
        L = request.prompt_tokens
        o = self.output_estimate(request)
        cls = request.slo_class
        ttft_target = cm.ttft_tight_s * (1.0 if cls == "tight" else cm.loose_factor)
        tpot_target = cm.tpot_tight_s * (1.0 if cls == "tight" else cm.loose_factor)
        slo_scale = self.slo_weight * (cm.ttft_tight_s * cm.loose_factor) / ttft_target
        own_pre = cm.tau_pre(L) + cm.tau_xfer(L)
        cap = float(cm.kv_capacity_tokens)
        safe = self.cache_safe_fraction

        pre_parts = []
        budget = max(1, int(cm.max_num_batched_tokens))
        for s in self._candidates(view.prefill):
            b = s.backlog_s if self.use_backlog else 0.0
            # the guard's TTFT: a batching engine pays the base once per step of queued tokens
            q = s.in_flight_tokens + L
            pre_wait = math.ceil(q / budget) * cm.tau_pre_base_s + q * cm.tau_pre_per_token_s + cm.tau_xfer(L)
            pre_parts.append((s.index, b, s.in_flight, pre_wait))
        dec_parts = []
        slope = cm.dec_concurrency_slope
        for s in self._candidates(view.decode):
            tau = cm.tau_dec(s.in_flight)
            cost = o * tau
            if self.use_backlog:
                cost += slope * min(s.backlog_s, s.in_flight * o * cm.tau_dec_s)
            wait = 0.0
            if self.use_cache_pressure:
                u = (s.kv_usage * cap + L + o) / cap
                if u > safe:
                    wait = ttft_target * (u - safe) / (1.0 - safe)
                    cost += wait
            if self.use_slo and tau > tpot_target:
                cost += self.slo_weight * o * (tau - tpot_target)
            dec_parts.append((s.index, cost, s.in_flight, tau + wait))
        out = []
        for p, pb, pn, pre_wait in pre_parts:
            for d, dc, dn, first in dec_parts:
                score = pb + own_pre + dc
                if self.use_slo:
                    ttft_hat = pb + own_pre + first
                    if ttft_hat > ttft_target:
                        score += slo_scale * (ttft_hat - ttft_target)
                out.append((score, pn + dn, p, d, pre_wait + first))
        return out

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        self._tick += 1
        priced = self._priced(request, view)
        if not priced:
            return Rejection(NO_HEALTHY)
        if self.admission_guard:
            cm = self.cost_model
            target = cm.ttft_tight_s * (1.0 if request.slo_class == "tight" else cm.loose_factor)
            fastest = min(c[4] for c in priced)
            if fastest > self.guard_margin * target:
                return Rejection(
                    f"admission guard: predicted TTFT {fastest:.3f} s exceeds {self.guard_margin:g} x the "
                    f"{request.slo_class} target ({target:.3f} s) on every instance",
                    retry_after_s=fastest - target,
                )
        if self.temperature_s > 0:
            low = min(c[0] for c in priced)
            weights = [math.exp(-(c[0] - low) / self.temperature_s) for c in priced]
            pick = self._rng.choices(priced, weights=weights)[0]
            return Placement(pick[2], pick[3])
        best = None
        for cand in priced:
            if (best is None or cand[0] < best[0] - 1e-12
                    or (abs(cand[0] - best[0]) <= 1e-12 and cand[1] < best[1])):
                best = cand
        return Placement(best[2], best[3])


class MarginalCostPlus(MarginalCost):
    """The paper's router with both of our additions on: power-of-2 sampled candidates and the
    admission guard at 1.5 x the TTFT target (`MarginalCost` documents both and every option; only
    the defaults of ``sample_d``, ``admission_guard`` and ``guard_margin`` differ). Chosen on the
    simulator over the four workloads at 2p4d and 1p2d."""

    name = "marginal_cost_plus"

    def __init__(
        self,
        cost_model: CostModel | None = None,
        *,
        use_backlog: bool = True,
        use_length: bool = True,
        use_cache_pressure: bool = True,
        use_slo: bool = True,
        cache_safe_fraction: float = 0.8,
        slo_weight: float = 1.0,
        default_output_tokens: float = 256.0,
        sample_d: int = 2,
        temperature_s: float = 0.0,
        admission_guard: bool = True,
        guard_margin: float = 1.5,
        random_state: int = 0,
    ) -> None:
        super().__init__(
            cost_model,
            use_backlog=use_backlog,
            use_length=use_length,
            use_cache_pressure=use_cache_pressure,
            use_slo=use_slo,
            cache_safe_fraction=cache_safe_fraction,
            slo_weight=slo_weight,
            default_output_tokens=default_output_tokens,
            sample_d=sample_d,
            temperature_s=temperature_s,
            admission_guard=admission_guard,
            guard_margin=guard_margin,
            random_state=random_state,
        )
