"""The simulated engines' mutable state: a prefill engine's queue and step, a decode engine's running batch in
closed-form segments (`repro.sim.simulator.Simulator` drives them, event by event). The simulator's own state,
never shown to a policy. Units: seconds, tokens.

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
  `repro.sim.engines.DecodeEngine`'s ``step_base_s``, ``step_per_seq_s``, ``step_per_context_token_s``). Since C
  grows by n per step, the time of k steps from a segment origin with context ``C0`` has the closed form
  ``k*(a + b*n + c*C0) + c*n*k*(k-1)/2``, so the simulator jumps straight to the next completion,
  join or KV-full boundary (`DecodeEngine.time_after`). When the next step cannot get KV for every
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
"""

from __future__ import annotations

import math
from collections import deque

from repro.engine.physics import HOST_WINDOW_S, Physics
from repro.errors import ConfigError


class PrefillEngine:
    """One prefill engine's mutable state (the simulator's own; never shown to the policy)."""

    # __slots__ is a speed shortcut: attribute access on these per-engine objects is on the hot path
    # (every event touches one), and slots make it cheaper than a __dict__ (and catch typos).
    __slots__ = ("name", "phys", "queue", "kv_used_tokens", "busy", "batch", "step_end_s", "max_batch_requests",
                 "queued_tokens", "kv_budget_tokens", "max_num_batched_tokens", "step_base_s", "per_token_s",
                 "per_token2_s", "ctx_s")

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
        # the step time's coefficients (`Physics.prefill_time_s`), copied from the physics (read on every step)
        self.step_base_s = float(phys.prefill_step_base_s)  # seconds per step
        self.per_token_s = float(phys.prefill_per_token_s)  # seconds per prompt token in the step
        self.per_token2_s = float(phys.prefill_per_token2_s)  # seconds per squared step token
        self.ctx_s = float(phys.prefill_ctx_s)  # mechanism attention_context: seconds per attended token pair

    def oracle_backlog(self, now: float) -> float:
        """The true remaining work (seconds) at ``now``: the running step's rest and the queued tokens' steps
        (what ``backlog="oracle"`` hands a policy)."""
        ph = self.phys
        rest = max(self.step_end_s - now, 0.0) if self.busy else 0.0
        in_step = sum(t for _, t in self.batch) if self.busy else 0
        queued = self.queued_tokens - in_step
        if queued <= 0:
            return rest
        steps = math.ceil(queued / ph.max_num_batched_tokens)
        return rest + steps * self.step_base_s + self.per_token_s * queued


class DecodeEngine:
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
        "freed_tokens", "freed_at", "free_ahead",
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
        self.freed_tokens = 0  # KV tokens freed so far (completions, preemptions): mechanism resume_cache's clock
        # mechanism resume_cache, per preempted request: the engine's KV allocated in all (held + freed tokens) after
        # its blocks were freed, and the free tokens ahead of them in the free queue then
        self.freed_at: dict[int, int] = {}
        self.free_ahead: dict[int, int] = {}
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

    def recompute_tokens(self, r: int, need: int, used: int) -> int:
        """Mechanism resume_cache: the tokens of preempted request ``r``'s context (``need``) it recomputes on
        resume, the engine holding ``used`` KV tokens now. vLLM frees a preempted request's blocks to the free
        queue's tail, its last block first (vllm/v1/core/block_pool.py ``BlockPool.free_blocks``), where they keep
        their hashes until allocated again, and takes new blocks from the queue's head; on resume
        ``KVCacheManager.get_computed_blocks`` hits the full blocks still cached (vllm/v1/core/kv_cache_manager.py).
        So what the engine allocated since beyond the tokens then free ahead of them evicted as many of its
        tokens, last first; the full blocks left are cached, and at least its last token is recomputed."""
        evicted = used + self.freed_tokens - self.freed_at[r] - self.free_ahead[r]
        if evicted < 0:
            evicted = 0
        block = self.phys.block_size
        cached = (need - evicted) // block * block if evicted < need else 0
        if cached >= need:
            cached = need - 1
        return need - cached

    def kv_used(self, now: float) -> int:
        """KV tokens held at ``now`` (running contexts + the next step's token per sequence +
        reservations)."""
        if self.n_running == 0:
            return self.reserved_kv_tokens
        k = self.steps_done_by(now)
        return self.sum_base_context + self.n_running * (self.origin_step + k + 1) + self.reserved_kv_tokens

    def oracle_backlog(self, now: float) -> float:
        """The true remaining work (seconds) at ``now``: the running sequences' and the queued requests' output
        tokens at the current step time (what ``backlog="oracle"`` hands a policy)."""
        v_now = self.origin_step + self.steps_done_by(now)
        remaining = self.sum_finish_step - self.n_running * v_now + self.queued_output_tokens
        return remaining * self.step_s_now() if self.n_running else remaining * self.step_base_s


class SharedHost:
    """Mechanism shared_host: one machine's cores shared by every engine and the serving path (`Physics.host_stretch`
    says how much longer CPU work takes). Holds the arrivals of the last `HOST_WINDOW_S` seconds."""

    __slots__ = ("phys", "arrivals")

    def __init__(self, phys: Physics) -> None:
        self.phys = phys
        self.arrivals: deque[float] = deque()  # arrival times (s) within the last HOST_WINDOW_S

    def stretch(self, now: float, pre: list[PrefillEngine], dec: list[DecodeEngine]) -> float:
        """The stretch of CPU work started at ``now``, from the engines computing then, the arrival rate over the last
        `HOST_WINDOW_S` and the tokens the decode engines stream at their own speed (every running sequence gains
        one per step)."""
        arrivals = self.arrivals
        while arrivals and arrivals[0] <= now - HOST_WINDOW_S:
            arrivals.popleft()
        busy = 0
        for e in pre:
            if e.busy:
                busy += 1
        tokens = 0.0
        steps = 0.0
        for d in dec:
            if d.n_running:
                busy += 1
                tokens += d.n_running / d.raw_step_s
                steps += 1.0 / d.raw_step_s
        return self.phys.host_stretch(busy, len(arrivals) / HOST_WINDOW_S, tokens, steps)


def shared_host(prefill: list[Physics], decode: list[Physics]) -> SharedHost | None:
    """The cluster's shared host when its engines state one (`Physics.shares_host`), else None; a ConfigError when
    the engines state different hosts (one cluster, one host)."""
    hosts = {(ph.host_cores, ph.host_base_cores, ph.host_cpu_per_request_s, ph.host_cpu_per_token_s,
              ph.host_cpu_per_step_s) for ph in [*prefill, *decode]}
    if len(hosts) > 1:
        raise ConfigError(f"sim: the engines state different shared hosts (physics host_cores, host_base_cores, "
                          f"host_cpu_per_request_s, host_cpu_per_token_s, host_cpu_per_step_s): {sorted(hosts)}; "
                          f"one cluster, one host")
    first = prefill[0] if prefill else (decode[0] if decode else None)
    return SharedHost(first) if first is not None and first.shares_host else None
