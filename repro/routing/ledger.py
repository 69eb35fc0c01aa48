"""The router's in-flight book: what it has dispatched, priced with its own cost model.

On dispatch the router charges the request's priced work (with *its* `CostModel`, right or wrong)
to the chosen prefill and decode instances; when the prefill answers it settles the prefill charge;
when the decode starts it starts counting down the decode charge; on completion (or failure) it
settles. Seconds-of-backlog per instance are read from here.
Nothing in this module looks at the engines' true state: with mispriced constants the book drifts
from reality exactly as a deployed router's would (paper §V-B, §VI).

Backlog models (seconds of priced work still outstanding at time ``now``):

- prefill (serial, FCFS queue): a workload process. Each dispatch pushes the instance's tail
  ``T = max(T, now) + tau_pre(L)``; ``backlog = max(T - now, 0)``; when the last in-flight request
  settles, a tail left in the future (overpriced work) is cleared.
- decode (parallel, continuous batching): a request's priced decode work is
  ``W = tau_xfer(L) + o * tau_dec``. When it counts down is the ledger's ``anchor``
  (`repro.vocab.LedgerAnchor`):

  - ``decode_start`` (default): until its decode starts the whole ``W`` is held in the backlog; from
    the start ``s`` (the simulator: the request joins the decode batch; the proxy: the decode
    engine's first streamed token, `decode_started`) it is expected to end at ``E = s + o * tau_dec``
    (its KV transfer is behind it). A request waiting in a full engine's queue keeps its whole work
    on that engine, as a deployed proxy that sees when decode starts can book it;
  - ``prefill_answer`` (an earlier reading, kept for comparison): the countdown starts at dispatch, ending at
    ``E = T_pre + W`` (``T_pre`` the prefill book's tail), and is re-anchored to ``now + W`` when the
    prefill answers, so a request still queued for decode drains out of the backlog without having
    started, fastest where the predictor under-estimates: a saturated instance reads cheap.

  ``backlog = held + sum(max(E_i - now, 0))``, kept in O(log n) per operation with a heap of end
  times and running sums.

Times are seconds on the caller's clock (virtual in the simulator, physics time in the proxy) and
must not go backwards.

Large pools: a `Ledger` built with ``arrays=True`` also keeps every book's state in numpy
arrays (`PoolBook`), updated on each charge / re-anchor / settle, and a heap of every decode end time
across its books, so that reading every instance's backlog at ``now`` (`Ledger.backlogs`) costs
O(expired entries) plus a few vectorised operations instead of one Python call per instance. The
arithmetic is the books' own (the same float operations in the same order per book), so the
values read are bit-for-bit those of ``book.backlog(now)``.
"""

from __future__ import annotations

import heapq

import numpy as np

from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies.pricing import Prices
from repro.vocab import LEDGER_ANCHORS


class PoolBook:
    """Array mirror of one pool's books, index i = instance i (see the module docstring).

    ``tail`` (prefill: the FCFS tail, s), ``sum_end`` / ``active`` (decode: sum of the end times
    still in the future, s, and their count), ``held`` (decode: the whole priced work of requests
    whose decode has not started, s), ``in_flight`` (requests), ``tokens`` (tokens).
    ``ends`` (decode only) is a heap of (end time s, instance) for every end time a book inserted.
    Written only by the books; read-only for everyone else.
    """

    __slots__ = ("tail", "sum_end", "active", "held", "in_flight", "tokens", "ends")

    def __init__(self, n: int) -> None:
        self.tail = np.zeros(n)
        self.sum_end = np.zeros(n)
        self.held = np.zeros(n)
        self.active = np.zeros(n, dtype=np.int64)
        self.in_flight = np.zeros(n, dtype=np.int64)
        self.tokens = np.zeros(n)
        self.ends: list[tuple[float, int]] = []


class MirroredBook:
    """What both books share: ``in_flight`` (requests charged and not settled), ``tokens`` (their
    tokens), and the `PoolBook` they write through to (``arrays=True``), or None."""

    __slots__ = ("in_flight", "tokens", "_mirror", "_index")

    def __init__(self, mirror: PoolBook | None = None, index: int = 0) -> None:
        self.in_flight = 0
        self.tokens = 0.0
        self._mirror = mirror
        self._index = index

    def backlog(self, now: float) -> float:
        """Seconds of priced work still outstanding at ``now`` (each kind of book says how)."""
        raise NotImplementedError


