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

`Router.route` also holds every policy to its contract (`repro.routing.policies.base`, "When a
policy misbehaves"): an exception in ``place``, a decision that is neither a `Placement` nor a
`Rejection`, or a placement naming no usable instance (an index out of range, negative, not an
int, or an unhealthy instance) is a `repro.errors.PolicyError` naming the policy, the request and
the candidates; and it times each ``place`` call (`DecisionTimes`: a report of this machine, kept
apart from every journal and summary).
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import numpy as np

from repro.errors import PolicyError, one_line
from repro.routing.cost_model import CostModel
from repro.routing.ledger import Ledger, MirroredBook, ParallelBook, SerialBook
from repro.routing.policies import POLICIES, base
from repro.routing.policies.base import ClusterView, Decision, InstanceSignals, Placement, Policy, RequestInfo
from repro.vocab import Role

OracleBacklog = Callable[[Role, int, float], float]  # (role, index, now) -> seconds

TIMES_KEPT = 1 << 16
"""Most decision times `DecisionTimes` keeps (then every other one, and so on: a systematic sample)."""
NAMES_SHOWN = 16
"""Instances of a pool an error message lists (then a count)."""


class DecisionTimes:
    """The wall time of each decision (`Policy.place`, nanoseconds; `time.perf_counter_ns`), for its
    percentiles: every decision's while fewer than `TIMES_KEPT`, then a systematic sample (every
    2nd, 4th, ... decision; a bounded memory however long the run), with the exact count and maximum.
    Machine-dependent: a report (the manifest's ``decision_time``), never an input to a result.
    ``keep``: the most times kept (default `TIMES_KEPT`; rounded up to even)."""

    def __init__(self, keep: int = TIMES_KEPT) -> None:
        self.keep = max(2, keep + keep % 2)
        self.samples: list[int] = []
        self.n = 0  # decisions timed
        self.max_ns = 0
        self.total_ns = 0  # all decisions' (a benchmark's split of a run's time: benchmarks/bench_sim.py)
        self.last_ns = 0  # the latest decision's (the proxy's histogram reads it)
        self._stride = 1  # keep every stride-th decision
        self._next = 0  # the index of the next decision kept

    def record(self, ns: int) -> None:
        """Count one decision of ``ns`` nanoseconds."""
        self.last_ns = ns
        self.total_ns += ns
        if ns > self.max_ns:
            self.max_ns = ns
        i = self.n
        self.n = i + 1
        if i == self._next:
            self._next = i + self._stride
            samples = self.samples
            samples.append(ns)
            if len(samples) >= self.keep:  # keep every other one: decisions 0, 2s, 4s, ... at stride 2s
                self.samples = samples[::2]
                self._stride *= 2

    def summary(self) -> dict[str, Any]:
        """``{"p50_us", "p99_us", "max_us", "n"}`` (microseconds; None without a decision)."""
        if not self.samples:
            return {"p50_us": None, "p99_us": None, "max_us": None, "n": self.n}
        p50, p99 = np.percentile(np.asarray(self.samples, dtype=np.float64), [50.0, 99.0]).tolist()
        return {"p50_us": round(p50 / 1e3, 3), "p99_us": round(p99 / 1e3, 3),
                "max_us": round(self.max_ns / 1e3, 3), "n": self.n}


class Router:
    """Route requests over ``prefill_names`` x ``decode_names`` with ``policy``.

    ``ledger_arrays``: the ledger's array books and the vectorised view on (True) or off (False);
    None (default): on from `Ledger.ARRAYS_MIN_INSTANCES` instances. Decisions are the same.
    ``label``: the policy as the user named it (a registered name or an import path), for error
    messages; None: the policy's registered ``name``, else its ``module:Class``.
    """

    def __init__(
        self,
        policy: Policy,
        cost_model: CostModel,
        prefill_names: list[str],
        decode_names: list[str],
        oracle_backlog: OracleBacklog | None = None,
        ledger_arrays: bool | None = None,
        label: str | None = None,
    ) -> None:
        self.policy = policy
        self.label = label or policy_label(policy)
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
        # the same lists, typed, for view() (a speed shortcut: no dict lookup per decision)
        self._sig_pre: list[InstanceSignals] = self._signals["prefill"]
        self._sig_dec: list[InstanceSignals] = self._signals["decode"]
        self._kv_at_pre: list[float] = self._kv_at["prefill"]
        self._kv_at_dec: list[float] = self._kv_at["decode"]
        # what route() checks each placement against (plain lists: the cheapest reads per decision)
        self._n_pre = len(prefill_names)
        self._n_dec = len(decode_names)
        self._up_pre = [True] * len(prefill_names)
        self._up_dec = [True] * len(decode_names)
        self.times = DecisionTimes()
        self._clock: Callable[[], int] = perf_counter_ns  # (an attribute: no module-global lookup per call)

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
        (self._up_pre if role == "prefill" else self._up_dec)[index] = healthy

    def is_healthy(self, role: Role, index: int) -> bool:
        return self._signals[role][index].healthy

    def view(self, now: float) -> ClusterView:
        """The snapshot a policy sees at ``now`` (signals are updated in place). Large pools: lazily,
        the signals or the `repro.routing.policies.base.PoolArrays`, whichever the policy reads."""
        if self._arrays:
            return ClusterView(now, self._sig_pre, self._sig_dec,
                               arrays=lambda: self._pool_arrays(now), fill=lambda: self._fill(now))
        self._fill(now)
        return ClusterView(now, self._sig_pre, self._sig_dec)

    def _fill(self, now: float) -> None:
        """Bring every instance's `InstanceSignals` up to ``now`` (one Python step per instance)."""
        led = self.ledger
        self._fill_pool("prefill", led.prefill, self._sig_pre, self._kv_at_pre, now)
        self._fill_pool("decode", led.decode, self._sig_dec, self._kv_at_dec, now)

    def _fill_pool(self, role: Role, books: list[SerialBook] | list[ParallelBook], sigs: list[InstanceSignals],
                   kv_at: list[float], now: float) -> None:
        """One pool's signals at ``now``: each book's backlog (or the oracle's), work in flight and its age of
        KV usage (a typed loop: native in the compiled module)."""
        oracle = self.oracle_backlog
        for i in range(len(books)):
            s = sigs[i]
            book: MirroredBook = books[i]
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
        """Ask the policy (timed: `times`); on a placement, charge the ledger. A policy that raises,
        returns neither a `Placement` nor a `Rejection`, or places on no usable instance is a
        `PolicyError` (nothing is charged)."""
        view = self.view(now)
        clock = self._clock
        t0 = clock()
        try:
            decision = self.policy.place(request, view)
        except Exception as exc:
            raise self._raised(request, exc, "") from exc
        self.times.record(clock() - t0)
        if isinstance(decision, Placement):
            # read untyped: a policy may have put anything there (a typed read would check it first)
            p: object = getattr(decision, "prefill")  # noqa: B009
            d: object = getattr(decision, "decode")  # noqa: B009
            # the usual case in a few integer steps; anything else is checked (and normalised) apart
            if type(p) is int and type(d) is int and 0 <= p < self._n_pre and 0 <= d < self._n_dec \
                    and self._up_pre[p] and self._up_dec[d]:
                pi, di = p, d
            else:
                decision = self._checked(request, decision)
                pi, di = decision.prefill, decision.decode
            try:
                estimate = self.policy.output_estimate(request)
            except Exception as exc:
                raise self._raised(request, exc, " in output_estimate()") from exc
            self.ledger.dispatch(request.request_id, pi, di, request.prompt_tokens, estimate, now)
        elif not isinstance(decision, base.Rejection):
            raise PolicyError(self._invalid(request, decision, f"a {type(decision).__name__} is neither a "
                                                               "Placement nor a Rejection"))
        return decision

    def decision_time(self) -> dict[str, Any]:
        """The decisions' wall times so far: ``{"p50_us", "p99_us", "max_us", "n"}`` (`DecisionTimes`)."""
        return self.times.summary()

    # ---- a policy that broke its contract ------------------------------------------------------
    def _checked(self, request: RequestInfo, decision: Placement) -> Placement:
        """``decision`` if both indices name a healthy instance (numpy integers are taken, as plain
        ints); else a `PolicyError` saying what is wrong with each."""
        problems: list[str] = []
        picked: list[int] = []
        given: list[object] = [getattr(decision, "prefill"), getattr(decision, "decode")]  # noqa: B009
        pools: tuple[tuple[Role, object, int, list[bool]], ...] = (
            ("prefill", given[0], self._n_pre, self._up_pre), ("decode", given[1], self._n_dec, self._up_dec))
        for role, index, n, up in pools:
            value = _as_index(index)
            if value is None:
                problems.append(f"{role} index {_shown(index)} is not an int (a {type(index).__name__})")
            elif not 0 <= value < n:
                problems.append(f"{role} index {value} is out of range 0..{n - 1}" if n else
                                f"{role} index {value}: the {role} pool is empty")
            elif not up[value]:
                problems.append(f"{role} index {value} names {self.names(role)[value]}, which is unhealthy")
            picked.append(-1 if value is None else value)
        if problems:
            raise PolicyError(self._invalid(request, decision, "; ".join(problems)))
        if type(given[0]) is int and type(given[1]) is int:
            return decision
        return Placement(picked[0], picked[1])  # numpy integers, as the plain ints the books index with

    def _invalid(self, request: RequestInfo, decision: object, problem: str) -> str:
        return (f"policy {self.label!r} returned an invalid decision for request {request.request_id!r}: "
                f"{_shown(decision)}: {problem}; valid (healthy) indices: prefill [{_ranges(self._up_pre)}], "
                f"decode [{_ranges(self._up_dec)}]")

    def _raised(self, request: RequestInfo, exc: BaseException, where: str) -> PolicyError:
        """The `PolicyError` of ``exc``, raised by the policy (``where``: in which method, if not place)."""
        err = PolicyError(f"policy {self.label!r} raised{where} on request {request.request_id!r}: "
                          f"{type(exc).__name__}: {one_line(exc, 500)}; candidates: {self.candidates()}")
        err.__cause__ = exc  # (`raise ... from` loses it in the compiled module)
        return err

    def candidates(self) -> str:
        """Both pools as ``prefill [0 name healthy, ...], decode [...]`` (error messages; long pools cut)."""
        parts = []
        pools: tuple[tuple[Role, list[bool]], ...] = (("prefill", self._up_pre), ("decode", self._up_dec))
        for role, up in pools:
            names = self.names(role)
            shown = [f"{i} {names[i]} {'healthy' if up[i] else 'UNHEALTHY'}" for i in range(min(len(names),
                                                                                               NAMES_SHOWN))]
            if len(names) > NAMES_SHOWN:
                shown.append(f"... {len(names) - NAMES_SHOWN} more ({sum(up)} of {len(up)} healthy)")
            parts.append(f"{role} [{', '.join(shown)}]")
        return ", ".join(parts)

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


def policy_label(policy: object) -> str:
    """How error messages name a policy: its registered name, else ``module:Class``."""
    name = getattr(policy, "name", None)
    cls = type(policy)
    if isinstance(name, str) and POLICIES.get(name) is cls:
        return name
    return f"{cls.__module__}:{cls.__qualname__}"


def _as_index(value: object) -> int | None:
    """``value`` as a list index if it is an integer (a Python or numpy int; not a bool), else None."""
    if isinstance(value, bool) or isinstance(value, np.bool_):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    return None


def _shown(value: object, limit: int = 200) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters."""
    try:
        text = repr(value)
    except Exception as exc:  # a user's object whose repr raises
        text = f"<{type(value).__name__} object: repr raised {type(exc).__name__}>"
    return one_line(text, limit)


def _ranges(up: list[bool]) -> str:
    """The indices where ``up`` is True as ranges: ``0..3, 5, 7..9`` (cut after 20 ranges)."""
    out: list[str] = []
    i, n = 0, len(up)
    while i < n:
        if not up[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and up[j + 1]:
            j += 1
        out.append(str(i) if i == j else f"{i}..{j}")
        i = j + 1
    if len(out) > 20:
        out = out[:20] + ["..."]
    return ", ".join(out) if out else "none healthy"
