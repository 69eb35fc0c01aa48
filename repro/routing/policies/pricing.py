"""The marginal-cost scorers' pair enumeration and argmin, on plain numbers.

The marginal-cost scorers (`repro.routing.policies.marginal_cost`, `batching`) reduce each instance
to a few numbers (its *parts*, built from the `InstanceSignals` there) and price every (prefill,
decode) pair here: the O(P x D) loop of every decision on small pools, kept apart so that the
install compiles it (`repro.native`: the same source, the same float operations in the same order,
so the same decisions).

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

TIE_S = 1e-12
"""Two scores closer than this (s) tie; the tie goes to fewer in-flight requests on p and d together."""

PrefillPart = tuple[int, float, int, float]
DecodePart = tuple[int, float, int, float, float, float]
BatchingDecodePart = tuple[int, float, int, float]
Priced = tuple[float, int, int, int, float]


def marginal_cost_pairs(pre_parts: list[PrefillPart], dec_parts: list[DecodePart], own_pre: float,
                        ttft_target: float, use_slo: bool, slo_weight: float) -> list[Priced]:
    """Every pair in enumeration order (prefill-major), priced by the paper's scorer
    (`repro.routing.policies.marginal_cost.MarginalCost`): ``cost(p) + own_pre + cost(d)``, plus with
    ``use_slo`` ``slo_weight * (max(0, cost(p) + own_pre + first(d) - ttft_target) + tpot_over(d))``."""
    out: list[Priced] = []
    for p, pre_cost, pn, guard_pre in pre_parts:
        pre_own = pre_cost + own_pre
        for d, dec_cost, dn, first, tpot_over, guard_dec in dec_parts:
            score = pre_own + dec_cost
            if use_slo:
                ttft_over = pre_own + first - ttft_target
                score += slo_weight * ((ttft_over if ttft_over > 0.0 else 0.0) + tpot_over)
            out.append((score, pn + dn, p, d, guard_pre + guard_dec))
    return out


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
        if (best is None or cand[0] < best[0] - TIE_S
                or (abs(cand[0] - best[0]) <= TIE_S and cand[1] < best[1])):
            best = cand
    return best
