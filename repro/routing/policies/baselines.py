"""The paper's three baselines (§IV): round-robin (`RoundRobin`), least-loaded (`LeastLoaded`: join the
shortest queue) and the predicted-length threshold heuristic (`LengthThreshold`). They count what the
router has in flight on each instance (requests, and tokens for a request predicted long); none prices
work in seconds (that is the paper's router, `repro.routing.policies.marginal_cost`).

Each implements the `repro.routing.policies.base.Policy` contract; options are keyword arguments of the
constructor (units in each class's docstring). Ties go round-robin from the policy's own counter, so a
decision depends only on the view and the requests placed before. Registered in `repro.routing.policies`.
"""

from __future__ import annotations

from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import (
    NO_HEALTHY,
    ClusterView,
    Decision,
    Policy,
    Rejection,
    RequestInfo,
)
from repro.routing.policies.pricing import fewest_in_flight, fewest_tokens, next_healthy, placement


class RoundRobin(Policy):
    """Cyclic assignment over each pool independently, skipping unhealthy instances. No options."""

    name = "round_robin"

    def __init__(self, cost_model: CostModel | None = None) -> None:
        super().__init__(cost_model)
        self._next_p = 0
        self._next_d = 0

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        pool = view.prefill
        p = next_healthy(pool, self._next_p)
        if p is not None:
            self._next_p = (p + 1) % len(pool)
        pool = view.decode
        d = next_healthy(pool, self._next_d)
        if d is not None:
            self._next_d = (d + 1) % len(pool)
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return placement(p, d)  # shared: a Placement is frozen


class LeastLoaded(Policy):
    """Join-the-shortest-queue on the router's in-flight request counts, in each pool (ties go
    round-robin). No options."""

    name = "least_loaded"

    def __init__(self, cost_model: CostModel | None = None) -> None:
        super().__init__(cost_model)
        self._tick = 0

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        self._tick += 1
        p = fewest_in_flight(view.prefill, self._tick)
        d = fewest_in_flight(view.decode, self._tick)
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
        p = fewest_in_flight(view.prefill, self._tick)
        if request.predicted_output_tokens >= self.threshold_tokens:
            d = fewest_tokens(view.decode, self._tick)
        else:
            d = fewest_in_flight(view.decode, self._tick)
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return placement(p, d)  # shared: a Placement is frozen
