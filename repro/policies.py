"""Routing policies: pick a (prefill, decode) pair for each request, or reject it.

A policy sees only what a deployed router can see (`ClusterView`): per instance, the router's own
in-flight ledger (seconds of backlog, in-flight count and tokens), the polled KV-cache usage and
its age, and health; plus the request's admission-time facts (`RequestInfo`: prompt length, the
predictor's output-length estimate, SLO class). Never the simulator's ground truth, and never the
request's ``max_tokens`` (the harness sets it to the true output length to enforce the token-count
contract, so reading it would be an oracle).

The same policy objects run in the simulator and in the proxy. Policies are registered by name;
a user's own policy is given as an import path ``package.module:ClassName`` (or
``package.module.ClassName``) and must subclass `Policy` or provide ``place``.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from repro.calibration import CostModel
from repro.errors import ConfigError


@dataclass(slots=True, frozen=True)
class RequestInfo:
    """What the router knows about a request at admission."""

    request_id: str
    prompt_tokens: int
    predicted_output_tokens: float
    slo_class: str  # "tight" | "loose"
    arrival_s: float


@dataclass(slots=True)
class InstanceSignals:
    """One instance as the router sees it (never the engine's internal truth)."""

    index: int  # position in its pool
    name: str
    backlog_s: float  # ledger: priced seconds of work still outstanding (router's cost model)
    in_flight: int  # ledger: requests dispatched and not yet settled
    in_flight_tokens: float  # ledger: prompt + estimated output tokens of those requests
    kv_usage: float  # polled vllm:kv_cache_usage_perc, 0..1
    kv_age_s: float  # age of that poll (s)
    healthy: bool = True


@dataclass(slots=True)
class ClusterView:
    """Snapshot handed to a policy for one decision."""

    now_s: float
    prefill: list[InstanceSignals]
    decode: list[InstanceSignals]


@dataclass(slots=True, frozen=True)
class Placement:
    prefill: int  # index into view.prefill
    decode: int  # index into view.decode


@dataclass(slots=True, frozen=True)
class Rejection:
    reason: str
    retry_after_s: float | None = None


Decision = Placement | Rejection


class Policy:
    """Base class. Subclasses implement `place`; options are the constructor's keyword arguments.

    ``cost_model`` is the router's belief (possibly miscalibrated), given to every policy.
    """

    name: ClassVar[str] = "policy"

    def __init__(self, cost_model: CostModel | None = None) -> None:
        self.cost_model = cost_model or CostModel.load("calibrated")

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:  # pragma: no cover - abstract
        raise NotImplementedError

    def output_estimate(self, request: RequestInfo) -> float:
        """Output tokens the router charges to its ledger for this request."""
        return request.predicted_output_tokens

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name}


class RoundRobin(Policy):
    """Cyclic assignment over each pool independently, skipping unhealthy instances."""

    name = "round_robin"

    def __init__(self, cost_model: CostModel | None = None) -> None:
        super().__init__(cost_model)
        self._next_p = 0
        self._next_d = 0

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        p = self._pick(view.prefill, "_next_p")
        d = self._pick(view.decode, "_next_d")
        if p is None or d is None:
            return Rejection("no healthy instance")
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
    """Join-the-shortest-queue on the router's in-flight request counts, in each pool."""

    name = "least_loaded"

    def __init__(self, cost_model: CostModel | None = None) -> None:
        super().__init__(cost_model)
        self._tick = 0

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        self._tick += 1
        p = _argmin(view.prefill, lambda s: s.in_flight, self._tick)
        d = _argmin(view.decode, lambda s: s.in_flight, self._tick)
        if p is None or d is None:
            return Rejection("no healthy instance")
        return Placement(p, d)


