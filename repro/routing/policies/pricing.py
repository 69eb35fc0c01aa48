"""The policies' hot loops on plain numbers: the router's prices, the paper's scorer's parts, the pair
enumeration and the argmin; and the baselines' cyclic and least-loaded picks (`next_healthy`,
`fewest_in_flight`, `fewest_tokens`).

The marginal-cost scorers (`repro.routing.policies.marginal_cost`, `batching`) reduce each instance
to a few numbers (its *parts*, built from the `InstanceSignals` there) and price every (prefill,
decode) pair here: the O(P x D) loop of every decision on small pools, kept apart so that the
install compiles it (`repro.native`: the same source, the same float operations in the same order,
so the same decisions). The paper's scorer builds its parts here too (`marginal_cost_parts`), and its
usual decision (every healthy instance priced, the argmin: no sampling, softmax or guard) runs here
from the view's signals to the `Placement` in one call (`marginal_cost_best`): the compiled module
does the whole decision with native floats (an `InstanceSignals`' ``index`` and ``in_flight`` must then
be Python ints, as the router and the vectorised path hand them and as the parts' types always asked).

`Prices` holds the router's `CostModel` as native numbers, with its prices (``tau_pre``, ``tau_dec``,
``tau_xfer``, the SLO targets): the same float operations in the same order as `CostModel`'s methods,
so the same bits (the compiled ledger and scorers call it instead of the model's Python methods).

Parts (seconds unless said):

- `PrefillPart` ``(p, cost, in_flight, guard)``: instance index; the prefill side of the score
  (backlog(p), or 0 with the backlog off); requests in flight (the tie-break); the admission
  guard's predicted prefill-side TTFT (0.0 with the guard off).
- `DecodePart` ``(d, cost, in_flight, first, tpot_over, guard)``: instance index; the decode side
  of the score; requests in flight; what the TTFT hinge adds for d (the first token's step);
  the decode seconds beyond the TPOT budget; the guard's decode-side TTFT.
- `BatchingDecodePart` ``(d, cost, in_flight, first)``: the batching scorer's (its TPOT term is in
  ``cost``, its guard adds ``first``).
- `Priced` ``(score, tiebreak, p, d, guard TTFT)``: one priced pair; tiebreak = in-flight on p and d.
"""

from __future__ import annotations

import math
from typing import Any, Final

from repro.routing.cost_model import CostModel
from repro.routing.policies.base import InstanceSignals, Placement

TIE_S: Final = 1e-12
"""Two scores closer than this (s) tie; the tie goes to fewer in-flight requests on p and d together."""

PrefillPart = tuple[int, float, int, float]
DecodePart = tuple[int, float, int, float, float, float]
BatchingDecodePart = tuple[int, float, int, float]
Priced = tuple[float, int, int, int, float]


