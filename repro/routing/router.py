"""The routing core shared by the simulator and the proxy.

`Router` keeps what a deployed router knows — its ledger, the last polled KV usage of every
instance (with its age) and health — builds the `ClusterView` for each decision, asks the policy,
and charges the ledger. The simulator and the HTTP proxy both drive this same object; only the
clock (virtual vs physics time) and the source of the KV polls differ.

Large pools (from `Ledger.ARRAYS_MIN_INSTANCES` instances): the ledger keeps its books in numpy
arrays and the router its polls and health, so a view is a few vectorised operations
(`repro.routing.policies.base.PoolArrays`); the per-instance `InstanceSignals` are filled only if
the policy reads them. Small pools keep the plain per-instance loop (cheaper below a few dozen
instances). Both give the same numbers.

The one deliberate exception is ``oracle_backlog``: a callable giving the *true* remaining work
per instance. Only the simulator can supply it; it reproduces the paper's §VI observation that a
simulator can hand a policy information no deployment has.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from repro.routing.cost_model import CostModel
from repro.routing.ledger import Ledger, ParallelBook, SerialBook
from repro.routing.policies import base
from repro.routing.policies.base import ClusterView, Decision, InstanceSignals, Placement, Policy, RequestInfo
from repro.vocab import Role

OracleBacklog = Callable[[Role, int, float], float]  # (role, index, now) -> seconds


class Router:
    """Route requests over ``prefill_names`` x ``decode_names`` with ``policy``.

    ``ledger_arrays``: the ledger's array books and the vectorised view on (True) or off (False);
    None (default): on from `Ledger.ARRAYS_MIN_INSTANCES` instances. Decisions are the same.
    """

    def __init__(
        self,
        policy: Policy,
        cost_model: CostModel,
        prefill_names: list[str],
        decode_names: list[str],
        oracle_backlog: OracleBacklog | None = None,
        ledger_arrays: bool | None = None,
    ) -> None:
        self.policy = policy
        self.cost_model = cost_model
        self.ledger = Ledger(len(prefill_names), len(decode_names), cost_model, arrays=ledger_arrays,
                             anchor=getattr(policy, "ledger_anchor", "decode_start"))
        self.oracle_backlog = oracle_backlog
        self._arrays = self.ledger.prefill_arrays is not None  # the vectorised view (large pools)
        n = {"prefill": len(prefill_names), "decode": len(decode_names)}
        self._kv = {role: np.zeros(k) for role, k in n.items()}  # polled usage, as the signals'
        self._kv_at_arr = {role: np.zeros(k) for role, k in n.items()}
        self._healthy = {role: np.ones(k, dtype=bool) for role, k in n.items()}
        # one InstanceSignals per instance, updated in place by view() (a speed shortcut: no
        # allocation per decision; policies must not keep them, see repro.routing.policies.base)
        self._signals = {
            "prefill": [InstanceSignals(i, n, 0.0, 0, 0.0, 0.0, 0.0) for i, n in enumerate(prefill_names)],
            "decode": [InstanceSignals(i, n, 0.0, 0, 0.0, 0.0, 0.0) for i, n in enumerate(decode_names)],
        }
        self._kv_at = {"prefill": [0.0] * len(prefill_names), "decode": [0.0] * len(decode_names)}

    # ---- signals ----------------------------------------------------------------------------
    def observe_kv(self, role: Role, index: int, usage: float, at_s: float) -> None:
        """Record a KV-usage poll (fraction 0..1) taken at time ``at_s``."""
        self._signals[role][index].kv_usage = usage
        self._kv_at[role][index] = at_s
        if self._arrays:
            self._kv[role][index] = usage
            self._kv_at_arr[role][index] = at_s

    def set_health(self, role: Role, index: int, healthy: bool) -> None:
        """Mark an instance (un)healthy; policies skip unhealthy instances."""
        self._signals[role][index].healthy = healthy
        self._healthy[role][index] = healthy

    def is_healthy(self, role: Role, index: int) -> bool:
        return self._signals[role][index].healthy

    def view(self, now: float) -> ClusterView:
        """The snapshot a policy sees at ``now`` (signals are updated in place). Large pools: lazily,
        the signals or the `repro.routing.policies.base.PoolArrays`, whichever the policy reads."""
        if self._arrays:
            return ClusterView(now, self._signals["prefill"], self._signals["decode"],
                               arrays=lambda: self._pool_arrays(now), fill=lambda: self._fill(now))
        self._fill(now)
        return ClusterView(now, self._signals["prefill"], self._signals["decode"])

    def _fill(self, now: float) -> None:
        """Bring every instance's `InstanceSignals` up to ``now`` (one Python step per instance)."""
        led = self.ledger
        oracle = self.oracle_backlog
        pools: tuple[tuple[Role, list[SerialBook] | list[ParallelBook]], ...] = (
            ("prefill", led.prefill), ("decode", led.decode))
        for role, books in pools:
            sigs = self._signals[role]
            kv_at = self._kv_at[role]
            for i, book in enumerate(books):
                s = sigs[i]
                s.backlog_s = oracle(role, i, now) if oracle is not None else book.backlog(now)
                s.in_flight = book.in_flight
                s.in_flight_tokens = book.tokens
                s.kv_age_s = now - kv_at[i]

    def _pool_arrays(self, now: float) -> tuple[base.PoolArrays, base.PoolArrays]:
        """Both pools' signals at ``now`` as arrays, from the ledger's arrays (a few numpy steps)."""
        led = self.ledger
        oracle = self.oracle_backlog
        if oracle is None:
            pre_b, dec_b = led.backlogs(now)
        else:
            pre_b = np.array([oracle("prefill", i, now) for i in range(len(led.prefill))], dtype=np.float64)
            dec_b = np.array([oracle("decode", i, now) for i in range(len(led.decode))], dtype=np.float64)
        # the ledger's and the router's own arrays, not copies: read during this decision only
        pre, dec = led.prefill_arrays, led.decode_arrays
        assert pre is not None and dec is not None  # arrays=True: the view asks for them only then
        return (base.PoolArrays(pre_b, pre.in_flight, pre.tokens, self._kv["prefill"],
                                now - self._kv_at_arr["prefill"], self._healthy["prefill"]),
                base.PoolArrays(dec_b, dec.in_flight, dec.tokens, self._kv["decode"],
                                now - self._kv_at_arr["decode"], self._healthy["decode"]))

    # ---- decisions and bookkeeping ------------------------------------------------------------
    def route(self, request: RequestInfo, now: float) -> Decision:
        """Ask the policy; on a placement, charge the ledger."""
        decision = self.policy.place(request, self.view(now))
        if isinstance(decision, Placement):
            self.ledger.dispatch(
                request.request_id,
                decision.prefill,
                decision.decode,
                request.prompt_tokens,
                self.policy.output_estimate(request),
                now,
            )
        return decision

    def prefill_done(self, request_id: str, now: float) -> None:
        """The request's prefill answered (the simulator: its prefill ended; the proxy: the prefill
        engine's answer came)."""
        self.ledger.prefill_done(request_id, now)

    def decode_started(self, request_id: str, now: float) -> None:
        """The request's decode started (the simulator: it joined the decode batch; the proxy: the
        decode engine's first streamed token). Only the first call counts."""
        self.ledger.decode_started(request_id, now)

    def finish(self, request_id: str, now: float) -> None:
        """The request completed or failed: settle it."""
        self.ledger.settle(request_id, now)

    def names(self, role: Role) -> list[str]:
        """The instance names of a pool, in index order."""
        return [s.name for s in self._signals[role]]
