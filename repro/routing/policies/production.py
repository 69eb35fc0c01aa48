"""Production-router baselines, each restated from its published source as a `Policy`.

Four routers that people run today in front of P/D-disaggregated vLLM, written from their
sources' formulas (not their code) and mapped onto what a `ClusterView` offers: the router's own
in-flight ledger per instance (``in_flight`` requests, ``in_flight_tokens``, ``backlog_s``), the
polled ``kv_usage`` and health. Each pool (prefill, decode) is chosen independently, as every one
of these routers does in its P/D mode (one policy instance per pool).

Prefix caches are reset before every run of this harness (the correctness gate), and the
paper's workloads share no prefixes, so every prefix/overlap term of these routers is zero here;
each docstring says where that term would enter.

This module only defines the classes; the registry (`repro.routing.policies.POLICIES`) names
them. Options are keyword arguments of each constructor, units in each class's docstring.

All randomness comes from a per-policy ``random.Random(random_state)``: same seed, same inputs,
same placements.
"""

from __future__ import annotations

import math
import random

from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import (
    NO_HEALTHY,
    ClusterView,
    Decision,
    InstanceSignals,
    Placement,
    Policy,
    Rejection,
    RequestInfo,
)


def _healthy(pool: list[InstanceSignals]) -> list[InstanceSignals]:
    """The healthy instances of ``pool``, in pool order."""
    return [s for s in pool if s.healthy]


def _check_seed(name: str, random_state: object) -> int:
    """``random_state`` as a seed, or a `ConfigError` naming policy ``name``'s option."""
    if isinstance(random_state, bool) or not isinstance(random_state, int) or random_state < 0:
        raise ConfigError(f"{name}: option 'random_state' must be a non-negative integer, got {random_state!r}")
    return int(random_state)


class PerPoolPolicy(Policy):
    """A router that picks the prefill and the decode instance independently, each from its own
    pool, as vllm-router, Dynamo, llm-d and SGLang treat P/D pools. Subclasses implement `_pick`;
    no healthy instance in either pool means no placement."""

    def _pick(self, request: RequestInfo, pool: list[InstanceSignals], role: str) -> int | None:
        """The chosen instance's index in ``pool`` (``role`` is "prefill" or "decode"), or None."""
        raise NotImplementedError

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:
        p = self._pick(request, view.prefill, "prefill")
        d = self._pick(request, view.decode, "decode")
        if p is None or d is None:
            return Rejection(NO_HEALTHY)
        return Placement(p, d)


class PowerOfTwo(PerPoolPolicy):
    """Power-of-two choices on in-flight load (vllm-router / SGLang router ``power_of_two``).

    Source: vllm-project/router, ``src/policies/power_of_two.rs`` (the same policy as
    sgl-project/sglang ``sgl-model-gateway/src/policies/power_of_two.rs``, of which vllm-router is
    a fork). Formula: among the healthy workers draw two *distinct* indices uniformly at random;
    each worker's load is ``cached_load + local_load`` where ``local_load`` is the router's own
    count of requests it has in flight on the worker and ``cached_load`` an optional externally
    polled load (``/get_load``; vLLM serves none, so it is 0); the lower load wins, a tie goes to
    the first draw. With one healthy worker it is taken; with none, no placement.

    Mapping: load = ``InstanceSignals.in_flight`` (the ledger's in-flight count: dispatched and not
    yet settled), per pool. In P/D mode vllm-router runs one policy per pool, so the prefill and
    the decode instance are drawn independently. No prefix term exists in this policy.

    Parameters
    ----------
    random_state : seed (integer >= 0) of the two draws.
    """

    name = "power_of_two"

    def __init__(self, cost_model: CostModel | None = None, *, random_state: int = 0) -> None:
        super().__init__(cost_model)
        self.random_state = _check_seed(self.name, random_state)
        self._rng = random.Random(self.random_state)

    def _pick(self, request: RequestInfo, pool: list[InstanceSignals], role: str) -> int | None:
        healthy = _healthy(pool)
        if not healthy:
            return None
        if len(healthy) == 1:
            return healthy[0].index
        n = len(healthy)
        i = self._rng.randrange(n)
        j = self._rng.randrange(n)
        while j == i:
            j = self._rng.randrange(n)
        a, b = healthy[i], healthy[j]
        return a.index if a.in_flight <= b.in_flight else b.index