class Prices:
    """A `CostModel`'s constants as native numbers (s, tokens, bytes) and its prices, each written as
    `CostModel`'s method (and `repro.routing.cost_model.SLOTargets`) writes it: the same float operations
    in the same order, so the same bits (an integer constant is the same float). ``cost_model``: the model
    they were read from (a `CostModel` is frozen: a holder rebuilds its `Prices` only when it is handed
    another model)."""

    def __init__(self, cost_model: CostModel) -> None:
        self.cost_model = cost_model
        cm: Any = cost_model  # (read untyped: a model loaded from JSON may hold an int where a float is declared)
        self.tau_pre_base_s = float(cm.tau_pre_base_s)
        self.tau_pre_per_token_s = float(cm.tau_pre_per_token_s)
        self.tau_dec_s = float(cm.tau_dec_s)
        self.dec_concurrency_slope = float(cm.dec_concurrency_slope)
        self.kv_bytes_per_token = float(cm.kv_bytes_per_token)
        self.xfer_latency_s = float(cm.xfer_latency_s)
        self.xfer_bandwidth_bytes_per_s = float(cm.xfer_bandwidth_bytes_per_s)
        self.max_num_batched_tokens = float(cm.max_num_batched_tokens)
        self.kv_capacity_tokens = float(cm.kv_capacity_tokens)
        slo: Any = cm.slo
        self.ttft_tight_s = float(slo.ttft_tight_s)
        self.tpot_tight_s = float(slo.tpot_tight_s)
        self.loose_factor = float(slo.loose_factor)
        # the same bits as the model's own methods at a few points: a change to one side shows here at once
        probes = [(self.tau_pre(L), cm.tau_pre(L)) for L in (1, 1000, 5000)]
        probes += [(self.tau_xfer(L), cm.tau_xfer(L)) for L in (1, 5000)]
        probes += [(self.tau_dec(n), cm.tau_dec(n)) for n in (0, 7)]
        probes += [(self.ttft_s(c), slo.ttft_s(c)) for c in ("tight", "loose")]
        probes += [(self.tpot_s(c), slo.tpot_s(c)) for c in ("tight", "loose")]
        for mine, theirs in probes:
            if not (mine == theirs or (mine != mine and theirs != theirs)):  # (NaN: both)
                raise AssertionError(f"pricing.Prices prices {mine!r} where CostModel {cm.name!r} prices {theirs!r}: "
                                     "Prices must follow repro.routing.cost_model.CostModel's pricing")

    def tau_pre(self, prompt_tokens: float) -> float:
        """`CostModel.tau_pre` (s)."""
        steps = max(1, math.ceil(prompt_tokens / self.max_num_batched_tokens))
        return steps * self.tau_pre_base_s + self.tau_pre_per_token_s * prompt_tokens

    def tau_dec(self, running: float) -> float:
        """`CostModel.tau_dec` (s per output token)."""
        return self.tau_dec_s * (1.0 + self.dec_concurrency_slope * running)

    def tau_xfer(self, prompt_tokens: float) -> float:
        """`CostModel.tau_xfer` (s)."""
        return self.xfer_latency_s + prompt_tokens * self.kv_bytes_per_token / self.xfer_bandwidth_bytes_per_s

    def ttft_s(self, slo_class: str) -> float:
        """`repro.routing.cost_model.SLOTargets.ttft_s` (s)."""
        return self.ttft_tight_s * (1.0 if slo_class == "tight" else self.loose_factor)

    def tpot_s(self, slo_class: str) -> float:
        """`repro.routing.cost_model.SLOTargets.tpot_s` (s)."""
        return self.tpot_tight_s * (1.0 if slo_class == "tight" else self.loose_factor)


def cache_pressure_s(kv_usage: float, prompt_tokens: float, output_tokens: float, ttft_target_s: float,
                     capacity_tokens: float, safe: float) -> float:
    """The cache-pressure term ``T_ttft * max(0, u - u_safe) / (1 - u_safe)`` (s), ``u`` the post-admission
    KV fraction ``(kv_usage * C + L + o) / C`` (`repro.routing.policies.scoring.MarginalCostBase`)."""
    u = (kv_usage * capacity_tokens + prompt_tokens + output_tokens) / capacity_tokens
    return ttft_target_s * (u - safe) / (1.0 - safe) if u > safe else 0.0


def guard_prefill_s(prices: Prices, in_flight_tokens: float, prompt_tokens: float) -> float:
    """The admission guard's prefill-side TTFT on p (s): a batching engine pays the base once per step of
    queued tokens (``in_flight_tokens`` plus its own), then the KV transfer."""
    q = in_flight_tokens + prompt_tokens
    budget = max(1, int(prices.max_num_batched_tokens))
    return math.ceil(q / budget) * prices.tau_pre_base_s + q * prices.tau_pre_per_token_s + prices.tau_xfer(
        prompt_tokens)


def marginal_cost_parts(prefill: list[InstanceSignals], decode: list[InstanceSignals], prompt_tokens: float, o: float,
                        ttft_target: float, tpot_target: float, prices: Prices, use_backlog: bool, use_own_work: bool,
                        use_cache_pressure: bool, tpot_by_backlog: bool, safe: float,
                        guard: bool) -> tuple[list[PrefillPart], list[DecodePart]]:
    """The paper's scorer's parts of the candidates ``prefill`` and ``decode`` (`InstanceSignals`, in
    enumeration order), for a request of ``prompt_tokens`` and ``o`` output tokens (options as in
    `repro.routing.policies.marginal_cost.MarginalCost`; ``tpot_by_backlog``: ``tpot_reading="backlog"``;
    ``safe``: the cache-pressure u_safe; ``guard``: the admission guard's parts, else 0.0)."""
    L = prompt_tokens
    pre_parts: list[PrefillPart] = []
    for s in prefill:
        pre_parts.append((s.index, s.backlog_s if use_backlog else 0.0, s.in_flight,
                          guard_prefill_s(prices, s.in_flight_tokens, L) if guard else 0.0))
    cap = prices.kv_capacity_tokens
    dec_parts: list[DecodePart] = []
    for s in decode:
        n = s.in_flight
        tau = prices.tau_dec(n)
        backlog = s.backlog_s if use_backlog else 0.0
        work = o * tau if use_own_work else 0.0
        first = tau if use_own_work else 0.0  # the first token's decode step, in TTFT_hat
        cache = cache_pressure_s(s.kv_usage, L, o, ttft_target, cap, safe) if use_cache_pressure else 0.0
        # decode seconds beyond the TPOT budget: o * (TPOT_hat - T_tpot), TPOT_hat = tau_dec(n_d), the
        # per-token time of the batch it joins (``batch``), or (backlog + own work) / o (``backlog``)
        tpot_over = backlog + work - o * tpot_target if tpot_by_backlog else (work - o * tpot_target)
        dec_parts.append((s.index, backlog + work + cache, n, first, tpot_over if tpot_over > 0.0 else 0.0,
                          tau + cache))
    return pre_parts, dec_parts