class SerialBook(MirroredBook):
    """Backlog of a FCFS server as a workload process (see module docstring).

    ``tail``: time (s) at which the priced work charged so far would end; ``in_flight``: requests
    charged and not settled; ``tokens``: their tokens.
    """

    # __slots__: a speed shortcut (one book per instance, read at every routing decision)
    __slots__ = ("tail",)

    def __init__(self, mirror: PoolBook | None = None, index: int = 0) -> None:
        super().__init__(mirror, index)
        self.tail = 0.0

    def _sync(self, m: PoolBook) -> None:
        i = self._index
        m.tail[i] = self.tail
        m.in_flight[i] = self.in_flight
        m.tokens[i] = self.tokens

    def charge(self, work_s: float, tokens: float, now: float) -> float:
        """Add work; returns the expected completion time of this work."""
        self.tail = max(self.tail, now) + work_s
        self.in_flight += 1
        self.tokens += tokens
        m = self._mirror
        if m is not None:
            self._sync(m)
        return self.tail

    def settle(self, tokens: float, now: float) -> None:
        """One charged request left this server (its ``tokens`` are released)."""
        self.in_flight -= 1
        self.tokens -= tokens
        if self.in_flight <= 0:
            self.in_flight = 0
            self.tokens = 0.0
            self.tail = min(self.tail, now)
        m = self._mirror
        if m is not None:
            self._sync(m)

    def backlog(self, now: float) -> float:
        """Seconds of priced work still outstanding at ``now``."""
        return self.tail - now if self.tail > now else 0.0


