"""Deterministic discrete-event simulator of a prefill/decode-disaggregated cluster.

Virtual time jumps from event to event; nothing ticks per token. Per request: arrival at the
router -> policy decision (the same `Router`/`Policy` code the proxy runs) -> prefill on the chosen
prefill engine -> admission on the chosen decode engine (KV budget) -> KV transfer -> continuous
batching decode -> completion. The simulator writes the journal schema of `repro.journal_schema`.

The engine model (what a prefill and a decode engine do per step, preemption, and the optional mechanisms of
`repro.engine.mechanisms`) is documented with the engines' state in `repro.sim.engines`; `repro.engine.physics.Physics`
is the truth the engines run on, and the per-request journal is written by `repro.sim.journal`.

Times are seconds from the first arrival's clock origin (the trace's ``arrival_s``).
"""

from __future__ import annotations

import gc
import math
from heapq import heappop, heappush
from typing import Final

import numpy as np
import pandas as pd

from repro.engine.links import Links
from repro.engine.mechanisms import path_factors
from repro.engine.physics import Physics
from repro.errors import ConfigError
from repro.routing.policies.base import Placement, RequestInfo
from repro.routing.router import Router
from repro.sim.config import SimConfig
from repro.sim.engines import DecodeEngine, PrefillEngine, shared_host
from repro.sim.journal import journal_frame, trace_columns
from repro.vocab import Role

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
_PULL_START: Final = 5  # x = request, y = decode engine, z = admission epoch: its KV bytes start to move (shared_link)
_LINK: Final = 6  # y = the links' schedule version: the next pull's bytes are through (mechanism shared_link)
_API_DONE: Final = 7  # x = request: its prefill engine's API server hands it to the engine (mechanism api_queue)


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
        self.pre = [PrefillEngine(n, ph, serial) for n, ph in zip(pnames, prefill, strict=True)]
        self.dec = [DecodeEngine(n, ph, serial) for n, ph in zip(dnames, decode, strict=True)]
        self.n_requests = len(trace)
        # typed (plain Python ints, floats and strs): the compiled module (repro.native) works on them unboxed
        (self.ids, self.family, self.slo, self.arrival, self.prompt, self.out,
         self.pred) = trace_columns(trace, predicted_output_tokens)
        # per-request state as parallel plain lists indexed by the request's row (a speed shortcut: the cheapest)
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
        self.max_request_tokens = (min(self.pre[0].phys.max_model_len, self.dec[0].kv_budget_tokens,
                                       self.pre[0].kv_budget_tokens) if self.pre and self.dec else 0)
        if config.backlog == "oracle":
            router.oracle_backlog = self._oracle_backlog
        # mechanism request_path: each request's serving path (s) after its prefill step, per prefill engine's
        # physics; path_tail: a lognormal factor per request, a fixed function of its id (`path_factors`)
        self.path_s = [e.phys.serving_path_s for e in self.pre]
        sigmas = [e.phys.serving_path_sigma for e in self.pre]
        self.path_factor: list[float] = (path_factors(self.ids, self.arrival, max(sigmas)) if any(sigmas) else [])
        # mechanism shared_link: pulls that share the links at both ends, and the pairs' handshakes
        self.link_shared = [d.phys.transfer_link_shared >= 1 for d in self.dec]
        self.links = Links(len(self.pre), len(self.dec))
        # mechanism api_queue: whether each prefill engine's API server queues, and when it is next free (s)
        self.api = [e.phys.api_queue_s > 0.0 or e.phys.api_queue_per_token_s > 0.0 for e in self.pre]
        self.api_free = [0.0] * len(self.pre)
        # mechanisms vllm_scheduler and resume_cache, per decode engine
        self.vllm_sched = [d.phys.decode_scheduler_vllm >= 1 for d in self.dec]
        self.resume_cache = [d.phys.resume_prefix_cache >= 1 for d in self.dec]
        self.host = shared_host(prefill, decode)  # mechanism shared_host: one machine's cores for all
        # mechanisms stream_admission (each decode engine's API server admits behind its streams) and prefill_hop
        # (each prefill engine's leg outside its core grows with the cluster's streams)
        self.admission = [d.phys.admits_behind_load for d in self.dec]
        self.hop = [e.phys.hops_behind_load for e in self.pre]

    # ---- event plumbing: an event is pushed as ``seq = self._seq = self._seq + 1`` then heappush(self._events,
    # (time_s, kind, seq, x, y, z)), written out where it happens (a speed shortcut); see the event kinds above.
    def run(self) -> pd.DataFrame:
        """Run to completion; returns the journal DataFrame (rows in trace order). The cycle collector is off
        meanwhile (a speed shortcut: the loop allocates a tuple per event and makes no reference cycles)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._loop()
        finally:
            if collecting:
                gc.enable()
        return self._journal()

    def _loop(self) -> None:
        """Every event and arrival in time order, until none is left. Locals for the attributes read every
        iteration (a speed shortcut); methods called as methods (compiled: a direct native call)."""
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
                elif kind == _PULL_START:
                    self._pull_start(x, y, z)
                elif kind == _LINK:
                    if y == self.links.version:  # else stale: the links were rescheduled since
                        self._link_done()
                elif kind == _API_DONE:
                    self._enqueue_prefill(x)
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
        """Mechanism shared_host: the stretch of CPU work started now (`SharedHost.stretch`); 1 without it."""
        return 1.0 if self.host is None else self.host.stretch(self.now, self.pre, self.dec)

    def _arrive(self, r: int) -> None:
        now = self.now
        if self.host is not None:
            self.host.arrivals.append(now)
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
        if self.api[p]:  # mechanism api_queue: the API server serves one request at a time, FCFS
            ph = self.pre[p].phys
            start = self.api_free[p] if self.api_free[p] > now else now
            done = start + ph.api_queue_s + ph.api_queue_per_token_s * prompt
            self.api_free[p] = done
            seq = self._seq = self._seq + 1
            heappush(self._events, (done, _API_DONE, seq, r, 0, 0))
            return
        self._enqueue_prefill(r)

    def _enqueue_prefill(self, r: int) -> None:
        """Request ``r`` reaches its prefill engine's queue."""
        p = self.p_of[r]
        e = self.pre[p]
        e.queue.append(r)
        e.queued_tokens += self.prompt[r]
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
        # `Physics.prefill_time_s` (tokens) on the engine's copies of its coefficients, written out
        step_s = e.step_base_s + e.per_token_s * tokens + e.per_token2_s * tokens * tokens
        ctx_s = e.ctx_s
        if ctx_s > 0.0:  # mechanism attention_context: each chunk attends over its prompt's earlier tokens
            pairs = 0
            for r, take in batch:  # `Physics.attention_pairs` (done, take), written out
                pairs += take * (prompt[r] - prefill_left[r]) + take * (take + 1) // 2
            step_s += ctx_s * pairs
        if self.host is None:
            e.step_end_s = self.now + step_s
        else:
            e.step_end_s = self.now + step_s * self._host_stretch()
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
    def _decode_admit(self, d: DecodeEngine, di: int, schedule: bool = True) -> None:
        """Admit waiting requests FCFS while a sequence slot and KV are free; start their KV pulls.
        Reschedules the engine if it admitted any, unless ``schedule`` is False (the caller will)."""
        if not d.waiting:
            return
        now = self.now
        # the running sequences' KV at ``now``, once (admitting keeps the segment)
        running_kv = (d.sum_base_context + d.n_running * (d.origin_step + d.steps_done_by(now) + 1)
                      if d.n_running else 0)
        prompt = self.prompt
        gen_before = self.gen_before
        preemptions = self.preemptions
        changed = False
        vllm = self.vllm_sched[di]
        while d.waiting and d.n_running + len(d.joining) + (0 if vllm else len(d.in_transfer)) < d.max_seqs:
            r = d.waiting[0]
            need = prompt[r] + gen_before[r]
            if need > d.kv_budget_tokens - (running_kv + d.reserved_kv_tokens):
                break
            d.waiting.popleft()
            if self.pulled[r]:  # preempted after its pull: it joins at the next boundary and its context (mechanism
                # resume_cache: the part of it evicted since) is recomputed inside that step (`_decode_boundary`)
                d.recompute[r] = (d.recompute_tokens(r, need, running_kv + d.reserved_kv_tokens)
                                  if self.resume_cache[di] else need)
            d.reserved_kv_tokens += need
            d.in_transfer[r] = need
            d.admission_order[r] = None
            changed = True
            used = d.reserved_kv_tokens + running_kv
            if used > self.kv_peak[di]:
                self.kv_peak[di] = used
            if self.pulled[r]:
                delay = 0.0
            else:  # pull the prompt's KV from the prefill engine, which still holds it
                p = self.p_of[r]
                ph = self.pre[p].phys
                wait = (self.links.handshake_wait(p, di, ph.transfer_handshake_s, now) if ph.transfer_handshake_s > 0.0
                        else 0.0)
                if self.link_shared[di]:  # mechanism shared_link: the bytes move once the setup is done
                    setup = ph.transfer_latency_s
                    if self.host is not None:
                        setup *= self._host_stretch()
                    if self.admission[di] and preemptions[r] == 0:
                        setup += d.phys.admission_delay_s(d.n_running)
                    seq = self._seq = self._seq + 1
                    heappush(self._events, (now + wait + setup, _PULL_START, seq, r, di, self.epoch[r]))
                    continue
                delay = ph.transfer_time_s(prompt[r])
                if self.host is not None:  # mechanism shared_host: the pull is CPU work too
                    delay *= self._host_stretch()
                delay += wait
            if self.admission[di] and preemptions[r] == 0:  # mechanism stream_admission: the API server admits
                delay += d.phys.admission_delay_s(d.n_running)  # it between the streams (once: not a re-admission)
            seq = self._seq = self._seq + 1
            heappush(self._events, (now + delay, _TRANSFER_DONE, seq, r, di, self.epoch[r]))
        if changed and schedule:
            self._decode_schedule(d, di)

    # ---- KV pulls over shared links (mechanism shared_link, `repro.engine.links.Links`) ----------
    def _pull_start(self, r: int, di: int, epoch: int) -> None:
        """Request ``r``'s KV bytes start to move (its pull's setup is done)."""
        if epoch != self.epoch[r]:  # the admission was cancelled by a preemption
            return
        p = self.p_of[r]
        ph = self.pre[p].phys
        self.links.add(r, float(self.prompt[r] * ph.kv_bytes_per_token), p, di, ph.transfer_bandwidth_bytes_per_s,
                       self.now)
        self._link_schedule()

    def _link_schedule(self) -> None:
        """Push the event at which the next pull's bytes are through."""
        links = self.links
        wait = links.reschedule()
        if links.first >= 0:
            seq = self._seq = self._seq + 1
            heappush(self._events, (self.now + wait, _LINK, seq, 0, links.version, 0))

    def _link_done(self) -> None:
        """The next pull's bytes are through: it completes (and any other through by now)."""
        done = self.links.done(self.now)
        self._link_schedule()
        for r in done:
            self._transfer_done(r, self.d_of[r], self.epoch[r])

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

    def _decode_schedule(self, d: DecodeEngine, di: int) -> None:
        """(Re)compute the next boundary at which this engine's batch changes.

        Speed shortcut: one event per batch change, never one per step; the steps in between are
        the segment's closed form (`DecodeEngine.time_after`). Bumping ``version`` invalidates any event
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

    def _decode_boundary(self, d: DecodeEngine, di: int, k: int) -> None:
        """The engine reached the boundary ``k`` steps into its segment: settle completions, let the
        transferred requests join, preempt until the next step fits in KV, start a new segment. Under mechanism
        vllm_scheduler (vLLM's ``Scheduler.schedule``) it preempts among the running first and lets nobody join or
        be admitted on a step that preempted.

        The engine's counters (running sequences, their base context) are kept in locals while completions
        change them (a speed shortcut) and written back before the joins."""
        now = self.now
        n_running = d.n_running
        if n_running:
            d.origin_s = d.time_after(k)
            step = d.origin_step = d.origin_step + k
        else:
            d.origin_s = now
            step = d.origin_step
        finish_step = self.finish_step
        running = d.running
        d.admit_pending = False
        # 1. completions. Speed shortcut: a preempted sequence's heap entry is not removed; it is
        #    skipped here when its finish step no longer matches (lazy deletion)
        heap = d.finish_heap
        if heap and heap[0][0] <= step:
            sum_base = d.sum_base_context
            sum_finish = d.sum_finish_step
            freed = 0
            router = self.router
            ids = self.ids
            order = d.admission_order
            while heap and heap[0][0] <= step:
                fv, r = heappop(heap)  # fv: the finish step index recorded when it joined
                if finish_step[r] != fv or r not in running:
                    continue
                base = running[r]
                sum_base -= base
                freed += base + step + 1
                del running[r]
                del order[r]
                n_running -= 1
                sum_finish -= fv
                self.t_finish[r] = now
                self.status[r] = "ok"
                router.finish(ids[r], now)
            d.n_running = n_running
            d.sum_base_context = sum_base
            d.sum_finish_step = sum_finish
            d.freed_tokens += freed
        vllm = self.vllm_sched[di]
        stall = 0.0  # seconds this boundary's first step lasts longer (recomputed contexts)
        joined: list[int] = []
        # 2. joins, then 3. KV for the next step: preempt until it fits
        if vllm:
            preempted = self._preempt_to_fit(d, di, step, True)
            if d.joining and not preempted:
                joined = d.joining
                stall = self._join(d, step, joined, True)
                preempted = self._preempt_to_fit(d, di, step, True)
        else:
            if d.joining:
                joined = d.joining
                stall = self._join(d, step, joined, False)
            preempted = self._preempt_to_fit(d, di, step, False)
        n_running = d.n_running
        d.resegment()  # the batch (and the step origin) changed: a new segment starts here
        if self.host is not None:  # mechanism shared_host: the segment's steps at the host's speed now
            stretch = self._host_stretch()
            if stretch != d.stretch:
                d.stretch = stretch
                d.resegment()
            stall *= stretch
        if stall > 0.0 and n_running:  # the recompute runs inside the next step: every sequence waits for it
            d.origin_s += stall
        used = d.sum_base_context + n_running * (step + 1) + d.reserved_kv_tokens
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
            if vllm and preempted:  # vLLM admits nobody on a step that preempted: the next boundary will
                d.admit_pending = True
            else:
                self._decode_admit(d, di, schedule=False)
        self._decode_schedule(d, di)

    def _join(self, d: DecodeEngine, step: int, joining: list[int], vllm: bool) -> float:
        """The transferred requests ``joining`` join the running batch at boundary ``step`` (under vllm_scheduler
        while a sequence slot is free; the rest wait for the next boundary); returns the seconds the boundary's
        first step lasts longer for the contexts they recompute (preempted requests resuming)."""
        d.joining = []
        prompt = self.prompt
        gen_before = self.gen_before
        out = self.out
        finish_step = self.finish_step
        running = d.running
        heap = d.finish_heap
        n_running = d.n_running
        sum_base = d.sum_base_context
        sum_finish = d.sum_finish_step
        reserved = d.reserved_kv_tokens
        queued_out = 0
        stall = 0.0
        t_joined = self.t_joined
        router = self.router
        ids = self.ids
        recompute = d.recompute
        order = d.admission_order
        for r in joining:
            if vllm and n_running >= d.max_seqs:
                d.joining.append(r)
                continue
            if recompute:
                ctx_tokens = 0
                if r in recompute:
                    ctx_tokens = recompute[r]
                    del recompute[r]
                if ctx_tokens:  # a resumed preempted sequence: its context is recomputed in this step
                    stall += d.phys.prefill_per_token_s * ctx_tokens
                    if d.phys.prefill_ctx_s > 0.0:  # mechanism attention_context: over the context before it
                        done = prompt[r] + gen_before[r] - ctx_tokens
                        stall += d.phys.prefill_ctx_s * d.phys.attention_pairs(done, ctx_tokens)
            if vllm:  # vLLM preempts the most recently scheduled of its running requests
                del order[r]
                order[r] = None
            if math.isnan(t_joined[r]):  # its decode starts: the ledger counts it down from here
                t_joined[r] = self.now
                router.decode_started(ids[r], self.now)
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
        d.n_running = n_running
        d.sum_base_context = sum_base
        d.sum_finish_step = sum_finish
        d.reserved_kv_tokens = reserved
        return stall

    def _preempt_to_fit(self, d: DecodeEngine, di: int, step: int, running_only: bool) -> bool:
        """Preempt the most recently admitted until the next step (boundary ``step``) fits in KV; whether any was.
        A request still pulling its KV is cancelled, unless ``running_only`` (vllm_scheduler: vLLM preempts only
        running requests); the oldest running one always progresses. Under resume_cache each preempted request's
        freed blocks are remembered (`_recompute_tokens`)."""
        budget = d.kv_budget_tokens
        n_running = d.n_running
        sum_base = d.sum_base_context
        reserved = d.reserved_kv_tokens
        if not (n_running and sum_base + n_running * (step + 1) + reserved > budget):
            return False
        running = d.running
        finish_step = self.finish_step
        order = d.admission_order
        cache = self.resume_cache[di]
        while n_running and sum_base + n_running * (step + 1) + reserved > budget:
            if running_only:
                r = -1
                for q in reversed(order):
                    if q in running:
                        r = q
                        break
            else:
                r = next(reversed(order))
            del order[r]
            self.preemptions[r] += 1
            d.waiting.appendleft(r)
            if r in d.in_transfer:
                need = d.in_transfer.pop(r)
                reserved -= need
                d.freed_tokens += need
                self.epoch[r] += 1
                if r in self.links.left:  # its bytes stop moving
                    self.links.remove(r, self.now)
                    self._link_schedule()
                if r in d.recompute:
                    del d.recompute[r]
                continue
            before = sum_base + n_running * (step + 1) + reserved
            base = running[r]
            del running[r]
            n_running -= 1
            sum_base -= base
            d.sum_finish_step -= finish_step[r]
            self.gen_before[r] = base + step - self.prompt[r]
            finish_step[r] = -1
            d.queued_output_tokens += self.out[r]
            d.freed_tokens += base + step + 1
            if cache:
                d.free_ahead[r] = budget - before if before < budget else 0
                d.freed_at[r] = sum_base + n_running * (step + 1) + reserved + d.freed_tokens
        d.n_running = n_running
        d.sum_base_context = sum_base
        d.reserved_kv_tokens = reserved
        return True

    # ---- oracle ------------------------------------------------------------------------------
    def _oracle_backlog(self, role: Role, i: int, now: float) -> float:
        """The true remaining work (seconds) on instance ``i`` of ``role`` at ``now``: what
        ``backlog="oracle"`` hands the policy instead of the ledger's estimate."""
        return self.pre[i].oracle_backlog(now) if role == "prefill" else self.dec[i].oracle_backlog(now)

    # ---- output ------------------------------------------------------------------------------
    def _journal(self) -> pd.DataFrame:
        return journal_frame(
            ids=self.ids, family=self.family, slo=self.slo, prompt=self.prompt, out=self.out, pred=self.pred,
            prefill_names=[e.name for e in self.pre], decode_names=[d.name for d in self.dec], p_of=self.p_of,
            d_of=self.d_of, status=self.status, reason=self.reason, arrival=self.arrival, t_pre_end=self.t_pre_end,
            t_joined=self.t_joined, t_first=self.t_first, t_finish=self.t_finish, preemptions=self.preemptions)