def _marginal_cost_score(pre_own: float, dec_cost: float, first: float, tpot_over: float, ttft_target: float,
                         use_slo: bool, slo_weight: float) -> float:
    """One pair's score (s) by the paper's scorer, ``pre_own`` = cost(p) + own_pre (`marginal_cost_pairs`)."""
    score = pre_own + dec_cost
    if use_slo:
        ttft_over = pre_own + first - ttft_target
        score += slo_weight * ((ttft_over if ttft_over > 0.0 else 0.0) + tpot_over)
    return score


def _better(score: float, tiebreak: int, best_score: float, best_tiebreak: int) -> bool:
    """`first_best`'s rule: a candidate beats the best so far if its score is lower by more than `TIE_S`,
    or within `TIE_S` with a smaller tiebreak."""
    return score < best_score - TIE_S or (abs(score - best_score) <= TIE_S and tiebreak < best_tiebreak)


def marginal_cost_pairs(pre_parts: list[PrefillPart], dec_parts: list[DecodePart], own_pre: float,
                        ttft_target: float, use_slo: bool, slo_weight: float) -> list[Priced]:
    """Every pair in enumeration order (prefill-major), priced by the paper's scorer
    (`repro.routing.policies.marginal_cost.MarginalCost`): ``cost(p) + own_pre + cost(d)``, plus with
    ``use_slo`` ``slo_weight * (max(0, cost(p) + own_pre + first(d) - ttft_target) + tpot_over(d))``."""
    out: list[Priced] = []
    for p, pre_cost, pn, guard_pre in pre_parts:
        pre_own = pre_cost + own_pre
        for d, dec_cost, dn, first, tpot_over, guard_dec in dec_parts:
            score = _marginal_cost_score(pre_own, dec_cost, first, tpot_over, ttft_target, use_slo, slo_weight)
            out.append((score, pn + dn, p, d, guard_pre + guard_dec))
    return out


def marginal_cost_best(prefill: list[InstanceSignals], decode: list[InstanceSignals], tick: int,
                       prompt_tokens: float, o: float,
                       slo_class: str, prices: Prices, use_backlog: bool, use_own_work: bool,
                       use_cache_pressure: bool, tpot_by_backlog: bool, use_slo: bool, slo_weight: float,
                       safe: float) -> Placement | None:
    """The paper's scorer's decision over every healthy instance of the pools ``prefill`` and ``decode``
    (`InstanceSignals`; the tie rotation from ``tick``), without sampling, softmax or guard: exactly
    ``first_best(marginal_cost_pairs(*marginal_cost_parts(...)))`` (the same pairs in the same order, each
    part and score by the same float operations, the same tie rule), without building the parts or the
    priced pairs: a decode instance's part is computed again for each prefill candidate (the same bits), which
    on the small pools this path serves costs less than keeping it. None when a pool has no healthy instance."""
    ttft_target = prices.ttft_s(slo_class)
    tpot_target = prices.tpot_s(slo_class)
    own_pre = prices.tau_pre(prompt_tokens) + prices.tau_xfer(prompt_tokens) if use_own_work else 0.0
    cap = prices.kv_capacity_tokens
    n_pre = len(prefill)
    n_dec = len(decode)
    t_pre = tick % n_pre if n_pre else 0
    t_dec = tick % n_dec if n_dec else 0
    found = False
    best_score = 0.0
    best_tiebreak = 0
    best_p = best_d = 0
    for i in range(n_pre):
        sp = prefill[(t_pre + i) % n_pre]
        healthy: object = getattr(sp, "healthy")  # noqa: B009 (untyped: any truth value, as the enumeration reads it)
        if not healthy:
            continue
        pn = sp.in_flight
        pre_own = (sp.backlog_s if use_backlog else 0.0) + own_pre
        for j in range(n_dec):
            s = decode[(t_dec + j) % n_dec]
            healthy = getattr(s, "healthy")  # noqa: B009
            if not healthy:
                continue
            # `marginal_cost_parts`' decode part, written out
            n = s.in_flight
            tau = prices.tau_dec(n)
            backlog = s.backlog_s if use_backlog else 0.0
            work = o * tau if use_own_work else 0.0
            first = tau if use_own_work else 0.0
            cache = (cache_pressure_s(s.kv_usage, prompt_tokens, o, ttft_target, cap, safe) if use_cache_pressure
                     else 0.0)
            tpot_over = backlog + work - o * tpot_target if tpot_by_backlog else (work - o * tpot_target)
            score = _marginal_cost_score(pre_own, backlog + work + cache, first,
                                         tpot_over if tpot_over > 0.0 else 0.0, ttft_target, use_slo, slo_weight)
            if not found or _better(score, pn + n, best_score, best_tiebreak):
                found = True
                best_score, best_tiebreak, best_p, best_d = score, pn + n, sp.index, s.index
    return placement(best_p, best_d) if found else None


