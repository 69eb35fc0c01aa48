"""The paper's three baselines (§IV): round-robin (`RoundRobin`), least-loaded (`LeastLoaded`: join the
shortest queue) and the predicted-length threshold heuristic (`LengthThreshold`). They count what the
router has in flight on each instance (requests, and tokens for a request predicted long); none prices
work in seconds (that is the paper's router, `repro.routing.policies.marginal_cost`).

Each implements the `repro.routing.policies.base.Policy` contract; options are keyword arguments of the
constructor (units in each class's docstring). Ties go round-robin from the policy's own counter, so a
decision depends only on the view and the requests placed before. Registered in `repro.routing.policies`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import (
    NO_HEALTHY,
    ClusterView,
    Decision,
    InstanceSignals,
    Policy,
    Rejection,
    RequestInfo,
)
from repro.routing.policies.pricing import placement


class RoundRobin(Policy):
    """Cyclic assignment over each pool independently, skipping unhealthy instances. No options."""

    name = "round_robin"

    def __init__(self, cost_model: CostModel | None = None) -> None:
        super().__init__(cost_model)
        self._next_p = 0
        self._next_d = 0

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        pool = view.prefill
        p = _next_healthy(pool, self._next_p)
        if p is not None:
            self._next_p = (p + 1) % len(pool)
        pool = view.decode
        d = _next_healthy(pool, self._next_d)
        if d is not None:
            self._next_d = (d + 1) % len(pool)
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return placement(p, d)  # shared: a Placement is frozen


def _next_healthy(pool: list[InstanceSignals], start: int) -> int | None:
    """The first healthy instance's index from ``start`` on, cyclically; None if none is healthy."""
    n = len(pool)
    for k in range(n):
        i = (start + k) % n
        if pool[i].healthy:
            return i
    return None


def _argmin(pool: list[InstanceSignals], key: Callable[[InstanceSignals], Any], offset: int) -> int | None:
    """Index of the healthy instance minimising ``key``; ties go round-robin from ``offset``
    (`_fewest_in_flight` is the in-flight count's, written out)."""
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


def _fewest_in_flight(pool: list[InstanceSignals], offset: int) -> int | None:
    """``_argmin(pool, lambda s: s.in_flight, offset)`` written out (a speed shortcut: no key call per
    instance): the healthy instance with the fewest in-flight requests, ties round-robin from ``offset``."""
    best = None
    best_n = 0
    n = len(pool)
    for k in range(n):
        s = pool[(offset + k) % n]
        if s.healthy and (best is None or s.in_flight < best_n):
            best, best_n = s.index, s.in_flight
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
        p = _fewest_in_flight(view.prefill, self._tick)
        d = _fewest_in_flight(view.decode, self._tick)
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return placement(p, d)  # shared: a Placement is frozen


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
        p = _fewest_in_flight(view.prefill, self._tick)
        if request.predicted_output_tokens >= self.threshold_tokens:
            d = _argmin(view.decode, lambda s: (s.in_flight_tokens, s.in_flight), self._tick)
        else:
            d = _fewest_in_flight(view.decode, self._tick)
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return placement(p, d)  # shared: a Placement is frozen