class ParallelBook(MirroredBook):
    """Sum of remaining priced work over requests that progress concurrently, plus the whole work of
    requests held (charged, not started: `hold`, `start`).

    Speed shortcut: instead of summing ``max(E_i - now, 0)`` over every entry at each read, it
    keeps the sum and count of the end times still in the future and expires passed ones from a
    heap (lazily: a moved or settled entry's heap item is skipped when it surfaces), so a read is
    ``sum_end - active * now + held``.
    """

    __slots__ = ("_heap", "_end", "_sum_end", "_active", "_seq", "_held", "_held_s")

    def __init__(self, mirror: PoolBook | None = None, index: int = 0) -> None:
        super().__init__(mirror, index)
        self._heap: list[tuple[float, int, str]] = []
        self._end: dict[str, tuple[float, int]] = {}  # key -> (end, insertion number)
        self._seq = 0
        self._sum_end = 0.0  # sum of end times of entries still in the future
        self._active = 0  # how many entries are still in the future
        self._held: dict[str, float] = {}  # key -> whole priced work (s) of a request not started
        self._held_s = 0.0  # their sum

    def _sync(self, m: PoolBook) -> None:
        i = self._index
        m.sum_end[i] = self._sum_end if self._active else 0.0  # nothing active reads 0 (reset at next touch)
        m.active[i] = self._active
        m.held[i] = self._held_s
        m.in_flight[i] = self.in_flight
        m.tokens[i] = self.tokens

    def _expire(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            end, seq, key = heapq.heappop(heap)
            entry = self._end.get(key)  # (compared field by field: native in the compiled module)
            if entry is not None and entry[0] == end and entry[1] == seq:
                self._sum_end -= end
                self._active -= 1
        if self._active == 0:
            self._sum_end = 0.0

    def expire(self, now: float) -> None:
        """Drop the end times passed at ``now`` from the running sums (what every operation does
        first); the `Ledger` calls it for the books whose earliest end time has passed."""
        self._expire(now)
        m = self._mirror
        if m is not None:
            self._sync(m)

    def _insert(self, key: str, end: float, now: float) -> None:
        self._seq += 1
        self._end[key] = (end, self._seq)
        if end > now:
            heapq.heappush(self._heap, (end, self._seq, key))
            self._sum_end += end
            self._active += 1
            if self._mirror is not None:
                heapq.heappush(self._mirror.ends, (end, self._index))

    def _remove(self, key: str, now: float) -> None:
        entry = self._end.get(key)  # (get and del, not pop(key, None): native in the compiled module)
        if entry is None:
            return
        del self._end[key]
        if entry[0] > now:
            self._sum_end -= entry[0]
            self._active -= 1

    def charge(self, key: str, end: float, tokens: float, now: float) -> None:
        """Add request ``key`` expected to end at ``end`` (s), holding ``tokens``."""
        self._expire(now)
        self._insert(key, end, now)
        self.in_flight += 1
        self.tokens += tokens
        m = self._mirror
        if m is not None:
            self._sync(m)

    def hold(self, key: str, work_s: float, tokens: float, now: float) -> None:
        """Add request ``key`` whose decode has not started: its whole priced ``work_s`` (s) counts in
        the backlog until `start`; it holds ``tokens``."""
        self._expire(now)
        self._held[key] = work_s
        self._held_s += work_s
        self.in_flight += 1
        self.tokens += tokens
        m = self._mirror
        if m is not None:
            self._sync(m)

    def _release(self, key: str) -> bool:
        """Drop ``key``'s held work; False if it held none."""
        work = self._held.get(key)
        if work is None:
            return False
        del self._held[key]
        self._held_s = self._held_s - work if self._held else 0.0  # empty: exactly 0 (no rounding residue)
        return True

    def start(self, key: str, end: float, now: float) -> None:
        """A held request's decode started: from now its work counts down, ending at ``end`` (s).
        A request not held (already started, or unknown) is left as it is."""
        self._expire(now)
        if self._release(key):
            self._insert(key, end, now)
        m = self._mirror
        if m is not None:
            self._sync(m)

    def reanchor(self, key: str, end: float, now: float) -> None:
        """Move an in-flight entry's expected end (e.g. when its decode actually starts)."""
        self._expire(now)
        if key in self._end:
            self._remove(key, now)
            self._insert(key, end, now)
        m = self._mirror
        if m is not None:
            self._sync(m)

    def settle(self, key: str, tokens: float, now: float) -> None:
        """Request ``key`` finished or failed: remove it and release its ``tokens``."""
        self._expire(now)
        if key in self._end:
            self._remove(key, now)
            self.in_flight -= 1
            self.tokens -= tokens
        elif self._release(key):
            self.in_flight -= 1
            self.tokens -= tokens
        if self.in_flight <= 0:
            self.in_flight = 0
            self.tokens = 0.0
        m = self._mirror
        if m is not None:
            self._sync(m)

    def backlog(self, now: float) -> float:
        """Seconds of priced work still outstanding at ``now`` (summed over the entries)."""
        self._expire(now)
        value = self._sum_end - self._active * now + self._held_s
        return value if value > 0.0 else 0.0


class _Entry:
    """One charged request: where it was placed and what was charged (a plain class, not a dataclass: the
    compiled module builds it natively)."""

    __slots__ = ("prefill", "decode", "prompt_tokens", "output_estimate", "decode_work_s", "prefill_open",
                 "decode_open")

    def __init__(self, prefill: int, decode: int, prompt_tokens: int, output_estimate: float,
                 decode_work_s: float) -> None:
        self.prefill = prefill
        self.decode = decode
        self.prompt_tokens = prompt_tokens
        self.output_estimate = output_estimate
        self.decode_work_s = decode_work_s
        self.prefill_open = True
        self.decode_open = True  # its decode has not started (the ``decode_start`` anchor)


class Ledger:
    """Per-instance books for a pool of ``n_prefill`` prefill and ``n_decode`` decode instances.

    ``arrays``: also keep the books' state in numpy arrays (``prefill_arrays``, ``decode_arrays``,
    `PoolBook`), for `backlogs`; None (default) turns them on from `ARRAYS_MIN_INSTANCES` instances,
    where one vectorised read beats a Python call per book.
    ``anchor``: when a request's decode work starts counting down (`repro.vocab.LedgerAnchor`, the
    module docstring): ``decode_start`` (default) or ``prefill_answer``.

    Events, in the order a request meets them: `dispatch` (placed), `prefill_done` (the prefill
    answered), `decode_started` (it joined the decode batch / its first token came; later calls, after
    a preemption, change nothing: a proxy cannot see one), `settle` (finished or failed).
    """

    ARRAYS_MIN_INSTANCES = 24

    def __init__(self, n_prefill: int, n_decode: int, cost_model: CostModel, arrays: bool | None = None,
                 anchor: str = "decode_start") -> None:
        if anchor not in LEDGER_ANCHORS:
            raise ConfigError(f"ledger: 'anchor' must be one of {list(LEDGER_ANCHORS)}, got {anchor!r}")
        self.anchor = anchor
        self._at_start = anchor == "decode_start"
        self.cost_model = cost_model
        self._prices = Prices(cost_model)  # its prices as native numbers (the same bits as its methods')
        if arrays is None:
            arrays = n_prefill + n_decode >= self.ARRAYS_MIN_INSTANCES
        self.prefill_arrays = PoolBook(n_prefill) if arrays else None
        self.decode_arrays = PoolBook(n_decode) if arrays else None
        self.prefill = [SerialBook(self.prefill_arrays, i) for i in range(n_prefill)]
        self.decode = [ParallelBook(self.decode_arrays, i) for i in range(n_decode)]
        self._entries: dict[str, _Entry] = {}

    def _priced(self) -> Prices:
        """`cost_model`'s prices (`repro.routing.policies.pricing.Prices`: its methods' arithmetic on native
        numbers), made again if ``cost_model`` was replaced."""
        prices = self._prices
        if prices.cost_model is not self.cost_model:
            prices = self._prices = Prices(self.cost_model)
        return prices

    def backlogs(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """(prefill, decode) seconds of priced work outstanding at ``now`` on every instance (new
        arrays), equal bit for bit to each book's ``backlog(now)``. Needs ``arrays=True``."""
        pa, da = self.prefill_arrays, self.decode_arrays
        if pa is None or da is None:
            raise ValueError("Ledger.backlogs needs a ledger built with arrays=True")
        self._expire(now)
        # tail - now is +0.0 when equal, negative when passed: the max is each book's ``backlog``
        return np.maximum(pa.tail - now, 0.0), np.maximum(da.sum_end - da.active * now + da.held, 0.0)

    def _expire(self, now: float) -> None:
        """Touch the decode books whose earliest end time has passed (array mirrors only; also on
        each dispatch, so that the heap of end times stays as small as the books' own heaps)."""
        da = self.decode_arrays
        if da is None:
            return
        ends = da.ends
        books = self.decode
        while ends and ends[0][0] <= now:
            books[heapq.heappop(ends)[1]].expire(now)

    def dispatch(
        self, key: str, prefill: int, decode: int, prompt_tokens: int, output_estimate: float, now: float
    ) -> None:
        """Charge a request placed on (prefill, decode) at time ``now``."""
        self._expire(now)
        cm = self._priced()
        pre_end = self.prefill[prefill].charge(cm.tau_pre(prompt_tokens), prompt_tokens, now)
        work = cm.tau_xfer(prompt_tokens) + output_estimate * cm.tau_dec_s
        if self._at_start:
            self.decode[decode].hold(key, work, prompt_tokens + output_estimate, now)
        else:
            self.decode[decode].charge(key, pre_end + work, prompt_tokens + output_estimate, now)
        self._entries[key] = _Entry(prefill, decode, prompt_tokens, output_estimate, work)

    def prefill_done(self, key: str, now: float) -> None:
        """The prefill answered: settle the prefill charge (``prefill_answer``: and re-anchor the
        decode charge at ``now``)."""
        e = self._entries.get(key)
        if e is None or not e.prefill_open:
            return
        e.prefill_open = False
        self.prefill[e.prefill].settle(e.prompt_tokens, now)
        if not self._at_start:
            self.decode[e.decode].reanchor(key, now + e.decode_work_s, now)

    def decode_started(self, key: str, now: float) -> None:
        """The request's decode started (``decode_start``: its priced decode ``o * tau_dec`` counts
        down from ``now``). Only the first call counts; with ``prefill_answer`` a no-op."""
        e = self._entries.get(key)
        if e is None or not e.decode_open:
            return
        e.decode_open = False
        if self._at_start:
            if e.prefill_open:  # the prefill's answer was not seen (it cannot be later than this)
                e.prefill_open = False
                self.prefill[e.prefill].settle(e.prompt_tokens, now)
            self.decode[e.decode].start(key, now + e.output_estimate * self._priced().tau_dec_s, now)

    def settle(self, key: str, now: float) -> None:
        """The request finished or failed: remove everything still charged for it."""
        e = self._entries.get(key)
        if e is None:
            return
        del self._entries[key]
        if e.prefill_open:
            self.prefill[e.prefill].settle(e.prompt_tokens, now)
        self.decode[e.decode].settle(key, e.prompt_tokens + e.output_estimate, now)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