_PLACEMENTS: Final[dict[int, Placement]] = {}
"""(p * 64 + d) -> the `Placement` of (p, d) for p, d < 64 (`placement`)."""


def placement(p: int, d: int) -> Placement:
    """``Placement(p, d)``, made once per pair of small indices and shared (a `Placement` is frozen: a speed
    shortcut, no allocation per decision)."""
    if not (0 <= p < 64 and 0 <= d < 64):
        return Placement(p, d)
    key = p * 64 + d
    made = _PLACEMENTS.get(key)
    if made is None:
        made = _PLACEMENTS[key] = Placement(p, d)
    return made


def next_healthy(pool: list[InstanceSignals], start: int) -> int | None:
    """The baselines' round-robin step: the first healthy instance's index from ``start`` on, cyclically; None if
    none is healthy."""
    n = len(pool)
    for k in range(n):
        i = (start + k) % n
        if pool[i].healthy:
            return i
    return None


def fewest_in_flight(pool: list[InstanceSignals], offset: int) -> int | None:
    """The baselines' join-the-shortest-queue: the healthy instance with the fewest in-flight requests, ties
    round-robin from ``offset`` (its ``index``; None if none is healthy)."""
    best = -1
    best_n = 0
    n = len(pool)
    for k in range(n):
        s = pool[(offset + k) % n]
        if s.healthy and (best < 0 or s.in_flight < best_n):
            best, best_n = s.index, s.in_flight
    return None if best < 0 else best


def fewest_tokens(pool: list[InstanceSignals], offset: int) -> int | None:
    """The length threshold's decode choice for a long request: the healthy instance with the fewest in-flight
    tokens, then the fewest in-flight requests, ties round-robin from ``offset`` (its ``index``; None if none is
    healthy)."""
    best = -1
    best_tokens = 0.0
    best_n = 0
    n = len(pool)
    for k in range(n):
        s = pool[(offset + k) % n]
        if not s.healthy:
            continue
        tokens = s.in_flight_tokens
        if best < 0 or tokens < best_tokens or (tokens == best_tokens and s.in_flight < best_n):
            best, best_tokens, best_n = s.index, tokens, s.in_flight
    return None if best < 0 else best


def batching_pairs(pre_parts: list[PrefillPart], dec_parts: list[BatchingDecodePart], own_pre: float,
                   ttft_target: float, use_slo: bool, slo_scale: float) -> list[Priced]:
    """Every pair in enumeration order, priced by the batching scorer
    (`repro.routing.policies.batching.MarginalCostBatching`): ``cost(p) + own_pre + cost(d)``, plus with
    ``use_slo`` ``slo_scale * (ttft_hat - ttft_target)`` where ``ttft_hat = cost(p) + own_pre + first(d)``
    exceeds the target. The guard's TTFT is ``guard(p) + first(d)``."""
    out: list[Priced] = []
    for p, pb, pn, pre_wait in pre_parts:
        for d, dc, dn, first in dec_parts:
            score = pb + own_pre + dc
            if use_slo:
                ttft_hat = pb + own_pre + first
                if ttft_hat > ttft_target:
                    score += slo_scale * (ttft_hat - ttft_target)
            out.append((score, pn + dn, p, d, pre_wait + first))
    return out


def first_best(candidates: list[Priced]) -> Priced | None:
    """The scorers' argmin in enumeration order: a candidate wins if its score is lower by more than
    `TIE_S`, or within `TIE_S` with a smaller tiebreak (the exact rule of the enumeration, kept as it
    is: the journals depend on it). None for no candidates."""
    best: Priced | None = None
    for cand in candidates:
        if best is None or _better(cand[0], cand[1], best[0], best[1]):
            best = cand
    return best
