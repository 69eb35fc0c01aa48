"""Clock-agnostic engine core: the continuous-batching scheduler (`EngineCore`) and its steps (`Plan`).

Its parts live beside it: the KV blocks and the prefix cache in `repro.emulator.kv_blocks`
(`BlockPool`), a request and its states in `repro.emulator.seq` (`Seq`). The core knows nothing
about HTTP or the wall clock. A driver calls ``schedule(now)`` to get
the next step's `Plan` (or None when idle), waits ``plan.time_s`` (physics seconds) and calls
``complete(plan, now + plan.time_s)``. The HTTP engine (`repro.emulator.engine`) drives it on the
wall clock; `benchmarks/bench_emulator.py` drives the very same core on a virtual clock to get the
"what physics says for exactly these arrivals" reference.

Scheduling follows vLLM v1 (one unified step, FCFS):

1. Running sequences first, in admission order. Decode sequences take one token each; a sequence
   whose next token crosses a block boundary gets one more KV block. Partially prefilled
   sequences get their next chunk. When KV blocks run out, the most recently admitted running
   sequence is preempted (its blocks are freed, it goes back to the head of the queue and later
   recomputes prompt + generated tokens: vLLM's recompute preemption).
2. Then, if nothing was preempted this step, waiting sequences are admitted in FIFO order while
   the token budget (``max_num_batched_tokens``, decode tokens included), ``max_num_seqs`` and
   free KV blocks allow; a long prompt is chunked over several steps. A full-block prefix-cache
   hit skips the cached tokens (never the last prompt token).
3. A sequence carrying ``do_remote_prefill`` (P/D decode side) is given blocks for its whole
   prompt, then waits (not running, not blocking the queue) while its KV is pulled from the
   prefill engine; afterwards it computes its last prompt token in an ordinary step, which
   produces its first token.

Step time (physics seconds) for a batch with ``b`` prefill tokens and ``n`` one-token
sequences (decodes, and the single last-token computes after a KV pull or a full cache hit)
holding ``C`` context tokens::

    b > 0, n = 0:  prefill_time_s(b)
    b = 0, n > 0:  decode_step_s(n, C)
    b > 0, n > 0:  prefill_time_s(b) + decode_step_s(n, C) - decode_base_s   (weights read once)

Every sequence in the step gains its token at the end of the step. Generated counts are kept
arithmetically (a global decode-step counter and per-sequence offsets) and the per-sequence
events (finish, next KV block, stream flush) sit in heaps, so a step costs O(events log n),
not O(running sequences).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from repro.emulator.kv_blocks import BlockPool
from repro.emulator.seq import ABORTED, FINISHED, PULLING, RUNNING, WAITING, Seq
from repro.engine.physics import Physics

if TYPE_CHECKING:
    from repro.emulator.vllm_metrics import EngineMetrics


@dataclass
class Plan:
    """One scheduled step (token counts in tokens, times in physics seconds)."""

    items: list[tuple[Seq, int]]  # (seq, chunk) for sequences computing prompt tokens this step
    n_dec: int  # decode participants (one token each)
    n_one: int  # one-token computes counted as decode-like
    prefill_tokens: int
    context_tokens: int  # KV context the decode-like participants read
    time_s: float  # how long the step takes
    start: float  # when it was scheduled
    pulls: list[Seq] = field(default_factory=list)  # sequences whose KV pull must start now


class NullMetrics:
    """Metrics sink that records nothing (virtual replays)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None