class LengthThreshold(Policy):
    """The paper's predicted-length threshold heuristic.

    Prefill: fewest in-flight requests. Decode: a request predicted long
    (``predicted_output_tokens >= threshold_tokens``) goes to the instance with the fewest in-flight
    tokens (so long requests spread by size); a short one to the fewest in-flight requests (JSQ).
    """

    name = "length_threshold"

    def __init__(self, cost_model: CostModel | None = None, threshold_tokens: float = 512.0) -> None:
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
            return Rejection("no healthy instance")
        return Placement(p, d)

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "threshold_tokens": self.threshold_tokens}


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
    """

    name = "marginal_cost"

    def __init__(
        self,
        cost_model: CostModel | None = None,
        use_backlog: bool = True,
        use_length: bool = True,
        use_cache_pressure: bool = True,
        use_slo: bool = True,
        cache_safe_fraction: float = 0.8,
        slo_weight: float = 1.0,
        default_output_tokens: float = 256.0,
    ) -> None:
        super().__init__(cost_model)
        if not 0.0 <= cache_safe_fraction < 1.0:
            raise ConfigError(f"marginal_cost: option 'cache_safe_fraction' must be in [0, 1), got {cache_safe_fraction!r}")
        if not slo_weight >= 0:
            raise ConfigError(f"marginal_cost: option 'slo_weight' must be >= 0, got {slo_weight!r}")
        if not default_output_tokens >= 1:
            raise ConfigError(f"marginal_cost: option 'default_output_tokens' must be >= 1, got {default_output_tokens!r}")
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

    def describe(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "use_backlog": self.use_backlog,
            "use_length": self.use_length,
            "use_cache_pressure": self.use_cache_pressure,
            "use_slo": self.use_slo,
            "cache_safe_fraction": self.cache_safe_fraction,
            "slo_weight": self.slo_weight,
            "default_output_tokens": self.default_output_tokens,
        }

    def scores(self, request: RequestInfo, view: ClusterView) -> list[tuple[float, int, int, int]]:
        """All healthy pairs as (score, in-flight tiebreak, p, d), in tie-rotation order."""
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
        npre = len(view.prefill)
        for k in range(npre):
            s = view.prefill[(self._tick + k) % npre]
            if s.healthy:
                b = s.backlog_s if self.use_backlog else 0.0
                pre_parts.append((s.index, b, s.in_flight))
        dec_parts = []
        ndec = len(view.decode)
        slope = cm.dec_concurrency_slope
        for k in range(ndec):
            s = view.decode[(self._tick + k) % ndec]
            if not s.healthy:
                continue
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
        for p, pb, pn in pre_parts:
            for d, dc, dn, first in dec_parts:
                score = pb + own_pre + dc
                if self.use_slo:
                    ttft_hat = pb + own_pre + first
                    if ttft_hat > ttft_target:
                        score += slo_scale * (ttft_hat - ttft_target)
                out.append((score, pn + dn, p, d))
        return out

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        self._tick += 1
        best = None
        for cand in self.scores(request, view):
            if best is None or cand[0] < best[0] - 1e-12 or (abs(cand[0] - best[0]) <= 1e-12 and cand[1] < best[1]):
                best = cand
        if best is None:
            return Rejection("no healthy instance")
        return Placement(best[2], best[3])


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (RoundRobin, LeastLoaded, LengthThreshold, MarginalCost)
}
PAPER_POLICIES = ("round_robin", "least_loaded", "length_threshold", "marginal_cost")


def policy_class(name: str) -> type:
    """A registered policy by name, or a user's class by import path ``pkg.mod:Cls``."""
    if name in POLICIES:
        return POLICIES[name]
    if ":" in name or "." in name:
        if ":" in name:
            module_name, attr = name.split(":", 1)
        else:
            module_name, _, attr = name.rpartition(".")
        try:
            module = importlib.import_module(module_name)
            cls = getattr(module, attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"policy: cannot import {name!r} ({exc})") from None
        if not callable(getattr(cls, "place", None)):
            raise ConfigError(f"policy: {name!r} has no place(request, view) method")
        return cls
    raise ConfigError(f"policy: unknown policy {name!r}; allowed: {sorted(POLICIES)} or an import path 'pkg.module:Class'")


def make_policy(name: str, cost_model: CostModel | None = None, **options: Any) -> Policy:
    """Instantiate a policy by name with options; unknown options are a ConfigError naming them."""
    cls = policy_class(name)
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = {}
    allowed = [p for p in params if p not in ("self", "cost_model")]
    for key in options:
        if key not in allowed:
            raise ConfigError(f"policy {name}: unknown option {key!r}; allowed: {allowed}")
    if "cost_model" in params:
        return cls(cost_model=cost_model, **options)
    return cls(**options)
