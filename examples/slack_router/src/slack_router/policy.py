"""`SlackRouter`: least backlog, with a KV-pressure penalty on the decode side.

A worked example of a policy written outside ``repro`` against its policy contract
(`repro.routing.policies.base`): it reads only the `ClusterView` (the router's in-flight ledger per
instance, the polled KV-cache usage, health) and the request's `RequestInfo` (here its predicted
output length), never the simulator's truth; its options are keyword arguments of the constructor
after ``cost_model``, each stored on an attribute of the same name; it is deterministic (no
randomness; ties rotate with a counter, so the same requests and views in the same order give the
same placements).

All times are seconds on the router's clock, lengths tokens, KV usage a fraction of the cache (0..1).
"""

from __future__ import annotations

from collections.abc import Callable

from repro.errors import check_number
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


class SlackRouter(Policy):
    """Prefill on the least-backlogged instance; decode on the least backlog plus KV pressure.

    Prefill: the healthy instance with the least ledger backlog (``backlog_s``, seconds of priced
    work outstanding). Decode: the healthy instance minimising

        backlog_s + kv_weight * max(0, kv_usage - kv_soft) * predicted_output_tokens / ref_tokens

    (seconds): above ``kv_soft`` of its KV cache an instance is charged ``kv_weight`` seconds per
    unit of usage over it, scaled by how long the request is predicted to hold its KV cache (a
    request predicted ``ref_tokens`` long pays exactly ``kv_weight`` per unit; twice as long, twice
    that), since a long request on a nearly full cache is what gets preempted. In either pool ties
    go to fewer in-flight requests, then round-robin. Unhealthy instances are never chosen; a pool
    without a healthy instance is a `Rejection` with the reserved reason ``NO_HEALTHY``.

    Parameters
    ----------
    cost_model : the router's cost model (unused by the score; kept by the `Policy` base).
    kv_weight : seconds of score per unit of KV usage above ``kv_soft`` (>= 0; 0 ignores KV usage),
        for a request predicted ``ref_tokens`` long.
    kv_soft : KV usage (fraction of the cache, 0..1) from which the penalty starts.
    ref_tokens : predicted output length (tokens, > 0) at which the penalty is ``kv_weight`` per unit
        of excess usage.
    """

    name = "slack_router"

    def __init__(self, cost_model: CostModel | None = None, *, kv_weight: float = 1.0, kv_soft: float = 0.8,
                 ref_tokens: float = 256.0) -> None:
        super().__init__(cost_model)
        check_number(self.name, "kv_weight", kv_weight, 0.0, float("inf"))
        check_number(self.name, "kv_soft", kv_soft, 0.0, 1.0)
        check_number(self.name, "ref_tokens", ref_tokens, 0.0, float("inf"), lo_open=True)
        self.kv_weight = float(kv_weight)
        self.kv_soft = float(kv_soft)
        self.ref_tokens = float(ref_tokens)
        self._tick = 0  # where tie rotation starts (one step per decision)

    def kv_penalty_s(self, request: RequestInfo, signals: InstanceSignals) -> float:
        """The KV-pressure term of ``signals``' decode score for ``request`` (seconds, >= 0)."""
        excess = max(0.0, signals.kv_usage - self.kv_soft)
        return self.kv_weight * excess * request.predicted_output_tokens / self.ref_tokens

    def decode_score_s(self, request: RequestInfo, signals: InstanceSignals) -> float:
        """The decode score of one instance for ``request`` (seconds; lower is better)."""
        return signals.backlog_s + self.kv_penalty_s(request, signals)

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        self._tick += 1
        p = _least(view.prefill, lambda s: s.backlog_s, self._tick)
        d = _least(view.decode, lambda s: self.decode_score_s(request, s), self._tick)
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return Placement(p, d)


def _least(pool: list[InstanceSignals], score: Callable[[InstanceSignals], float], tick: int) -> int | None:
    """The index of the healthy instance of ``pool`` with the least ``(score, in_flight)``; exact ties go
    to the first met scanning from position ``tick`` (round-robin). None when none is healthy."""
    best: int | None = None
    best_key: tuple[float, int] | None = None
    n = len(pool)
    for k in range(n):
        s = pool[(tick + k) % n]
        if not s.healthy:
            continue
        key = (score(s), s.in_flight)
        if best_key is None or key < best_key:
            best, best_key = s.index, key
    return best
