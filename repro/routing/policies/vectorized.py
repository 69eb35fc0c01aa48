"""Pricing a large pool with numpy: the marginal-cost scorers' vectorised path (`VectorizedPricing`,
`VectorizedPricing.place_vectorized`), which decides exactly as their enumeration
(`repro.routing.policies.scoring.MarginalCostBase.place_enumerated`), only faster from about 64 pairs.

A scorer states its score as per-candidate parts over prefill rows and decode columns (`VectorParts`:
numpy float64 arrays, seconds; the tiebreak parts in requests), read from the view's `PoolArrays`
with the float operations of its enumeration in the same order, so that every element of the score
matrix equals the enumerated score bit for bit. Only the block of rows and columns that can hold the
minimum is priced (`VectorizedPricing.place_vectorized` says why that is exact), and the enumeration's
tie rule (`repro.routing.policies.pricing.first_best`) decides among the near-minimal scores; where no
clear gap separates them, the enumeration decides. tests/test_router_scale.py checks the decisions,
and the random draws, against the enumeration on random views.

`VectorizedPricing` is a mixin of `repro.routing.policies.scoring.MarginalCostBase`: it reads the host's
options (``sample_d``, ``admission_guard``, ``cache_safe_fraction``), its `CostModel`, its state (``_tick``,
the tie rotation; ``_rng``, the sampling draws) and its enumeration (``_priced_pairs``, ``_decide``,
``_guard``). A scorer takes the vectorised path by implementing ``_vector_parts`` and ``_vector_scores``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from repro.routing.cost_model import CostModel
from repro.routing.policies.base import ClusterView, Decision, InstanceSignals, Placement, PoolArrays, RequestInfo
from repro.routing.policies.pricing import TIE_S, first_best


@dataclass(slots=True)
class VectorParts:
    """A scorer's per-candidate parts over candidate rows (prefill) and columns (decode), numpy arrays:
    score(p, d) = ``a[p] + b[d]`` + a hinge that couples them only through ``a[p] + first[d]``
    (`VectorizedPricing._vector_scores`), non-decreasing in ``a[p]`` with slope >= 1."""

    a: np.ndarray
    """Prefill side of the score (s), per row."""
    b: np.ndarray
    """Decode side of the score (s), per column."""
    first: np.ndarray
    """What the hinge adds to ``a`` to predict the TTFT (s), per column."""
    tpot: np.ndarray
    """The decode-only part of the hinge (s), per column (zeros where the scorer has none)."""
    in_flight_p: np.ndarray
    """Tiebreak part per row (requests)."""
    in_flight_d: np.ndarray
    """Tiebreak part per column (requests)."""
    guard_p: np.ndarray | None
    """The guard's prefill-side TTFT per row (s), when the guard is on."""
    guard_d: np.ndarray | None
    """The guard's decode-side TTFT per column (s), when the guard is on."""
    ttft_target_s: float
    """The request's TTFT target (s), where the hinge starts."""
    hinge_weight: float
    """Seconds of score per second of TTFT overrun."""


def take(values: np.ndarray, positions: np.ndarray | None) -> np.ndarray:
    """``values`` at the candidate ``positions`` (None: every instance, in pool order)."""
    return values if positions is None else values[positions]


def _pool_index(positions: np.ndarray | None, k: int) -> int:
    """The pool index of candidate ``k``."""
    return k if positions is None else int(positions[k])


def _signals_at(pool: PoolArrays, positions: np.ndarray | None, tick: int) -> list[InstanceSignals]:
    """The candidates at ``positions`` (None: all, in the tie rotation from ``tick``) as
    `InstanceSignals` (unnamed), in enumeration order."""
    n = pool.healthy.size
    idx = ((tick + np.arange(n)) % n if positions is None else positions).tolist()
    fields = (pool.backlog_s, pool.in_flight, pool.in_flight_tokens, pool.kv_usage, pool.kv_age_s, pool.healthy)
    if len(idx) <= 8:  # a few (sampled): element by element beats gathering
        b, n_, t, kv, age, ok = fields
        return [InstanceSignals(i, "", b.item(i), n_.item(i), t.item(i), kv.item(i), age.item(i), ok.item(i))
                for i in idx]
    return [InstanceSignals(i, "", *values) for i, *values in zip(idx, *(f[idx].tolist() for f in fields), strict=True)]


