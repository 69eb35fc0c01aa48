"""The paper's router (§III): `MarginalCost`, which scores every (prefill, decode) pair by the completion
time the request would see there, in seconds (backlog, its own priced work, post-admission cache
pressure, SLO tightness), and takes the argmin. The class docstring holds the formula, where each term
comes from in the paper and how this harness reads what the paper leaves unsaid (docs/ROUTER_READING.md).

Its options are `repro.routing.policies.scoring.MarginalCostBase`'s (keyword arguments of the
constructor) plus the term switch ``use_own_work`` and the reading (``ledger_anchor``, ``tpot_reading``);
the prior readings are named subclasses in `repro.routing.policies.readings`. Registered in
`repro.routing.policies` as ``marginal_cost``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from repro.errors import check_choice
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import (
    NO_HEALTHY,
    ClusterView,
    Decision,
    InstanceSignals,
    PoolArrays,
    Rejection,
    RequestInfo,
)
from repro.routing.policies.pricing import marginal_cost_best, marginal_cost_pairs, marginal_cost_parts
from repro.routing.policies.scoring import MarginalCostBase, ScorerOptions
from repro.routing.policies.vectorized import VectorParts, take
from repro.vocab import LEDGER_ANCHORS, TPOT_READINGS


@dataclass(frozen=True)
class MarginalCostOptions(ScorerOptions):
    """`MarginalCost`'s options: the scorers' (`repro.routing.policies.scoring.ScorerOptions`) and its reading."""

    use_own_work: bool = field(default=True, metadata={"help": "the request's own priced work (tau_pre + tau_xfer "
                                                                "+ o * tau_dec(n_d))"})
    ledger_anchor: str | None = field(default=None, metadata={"help": "decode_start or prefill_answer "
                                                                      "(repro.vocab.LedgerAnchor); none: the class's"})
    tpot_reading: str | None = field(default=None, metadata={"help": "batch or backlog (repro.vocab.TpotReading); "
                                                                     "none: the class's"})


class MarginalCost(MarginalCostBase):
    r"""The paper's router (§III): it "scores every candidate instance by the completion time this
    request would experience there, combining seconds-of-backlog, the request's own priced work,
    post-admission cache pressure, and SLO tightness" (§I), where "backlog(d) is observed in real
    seconds, while the request's own work is priced using tau_dec and tau_pre" (§III-B); every
    (prefill p, decode d) pair is scored and the argmin taken (ties: fewer in-flight requests, then
    round-robin).

    The score, every term in seconds (``L`` prompt tokens; ``o`` = o_hat, the predictor's output
    estimate in tokens; ``n_d`` requests in flight on d; the router's `CostModel` prices
    ``tau_pre(L)``, ``tau_xfer(L)`` (s) and ``tau_dec(n)`` (s per output token with n co-running);
    ``T_ttft``, ``T_tpot`` the request's class targets)::

        score(p, d) = backlog(p)                                        [use_backlog]
                    + tau_pre(L) + tau_xfer(L)                          [use_own_work]
                    + backlog(d)                                        [use_backlog]
                    + o * tau_dec(n_d)                                  [use_own_work]
                    + T_ttft * max(0, u_d - u_safe) / (1 - u_safe)      [use_cache_pressure]
                    + w_slo * ( max(0, TTFT_hat - T_ttft)                [use_slo]
                              + o * max(0, TPOT_hat - T_tpot) )

        TTFT_hat = backlog(p) + tau_pre(L) + tau_xfer(L) + tau_dec(n_d)
        TPOT_hat = tau_dec(n_d)                           (tpot_reading="batch", the default)
        u_d      = (kv_usage_d * C + L + o) / C    (C = KV capacity, tokens)

    Where each term comes from:

    - backlog(p), backlog(d): the router's ledger (`repro.routing.ledger`), "an in-flight ledger
      yielding seconds-of-backlog" (§IV-A): the priced seconds of the work the router booked on
      that instance that remain on the real clock (prefill: a FCFS queue's tail; decode: the sum of
      each booked request's remaining seconds). Both at full weight, added to the request's own
      priced work: "backlog(d) is observed in real seconds, while the request's own work is priced
      using tau_dec and tau_pre. If those constants do not match the deployment hardware, the two
      terms are expressed in different units, the size-aware terms are effectively silenced, and
      the scorer degenerates into queue counting" (§III-B). With a cost model that prices decode
      too cheaply the ledger books every request as ending (true / priced) x too soon on the real
      clock, so backlog(d) drains while the requests still run; where it has drained, all that
      tells instances apart is ``o * tau_dec(n_d)``, which grows with n_d alone: the argmin counts
      requests (JSQ), "letting token load skew" (§V-B).
    - tau_pre(L) + tau_xfer(L) + o * tau_dec(n_d): "the request's own priced work" (§I); the
      transfer term is the one "the scorer already accommodates" (§VI, Scope).
    - Cache pressure: "post-admission cache pressure" (§I), from "cache occupancy polled every
      50 ms" (§IV-A), here the polled usage plus the request's own tokens.
    - The SLO hinge: "SLO tightness" (§I), the class's TTFT/TPOT targets (§IV-B).

    Where the paper is silent (its §III-A formula is not in the text we have), the simplest reading:

    - Weights: every term at weight 1 in seconds ("a scoring function with hand-set weights whose
      constants, not weights, were fitted", §VI); ``slo_weight`` (default 1) is the only weight.
    - Cache-pressure shape: zero up to a safe fraction u_safe of the KV budget (default 0.8), then
      linear, reaching one TTFT target of the request's class at a full cache: it is inert while
      the budget does not saturate, as §V-G reports ("Cache pressure contributes nothing
      measurable here because the 60k-token KV budget never saturates").
    - SLO hinge: the overrun of the score's own predictions beyond the class's targets, in seconds,
      with the same weight for both classes (tightness enters through the tighter targets).
      TTFT_hat is the score's prefill side plus one decode step (the SLO targets' own definition,
      `repro.routing.cost_model.slo_from_constants`). TPOT_hat is the per-token time the request
      would see in the batch it joins: ``tau_dec(n_d)``, the decode rate under concurrency that
      calibration measures ("A five-minute benchmark of the target cluster (prefill latency curve,
      decode rate under concurrency) sets tau_pre, tau_dec, and the SLO targets", §III-B), with
      ``n_d`` the requests the router has in flight there. The TPOT hinge is
      ``o * max(0, TPOT_hat - T_tpot)``, the decode seconds beyond what the TPOT target allows. The
      decode backlog is already in the score once, at full weight; it does not slow each token of a
      continuously batching engine's newcomer by its own length (on a batching engine it shares the
      decode, it does not precede it). On the paper's constants this hinge needs ``n_d`` above
      ~486, past ``max_num_seqs`` 256: it is inert, as §V-G finds the TPOT side of SLO tightness.
      ``tpot_reading="backlog"`` is the alternative reading: TPOT_hat =
      ``(backlog(d) + o * tau_dec(n_d)) / o``, which with backlog(d) ~143 s per decode instance at
      the operating point implies ~0.25 s/token against ~0.016 s measured, so the hinge is always on
      and counts the backlog a second time.
    - The ledger (`ledger_anchor`, `repro.routing.ledger`): a request's priced decode work counts
      down from when its decode starts, and until then stays whole in backlog(d)
      (``decode_start``): "an in-flight ledger yielding seconds-of-backlog" (§IV-A) kept by a proxy
      that "executes the two-step disaggregated inference" sees the decode engine's first token, and
      nothing in the paper has work drain before it starts. ``prefill_answer`` is the alternative
      reading: the countdown restarts when the prefill answers, so a request waiting for a full
      engine's KV drains from its backlog unstarted, and that engine reads cheap and attracts more
      (herding: at 125 % predictor noise one decode instance of four took half the requests).

    Why these defaults: each is the reading that needs nothing the paper does not say and that a
    deployed proxy can run (the backlog counted once; work counted until it starts, from the
    engine's own stream). The alternative readings are registered as named readings for the sensitivity
    rows (`MarginalCostPrefillAnchor`, `MarginalCostBacklogTpot`, `MarginalCostPrior`).
    - A switched-off term is read nowhere: it leaves the score and the hinge's predictions
      (TTFT_hat, TPOT_hat) alike, as removing a feature (§V-G) requires. ``use_length=False``
      replaces o by ``default_output_tokens`` everywhere, the ledger's charges included.

    Options as in `MarginalCostBase` (the sampling, softmax and guard additions beyond the paper
    are off by default, so the default is the paper's scorer), plus ``use_own_work``: the
    request's own priced work (tau_pre + tau_xfer + o * tau_dec(n_d)); ``ledger_anchor``:
    ``decode_start`` or ``prefill_answer`` (`repro.vocab.LedgerAnchor`); ``tpot_reading``:
    ``batch`` or ``backlog`` (`repro.vocab.TpotReading`); None (default): the class's `READING`.
    """

    name = "marginal_cost"
    READING: tuple[str, str] = ("decode_start", "batch")
    """(ledger anchor, TPOT reading) when the options leave them None: this class's reading."""

    Options: ClassVar[type[ScorerOptions]] = MarginalCostOptions

    def __init__(self, cost_model: CostModel | None = None, **options: Any) -> None:
        super().__init__(cost_model, **options)
        self.ledger_anchor = self.READING[0] if self.ledger_anchor is None else self.ledger_anchor
        self.tpot_reading = self.READING[1] if self.tpot_reading is None else self.tpot_reading
        check_choice(self.name, "ledger_anchor", self.ledger_anchor, LEDGER_ANCHORS)
        check_choice(self.name, "tpot_reading", self.tpot_reading, TPOT_READINGS)

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        """`MarginalCostBase.place`'s decision; on a small pool in its usual case (below), `place_enumerated`'s
        compiled decision at once, without the dispatch in between (unless this class or this instance
        replaces `place_enumerated` or a method its pricing stands for)."""
        if (self.sample_d or self.temperature_s or self.admission_guard
                or view.n_prefill * view.n_decode >= self.VECTOR_MIN_PAIRS or not _own_decision(type(self))
                or "place_enumerated" in self.__dict__):
            return super().place(request, view)
        return self._best(request, view)

    def place_enumerated(self, request: RequestInfo, view: ClusterView) -> Decision:
        """`MarginalCostBase.place_enumerated`'s decision; the usual case (every healthy instance priced,
        the argmin: no sampling, softmax or guard) in one call of the compiled
        `repro.routing.policies.pricing.marginal_cost_best` (the same parts, scores and tie rule)."""
        if self.sample_d or self.temperature_s or self.admission_guard or not _own_pricing(type(self)):
            return super().place_enumerated(request, view)
        return self._best(request, view)

    def _best(self, request: RequestInfo, view: ClusterView) -> Decision:
        """The usual case's decision (`repro.routing.policies.pricing.marginal_cost_best`)."""
        self._tick += 1
        prices = self._prices_made
        if prices is None or prices.cost_model is not self.cost_model:
            prices = self._prices()
        best = marginal_cost_best(
            view.prefill, view.decode, self._tick, request.prompt_tokens,
            request.predicted_output_tokens if self.use_length else self.default_output_tokens,  # output_estimate
            request.slo_class, prices, self.use_backlog, self.use_own_work, self.use_cache_pressure,
            self.tpot_reading == "backlog", self.use_slo, self.slo_weight, self.cache_safe_fraction)
        return Rejection(NO_HEALTHY) if best is None else best

    def _priced_pairs(self, request: RequestInfo, prefill: list[InstanceSignals],
                      decode: list[InstanceSignals]) -> list[tuple[float, int, int, int, float]]:
        L, o, ttft_target, tpot_target, own_pre = self._request_terms(request)
        # the parts (`repro.routing.policies.pricing.marginal_cost_parts`); the guard's predicted TTFT (the
        # 5th element of a priced pair) is read only with the guard on
        pre_parts, dec_parts = marginal_cost_parts(
            prefill, decode, L, o, ttft_target, tpot_target, self._prices(), self.use_backlog, self.use_own_work,
            self.use_cache_pressure, self.tpot_reading == "backlog", self.cache_safe_fraction, self.admission_guard)
        return marginal_cost_pairs(pre_parts, dec_parts, own_pre if self.use_own_work else 0.0, ttft_target,
                                   self.use_slo, self.slo_weight)

    def _vector_parts(self, request: RequestInfo, pre: PoolArrays, dec: PoolArrays, pc: np.ndarray,
                      dc: np.ndarray) -> VectorParts:
        cm = self.cost_model
        L, o, ttft_target, tpot_target, own_pre = self._request_terms(request)
        if not self.use_own_work:
            own_pre = 0.0
        n_d = take(dec.in_flight, dc)
        zeros = np.zeros(n_d.size)
        a = (take(pre.backlog_s, pc) if self.use_backlog else np.zeros(pre.healthy.size if pc is None else pc.size))
        a = a + own_pre
        tau = cm.tau_dec(n_d.astype(np.float64))
        backlog = take(dec.backlog_s, dc) if self.use_backlog else zeros
        work = backlog + o * tau if self.use_own_work else backlog + 0.0
        first = tau if self.use_own_work else zeros
        cache = self._cache_pressure_vec(take(dec.kv_usage, dc), L, o, ttft_target) if self.use_cache_pressure else 0.0
        own = o * tau if self.use_own_work else zeros
        tpot = np.maximum(0.0, (work if self.tpot_reading == "backlog" else own) - o * tpot_target)
        b = work + cache
        guard = self.admission_guard
        return VectorParts(a, b, first, tpot, take(pre.in_flight, pc), n_d,
                           self._guard_prefill_vec(take(pre.in_flight_tokens, pc), L) if guard else None,
                           tau + cache if guard else None, ttft_target, self.slo_weight)

    def _vector_scores(self, v: VectorParts, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        a = v.a[rows][:, None]
        score = a + v.b[cols]
        if self.use_slo:
            hinge = np.maximum(0.0, (a + v.first[cols]) - v.ttft_target_s) + v.tpot[cols]
            score = score + (hinge if v.hinge_weight == 1.0 else v.hinge_weight * hinge)  # 1.0 * x is x
        return score


_HOOKS = ("_priced", "_priced_pairs", "_candidates", "_decide", "_request_terms", "output_estimate", "_prices")
_OWN_PRICING: dict[type, bool] = {}
_OWN_DECISION: dict[type, bool] = {}


def _own_pricing(cls: type) -> bool:
    """Whether ``cls`` prices as `MarginalCost` does (overrides none of the methods that its compiled
    decision, `MarginalCost.place_enumerated`, stands for); else that decision takes the methods' path."""
    own = _OWN_PRICING.get(cls)
    if own is None:
        own = _OWN_PRICING[cls] = all(getattr(cls, name) is getattr(MarginalCost, name) for name in _HOOKS)
    return own


def _own_decision(cls: type) -> bool:
    """Whether ``cls`` decides a small pool as `MarginalCost` does: it prices as `MarginalCost` (`_own_pricing`) and
    replaces neither `MarginalCost.place_enumerated` nor `MarginalCost._best`; else ``place`` takes the base's path."""
    own = _OWN_DECISION.get(cls)
    if own is None:
        own = _OWN_DECISION[cls] = _own_pricing(cls) and all(
            getattr(cls, name) is getattr(MarginalCost, name) for name in ("place_enumerated", "_best"))
    return own
