"""The truth about an engine: how long prefill, decode steps and KV transfers take.

`Physics` is what the hardware *does*; `repro.routing.cost_model.CostModel` is what the router
*believes*. They are separate objects on purpose, so that a miscalibrated router can be expressed.
Both the simulator (virtual clock) and the emulated engine (wall clock) read time from here.

Units: seconds, tokens, bytes. Profiles live in ``data/hardware/*.json``; every number in a
profile carries a ``source`` saying where it comes from (measured in the paper, or estimated and
how).

Model
-----
- Prefill step over ``b`` batched prompt tokens (vLLM runs one scheduler step over up to
  ``max_num_batched_tokens`` tokens, chunking longer prompts)::

      t_prefill(b) = prefill_base_s + prefill_per_token_s * b

- Decode step for ``n`` running sequences holding ``C`` context tokens in total (memory bound: it
  reads the weights once and every sequence's KV cache)::

      t_step(n, C) = decode_base_s + decode_per_seq_s * n + C * kv_bytes_per_token / hbm_bandwidth

  This context term is the intra-batch interference: a long sequence slows its neighbours.
- KV transfer of ``L`` prompt tokens from a prefill to a decode engine::

      t_xfer(L) = transfer_latency_s + L * kv_bytes_per_token / transfer_bandwidth

- KV budget: ``kv_budget_tokens`` per engine, allocated in blocks of ``block_size`` tokens.

The profile's estimates (the constants the paper does not state) may be overridden per run for
sensitivity sweeps (`OVERRIDABLE`, `check_overrides`; a spec's ``physics`` field).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from repro.errors import ConfigError, check_ranges

NO_CONTEXT_BANDWIDTH = 1e30
"""``hbm_bandwidth_bytes_per_s`` of an engine whose decode step does not grow with its context (bytes/s)."""


HOST_MAX_STRETCH = 1000.0
"""The most a shared host stretches a step (`Physics.host_stretch`): where the serving path alone fills the
host, the engines all but stop."""

HOST_WINDOW_S = 1.0
"""The window (s) over which a simulated shared host counts the request rate of `Physics.host_stretch`."""
ADMISSION_MAX_UTILISATION = 0.95
"""The most a decode API server's event loop is counted busy (`Physics.admission_delay_s`): beyond, its queue
grows without bound; the delay stays at 20 x its light-load time."""


@dataclass(frozen=True)
class Physics:
    """True timing of one engine. All times in seconds, sizes in tokens or bytes."""

    name: str
    model: str
    prefill_base_s: float
    prefill_per_token_s: float
    max_num_batched_tokens: int
    decode_base_s: float
    decode_per_seq_s: float
    hbm_bandwidth_bytes_per_s: float
    kv_bytes_per_token: int
    kv_budget_tokens: int
    block_size: int
    max_num_seqs: int
    max_model_len: int
    transfer_latency_s: float
    transfer_bandwidth_bytes_per_s: float
    prefill_per_token2_s: float = 0.0
    """A prefill step's convex part (s per token squared): ``t_prefill(b)`` gains ``prefill_per_token2_s *
    b**2`` (attention over the chunk, and kernels whose efficiency falls with the batch, as measured on
    the tiny CPU engines: `repro.live.calibration_bench.prefill_curve`). 0 (the default, and every
    shipped GPU profile's): the paper's linear model."""
    prefill_step_share: float = 1.0
    """Mechanism ``request_path`` (`repro.engine.mechanisms`): the share of ``prefill_base_s`` that is the
    prefill engine's own step (one forward pass, shared by every prompt of the batch); the rest,
    ``serving_path_s``, is each request's own time outside the engine's step loop (the API server's HTTP
    and tokenization, the proxy's hops, the response), not shared by a batch and occupying no engine.
    1 (the default): the whole base is a step's, as the paper's §VI model."""
    serving_path_sigma: float = 0.0
    """Mechanism ``path_tail``: the per-request serving path is lognormal with this sigma (mean
    ``serving_path_s``; a request's draw is a fixed function of its id). 0: every request's the same."""
    transfer_link_shared: int = 0
    """Mechanism ``shared_link``: 1 = concurrent KV pulls share the links at both ends (NIXL posts every READ at
    once: a pull's bytes move at ``transfer_bandwidth_bytes_per_s`` divided by the pulls in flight at the busier of
    its prefill engine's outgoing and its decode engine's incoming link); 0: concurrent pulls do not interact."""
    transfer_handshake_s: float = 0.0
    """Mechanism ``shared_link``: the first pull between a prefill and a decode engine waits this long for the
    pair's NIXL handshake (s); every pull of the pair that starts before it is done waits for the same one. 0 (the
    default): the pairs were warmed up before the run (the paper's harness does, §IV)."""
    api_queue_s: float = 0.0
    """Mechanism ``api_queue``: each request spends this long (s) in its prefill engine's API server before its
    prompt reaches the engine, served one at a time first come, first served (the server's one tokenizer thread
    and its event loop): under load it queues. 0 (the default, with ``api_queue_per_token_s``): off."""
    api_queue_per_token_s: float = 0.0
    """``api_queue``: the API server's time per prompt token (tokenization; s/token)."""
    decode_scheduler_vllm: int = 0
    """Mechanism ``vllm_scheduler``: 1 = a decode engine schedules as vLLM's ``Scheduler.schedule``: a request
    whose KV is still being pulled holds its blocks but is neither running (it takes no sequence slot) nor ever
    preempted; a step that preempted admits nobody and lets no pulled request join. 0: the in-flight pull of the
    most recently admitted request is cancelled first, and admissions go on after a preemption."""
    resume_prefix_cache: int = 0
    """Mechanism ``resume_cache``: 1 = a preempted request's freed blocks stay cached until the engine allocates
    them again (vLLM's prefix cache: ``BlockPool.free_blocks`` puts them at the free queue's tail, its last block
    first), so on resume it recomputes only the evicted part; 0: the whole context is recomputed."""
    base_counts_first_token: int = 0
    """Mechanism ``first_token_path``: 1 = the stated ``prefill_base_s`` is the intercept of a client's TTFT
    through the disaggregated path, so the part the simulator already simulates on the decode side (one pull's
    setup and one decode step of a lone sequence) is taken out of it (`prefill_base_net_s`); 0: the base is the
    prefill side's alone."""
    prefill_ctx_s: float = 0.0
    """Mechanism ``attention_context``: a prefill step's attention over earlier tokens (s per token pair): a chunk
    of ``k`` tokens of a prompt whose first ``c`` tokens are done adds ``prefill_ctx_s * (k * c + k * (k + 1) / 2)``
    (causal attention: the token at position ``p`` attends to ``p + 1``). 0 (the default): linear prefill."""
    host_cores: int = 0
    """Mechanism ``shared_host`` (`repro.engine.mechanisms.SHARED_HOST`): the CPU cores of the one machine
    that every engine of the cluster and its serving path (API servers, proxy, load generator) share. 0 (the
    default): each engine owns its hardware and the serving path costs no engine time. Every engine of a
    simulated cluster states the same host (`repro.sim.simulator.Simulator` checks)."""
    host_base_cores: float = 0.0
    """``shared_host``: cores the serving path takes whatever the load (pollers, metric scrapes)."""
    host_cpu_per_request_s: float = 0.0
    """``shared_host``: CPU seconds the serving path spends per request (HTTP, tokenization, routing)."""
    host_cpu_per_token_s: float = 0.0
    """``shared_host``: CPU seconds the serving path spends per streamed output token (detokenization and
    the token's chunk through the decode API server, the proxy and the client)."""
    host_cpu_per_step_s: float = 0.0
    """``shared_host``: CPU seconds the serving path spends per decode step of an engine, whatever its batch (the
    step's outputs handed from the engine core to the API server and handled there at once)."""
    host_steal_share: float = 1.0
    """``shared_host``: how much of the serving path's CPU preempts the engines while cores are left over (1: it
    lands on every core alike, the engines' and the idle ones; 0: only on cores no engine computes on). Whatever
    the share, the engines never get more than the cores the serving path leaves."""
    admission_per_stream_s: float = 0.0
    """Mechanism ``stream_admission`` (`repro.engine.mechanisms.STREAM_ADMISSION`): a request reaching a decode
    engine's API server is admitted (handed to the engine core) after ``admission_per_stream_s * n **
    admission_exponent`` seconds when the engine streams ``n`` sequences: the server's one event loop serves the
    new request between the streams' outputs. 0 (the default): admitted at once."""
    admission_exponent: float = 1.0
    """``stream_admission``: how the admission delay grows with the streams (1: in proportion)."""
    admission_loop_s: float = 0.0
    """``stream_admission``: the decode engine's API server as one event loop that serves the new request and every
    stream's per-step outputs in turn (`admission_delay_s`): a request's own time through it with no stream (s).
    0 (the default): off (or the streams' power law alone)."""
    admission_busy_per_stream: float = 0.0
    """``stream_admission``: the loop's busy share per sequence the engine streams (each stream's outputs pass
    through it every step: detokenization, the SSE chunk); its utilisation is ``admission_busy_per_stream x
    streams``, at most `ADMISSION_MAX_UTILISATION`."""
    hop_loop_s: float = 0.0
    """Mechanism ``prefill_hop`` (`repro.engine.mechanisms.PREFILL_HOP`): a request's time on its prefill leg
    outside the prefill engine's core (the proxy's hop to the prefill API server and back, that server's HTTP,
    tokenization and answer), added after its prefill step, when the cluster's decode engines stream no sequence
    (s; `prefill_hop_s`). 0 (the default): off (or the streams' power law alone)."""
    hop_per_stream_s: float = 0.0
    """``prefill_hop``: the hop's growth with the sequences the whole cluster's decode engines stream, ``n``:
    ``hop_per_stream_s * n ** hop_exponent`` (s): the proxy's and the prefill API server's event loops, on the
    cores every stream's tokens load."""
    hop_exponent: float = 1.0
    """``prefill_hop``: how the hop grows with the cluster's streams (1: in proportion)."""
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    stated_slo: tuple[float, float] | None = field(default=None, compare=False, repr=False)
    """The testbed's stated SLO targets (tight TTFT, tight TPOT; s), from the profile's optional ``slo``
    section; None: derived from the constants (`repro.routing.cost_model.slo_from_constants`)."""

    # ---- timing -----------------------------------------------------------------------------
    def prefill_time_s(self, batch_tokens: int) -> float:
        """Duration of one prefill step over ``batch_tokens`` prompt tokens (s)."""
        return (self.prefill_step_base_s + self.prefill_per_token_s * batch_tokens
                + self.prefill_per_token2_s * batch_tokens * batch_tokens)

    @property
    def prefill_base_net_s(self) -> float:
        """The prefill side's share of the stated base (s): ``prefill_base_s``, less `first_token_path_s` under
        mechanism ``first_token_path`` (never below 0)."""
        if not self.base_counts_first_token:
            return self.prefill_base_s
        return max(0.0, self.prefill_base_s - self.first_token_path_s)

    @property
    def first_token_path_s(self) -> float:
        """What a lone short request spends on the decode side before its first token, as the simulator
        simulates it (s): one pull's setup (``transfer_latency_s``) and one decode step of a lone sequence
        (``decode_base_s + decode_per_seq_s``)."""
        return self.transfer_latency_s + self.decode_base_s + self.decode_per_seq_s

    @property
    def prefill_step_base_s(self) -> float:
        """The fixed part of one prefill step: `prefill_base_net_s` x ``prefill_step_share`` (s)."""
        share = self.prefill_step_share
        base = self.prefill_base_net_s
        return base if share == 1.0 else base * share

    @property
    def serving_path_s(self) -> float:
        """Each request's mean time outside the engine's steps after its prefill (s): `prefill_base_net_s` x (1 -
        share), less the API server's own time per request under mechanism ``api_queue`` (``api_queue_s``, spent
        before the prefill; never below 0): a lone request's time outside the step stays the base's."""
        path = self.prefill_base_net_s * (1.0 - self.prefill_step_share)
        if self.api_queue_s > 0.0:
            path = path - self.api_queue_s if path > self.api_queue_s else 0.0
        return path

    def attention_pairs(self, done: int, take: int) -> int:
        """Token pairs a chunk of ``take`` tokens attends over when ``done`` tokens of its prompt precede it."""
        return take * done + take * (take + 1) // 2

    def prefill_request_time_s(self, prompt_tokens: int) -> float:
        """Duration of an unbatched prefill of one prompt, chunked by the token budget (s)."""
        steps = max(1, math.ceil(prompt_tokens / self.max_num_batched_tokens))
        out = steps * self.prefill_step_base_s + self.serving_path_s + self.prefill_per_token_s * prompt_tokens
        if self.prefill_per_token2_s:
            full, last = divmod(prompt_tokens, self.max_num_batched_tokens)
            out += self.prefill_per_token2_s * (full * self.max_num_batched_tokens ** 2 + last * last)
        if self.prefill_ctx_s:
            out += self.prefill_ctx_s * self.attention_pairs(0, prompt_tokens)
        if self.api_queue_s or self.api_queue_per_token_s:  # mechanism api_queue: the API server's own time
            out += self.api_queue_s + self.api_queue_per_token_s * prompt_tokens
        return out

    @property
    def context_s_per_token(self) -> float:
        """Decode-step time added per context token held by the batch (s/token)."""
        return self.kv_bytes_per_token / self.hbm_bandwidth_bytes_per_s

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        """Duration of one decode step for ``batch_size`` sequences with ``context_tokens`` in all (s)."""
        return (
            self.decode_base_s
            + self.decode_per_seq_s * batch_size
            + context_tokens * self.context_s_per_token
        )

    def transfer_time_s(self, prompt_tokens: int) -> float:
        """KV transfer time of a prompt's cache from a prefill to a decode engine (s)."""
        return (
            self.transfer_latency_s
            + prompt_tokens * self.kv_bytes_per_token / self.transfer_bandwidth_bytes_per_s
        )

    @property
    def shares_host(self) -> bool:
        """Mechanism ``shared_host`` is on (`host_cores` > 0)."""
        return self.host_cores > 0

    def host_stretch(self, busy_engines: int, request_rate: float, token_rate: float, step_rate: float) -> float:
        """Mechanism ``shared_host``: how many times longer an engine's step (and any other CPU work of the
        cluster: a KV pull, a request's serving path) takes than on a machine of its own, when
        ``busy_engines`` engines are computing, requests arrive at ``request_rate`` (req/s) and the decode
        engines would stream ``token_rate`` tokens/s in ``step_rate`` steps/s at their own speed.

        The host's ``C`` = `host_cores` cores are shared by the ``M = max(1, busy_engines)`` computing engines
        (one runnable thread each, as vLLM's CPU worker with one OpenMP thread) and the serving path, whose
        many short tasks run first (Linux's scheduler lets a thread that slept preempt one that computes): the
        serving path takes ``S = R + T s`` cores, ``R = host_base_cores + host_cpu_per_request_s *
        request_rate`` whatever the engines' speed ``s`` and ``T = host_cpu_per_token_s * token_rate +
        host_cpu_per_step_s * step_rate`` for the tokens and steps, which come at that speed. A share ``phi =
        host_steal_share * min(M, C) / C`` of ``S`` preempts the engines (``host_steal_share`` 1: spread over
        the cores alike), so ``s = (min(M, C) - phi S) / M``; and the engines never take more than the serving
        path leaves, ``s <= (C - S) / M``. Solved: ``s = min((min(M, C) - phi R) / (M + phi T), (C - R) / (M +
        T))``; the stretch is ``1 / s`` (1 when nothing else runs and the engines fit the cores), at most
        `HOST_MAX_STRETCH` (``R >= C``: the serving path alone fills the host)."""
        cores = float(self.host_cores)
        free = cores - self.host_base_cores - self.host_cpu_per_request_s * request_rate
        if free <= 0.0:
            return HOST_MAX_STRETCH
        rest = cores - free  # R
        engines = float(busy_engines) if busy_engines > 1 else 1.0
        on_cores = engines if engines < cores else cores
        streamed = self.host_cpu_per_token_s * token_rate + self.host_cpu_per_step_s * step_rate
        phi = self.host_steal_share * on_cores / cores
        speed = (on_cores - phi * rest) / (engines + phi * streamed)
        bound = free / (engines + streamed)
        if bound < speed:
            speed = bound
        if speed <= 1.0 / HOST_MAX_STRETCH:
            return HOST_MAX_STRETCH
        return 1.0 / speed

    def admission_delay_s(self, streams: int) -> float:
        """Mechanism ``stream_admission``: seconds before a request reaching this decode engine's API server is
        admitted, when the engine streams ``streams`` sequences: ``admission_per_stream_s * streams **
        admission_exponent`` (a power law in the streams), plus the time through one busy event loop,
        ``admission_loop_s / (1 - rho)`` (an M/M/1 server's mean time in system), ``rho =
        admission_busy_per_stream * streams`` at most `ADMISSION_MAX_UTILISATION`."""
        delay = 0.0
        if streams > 0 and self.admission_per_stream_s > 0.0:
            delay += self.admission_per_stream_s * float(streams) ** self.admission_exponent
        if self.admission_loop_s > 0.0:
            rho = self.admission_busy_per_stream * streams
            if rho > ADMISSION_MAX_UTILISATION:
                rho = ADMISSION_MAX_UTILISATION
            delay += self.admission_loop_s / (1.0 - rho)
        return delay

    @property
    def admits_behind_load(self) -> bool:
        """Whether mechanism ``stream_admission`` is on (either of its delays)."""
        return self.admission_per_stream_s > 0.0 or self.admission_loop_s > 0.0

    def prefill_hop_s(self, streams: int) -> float:
        """Mechanism ``prefill_hop``: the seconds a request's prefill leg spends outside this prefill engine's core
        (after its prefill step, before the proxy hands it to its decode engine) when the cluster's decode engines
        stream ``streams`` sequences in all: ``hop_loop_s + hop_per_stream_s * streams ** hop_exponent``."""
        delay = self.hop_loop_s
        if streams > 0 and self.hop_per_stream_s > 0.0:
            delay += self.hop_per_stream_s * float(streams) ** self.hop_exponent
        return delay

    @property
    def hops_behind_load(self) -> bool:
        """Whether mechanism ``prefill_hop`` is on."""
        return self.hop_loop_s > 0.0 or self.hop_per_stream_s > 0.0

    def blocks_for(self, tokens: int) -> int:
        """KV blocks that ``tokens`` tokens occupy."""
        return -(-tokens // self.block_size)

    @property
    def kv_budget_blocks(self) -> int:
        return self.kv_budget_tokens // self.block_size

    @property
    def num_gpu_blocks_override(self) -> int:
        """The ``--num-gpu-blocks-override`` that gives this KV budget in vLLM (one block is reserved)."""
        return self.kv_budget_blocks + 1

    def with_overrides(self, **changes: Any) -> Physics:
        """A copy with some parameters changed (e.g. a smaller KV budget)."""
        for key in changes:
            if key not in _NUMERIC_FIELDS:
                raise ConfigError(f"physics: unknown parameter {key!r}; allowed: {sorted(_NUMERIC_FIELDS)}")
        return replace(self, **changes)

    def with_estimates(self, overrides: dict[str, float]) -> Physics:
        """A copy with the estimated constants ``overrides`` (`OVERRIDABLE` names, checked) in place. A new
        ``decode_per_seq_s`` moves ``decode_base_s`` by the opposite amount, so that the decode step of a
        lone sequence (the paper's measured 0.013237 s/token) stays as stated."""
        checked = check_overrides(overrides, "physics overrides")
        if "decode_per_seq_s" in checked:
            base = self.decode_base_s + self.decode_per_seq_s - checked["decode_per_seq_s"]
            if base < 0:
                raise ConfigError(f"physics overrides: parameter 'decode_per_seq_s' = {checked['decode_per_seq_s']!r} "
                                  f"exceeds the lone-sequence decode step it is part of "
                                  f"({self.decode_base_s + self.decode_per_seq_s:g} s)")
            checked = {**checked, "decode_base_s": base}
        ints = {k: int(round(v)) for k, v in checked.items() if _NUMERIC_FIELDS[k] is int}
        return replace(self, **{**checked, **ints})

    # ---- persistence (the file: `repro.engine.profile.load_profile`) -------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any], origin: str = "profile") -> Physics:
        if not isinstance(raw, dict):
            raise ConfigError(f"{origin}: expected a JSON object")
        params = raw.get("params")
        if not isinstance(params, dict):
            raise ConfigError(f"{origin}: field 'params' is missing (an object of {{value, source}})")
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name, kind in _NUMERIC_FIELDS.items():
            entry = params.get(name)
            if entry is None and name in _OPTIONAL:
                continue
            if entry is None:
                raise ConfigError(f"{origin}: field 'params.{name}' is missing")
            if not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
                raise ConfigError(f"{origin}: field 'params.{name}' must be {{\"value\": ..., \"source\": \"...\"}}")
            value = entry["value"]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{origin}: field 'params.{name}' must be a number, got {value!r}")
            lo = _MINIMA[name]
            if not value >= lo or not math.isfinite(value):
                raise ConfigError(f"{origin}: field 'params.{name}' = {value!r} out of range (must be >= {lo})")
            if kind is int:
                if int(value) != value:
                    raise ConfigError(f"{origin}: field 'params.{name}' must be an integer, got {value!r}")
                value = int(value)
            values[name] = kind(value)
            sources[name] = str(entry["source"])
        unknown = set(params) - set(_NUMERIC_FIELDS)
        if unknown:
            raise ConfigError(f"{origin}: unknown field(s) {sorted('params.' + u for u in unknown)}")
        for name in ("name", "model"):
            if not isinstance(raw.get(name), str) or not raw[name]:
                raise ConfigError(f"{origin}: field '{name}' is missing (a non-empty string)")
        slo = raw.get("slo")
        stated = None
        if slo is not None:
            try:
                stated = (float(slo["ttft_tight_s"]["value"]), float(slo["tpot_tight_s"]["value"]))
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{origin}: field 'slo' must hold ttft_tight_s and tpot_tight_s as "
                                  f"{{\"value\": seconds, \"source\": \"...\"}}") from None
            if not all(math.isfinite(v) and v > 0 for v in stated):
                raise ConfigError(f"{origin}: field 'slo': targets must be > 0 s, got {stated}")
        return cls(name=raw["name"], model=raw["model"], sources=sources, stated_slo=stated, **values)

    def to_dict(self, slo: bool = False) -> dict[str, Any]:
        """The profile file's JSON object (`from_dict` reads it back); with ``slo`` also the stated SLO
        targets (``slo`` section) when there are any."""
        out: dict[str, Any] = {
            "name": self.name,
            "model": self.model,
            "params": {
                n: {"value": getattr(self, n), "source": self.sources.get(n, "")} for n in _NUMERIC_FIELDS
                if not (n in _OPTIONAL and getattr(self, n) == _OPTIONAL[n] and n not in self.sources)
            },
        }
        if slo and self.stated_slo is not None:
            out["slo"] = {"ttft_tight_s": {"value": self.stated_slo[0], "source": "stated"},
                          "tpot_tight_s": {"value": self.stated_slo[1], "source": "stated"}}
        return out


_NUMERIC_FIELDS: dict[str, type] = {
    f.name: (int if f.type in ("int", int) else float)
    for f in fields(Physics)
    if f.name not in ("name", "model", "sources", "stated_slo")
}
PARAMETERS: tuple[str, ...] = tuple(_NUMERIC_FIELDS)
"""The numeric parameters of a profile (``params`` in its file), in field order."""
HOST_PARAMETERS: tuple[str, ...] = ("host_cores", "host_base_cores", "host_cpu_per_request_s", "host_cpu_per_token_s",
                                    "host_cpu_per_step_s", "host_steal_share", "admission_per_stream_s",
                                    "admission_exponent", "admission_loop_s", "admission_busy_per_stream", "hop_loop_s",
                                    "hop_per_stream_s", "hop_exponent")
"""Mechanisms ``shared_host``'s, ``stream_admission``'s and ``prefill_hop``'s parameters: the machine's and the
serving path's, not an engine's (a calibration of the engines alone does not see them; `repro.validation.host`
measures them)."""
_OPTIONAL: dict[str, float] = {"prefill_per_token2_s": 0.0, "prefill_step_share": 1.0, "serving_path_sigma": 0.0,
                               "transfer_link_shared": 0, "transfer_handshake_s": 0.0, "api_queue_s": 0.0,
                               "api_queue_per_token_s": 0.0, "decode_scheduler_vllm": 0, "resume_prefix_cache": 0,
                               "base_counts_first_token": 0, "prefill_ctx_s": 0.0, "host_cores": 0,
                               "host_base_cores": 0.0,
                               "host_cpu_per_request_s": 0.0, "host_cpu_per_token_s": 0.0,
                               "host_cpu_per_step_s": 0.0, "host_steal_share": 1.0, "admission_per_stream_s": 0.0,
                               "admission_exponent": 1.0, "admission_loop_s": 0.0, "admission_busy_per_stream": 0.0,
                               "hop_loop_s": 0.0, "hop_per_stream_s": 0.0, "hop_exponent": 1.0}
"""Parameters a profile file may leave out (their value then), and `Physics.to_dict` leaves out at it unless the
profile stated it (a source)."""
_MINIMA: dict[str, float] = {name: 0.0 for name in _NUMERIC_FIELDS}
_MINIMA.update(
    max_num_batched_tokens=1,
    kv_budget_tokens=1,
    block_size=1,
    max_num_seqs=1,
    max_model_len=1,
    hbm_bandwidth_bytes_per_s=1e-9,
    transfer_bandwidth_bytes_per_s=1e-9,
)


OVERRIDABLE: dict[str, tuple[float, float]] = {
    "prefill_per_token_s": (1e-7, 1e-2),
    "decode_per_seq_s": (0.0, 1e-2),
    "transfer_bandwidth_bytes_per_s": (1e8, 1e13),
    "transfer_latency_s": (0.0, 1.0),
    "max_num_batched_tokens": (256, 65536),
    "prefill_step_share": (0.05, 1.0),
    "serving_path_sigma": (0.0, 2.0),
    "transfer_link_shared": (0, 1),
    "transfer_handshake_s": (0.0, 10.0),
    "api_queue_s": (0.0, 1.0),
    "api_queue_per_token_s": (0.0, 1e-3),
    "decode_scheduler_vllm": (0, 1),
    "resume_prefix_cache": (0, 1),
    "base_counts_first_token": (0, 1),
    "prefill_ctx_s": (0.0, 1e-6),
    "host_cores": (0, 1024),
    "host_base_cores": (0.0, 1024.0),
    "host_cpu_per_request_s": (0.0, 10.0),
    "host_cpu_per_token_s": (0.0, 1.0),
    "host_cpu_per_step_s": (0.0, 1.0),
    "host_steal_share": (0.0, 1.0),
    "admission_per_stream_s": (0.0, 1.0),
    "admission_exponent": (0.0, 4.0),
    "admission_loop_s": (0.0, 1.0),
    "admission_busy_per_stream": (0.0, 1.0),
    "hop_loop_s": (0.0, 1.0),
    "hop_per_stream_s": (0.0, 1.0),
    "hop_exponent": (0.0, 4.0),
}
"""The profile parameters a run may override (`check_overrides`; a spec's ``physics`` field) and the
allowed range of each (s/token, s per sequence per decode step, bytes/s, s): the estimates the paper
does not state (the A40 profile's sources say "estimate (paper silent)"), for sensitivity sweeps and
`repro identify`, and the switches of the engine's mechanisms (`repro.engine.mechanisms`: the prefill
step's share of the stated base, the serving path's tail, a shared KV link, a host shared with the serving
path (cores, and its CPU per request and per token); the scheduler's token budget
``max_num_batched_tokens``, an integer: vLLM's default depends on the GPU). The ranges only exclude
nonsense (a prefill of 0.1 us to 10 ms per token; up to 10 ms per sequence-step; a link of 100 MB/s to
10 TB/s; up to 1 s of transfer setup); a sweep's plausible range is its own
(`repro.paper.sections.sensitivity`). Constants the paper states (prefill base, decode, KV bytes per token,
KV budget) are not overridable."""


def check_overrides(raw: Any, where: str = "spec: field 'physics'") -> dict[str, float]:
    """``raw`` (a mapping of `OVERRIDABLE` names to numbers) validated and normalised: keys sorted, values
    floats. An unknown name or a value out of its range is a `ConfigError` naming it and the allowed."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping of {sorted(OVERRIDABLE)} to numbers, got {raw!r}")
    return check_ranges(raw, OVERRIDABLE, where)
