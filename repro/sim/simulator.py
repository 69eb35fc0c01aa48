"""Deterministic discrete-event simulator of a prefill/decode-disaggregated cluster.

Virtual time jumps from event to event; nothing ticks per token. Per request: arrival at the
router -> policy decision (the same `Router`/`Policy` code the proxy runs) -> prefill on the chosen
prefill engine -> admission on the chosen decode engine (KV budget) -> KV transfer -> continuous
batching decode -> completion. The simulator writes the journal schema of `repro.journal_schema`.

Engine model (`repro.engine.physics.Physics` is the truth):

- Prefill engine: FCFS queue; each step batches queued prompts up to ``max_num_batched_tokens``
  (chunking a long prompt across steps) and lasts ``prefill_time_s(batch tokens)``. A prompt's KV
  is allocated when its first chunk is scheduled and held until the decode engine has pulled it.
- Decode engine (vLLM semantics): a request whose prefill is done waits FCFS for KV blocks
  (prompt tokens) and a sequence slot; a busy engine looks at its queue only at step boundaries
  (an idle one at once); once admitted its KV is pulled (``transfer_time_s``) and it joins the
  running batch at the next step boundary after the pull, so a request meets up to two boundaries.
  Every running sequence gains one token per step; a step over ``n`` sequences holding ``C``
  context tokens takes ``decode_step_s(n, C) = a + b*n + c*C`` (seconds; ``a``, ``b``, ``c`` are
  `_Decode`'s ``step_base_s``, ``step_per_seq_s``, ``step_per_context_token_s``). Since C grows by
  n per step, the time of k steps from a segment origin with context ``C0`` has the closed form
  ``k*(a + b*n + c*C0) + c*n*k*(k-1)/2``, so the simulator jumps straight to the next completion,
  join or KV-full boundary (`_Decode.time_after`). When the next step cannot get KV for every
  sequence, the most recently admitted sequence is preempted (recompute, as vLLM v1: its blocks are
  freed): it returns to the head of the queue, and once re-admitted its context (prompt + tokens
  generated so far) is recomputed inside the engine's steps, as vLLM schedules a resumed request's
  tokens as prefill in the same step as the running sequences' decode: the step it joins in lasts
  ``prefill_per_token_s`` x its context longer, for every sequence in the batch (vLLM chunks a
  context longer than the step's token budget over several steps; here the batch pays the same
  seconds at once).
- Mechanism ``shared_host`` (`Physics.host_cores` > 0): the engines and the serving path share one
  machine's cores; every prefill step, KV pull, serving-path hop and decode segment started at ``t``
  lasts `Physics.host_stretch` (at ``t``) times its own time, from the engines computing at ``t``, the
  arrivals of the last `HOST_WINDOW_S` and the tokens the decode engines stream (a decode segment keeps
  the stretch it started with until its batch next changes).
- Mechanism ``stream_admission`` (`Physics.admission_per_stream_s` or ``admission_loop_s`` > 0): a request
  admitted by a decode engine streaming ``n`` sequences starts its KV pull `Physics.admission_delay_s` (n) later:
  its API server's event loop admits it between the streams' outputs.
- Mechanism ``prefill_hop`` (`Physics.hop_loop_s` or ``hop_per_stream_s`` > 0): a request's prefill leg ends
  `Physics.prefill_hop_s` (n) after its prefill step, ``n`` the sequences every decode engine streams then: the
  proxy's and the prefill API server's event loops, on the cores the streams load.
- ``service="serial"`` is the paper's original simulator (§VI): one request per prefill step and
  one running sequence per decode engine.
- ``backlog="oracle"`` hands the policy the engines' true remaining work instead of the ledger's
  estimate (§VI: information no deployment has).
- KV usage is "polled" lazily: at the first decision after each ``kv_poll_interval_s`` tick, the
  router records every engine's usage; later decisions see that value and its age.

Times are seconds from the first arrival's clock origin (the trace's ``arrival_s``).
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappop, heappush
from typing import Final

import numpy as np
import pandas as pd

from repro.engine.mechanisms import path_factors
from repro.engine.physics import HOST_WINDOW_S, Physics
from repro.errors import ConfigError
from repro.journal_schema import FIELD_NAMES
from repro.routing.policies.base import Placement, RequestInfo
from repro.routing.router import Router
from repro.sim.config import SimConfig
from repro.vocab import Role, SloClass

# Event kinds, in tie-break priority order at equal times (smaller first). An event is the tuple
# (time_s, kind, sequence number, x, y, z) on one heap (a plain tuple, not an object: a speed
# shortcut; the sequence number makes equal (time, kind) pairs pop in push order), with
#   _PRE_STEP_END:  x = prefill engine index
#   _TRANSFER_DONE: x = request, y = decode engine index, z = the request's admission epoch
#   _DEC_NEXT:      x = decode engine index, y = the engine's schedule version, z = steps into the segment
# Arrivals are not pushed: they are read in order from the trace (another speed shortcut).
# (Final: the compiled module inlines them)
_PRE_STEP_END: Final = 0
_TRANSFER_DONE: Final = 1
_DEC_NEXT: Final = 2
_ARRIVAL: Final = 3
_HANDOFF: Final = 4  # x = request: its prefill response has come back through the serving path (mechanism request_path)


class _Prefill:
    """One prefill engine's mutable state (the simulator's own; never shown to the policy)."""

    # __slots__ is a speed shortcut: attribute access on these per-engine objects is on the hot path
    # (every event touches one), and slots make it cheaper than a __dict__ (and catch typos).
    __slots__ = ("name", "phys", "queue", "kv_used_tokens", "busy", "batch", "step_end_s", "max_batch_requests",
                 "queued_tokens", "kv_budget_tokens", "max_num_batched_tokens")

    def __init__(self, name: str, phys: Physics, serial: bool) -> None:
        self.name = name
        self.phys = phys
        self.queue: deque[int] = deque()  # requests placed here, FCFS, until their prefill completes
        self.kv_used_tokens = 0  # KV held: prompts scheduled here and not yet pulled by their decode engine
        self.busy = False  # a step is running (it ends at step_end_s)
        self.batch: list[tuple[int, int]] = []  # the running step: (request, prompt tokens it prefills)
        self.step_end_s = 0.0
        self.max_batch_requests = 1 if serial else 1 << 30  # serial: one request per step (§VI)
        self.queued_tokens = 0  # prompt tokens still to prefill (queued or in the current step)
        self.kv_budget_tokens = phys.kv_budget_tokens  # copied from the physics (read on every poll)
        self.max_num_batched_tokens = phys.max_num_batched_tokens  # tokens per prefill step


class _Decode:
    """One decode engine's mutable state, in *segments*: between two changes of its running batch
    the engine runs ``n_running`` sequences step after step, so the state records only the
    segment's origin (``origin_step``, ``origin_s``) and per-sequence constants, and step times come
    in closed form (`time_after`). The step counter ``origin_step`` never resets: a sequence's
    context is ``base + step`` where ``base`` (in ``running``) was fixed when it joined, so the
    total context at step ``v`` is ``sum_base_context + n_running * v``.
    """

    # __slots__ is a speed shortcut: these fields are read on every decode event, and slots make
    # attribute access cheaper than a __dict__ (and catch typos).
    __slots__ = (
        "name", "phys", "step_base_s", "step_per_seq_s", "step_per_context_token_s", "kv_budget_tokens",
        "max_seqs", "waiting", "reserved_kv_tokens", "running", "finish_heap", "n_running", "sum_base_context",
        "sum_finish_step", "origin_step", "origin_s", "joining", "version", "in_transfer", "queued_output_tokens",
        "admission_order", "admit_pending", "seg_step_s", "seg_cn", "recompute", "stretch", "raw_step_s",
    )

    def __init__(self, name: str, phys: Physics, serial: bool) -> None:
        self.name = name
        self.phys = phys
        # the step time's coefficients, copied from the physics (local fields: read in the hot path)
        self.step_base_s = phys.decode_base_s  # a: seconds per step
        self.step_per_seq_s = phys.decode_per_seq_s  # b: seconds per step per running sequence
        self.step_per_context_token_s = phys.context_s_per_token  # c: seconds per step per context token
        self.kv_budget_tokens = phys.kv_budget_tokens
        self.max_seqs = 1 if serial else phys.max_num_seqs  # serial: one running sequence (§VI)
        self.waiting: deque[int] = deque()  # prefilled requests waiting for KV and a sequence slot, FCFS
        self.reserved_kv_tokens = 0  # KV tokens held by admitted sequences not yet running
        self.running: dict[int, int] = {}  # request -> base context (its context = base + step index)
        self.finish_heap: list[tuple[int, int]] = []  # (step index at which it finishes, request); lazy deletes
        self.n_running = 0  # len(running), kept as a field for the closed forms
        self.sum_base_context = 0  # sum of the running sequences' base contexts (tokens)
        self.sum_finish_step = 0  # sum of the running sequences' finish step indices (oracle backlog)
        self.origin_step = 0  # steps executed up to the segment origin
        self.origin_s = 0.0  # time of the segment origin (seconds)
        self.joining: list[int] = []  # transferred, joining the batch at the next step boundary
        self.version = 0  # bumped at every reschedule: a _DEC_NEXT event of an older version is stale
        self.in_transfer: dict[int, int] = {}  # request -> KV tokens reserved while pulling
        self.queued_output_tokens = 0  # output tokens of waiting + transferring + joining requests
        self.admission_order: dict[int, None] = {}  # every KV-holding request, in admission order
        self.admit_pending = False  # a request waits for the next step boundary to be scheduled
        self.recompute: dict[int, int] = {}  # re-admitted preempted request -> context tokens it recomputes
        self.seg_step_s = 0.0  # A: the segment's first step (seconds); set by resegment
        self.seg_cn = 0.0  # c * n: how much each step of the segment outlasts the one before (seconds)
        self.stretch = 1.0  # mechanism shared_host: the segment's steps take this many times their own time
        self.raw_step_s = 0.0  # the segment's first step on a machine of its own (seconds)
        self.resegment()

    # closed-form step timing of the current segment: step j (0-based) of the segment runs
    # n = n_running sequences over a context of sum_base_context + n * (origin_step + j) tokens, so
    #   time_after(k) = origin_s + k * A + c * n * k * (k - 1) / 2,
    #   A = a + b * n + c * (sum_base_context + n * origin_step)   (the segment's first step, seconds)
    # A and c * n are cached per segment (`resegment`; a speed shortcut: they are read at every
    # event, and change only at a batch boundary). The expressions keep the original operation order,
    # so the floats are the same bits as computing them afresh.
    def resegment(self) -> None:
        """Recompute the segment's cached ``seg_step_s`` (A, seconds) and ``seg_cn`` (c * n, seconds):
        to be called whenever ``n_running``, ``sum_base_context``, ``origin_step`` or ``stretch`` changed.
        (Multiplying by a ``stretch`` of 1 leaves the floats' bits as they are.)"""
        n = self.n_running
        c = self.step_per_context_token_s
        raw = self.step_base_s + self.step_per_seq_s * n + c * (self.sum_base_context + n * self.origin_step)
        self.raw_step_s = raw
        self.seg_step_s = raw * self.stretch
        self.seg_cn = c * n * self.stretch

    def time_after(self, k: int) -> float:
        """Time (seconds) at which the segment's ``k``-th step ends (``k = 0``: its origin)."""
        return self.origin_s + k * self.seg_step_s + self.seg_cn * k * (k - 1) * 0.5

    def steps_done_by(self, when: float) -> int:
        """Steps of the current segment completed by time ``when`` (seconds): the largest ``k`` with
        ``time_after(k) <= when``. Solves the quadratic, then corrects the float rounding by stepping
        (`time_after` written out: this runs at every poll and admission)."""
        o = self.origin_s
        if self.n_running == 0 or when <= o:
            return 0
        A = self.seg_step_s
        if o + A > when:  # time_after(1) > when (a shortcut: the answer is unique, time_after is monotone)
            return 0
        cn = self.seg_cn
        alpha = cn * 0.5
        beta = A - alpha
        x = when - o
        k = int(2.0 * x / (beta + math.sqrt(beta * beta + 4.0 * alpha * x)))
        while o + (k + 1) * A + cn * (k + 1) * k * 0.5 <= when:
            k += 1
        while k > 0 and o + k * A + cn * k * (k - 1) * 0.5 > when:
            k -= 1
        return k

    def step_s_now(self) -> float:
        """Duration (seconds) of the segment's first step (the one starting at its origin)."""
        return self.seg_step_s

    def kv_used(self, now: float) -> int:
        """KV tokens held at ``now`` (running contexts + the next step's token per sequence +
        reservations)."""
        if self.n_running == 0:
            return self.reserved_kv_tokens
        k = self.steps_done_by(now)
        return self.sum_base_context + self.n_running * (self.origin_step + k + 1) + self.reserved_kv_tokens


class Simulator:
    """Simulate one run of a trace through a router over explicit prefill and decode pools.

    Parameters
    ----------
    trace : DataFrame with the trace columns of `repro.workload.traces` (request_id, arrival_s, family,
        prompt_tokens, output_tokens, slo_class), sorted by arrival_s.
    predicted_output_tokens : the router's output estimate per request (tokens), aligned with trace.
    router : the `Router` (policy + cost model + ledger). Its instance names must match the pools.
    prefill, decode : the true `Physics` of each prefill / decode instance.
    config : the service model and the backlog source (`SimConfig`).
    kv_poll_interval_s : seconds between the router's KV-usage polls (0: every decision sees the
        current usage).
    """

    def __init__(
        self,
        trace: pd.DataFrame,
        predicted_output_tokens: np.ndarray,
        router: Router,
        prefill: list[Physics],
        decode: list[Physics],
        config: SimConfig = SimConfig(),
        kv_poll_interval_s: float = 0.05,
    ) -> None:
        if not kv_poll_interval_s >= 0:
            raise ConfigError(f"sim: kv_poll_interval_s must be >= 0 seconds, got {kv_poll_interval_s!r}")
        self.cfg = config
        self.kv_poll_interval_s = kv_poll_interval_s
        serial = config.service == "serial"
        pnames = router.names("prefill")
        dnames = router.names("decode")
        if len(pnames) != len(prefill) or len(dnames) != len(decode):
            raise ConfigError("sim: the router's pools do not match the simulated pools")
        self.router = router
        self.pre = [_Prefill(n, ph, serial) for n, ph in zip(pnames, prefill, strict=True)]
        self.dec = [_Decode(n, ph, serial) for n, ph in zip(dnames, decode, strict=True)]
        self.n_requests = len(trace)
        # typed (plain Python ints, floats and strs): the compiled module (repro.native) works on them unboxed
        self.ids: list[str] = trace["request_id"].astype(str).tolist()
        self.family: list[str] = trace["family"].astype(str).tolist()
        self.slo: list[SloClass] = trace["slo_class"].astype(str).tolist()
        self.arrival: list[float] = trace["arrival_s"].to_numpy(dtype=float).tolist()
        self.prompt: list[int] = trace["prompt_tokens"].to_numpy(dtype=np.int64).tolist()
        self.out: list[int] = trace["output_tokens"].to_numpy(dtype=np.int64).tolist()
        self.pred: list[float] = np.asarray(predicted_output_tokens, dtype=float).tolist()
        if len(self.pred) != self.n_requests:
            raise ConfigError("sim: predicted_output_tokens must have one value per request")
        if not all(math.isfinite(a) for a in self.arrival):
            raise ConfigError("sim: trace field 'arrival_s' must be finite seconds")
        if any(b < a for a, b in zip(self.arrival, self.arrival[1:], strict=False)):
            raise ConfigError("sim: trace field 'arrival_s' must be sorted ascending")
        # Per-request state as parallel plain lists indexed by the request's row (a speed shortcut:
        # list indexing by int is the cheapest per-request access in the event loop).
        n = self.n_requests
        self.p_of = [-1] * n  # prefill engine index (-1: not placed)
        self.d_of = [-1] * n  # decode engine index (-1: not placed)
        self.prefill_left = [0] * n  # prompt tokens still to prefill
        self.gen_before = [0] * n  # tokens generated before a preemption
        self.pulled = [False] * n  # KV pulled from the prefill engine (its blocks released)
        self.epoch = [0] * n  # invalidates the transfer event of a cancelled admission
        self.finish_step = [-1] * n  # decode step index at which it finishes (-1: not running)
        self.preemptions = [0] * n
        self.t_pre_end = [math.nan] * n
        self.t_joined = [math.nan] * n  # first time it joined a decode batch (the ledger's decode start)
        self.t_first = [math.nan] * n
        self.t_finish = [math.nan] * n
        self.status = [""] * n
        self.reason: list[str | None] = [None] * n
        self._events: list[tuple[float, int, int, int, int, int]] = []  # see the event kinds above
        self._seq = 0  # the last event's sequence number (push order: the next event takes _seq + 1)
        self.now = 0.0
        self._last_poll = -math.inf
        self.kv_peak = [0] * len(self.dec)  # most KV tokens each decode engine held
        self.pre_kv_peak = [0] * len(self.pre)  # most KV tokens each prefill engine held
        # the longest request (prompt + output tokens) the engines take; longer ones fail on arrival
        self.max_request_tokens = (
            min(self.pre[0].phys.max_model_len, self.dec[0].kv_budget_tokens, self.pre[0].kv_budget_tokens)
            if self.pre and self.dec else 0
        )
        if config.backlog == "oracle":
            router.oracle_backlog = self._oracle_backlog
        # mechanism request_path: each request's serving path (s) after its prefill step, per prefill engine's
        # physics; path_tail: a lognormal factor per request, a fixed function of its id (`path_factors`)
        self.path_s = [e.phys.serving_path_s for e in self.pre]
        sigmas = [e.phys.serving_path_sigma for e in self.pre]
        self.path_factor: list[float] = (path_factors(self.ids, self.arrival, max(sigmas)) if any(sigmas) else [])
        # mechanism shared_link: when each decode engine's link is next free (s)
        self.link_shared = [d.phys.transfer_link_shared >= 1 for d in self.dec]
        self.link_free_s = [0.0] * len(self.dec)
        # mechanism shared_host: one machine's cores shared by every engine and the serving path
        hosts = {(ph.host_cores, ph.host_base_cores, ph.host_cpu_per_request_s, ph.host_cpu_per_token_s,
                  ph.host_cpu_per_step_s) for ph in [*prefill, *decode]}
        if len(hosts) > 1:
            raise ConfigError(f"sim: the engines state different shared hosts (physics host_cores, host_base_cores, "
                              f"host_cpu_per_request_s, host_cpu_per_token_s, host_cpu_per_step_s): {sorted(hosts)}; "
                              f"one cluster, one host")
        first = prefill[0] if prefill else (decode[0] if decode else None)
        self.host: Physics | None = first if first is not None and first.shares_host else None
        self.host_arrivals: deque[float] = deque()  # arrivals within the last HOST_WINDOW_S (shared_host)
        # mechanism stream_admission: whether each decode engine's API server admits behind its streams
        self.admission = [d.phys.admits_behind_load for d in self.dec]
        # mechanism prefill_hop: whether each prefill engine's leg outside its core grows with the cluster's streams
        self.hop = [e.phys.hops_behind_load for e in self.pre]

    # ---- event plumbing -------------------------------------------------------------------
    # An event is pushed as ``seq = self._seq = self._seq + 1`` then heappush(self._events, (time_s, kind,
    # seq, x, y, z)), written out where it happens (a speed shortcut: no helper call per event); see the event
    # kinds above.
    def run(self) -> pd.DataFrame:
        """Run to completion; returns the journal DataFrame (rows in trace order)."""
        # locals for the attributes read every iteration (a speed shortcut). The methods are called as
        # methods: in the compiled module (repro.native) that is a direct native call, where a bound method
        # kept in a local would be a Python-level call with its arguments boxed
        events = self._events
        arrivals = self.arrival
        n = self.n_requests
        dec = self.dec
        i = 0
        next_arrival = arrivals[0] if n else math.inf
        while True:
            # the next event goes first unless the next trace arrival is strictly earlier (every event
            # kind sorts before _ARRIVAL, so an event at the same time goes first)
            if events and events[0][0] <= next_arrival:
                when, kind, _, x, y, z = heappop(events)
                if when < self.now - 1e-9:
                    raise AssertionError(f"sim: clock went backwards ({when} < {self.now})")
                self.now = when
                if kind == _DEC_NEXT:
                    d = dec[x]
                    if y == d.version:  # else stale: the engine was rescheduled since
                        self._decode_boundary(d, x, z)
                elif kind == _TRANSFER_DONE:
                    self._transfer_done(x, y, z)
                elif kind == _HANDOFF:
                    self._handoff(x)
                else:
                    self._prefill_step_end(x)
            elif i < n:
                if next_arrival < self.now:
                    raise AssertionError("sim: clock went backwards")
                self.now = next_arrival
                self._arrive(i)
                i += 1
                next_arrival = arrivals[i] if i < n else math.inf
            else:
                break
        return self._journal()

    # ---- arrivals and routing ------------------------------------------------------------
    def _poll(self, now: float) -> None:
        """Record every engine's KV usage with the router (at most once per ``kv_poll_interval_s``)."""
        if now - self._last_poll < self.kv_poll_interval_s:
            return
        self._last_poll = now
        router = self.router
        for i, e in enumerate(self.pre):
            router.observe_kv("prefill", i, e.kv_used_tokens / e.kv_budget_tokens, now)
        for i, d in enumerate(self.dec):
            router.observe_kv("decode", i, d.kv_used(now) / d.kv_budget_tokens, now)

    def _host_stretch(self) -> float:
        """Mechanism shared_host: the stretch of CPU work started now (`Physics.host_stretch`), from the engines
        computing now, the arrival rate over the last `HOST_WINDOW_S` and the tokens the decode engines stream
        at their own speed (every running sequence gains one per step). 1 without a shared host."""
        host = self.host
        if host is None:
            return 1.0
        now = self.now
        arrivals = self.host_arrivals
        while arrivals and arrivals[0] <= now - HOST_WINDOW_S:
            arrivals.popleft()
        busy = 0
        for e in self.pre:
            if e.busy:
                busy += 1
        tokens = 0.0
        steps = 0.0
        for d in self.dec:
            if d.n_running:
                busy += 1
                tokens += d.n_running / d.raw_step_s
                steps += 1.0 / d.raw_step_s
        return host.host_stretch(busy, len(arrivals) / HOST_WINDOW_S, tokens, steps)

    def _arrive(self, r: int) -> None:
        now = self.now
        if self.host is not None:
            self.host_arrivals.append(now)
        self._poll(now)
        prompt = self.prompt[r]
        out = self.out[r]
        limit = self.max_request_tokens
        if prompt + out > limit:
            self.status[r] = "failed"
            self.reason[r] = f"prompt + output ({prompt + out} tokens) exceeds the engines' limit ({limit})"
            return
        decision = self.router.route(RequestInfo(self.ids[r], prompt, self.pred[r], self.slo[r], now), now)
        if not isinstance(decision, Placement):
            self.status[r] = "rejected"
            self.reason[r] = decision.reason
            return
        p = decision.prefill
        self.p_of[r] = p
        self.d_of[r] = decision.decode
        self.prefill_left[r] = prompt
        e = self.pre[p]
        e.queue.append(r)
        e.queued_tokens += prompt
        if not e.busy:
            self._prefill_start(p)

    # ---- prefill ---------------------------------------------------------------------------
    def _prefill_start(self, p: int) -> None:
        e = self.pre[p]
        if e.busy or not e.queue:
            return
        budget = e.max_num_batched_tokens
        kv_budget = e.kv_budget_tokens
        max_requests = e.max_batch_requests
        prompt = self.prompt
        prefill_left = self.prefill_left
        batch: list[tuple[int, int]] = []
        tokens = 0
        for r in e.queue:
            if len(batch) >= max_requests:
                break
            left = prefill_left[r]
            if left == prompt[r]:  # first chunk: allocate the prompt's KV
                if e.kv_used_tokens + left > kv_budget:
                    break
                e.kv_used_tokens += left
                if e.kv_used_tokens > self.pre_kv_peak[p]:
                    self.pre_kv_peak[p] = e.kv_used_tokens
            take = min(left, budget - tokens)
            batch.append((r, take))
            tokens += take
            if tokens >= budget:
                break
        if not batch:
            return
        e.batch = batch
        e.busy = True
        if self.host is None:
            e.step_end_s = self.now + e.phys.prefill_time_s(tokens)
        else:
            e.step_end_s = self.now + e.phys.prefill_time_s(tokens) * self._host_stretch()
        seq = self._seq = self._seq + 1
        heappush(self._events, (e.step_end_s, _PRE_STEP_END, seq, p, 0, 0))

    def _prefill_step_end(self, p: int) -> None:
        e = self.pre[p]
        now = self.now
        e.busy = False
        prefill_left = self.prefill_left
        done = []
        for r, take in e.batch:
            left = prefill_left[r] - take  # (not `prefill_left[r] -= take`: a generic operation in the compiled module)
            prefill_left[r] = left
            e.queued_tokens -= take
            if left == 0:
                done.append(r)
        e.batch = []
        path = self.path_s[p]
        if path > 0.0 and done and self.host is not None:
            path *= self._host_stretch()
        hop = 0.0
        if self.hop[p] and done:  # mechanism prefill_hop: the hop back through loops the cluster's streams load
            streams = 0
            for d in self.dec:
                streams += d.n_running
            hop = e.phys.prefill_hop_s(streams)
        for r in done:
            e.queue.popleft()  # completed requests are exactly the front of the queue
            if path > 0.0 or hop > 0.0:  # mechanism request_path: the response travels the serving path first
                delay = (path * self.path_factor[r] if self.path_factor else path) + hop
                seq = self._seq = self._seq + 1
                heappush(self._events, (now + delay, _HANDOFF, seq, r, 0, 0))
            else:
                self._handoff(r)
        self._prefill_start(p)

    def _handoff(self, r: int) -> None:
        """Request ``r``'s prefill is done as the router sees it: hand it to its decode engine."""
        now = self.now
        self.t_pre_end[r] = now
        self.router.prefill_done(self.ids[r], now)
        d = self.d_of[r]
        dd = self.dec[d]
        dd.waiting.append(r)
        dd.queued_output_tokens += self.out[r]
        if dd.n_running:  # a busy engine schedules new requests at its next step boundary (vLLM)
            if not dd.admit_pending:
                dd.admit_pending = True
                self._decode_schedule(dd, d)
        else:
            self._decode_admit(dd, d)

    # ---- decode ----------------------------------------------------------------------------
    def _decode_admit(self, d: _Decode, di: int, schedule: bool = True) -> None:
        """Admit waiting requests FCFS while a sequence slot and KV are free; start their KV pulls.
        Reschedules the engine if it admitted any, unless ``schedule`` is False (the caller will)."""
        if not d.waiting:
            return
        now = self.now
        # the running sequences' KV at ``now`` (their contexts + the next step's token each): the
        # segment does not change while admitting, so it is computed once
        running_kv = (d.sum_base_context + d.n_running * (d.origin_step + d.steps_done_by(now) + 1)
                      if d.n_running else 0)
        prompt = self.prompt
        gen_before = self.gen_before
        preemptions = self.preemptions
        changed = False
        while d.waiting and d.n_running + len(d.in_transfer) + len(d.joining) < d.max_seqs:
            r = d.waiting[0]
            need = prompt[r] + gen_before[r]
            if need > d.kv_budget_tokens - (running_kv + d.reserved_kv_tokens):
                break
            d.waiting.popleft()
            d.reserved_kv_tokens += need
            d.in_transfer[r] = need
            d.admission_order[r] = None
            changed = True
            if self.pulled[r]:  # preempted after its pull: it joins at the next boundary and its context is
                d.recompute[r] = need  # recomputed inside that step (`_decode_boundary`)
                delay = 0.0
            elif self.link_shared[di]:  # mechanism shared_link: the pull waits for the engine's link
                ph = self.pre[self.p_of[r]].phys
                start = max(now, self.link_free_s[di])
                wire = prompt[r] * ph.kv_bytes_per_token / ph.transfer_bandwidth_bytes_per_s
                self.link_free_s[di] = start + wire
                delay = start - now + ph.transfer_latency_s + wire
            else:  # pull the prompt's KV from the prefill engine, which still holds it
                delay = self.pre[self.p_of[r]].phys.transfer_time_s(prompt[r])
            if self.host is not None:  # mechanism shared_host: the pull is CPU work too
                delay *= self._host_stretch()
            if self.admission[di] and preemptions[r] == 0:  # mechanism stream_admission: the API server admits
                delay += d.phys.admission_delay_s(d.n_running)  # it between the streams (once: not a re-admission)
            seq = self._seq = self._seq + 1
            heappush(self._events, (now + delay, _TRANSFER_DONE, seq, r, di, self.epoch[r]))
            used = d.reserved_kv_tokens + running_kv
            if used > self.kv_peak[di]:
                self.kv_peak[di] = used
        if changed and schedule:
            self._decode_schedule(d, di)

    def _transfer_done(self, r: int, di: int, epoch: int) -> None:
        if epoch != self.epoch[r]:  # this admission was cancelled by a preemption
            return
        d = self.dec[di]
        del d.in_transfer[r]
        if not self.pulled[r]:  # the prefill engine's blocks are released once pulled
            self.pulled[r] = True
            p = self.p_of[r]
            e = self.pre[p]
            e.kv_used_tokens -= self.prompt[r]
            if not e.busy:
                self._prefill_start(p)
        d.joining.append(r)
        self._decode_schedule(d, di)

    def _decode_schedule(self, d: _Decode, di: int) -> None:
        """(Re)compute the next boundary at which this engine's batch changes.

        Speed shortcut: one event per batch change, never one per step; the steps in between are
        the segment's closed form (`_Decode.time_after`). Bumping ``version`` invalidates any event
        pushed earlier for this engine (it is skipped when popped) instead of removing it."""
        now = self.now
        version = d.version = d.version + 1
        n = d.n_running
        if n == 0:
            if d.joining:
                d.origin_s = now
                seq = self._seq = self._seq + 1
                heappush(self._events, (now, _DEC_NEXT, seq, di, version, 0))
            return
        origin_step = d.origin_step
        # next completion
        k = d.finish_heap[0][0] - origin_step
        # KV full: first boundary whose next step cannot allocate a token per sequence
        k_full = (d.kv_budget_tokens - d.reserved_kv_tokens - (d.sum_base_context + n * origin_step)) // n
        if k_full < k:
            k = k_full
        if d.joining or d.admit_pending:
            k_join = d.steps_done_by(now) + 1
            if k_join < k:
                k = k_join
        if k < 0:
            k = 0
        when = d.origin_s + k * d.seg_step_s + d.seg_cn * k * (k - 1) * 0.5  # d.time_after(k), written out
        seq = self._seq = self._seq + 1
        heappush(self._events, (when, _DEC_NEXT, seq, di, version, k))

    def _decode_boundary(self, d: _Decode, di: int, k: int) -> None:
        """The engine reached the boundary ``k`` steps into its segment: settle completions, let the
        transferred requests join, preempt until the next step fits in KV, start a new segment.

        The engine's counters (running sequences, their base context, reserved KV) are kept in locals
        while they change and written back before admission (a speed shortcut)."""
        now = self.now
        n_running = d.n_running
        if n_running:
            d.origin_s = d.time_after(k)
            step = d.origin_step = d.origin_step + k
        else:
            d.origin_s = now
            step = d.origin_step
        sum_base = d.sum_base_context
        sum_finish = d.sum_finish_step
        reserved = d.reserved_kv_tokens
        finish_step = self.finish_step
        gen_before = self.gen_before
        out = self.out
        running = d.running
        d.admit_pending = False
        stall = 0.0  # seconds this boundary's first step lasts longer (recomputed contexts)
        # 1. completions. Speed shortcut: a preempted sequence's heap entry is not removed; it is
        #    skipped here when its finish step no longer matches (lazy deletion)
        heap = d.finish_heap
        if heap and heap[0][0] <= step:
            router = self.router
            ids = self.ids
            order = d.admission_order
            while heap and heap[0][0] <= step:
                fv, r = heappop(heap)  # fv: the finish step index recorded when it joined
                if finish_step[r] != fv or r not in running:
                    continue
                sum_base -= running[r]
                del running[r]
                del order[r]
                n_running -= 1
                sum_finish -= fv
                self.t_finish[r] = now
                self.status[r] = "ok"
                router.finish(ids[r], now)
        # 2. joins
        joined = d.joining
        if joined:
            d.joining = []
            prompt = self.prompt
            queued_out = 0
            t_joined = self.t_joined
            router = self.router
            ids = self.ids
            recompute = d.recompute
            for r in joined:
                if recompute:
                    ctx_tokens = 0
                    if r in recompute:
                        ctx_tokens = recompute[r]
                        del recompute[r]
                    if ctx_tokens:  # a resumed preempted sequence: its context is recomputed in this step
                        stall += d.phys.prefill_per_token_s * ctx_tokens
                if math.isnan(t_joined[r]):  # its decode starts: the ledger counts it down from here
                    t_joined[r] = now
                    router.decode_started(ids[r], now)
                ctx = prompt[r] + gen_before[r]
                reserved -= ctx
                base = ctx - step
                running[r] = base
                n_running += 1
                sum_base += base
                fv = step + out[r] - gen_before[r]
                finish_step[r] = fv
                sum_finish += fv
                queued_out += out[r]
                heappush(heap, (fv, r))
            d.queued_output_tokens -= queued_out
        # 3. KV for the next step: preempt the most recently admitted until it fits (a request
        #    still pulling its KV is cancelled; the oldest running one always progresses)
        budget = d.kv_budget_tokens
        while n_running and sum_base + n_running * (step + 1) + reserved > budget:
            r = next(reversed(d.admission_order))
            del d.admission_order[r]
            self.preemptions[r] += 1
            d.waiting.appendleft(r)
            if r in d.in_transfer:
                reserved -= d.in_transfer.pop(r)
                self.epoch[r] += 1
                continue
            base = running[r]
            del running[r]
            n_running -= 1
            sum_base -= base
            sum_finish -= finish_step[r]
            gen_before[r] = base + step - self.prompt[r]
            finish_step[r] = -1
            d.queued_output_tokens += out[r]
        d.n_running = n_running
        d.sum_base_context = sum_base
        d.sum_finish_step = sum_finish
        d.reserved_kv_tokens = reserved
        d.resegment()  # the batch (and the step origin) changed: a new segment starts here
        if self.host is not None:  # mechanism shared_host: the segment's steps at the host's speed now
            stretch = self._host_stretch()
            if stretch != d.stretch:
                d.stretch = stretch
                d.resegment()
            stall *= stretch
        if stall > 0.0 and n_running:  # the recompute runs inside the next step: every sequence waits for it
            d.origin_s += stall
        used = sum_base + n_running * (step + 1) + reserved
        if used > self.kv_peak[di]:
            self.kv_peak[di] = used
        # first tokens of sequences that joined now come at the end of this step
        if joined and n_running:
            first = d.origin_s + d.seg_step_s
            t_first = self.t_first
            for r in joined:
                if r in running and math.isnan(t_first[r]):
                    t_first[r] = first
        if d.waiting:
            self._decode_admit(d, di, schedule=False)
        self._decode_schedule(d, di)

    # ---- oracle ------------------------------------------------------------------------------
    def _oracle_backlog(self, role: Role, i: int, now: float) -> float:
        """The true remaining work (seconds) on instance ``i`` of ``role`` at ``now``: what
        ``backlog="oracle"`` hands the policy instead of the ledger's estimate."""
        if role == "prefill":
            e = self.pre[i]
            ph = e.phys
            rest = max(e.step_end_s - now, 0.0) if e.busy else 0.0
            in_step = sum(t for _, t in e.batch) if e.busy else 0
            queued = e.queued_tokens - in_step
            if queued <= 0:
                return rest
            steps = math.ceil(queued / ph.max_num_batched_tokens)
            return rest + steps * ph.prefill_step_base_s + ph.prefill_per_token_s * queued
        d = self.dec[i]
        v_now = d.origin_step + d.steps_done_by(now)
        remaining = d.sum_finish_step - d.n_running * v_now + d.queued_output_tokens
        return remaining * d.step_s_now() if d.n_running else remaining * d.step_base_s

    # ---- output ------------------------------------------------------------------------------
    def _journal(self) -> pd.DataFrame:
        arrival = np.asarray(self.arrival)
        first = np.asarray(self.t_first)
        finish = np.asarray(self.t_finish)
        out = np.asarray(self.out, dtype=np.int64)
        status = np.asarray([s or "failed" for s in self.status], dtype=object)
        ok = status == "ok"
        reason = [
            (rs if rs is not None else ("simulation ended before completion" if st != "ok" else None))
            for rs, st in zip(self.reason, status, strict=True)
        ]
        ttft = np.where(ok, first - arrival, np.nan)
        e2e = np.where(ok, finish - arrival, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(ok & (out >= 2), (e2e - ttft) / (out - 1), np.nan)
        pnames = [e.name for e in self.pre]
        dnames = [d.name for d in self.dec]
        placed = np.asarray(self.p_of) >= 0
        cols = {
            "request_id": self.ids,
            "family": self.family,
            "slo_class": self.slo,
            "prompt_tokens": np.asarray(self.prompt, dtype=np.int64),
            "output_tokens": out,
            "predicted_output_tokens": np.asarray(self.pred, dtype=float),
            "prefill_instance": [pnames[p] if p >= 0 else None for p in self.p_of],
            "decode_instance": [dnames[d] if d >= 0 else None for d in self.d_of],
            "status": status,
            "reason": reason,
            "arrival_s": arrival,
            "prefill_start_s": np.where(placed, arrival, np.nan),
            "prefill_end_s": np.asarray(self.t_pre_end),
            "decode_start_s": np.asarray(self.t_pre_end),
            "decode_started_s": np.asarray(self.t_joined),
            "first_token_s": np.where(ok, first, np.nan),
            "finish_s": np.where(ok, finish, np.nan),
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "generated_tokens": np.where(ok, out, 0),
            "preemptions": np.asarray(self.preemptions, dtype=np.int64),
        }
        df = pd.DataFrame(cols, columns=list(FIELD_NAMES))
        return df


def simulate(
    trace: pd.DataFrame,
    predicted_output_tokens: np.ndarray,
    router: Router,
    prefill: list[Physics],
    decode: list[Physics],
    config: SimConfig = SimConfig(),
    kv_poll_interval_s: float = 0.05,
) -> pd.DataFrame:
    """Convenience wrapper: run a `Simulator` and return its journal."""
    return Simulator(trace, predicted_output_tokens, router, prefill, decode, config, kv_poll_interval_s).run()