def softmax_sample_min(logits: list[float], temperature: float, rng: random.Random) -> int:
    """Dynamo's ``softmax_sample`` restated: position of the chosen logit (lower is better).

    ``temperature == 0``: every position within 1e-5 of the minimum is a candidate, one drawn
    uniformly (Dynamo then breaks ties by its prefix-tree size, which is 0 for all here). Otherwise
    ``p_i ∝ exp(-(v_i / (max - min)) / T)`` (uniform if all equal), sampled with one uniform draw.
    """
    if not logits:
        raise ValueError("softmax_sample_min: no logits")
    lo, hi = min(logits), max(logits)
    if temperature == 0.0:
        ties = [i for i, v in enumerate(logits) if abs(v - lo) < 1e-5]
        return ties[0] if len(ties) == 1 else ties[rng.randrange(len(ties))]
    if hi == lo:
        probs = [1.0 / len(logits)] * len(logits)
    else:
        scaled = [-(v / (hi - lo)) / temperature for v in logits]
        top = max(scaled)
        ex = [math.exp(s - top) for s in scaled]
        tot = sum(ex)
        probs = [e / tot for e in ex]
    u = rng.random()
    acc = 0.0
    for i, p in enumerate(probs):
        acc += p
        if u <= acc:
            return i
    return len(logits) - 1


