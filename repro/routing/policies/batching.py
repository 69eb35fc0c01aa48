"""Ours, beyond the paper, on the marginal-cost machinery (`repro.routing.policies.scoring`):
`MarginalCostBatching`, the marginal-cost scorer re-reasoned for continuously batching decode engines
(the decode backlog priced as the slowdown a newcomer shares with d's sequences, not at full weight),
and `MarginalCostPlus`, our router: that scorer with the admission guard on, its defaults tuned on
held-out traces (`repro.paper.tuning`). Formulas, every term in seconds, in each class's docstring;
options are keyword arguments of the constructor (`repro.routing.policies.scoring.MarginalCostBase`).
Registered in `repro.routing.policies`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from repro.routing.policies.base import InstanceSignals, PoolArrays, RequestInfo
from repro.routing.policies.pricing import batching_pairs
from repro.routing.policies.scoring import MarginalCostBase, ScorerOptions
from repro.routing.policies.vectorized import VectorParts, take


class MarginalCostBatching(MarginalCostBase):
    r"""Beyond the paper: the marginal-cost scorer re-reasoned for continuously batching decode
    engines (what `MarginalCost` was before the paper's own scorer took that name). The decode
    backlog enters as the slowdown a newcomer shares with d's in-flight sequences, not at full weight.

    With ``L`` = prompt tokens, ``o`` = output estimate (tokens), ``n_d`` = in-flight on d, the
    cost model's prices ``tau_pre(L)``, ``tau_xfer(L)``, ``tau_dec(n)`` (s, ``tau_dec_s`` at n=0,
    growing by ``slope`` per co-running sequence), and per-class targets ``T_ttft``, ``T_tpot`` (s)::

        score(p, d) = [backlog]  B_p + slope * min(R_d, n_d * o * tau_dec_s)      seconds
                    + own work   tau_pre(L) + tau_xfer(L) + o * tau_dec(n_d)        seconds
                    + [cache]    W_d = T_ttft * max(0, u_d - u_safe) / (1 - u_safe)  seconds
                    + [slo]      w_slo * (T_ttft,loose / T_ttft) * max(0, ttft_hat - T_ttft)
                                 + w_slo * o * max(0, tau_dec(n_d) - T_tpot)        seconds

        B_p      = seconds of priced prefill work queued on p (ledger): a FCFS prefill engine
                   makes the request wait for all of it
        R_d      = seconds of priced decode work outstanding on d (ledger). A continuously
                   batching decode engine does not queue a newcomer behind R_d; instead every
                   step it shares with the d's in-flight sequences is ``slope`` slower, for it and
                   for them, for min(its length, theirs): the marginal cost of joining d
        u_d      = post-admission KV fraction of d: (kv_usage_d * C + L + o) / C, from the
                   polled usage (measured, not the ledger's predicted tokens: with a noisy
                   predictor those would inflate the pressure), C = KV capacity (tokens)
        ttft_hat = B_p + tau_pre(L) + tau_xfer(L) + W_d + tau_dec(n_d)

    What it changes and why: the paper adds backlog(d) at full weight, as if the request queued
    behind it, which a batching engine does not do; this variant prices instead the slowdown the
    request and d's sequences impose on each other. The price of that reasoning: with slope
    ~0.004 the decode backlog is nearly ignored, every decode term scales with tau_dec together
    (so §III-B's unit mismatch has little to silence), its TPOT hinge cannot fire (it needs
    tau_dec(n_d) > T_tpot, n_d > ~486 on the paper's constants, above max_num_seqs 256) and with
    simulator-derived constants its TTFT hinge hardly does. The cache term prices the expected
    KV-admission wait; the TTFT hinge weighs a
    tight request's overrun by the loose/tight ratio (3x). Each bracketed term is a switch, as in
    `MarginalCost` (the own work is always on here). Options as in `MarginalCostBase`.
    """

    name = "marginal_cost_batching"

    def _priced_pairs(self, request: RequestInfo, prefill: list[InstanceSignals],
                      decode: list[InstanceSignals]) -> list[tuple[float, int, int, int, float]]:
        cm = self.cost_model
        L, o, ttft_target, tpot_target, own_pre = self._request_terms(request)
        slo_scale = self.slo_weight * (cm.ttft_tight_s * cm.loose_factor) / ttft_target

        pre_parts = []
        for s in prefill:
            b = s.backlog_s if self.use_backlog else 0.0
            pre_parts.append((s.index, b, s.in_flight, self._guard_prefill_s(s, L)))
        dec_parts = []
        slope = cm.dec_concurrency_slope
        for s in decode:
            tau = cm.tau_dec(s.in_flight)
            cost = o * tau
            if self.use_backlog:
                cost += slope * min(s.backlog_s, s.in_flight * o * cm.tau_dec_s)
            wait = 0.0
            if self.use_cache_pressure:
                wait = self._cache_pressure_s(s, L, o, ttft_target)
                cost += wait
            if self.use_slo and tau > tpot_target:
                cost += self.slo_weight * o * (tau - tpot_target)
            dec_parts.append((s.index, cost, s.in_flight, tau + wait))
        return batching_pairs(pre_parts, dec_parts, own_pre, ttft_target, self.use_slo, slo_scale)

    def _vector_parts(self, request: RequestInfo, pre: PoolArrays, dec: PoolArrays, pc: np.ndarray,
                      dc: np.ndarray) -> VectorParts:
        cm = self.cost_model
        L, o, ttft_target, tpot_target, own_pre = self._request_terms(request)
        a = (take(pre.backlog_s, pc) if self.use_backlog else np.zeros(pre.healthy.size if pc is None else pc.size))
        a = a + own_pre
        n_d = take(dec.in_flight, dc)
        n = n_d.astype(np.float64)
        tau = cm.tau_dec(n)
        cost = o * tau
        if self.use_backlog:
            cost = cost + cm.dec_concurrency_slope * np.minimum(take(dec.backlog_s, dc), n * o * cm.tau_dec_s)
        wait = 0.0
        if self.use_cache_pressure:
            wait = self._cache_pressure_vec(take(dec.kv_usage, dc), L, o, ttft_target)
            cost = cost + wait
        if self.use_slo:
            cost = np.where(tau > tpot_target, cost + self.slo_weight * o * (tau - tpot_target), cost)
        first = tau + wait
        slo_scale = self.slo_weight * (cm.ttft_tight_s * cm.loose_factor) / ttft_target
        guard = self.admission_guard
        return VectorParts(a, cost, first, np.zeros(n_d.size), take(pre.in_flight, pc), n_d,
                           self._guard_prefill_vec(take(pre.in_flight_tokens, pc), L) if guard else None,
                           first if guard else None, ttft_target, slo_scale)

    def _vector_scores(self, v: VectorParts, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        a = v.a[rows][:, None]
        score = a + v.b[cols]
        if self.use_slo:
            ttft_hat = a + v.first[cols]
            score = np.where(ttft_hat > v.ttft_target_s,
                             score + v.hinge_weight * (ttft_hat - v.ttft_target_s), score)
        return score


@dataclass(frozen=True)
class PlusOptions(ScorerOptions):
    """`MarginalCostPlus`'s options: the scorers', with the admission guard on at margin 1.0 (its tuning)."""

    admission_guard: bool = field(default=True, metadata={"help": "reject requests predicted to miss their TTFT "
                                                                  "target everywhere"})
    guard_margin: float = field(default=1.0, metadata={"help": "the guard's threshold, a multiple of the class's "
                                                               "TTFT target", "lo": 1.0})


class MarginalCostPlus(MarginalCostBatching):
    """Our router: a marginal-cost scorer with our additions beyond the paper on (`MarginalCostBase`
    documents every option): it builds on `MarginalCostBatching`, with the admission guard at 1 x the
    class's TTFT target (``admission_guard=True``, ``guard_margin=1.0``: a request predicted to miss its
    TTFT target on every candidate is rejected) and every instance priced (``sample_d=0``; power-of-d
    sampling is an option). Only the guard's two defaults differ from the base scorer's.

    Tuned on held-out traces (`repro.paper.tuning`, ``benchmarks/tune_plus.py``): the scorer it builds on
    and the three defaults were chosen on the arrival traces of seeds 101, 102, 103 (`TUNING_SEEDS`),
    disjoint from every evaluation trace (1-10: the notebooks'), 3,000 requests per run, in notebook
    13's ten cells (mixed at 16 req/s on the seven pool shapes 1p2d .. 4p4d; chat, reasoning and documents
    at their saturation rates on 2p4d). Grid (20 settings): base {`MarginalCost` (the paper's),
    `MarginalCostBatching`} x ``sample_d`` {0, 2} x guard {off, 1.0, 1.25, 1.5, 2.0}. Objective: the
    worst gap, over the cells, of the setting's mean goodput minus the best baseline's (the paper's four
    policies, its router included, and the production routers), maximised; ties by the mean gap over
    the cells, then by fewer additions. Result (worst gap / mean gap, goodput fractions; simulator,
    deterministic; ``python benchmarks/tune_plus.py --evaluate``, commit a80f54d; the tuning columns are
    in ``data/tuning/marginal_cost_plus.csv``):

    ==========================================  ==================  ===================
    setting                                     tuning (101-103)    evaluation (1-10)
    ==========================================  ==================  ===================
    batching, d=0, guard 1.0 (chosen)           +0.003 / 0.216      +0.002 / 0.213
    batching, d=2, guard 1.0                    +0.000 / 0.211      +0.002 / 0.209
    batching, d=0, guard 1.25                   +0.001 / 0.204      -0.000 / 0.201
    paper's scorer, d=0, guard 1.0 (its best)   -0.001 / 0.163      +0.002 / 0.162
    ==========================================  ==================  ===================

    The batching base wins at every guard setting but one; the guard's margin matters most (lower is
    better down to 1.0, the smallest allowed), sampling little: the best two settings differ by less
    than the noise of 3 x 3,000 requests. On the evaluation traces the chosen setting is at worst 0.002
    above the best baseline (chat/2p4d), 0.51 above round-robin at 1p2d and 0.054 above the best
    other policy on mixed 2p4d; on those traces the paper's scorer with the guard would have tied it.
    """

    name = "marginal_cost_plus"

    Options: ClassVar[type[ScorerOptions]] = PlusOptions