class EngineCore:
    """The scheduler state machine (see module docstring)."""

    def __init__(
        self,
        physics: Physics,
        *,
        stream_interval_tokens: int = 1,
        stream_interval_s: float = 0.0,
        slow_factor: float = 1.0,
        handoff_timeout_s: float = 480.0,
        metrics: EngineMetrics | None = None,
    ):
        self.p = physics
        self.bs = physics.block_size
        self.pool = BlockPool(physics.kv_budget_blocks)
        self.waiting: deque[Seq] = deque()
        self.pulling: dict[str, Seq] = {}
        self.running: OrderedDict[str, Seq] = OrderedDict()
        self.pre: OrderedDict[str, Seq] = OrderedDict()
        self.dec: dict[str, Seq] = {}
        self.dec_ctx = 0
        self.dstep = 0
        self._fin: list = []
        self._blk: list = []
        self._ntf: list = []
        self.handoffs: OrderedDict[str, Seq] = OrderedDict()
        self.stream_n = max(1, int(stream_interval_tokens))
        self.stream_s = max(0.0, float(stream_interval_s))
        self.slow_factor = float(slow_factor)
        self.handoff_timeout_s = float(handoff_timeout_s)
        self.m: EngineMetrics | NullMetrics = metrics if metrics is not None else NullMetrics()
        self.last_end: float | None = None
        self._last_flush = 0.0
        self.num_preemptions = 0
        self.steps = 0
        self.live: dict[str, Seq] = {}

    # ---- queries -----------------------------------------------------------------------------
    def generated(self, seq: Seq) -> int:
        """Output tokens produced so far (EOS included)."""
        if seq.decoding:
            return seq.g0 + (self.dstep - seq.s0)
        return seq.g

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.pulling)

    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    def idle(self) -> bool:
        return not (self.running or self.waiting or self.pulling)

    # ---- requests in and out -----------------------------------------------------------------
    def add(self, seq: Seq) -> None:
        if seq.rid in self.live:
            raise ValueError(f"request id {seq.rid!r} is already in the engine")
        self.live[seq.rid] = seq
        self.waiting.append(seq)

    def abort(self, seq: Seq, now: float) -> None:
        """Drop a request wherever it is (client went away); frees its blocks."""
        if seq.state in (FINISHED, ABORTED):
            if self.handoffs.pop(seq.rid, None) is not None:
                self.pool.release(seq.blocks)
                seq.blocks = []
            return
        if seq.state == WAITING:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        elif seq.state == PULLING:
            self.pulling.pop(seq.rid, None)
        else:
            self._unrun(seq)
        self.pool.release(seq.blocks)
        seq.blocks = []
        seq.state = ABORTED
        seq.finish_reason = "abort"
        seq.finish_t = now
        seq.epoch += 1
        self.live.pop(seq.rid, None)
        self.m.on_abort(seq)
        if seq.notify:
            seq.notify()

    def release_handoff(self, rid: str, block_ids: list[int] | None = None) -> bool:
        """The decode engine has read this request's KV: free the held blocks."""
        seq = self.handoffs.get(rid)
        if seq is None:
            return False
        if block_ids is not None and list(block_ids) != list(seq.blocks):
            return False
        del self.handoffs[rid]
        self.pool.release(seq.blocks)
        seq.blocks = []
        return True

    def expire_handoffs(self, now: float) -> int:
        n = 0
        while self.handoffs:
            rid, seq = next(iter(self.handoffs.items()))
            if seq.handoff_expiry > now:
                break
            del self.handoffs[rid]
            self.pool.release(seq.blocks)
            seq.blocks = []
            n += 1
        return n

    def kv_arrived(self, seq: Seq, ok: bool, now: float) -> None:
        """The KV pull of a remote-prefill request finished (``ok``) or failed (recompute)."""
        if seq.state != PULLING:
            return
        del self.pulling[seq.rid]
        seq.pull_ok = ok
        if ok:
            seq.computed = seq.P - 1
            seq.kv_loaded = True
            self._register_hashes(seq, seq.computed)
        else:
            seq.computed = seq.cached_tokens
        seq.remote = None
        seq.state = WAITING
        self.waiting.appendleft(seq)

    def reset_prefix_cache(self) -> int:
        return self.pool.reset_cache()

    # ---- the step ----------------------------------------------------------------------------
    def schedule(self, now: float) -> Plan | None:
        p = self.p
        budget = p.max_num_batched_tokens
        preempted = False
        # 1) decode sequences that need a new block at this step
        blk = self._blk
        while blk and blk[0][0] <= self.dstep:
            _, _, seq, epoch = heapq.heappop(blk)
            if seq.epoch != epoch or not seq.decoding:
                continue
            if not self._grow(seq, 1, now):
                preempted = True
                continue
            self._push_blk(seq)
        budget -= len(self.dec)
        items: list = []
        # 2) running sequences with prompt tokens left
        if self.pre:
            for seq in list(self.pre.values()):
                if budget <= 0:
                    break
                if seq.state != RUNNING or seq.decoding:
                    continue
                chunk = min(seq.T - seq.computed, budget)
                need = -(-(seq.computed + chunk) // self.bs) - len(seq.blocks)
                if need > 0 and not self._grow(seq, need, now):
                    preempted = True
                    continue
                items.append((seq, chunk))
                budget -= chunk
        # 3) admissions
        pulls: list = []
        if not preempted:
            waiting = self.waiting
            max_seqs = p.max_num_seqs
            while waiting and len(self.running) < max_seqs:
                seq = waiting[0]
                if seq.remote is not None and not seq.kv_loaded:
                    if not self._admit_remote(seq):
                        break
                    waiting.popleft()
                    pulls.append(seq)
                    continue
                if budget <= 0:
                    break
                touched: list[int] = []
                looked = seq.computed == 0 and not seq.blocks
                if looked:
                    touched = self._lookup_prefix(seq)
                chunk = min(seq.T - seq.computed, budget)
                if not self._reserve(seq, seq.computed + chunk, touched):
                    break
                waiting.popleft()
                if looked:
                    self.m.on_prefix(seq.T, seq.cached_tokens)
                seq.state = RUNNING
                if seq.first_sched is None:
                    seq.first_sched = now
                    self.m.on_scheduled(seq, now)
                self.running[seq.rid] = seq
                self.pre[seq.rid] = seq
                items.append((seq, chunk))
                budget -= chunk
        n_dec = len(self.dec)
        if not items and not n_dec:
            return None if not pulls else Plan([], 0, 0, 0, 0, 0.0, now, pulls)
        ptok = 0
        n_one = 0
        ctx = self.dec_ctx
        pairs = 0
        for seq, chunk in items:
            if chunk == 1:
                n_one += 1
                ctx += seq.T
            else:
                ptok += chunk
                if p.prefill_ctx_s:  # mechanism attention_context: the chunk attends over its prompt's earlier tokens
                    pairs += p.attention_pairs(seq.computed, chunk)
        n = n_dec + n_one
        if ptok and n:
            t = p.prefill_time_s(ptok) + p.decode_step_s(n, ctx) - p.decode_base_s
        elif ptok:
            t = p.prefill_time_s(ptok)
        else:
            t = p.decode_step_s(n, ctx)
        if pairs:
            t += p.prefill_ctx_s * pairs
        return Plan(items, n_dec, n_one, ptok, ctx, t * self.slow_factor, now, pulls)

    def complete(self, plan: Plan, t_end: float) -> None:
        """Apply a finished step at time ``t_end``: tokens appear, requests finish."""
        self.steps += 1
        m = self.m
        n_dec = len(self.dec)  # participants still here (an abort may have left during the step)
        if plan.n_dec:
            self.dstep += 1
            self.dec_ctx += n_dec
            itl = t_end - self.last_end if self.last_end is not None else plan.time_s
            m.on_decode_tokens(n_dec, itl)
        new_tokens = n_dec
        first_notify = []
        for seq, chunk in plan.items:
            if seq.state != RUNNING or seq.decoding:
                continue
            seq.computed += chunk
            if seq.computed < seq.T:
                continue
            self._register_hashes(seq, min(seq.T, seq.P))
            seq.g += 1
            new_tokens += 1
            if seq.first_token_t is None:
                seq.first_token_t = t_end
                m.on_first_token(seq, t_end)
                first_notify.append(seq)
            if seq.g >= seq.target:
                self._finish(seq, t_end)
                continue
            del self.pre[seq.rid]
            seq.decoding = True
            seq.g0 = seq.g
            seq.s0 = self.dstep
            self.dec[seq.rid] = seq
            self.dec_ctx += seq.P + seq.g
            heapq.heappush(self._fin, (seq.s0 + seq.target - seq.g0, seq.order, seq, seq.epoch))
            self._push_blk(seq)
            if seq.stream and self.stream_n > 1:
                heapq.heappush(self._ntf, (self.dstep + self.stream_n, seq.order, seq, seq.epoch))
        m.on_step(plan.prefill_tokens + plan.n_one, new_tokens, plan.time_s)
        # finishes
        fin = self._fin
        while fin and fin[0][0] <= self.dstep:
            _, _, seq, epoch = heapq.heappop(fin)
            if seq.epoch != epoch or not seq.decoding:
                continue
            self._finish(seq, t_end)
        # stream notifications
        for seq in first_notify:
            if seq.notify and seq.state == RUNNING:
                seq.notify()
        if self.stream_n <= 1:
            for seq in self.dec.values():
                if seq.stream and seq.notify:
                    seq.notify()
        else:
            ntf = self._ntf
            while ntf and ntf[0][0] <= self.dstep:
                _, _, seq, epoch = heapq.heappop(ntf)
                if seq.epoch != epoch or not seq.decoding:
                    continue
                if seq.notify:
                    seq.notify()
                heapq.heappush(ntf, (self.dstep + self.stream_n, seq.order, seq, seq.epoch))
            if self.stream_s > 0.0 and t_end - self._last_flush >= self.stream_s:
                self._last_flush = t_end
                for seq in self.dec.values():
                    if seq.stream and seq.notify:
                        seq.notify()
        self.last_end = t_end

    # ---- internals ---------------------------------------------------------------------------
    def _push_blk(self, seq: Seq) -> None:
        g_need = len(seq.blocks) * self.bs + 1 - seq.P
        step = seq.s0 + (g_need - seq.g0)
        if step < seq.target + seq.s0 - seq.g0:  # only if it will still be running then
            heapq.heappush(self._blk, (step, seq.order, seq, seq.epoch))

    def _grow(self, seq: Seq, k: int, now: float) -> bool:
        """Give ``seq`` k more blocks, preempting from the tail of the running list if needed."""
        pool = self.pool
        while pool.num_free < k:
            if not self.running:
                return False
            victim = next(reversed(self.running.values()))
            self._preempt(victim, now)
            if victim is seq:
                return False
        seq.blocks.extend(pool.allocate(k))
        return True

    def _preempt(self, seq: Seq, now: float) -> None:
        g = self.generated(seq)
        self._unrun(seq)
        seq.g = g
        self.pool.release(seq.blocks)
        seq.blocks = []
        seq.computed = 0
        seq.cached_tokens = 0
        seq.T = seq.P + g
        seq.kv_loaded = False
        seq.remote = None
        seq.epoch += 1
        seq.state = WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1
        self.m.on_preempt(seq)

    def _unrun(self, seq: Seq) -> None:
        if seq.decoding:
            g = self.generated(seq)
            self.dec_ctx -= seq.P + g
            del self.dec[seq.rid]
            seq.g = g
            seq.decoding = False
        else:
            self.pre.pop(seq.rid, None)
        self.running.pop(seq.rid, None)

    def _finish(self, seq: Seq, t: float) -> None:
        if seq.decoding:
            seq.g = seq.target
        self._unrun(seq)
        seq.state = FINISHED
        seq.finish_t = t
        seq.epoch += 1
        reason = seq.finish_kind if seq.g >= seq.target else "length"
        seq.finish_reason = reason
        self.live.pop(seq.rid, None)
        if seq.prefill_only and reason == "length" and seq.blocks:
            seq.handoff_expiry = t + self.handoff_timeout_s
            self.handoffs[seq.rid] = seq
            seq.kv_params = {"remote_block_ids": list(seq.blocks)}
        else:
            self.pool.release(seq.blocks)
            seq.blocks = []
        self.m.on_finish(seq, t)
        if seq.notify:
            seq.notify()

    def _block_hashes(self, seq: Seq) -> list[int]:
        if seq.hashes is None:
            ids = seq.prompt_ids
            bs = self.bs
            h = 0x345678
            out = []
            for i in range(0, (seq.P // bs) * bs, bs):
                h = hash((h, tuple(ids[i:i + bs])))
                out.append(h)
            seq.hashes = out
        return seq.hashes

    def _lookup_prefix(self, seq: Seq) -> list[int]:
        hashes = self._block_hashes(seq)
        max_blocks = min(len(hashes), (seq.T - 1) // self.bs)
        if max_blocks <= 0 or not self.pool.cached:
            seq.cached_tokens = 0
            return []
        touched = self.pool.touch_prefix(hashes, max_blocks)
        seq.blocks = list(touched)
        seq.computed = len(touched) * self.bs
        seq.cached_tokens = seq.computed
        return touched

    def _register_hashes(self, seq: Seq, upto_tokens: int) -> None:
        nfull = min(upto_tokens, seq.P) // self.bs
        if nfull <= 0:
            return
        hashes = self._block_hashes(seq)
        pool = self.pool
        blocks = seq.blocks
        for i in range(min(nfull, len(blocks), len(hashes))):
            pool.register(blocks[i], hashes[i])

    def _reserve(self, seq: Seq, tokens: int, touched: list[int]) -> bool:
        """KV blocks for ``seq``'s first ``tokens`` tokens: allocated, True. When the pool cannot hold them,
        nothing is allocated, the prefix-cache blocks its lookup took (``touched``) are handed back and the
        sequence starts over (vLLM's ``KVCacheManager.allocate_slots`` returning None), False."""
        need = -(-tokens // self.bs) - len(seq.blocks)
        if need > self.pool.num_free:
            if touched:
                self.pool.release(touched)
                seq.blocks = []
                seq.computed = 0
                seq.cached_tokens = 0
            return False
        if need > 0:
            seq.blocks.extend(self.pool.allocate(need))
        return True

    def _admit_remote(self, seq: Seq) -> bool:
        touched = self._lookup_prefix(seq)
        if not self._reserve(seq, seq.P, touched):
            return False
        self.m.on_prefix(seq.T, seq.cached_tokens)
        seq.transfer_tokens = max(0, seq.P - seq.computed)
        seq.state = PULLING
        self.pulling[seq.rid] = seq
        return True