class DynamoKV(PerPoolPolicy):
    r"""NVIDIA Dynamo's KV-router cost with softmax sampling (``dynamo_kv``).

    Source: ai-dynamo/dynamo, ``lib/llm/src/kv_router/scheduler.rs`` (``DefaultWorkerSelector``
    and ``softmax_sample``; later moved to ``lib/kv-router/src/scheduling/selector.rs`` with the
    same formula), and ``docs/router/kv_cache_routing.md`` for the defaults
    (``--kv-overlap-score-weight`` 1, ``--router-temperature`` 0). Per worker ``w``, lower is better::

        logit(w) = overlap_score_weight * prefill_blocks(w) + decode_blocks(w)
        prefill_blocks(w) = potential_prefill_tokens(w) / block_size
                          = (tokens w is still prefilling + ISL - overlap_blocks(w) * block_size) / block_size
        decode_blocks(w)  = blocks w holds for its active sequences + the request's new blocks

    then ``softmax_sample``: at temperature 0 the minimum (ties drawn at random); otherwise
    ``p(w) ∝ exp(-(logit(w) / (max - min)) / T)``.

    Prefix term: ``overlap_blocks = 0`` for every worker here (prefix caches are reset and the
    workloads share no prefixes), so ``prefill_blocks`` is the worker's pending prefill plus the
    whole prompt.

    Mapping onto `ClusterView` (``L`` = prompt tokens, ``B`` = ``block_size``, default 16 as vLLM):

    - prefill pool: pending prefill tokens = ``in_flight_tokens`` of the prefill instance (the
      ledger's queued prompt tokens, settled when its prefill answers); active blocks =
      ``ceil(in_flight_tokens / B)``; new blocks ``ceil(L / B)``.
    - decode pool: a decode engine prefills nothing itself, so its pending prefill is 0 and the
      prefill term is ``L / B`` for every decode worker (a constant, which neither the argmin nor
      the range-normalised softmax sees); active blocks = ``ceil(in_flight_tokens / B)`` where
      ``in_flight_tokens`` is the ledger's prompt + estimated output of its in-flight requests
      (Dynamo's own active-sequence tracker counts prompt blocks plus output blocks as they are
      generated; the ledger charges the output estimate up front).

    Parameters
    ----------
    overlap_score_weight : weight (>= 0) of the prefill blocks in the logit (Dynamo's default 1).
    temperature : softmax temperature (>= 0, dimensionless: logits are range-normalised); 0 takes
        the minimum.
    block_size : KV block size (tokens, >= 1).
    random_state : seed (integer >= 0) of the tie and softmax draws.
    """

    name = "dynamo_kv"

    def __init__(
        self,
        cost_model: CostModel | None = None,
        *,
        overlap_score_weight: float = 1.0,
        temperature: float = 0.0,
        block_size: int = 16,
        random_state: int = 0,
    ) -> None:
        super().__init__(cost_model)
        w = overlap_score_weight
        if not (isinstance(w, (int, float)) and w >= 0 and math.isfinite(w)):
            raise ConfigError(f"dynamo_kv: option 'overlap_score_weight' must be >= 0, got {w!r}")
        if not (isinstance(temperature, (int, float)) and temperature >= 0 and math.isfinite(temperature)):
            raise ConfigError(f"dynamo_kv: option 'temperature' must be >= 0, got {temperature!r}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"dynamo_kv: option 'block_size' must be a positive integer, got {block_size!r}")
        self.overlap_score_weight = float(overlap_score_weight)
        self.temperature = float(temperature)
        self.block_size = int(block_size)
        self.random_state = _check_seed(self.name, random_state)
        self._rng = random.Random(self.random_state)

    def logits(self, request: RequestInfo, pool: list[InstanceSignals], role: str) -> list[tuple[int, float]]:
        """(instance index, logit) for every healthy instance of ``pool``."""
        B = self.block_size
        L = request.prompt_tokens
        new_blocks = math.ceil(L / B)
        out = []
        for s in _healthy(pool):
            active = math.ceil(max(s.in_flight_tokens, 0.0) / B)
            pending_prefill = max(s.in_flight_tokens, 0.0) if role == "prefill" else 0.0
            prefill_blocks = (pending_prefill + L) / B  # overlap_blocks = 0
            decode_blocks = active + new_blocks
            out.append((s.index, self.overlap_score_weight * prefill_blocks + decode_blocks))
        return out

    def _pick(self, request: RequestInfo, pool: list[InstanceSignals], role: str) -> int | None:
        cand = self.logits(request, pool, role)
        if not cand:
            return None
        k = softmax_sample_min([v for _, v in cand], self.temperature, self._rng)
        return cand[k][0]


class LlmdWeighted(PerPoolPolicy):
    r"""llm-d inference scheduler: queue and KV-utilization scorers, weighted sum, max-score picker.

    Source: llm-d/llm-d-inference-scheduler,
    ``pkg/epp/framework/plugins/scheduling/scorer/queuedepth/README.md`` (``queue-scorer``),
    ``.../scorer/kvcacheutilization/README.md`` (``kv-cache-utilization-scorer``),
    ``.../picker/maxscore/README.md`` (``max-score-picker``) and ``deploy/config/pd-epp-config.yaml``
    (the P/D profiles: one ``prefill`` and one ``decode`` scheduling profile, each
    ``prefix-cache-scorer`` weight 2 + ``queue-scorer`` weight 1 + ``max-score-picker``). Per
    candidate endpoint ``e`` of a profile::

        queue(e) = (q_max - q_e) / (q_max - q_min)      (1.0 for all when q_max == q_min)
        kv(e)    = 1 - kv_usage_e
        score(e) = w_queue * queue(e) + w_kv * kv(e) + w_prefix * prefix(e)

    and the picker shuffles the candidates, sorts by score (descending) and takes the first: the
    maximum, ties broken at random.

    Prefix term: ``prefix(e) = 0`` for every endpoint here (caches reset, no shared prefixes), so
    ``w_prefix`` changes nothing; it is not an option.

    Mapping: ``q_e`` (llm-d reads the engine's ``WaitingQueueSize`` from its metrics) = the ledger's
    ``in_flight`` count for that instance (the router's requests on it not yet settled: queued
    plus running, since `ClusterView` carries no separate waiting count); ``kv_usage_e`` = the
    polled ``kv_usage`` (vllm:kv_cache_usage_perc, as llm-d scrapes it). Defaults: ``w_queue = 1``
    (pd-epp-config.yaml) and ``w_kv = 1`` (the scorer README's example weight).

    Parameters
    ----------
    queue_weight : w_queue (>= 0), weight of the queue scorer (scores are in [0, 1]).
    kv_weight : w_kv (>= 0), weight of the KV-utilization scorer.
    random_state : seed (integer >= 0) of the picker's shuffle.
    """

    name = "llmd_weighted"

    def __init__(self, cost_model: CostModel | None = None, *, queue_weight: float = 1.0,
                 kv_weight: float = 1.0, random_state: int = 0) -> None:
        super().__init__(cost_model)
        for key, v in (("queue_weight", queue_weight), ("kv_weight", kv_weight)):
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and math.isfinite(v)):
                raise ConfigError(f"llmd_weighted: option '{key}' must be >= 0, got {v!r}")
        self.queue_weight = float(queue_weight)
        self.kv_weight = float(kv_weight)
        self.random_state = _check_seed(self.name, random_state)
        self._rng = random.Random(self.random_state)

    def scores(self, pool: list[InstanceSignals]) -> list[tuple[int, float]]:
        """(instance index, weighted score) for every healthy instance of ``pool``."""
        healthy = _healthy(pool)
        if not healthy:
            return []
        qs = [s.in_flight for s in healthy]
        q_min, q_max = min(qs), max(qs)
        out = []
        for s in healthy:
            queue = 1.0 if q_max == q_min else (q_max - s.in_flight) / (q_max - q_min)
            kv = 1.0 - min(max(s.kv_usage, 0.0), 1.0)
            out.append((s.index, self.queue_weight * queue + self.kv_weight * kv))
        return out

    def _pick(self, request: RequestInfo, pool: list[InstanceSignals], role: str) -> int | None:
        cand = self.scores(pool)
        if not cand:
            return None
        self._rng.shuffle(cand)
        cand.sort(key=lambda c: -c[1])  # stable: the shuffle decides among equal scores
        return cand[0][0]