def _enumeration_rank(k: np.ndarray, positions: np.ndarray | None, n: int, tick: int) -> np.ndarray:
    """Where candidates ``k`` come in the enumeration: their place in the tie rotation starting at
    ``tick`` (every instance), or in ``positions`` (already in enumeration order)."""
    return (k - tick) % n if positions is None else k


class VectorizedPricing:
    """The vectorised path of a marginal-cost scorer (module docstring): a mixin of
    `repro.routing.policies.scoring.MarginalCostBase`, which provides what is declared here and the
    enumeration (``_priced_pairs``, ``_decide``, ``_guard``)."""

    cost_model: CostModel
    sample_d: int
    admission_guard: bool
    cache_safe_fraction: float
    _tick: int
    _rng: random.Random

    VECTOR_MIN_PAIRS = 64
    """From this many (prefill x decode) instances, `place` prices with numpy (`place_vectorized`);
    below it the enumeration is cheaper. Both decide the same (tests/test_router_scale.py)."""

    SAMPLED_VECTOR_MIN_INSTANCES = 64
    """With ``sample_d``, from this many instances in all: below it, reading every instance's signals
    costs less than making the arrays (measured, benchmarks/bench_router.py)."""

    # ---- the vectorised path (the same decisions, from the view's arrays) -----------------------
    def _vector_parts(self, request: RequestInfo, pre: PoolArrays, dec: PoolArrays, pc: np.ndarray,
                      dc: np.ndarray) -> VectorParts:
        """The scorer's parts over candidate rows ``pc`` and columns ``dc`` (indices into the pools),
        with the float operations of `_priced` in the same order (a subclass that has none is
        always enumerated)."""
        raise NotImplementedError

    def _vector_scores(self, v: VectorParts, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The score matrix (s) of candidate rows x columns (positions in ``v``), as `_priced`
        computes each element."""
        raise NotImplementedError

    def _candidate_positions(self, healthy: np.ndarray) -> np.ndarray | None:
        """`_candidates` as pool indices, in enumeration order (healthy ones in tie-rotation order, or
        ``sample_d`` of them: the same draws, `random.Random.sample` depends only on the population's
        size); None when that is the whole pool (the rotation is then applied to ties only)."""
        n = healthy.size
        start = self._tick % n if n else 0
        if n and np.count_nonzero(healthy) == n:
            if self.sample_d and self.sample_d < n:
                return np.array([(start + j) % n for j in self._rng.sample(range(n), self.sample_d)], dtype=np.intp)
            return None
        order = np.concatenate((np.arange(start, n), np.arange(0, start)))
        alive = order[healthy[order]]
        if self.sample_d and self.sample_d < alive.size:
            alive = alive[self._rng.sample(range(alive.size), self.sample_d)]
        return alive

    def place_vectorized(self, request: RequestInfo, view: ClusterView) -> Decision:
        """`place_enumerated`'s decision (argmin only, no temperature) from the view's `PoolArrays`.

        Each scorer's score is ``a[p] + b[d]`` plus a hinge on ``a[p] + first[d]``, and every float
        operation in it is non-decreasing in ``a[p]`` with slope >= 1: so the row of the smallest
        ``a`` holds the minimum ``m`` (exactly, in floats), only the columns where that row is within
        ~1e-9 s of ``m`` and the rows whose ``a`` is within a (generous) margin of the smallest can
        hold a near-minimal score, and only that block is priced. The enumeration's tie rule is then
        applied, in enumeration order, to the scores within 1e-9 s of ``m``: exact whenever no other
        score lies within 2 `TIE_S` above those (checked; otherwise the enumeration decides). Few
        sampled candidates are priced by the enumeration's own code (`_priced_pairs`)."""
        self._tick += 1
        pre, dec = view.arrays()
        pc = self._candidate_positions(pre.healthy)
        dc = self._candidate_positions(dec.healthy)
        n_rows = pre.healthy.size if pc is None else pc.size
        n_cols = dec.healthy.size if dc is None else dc.size
        if n_rows * n_cols < self.VECTOR_MIN_PAIRS:  # a few candidates (sampled, or mostly unhealthy)
            return self._decide(request, self._priced_pairs(request, _signals_at(pre, pc, self._tick),
                                                            _signals_at(dec, dc, self._tick)))
        v = self._vector_parts(request, pre, dec, pc, dc)
        if self.admission_guard:
            rejection = self._guard(request, float(v.guard_p.min() + v.guard_d.min()))
            if rejection is not None:
                return rejection
        p0 = int(np.argmin(v.a))
        row = self._vector_scores(v, slice(p0, p0 + 1), slice(None))[0]
        m = float(row.min())
        low = m + 1e-9
        hi = low + 2 * TIE_S
        cols = np.flatnonzero(row <= hi)
        margin = 1e-6 * (1.0 + abs(m) + v.ttft_target_s)  # >> the rounding of any score near m
        rows = np.flatnonzero(v.a <= float(v.a[p0]) + (hi - m) + margin)
        if rows.size == 1:
            if cols.size == 1:  # the minimum alone, with a clear gap above it
                return Placement(_pool_index(pc, p0), _pool_index(dc, int(cols[0])))
            scores = row[cols][None, :]
        else:
            scores = self._vector_scores(v, rows, cols)
        flat = np.flatnonzero(scores <= hi)
        vals = scores.ravel()[flat]
        if float(vals.max()) > low:  # a score just above the near-minimal ones: no clear gap, enumerate
            return self._decide(request, self._priced_pairs(request, _signals_at(pre, pc, self._tick),
                                                            _signals_at(dec, dc, self._tick)))
        r, c = rows[flat // cols.size], cols[flat % cols.size]
        if flat.size == 1:
            return Placement(_pool_index(pc, int(r[0])), _pool_index(dc, int(c[0])))
        start = self._tick
        order = np.lexsort((_enumeration_rank(c, dc, n_cols, start), _enumeration_rank(r, pc, n_rows, start)))
        r, c, vals = r[order], c[order], vals[order]
        ties = v.in_flight_p[r] + v.in_flight_d[c]
        if vals.min() == vals.max():
            k = int(np.argmin(ties))
            return Placement(_pool_index(pc, int(r[k])), _pool_index(dc, int(c[k])))
        best = first_best([(v_, t_, r_, c_, 0.0) for v_, t_, r_, c_ in zip(vals.tolist(), ties.tolist(), r.tolist(),
                                                                              c.tolist(), strict=True)])
        return Placement(_pool_index(pc, best[2]), _pool_index(dc, best[3]))

    def _cache_pressure_vec(self, kv_usage: np.ndarray, prompt_tokens: int, output_tokens: float,
                            ttft_target_s: float) -> np.ndarray:
        """`_cache_pressure_s` over an array of polled KV usages (s)."""
        cap = float(self.cost_model.kv_capacity_tokens)
        safe = self.cache_safe_fraction
        # u is non-decreasing in the usage (each rounded step is): if the fullest is safe, all are
        if not (float(kv_usage.max()) * cap + prompt_tokens + output_tokens) / cap > safe:
            return np.zeros(kv_usage.size)
        u = (kv_usage * cap + prompt_tokens + output_tokens) / cap
        return np.where(u > safe, ttft_target_s * (u - safe) / (1.0 - safe), 0.0)

    def _guard_prefill_vec(self, in_flight_tokens: np.ndarray, prompt_tokens: int) -> np.ndarray:
        """`_guard_prefill_s` over an array of prefill instances' queued tokens (s)."""
        cm = self.cost_model
        q = in_flight_tokens + prompt_tokens
        budget = max(1, int(cm.max_num_batched_tokens))
        return np.ceil(q / budget) * cm.tau_pre_base_s + q * cm.tau_pre_per_token_s + cm.tau_xfer(prompt_tokens)