class SglangLeastLoad(PerPoolPolicy):
    """SGLang model gateway's ``least_load``: the worker with the least outstanding request size.

    Source: sgl-project/sglang, ``sgl-model-gateway/src/policies/least_load.rs``. Formula: each
    request's load is the length of its request text (``calculate_request_load``: characters of the
    prompt, 1 if absent); the router adds it to the chosen worker's load on dispatch and removes it
    when that request completes; a request goes to the healthy worker with the minimum current
    load, scanning in worker order with a strict ``<`` (ties: the first, i.e. lowest index).
    Externally reported loads (``update_loads``) overwrite the counter; vLLM reports none.

    As published (the versions of this file read), ``least_load`` has *no* throughput divisor and
    *no* KV-occupancy barrier: it is join-the-least-outstanding-text. It is restated as such here.

    Mapping: request text length -> tokens. Prefill pool: load = ``in_flight_tokens`` (the
    ledger's queued prompt tokens on that instance; SGLang would keep a request's prompt charged
    until the whole request completes, the ledger releases it when the prefill answers). Decode
    pool: load = ``in_flight_tokens`` (prompt + the predictor's output estimate of its in-flight
    requests; the source charges the prompt alone: the ledger has no prompt-only count per decode
    instance). No prefix term exists in this policy. No options.
    """

    name = "sglang_least_load"

    def _pick(self, request: RequestInfo, pool: list[InstanceSignals], role: str) -> int | None:
        best, best_load = None, math.inf
        for s in pool:
            if s.healthy and s.in_flight_tokens < best_load:
                best, best_load = s.index, s.in_flight_tokens
        return best

