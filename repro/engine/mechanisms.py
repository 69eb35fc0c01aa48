"""The catalogue of engine and workload mechanisms a testbed may be built with.

A `Mechanism` is a named, switchable part of the truth (`repro.engine.physics.Physics`) or of the workload
generator (`repro.workload.params`): what it fixes when switched on, which of its parameters a fit frees
(each with a prior range and the reason for it), and the source it rests on (vLLM 0.12's code, the A40's
datasheet, the paper). Off, every mechanism leaves the profile as shipped, so a journal simulated without
mechanisms stays byte for byte the same (`tests/test_mechanisms.py`). `repro identify --mechanisms NAME,...`
builds a model from them; docs/IDENTIFY.md ("Mechanisms") has the catalogue with its sources and what the
paper's baseline numbers say of each.

Units: seconds, tokens, bytes; shares are fractions of the stated prefill base (0.0667 s, paper §VI).
"""

from __future__ import annotations

import collections
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

from repro.engine.physics import HOST_PARAMETERS, Physics
from repro.errors import ConfigError


@dataclass(frozen=True)
class Prior:
    """A quantity a fit may free: its name, kind (``physics`` | ``workloads`` | ``rate``), prior range ``[lo, hi]``
    in ``unit``, the reason for the range, whether it is searched in log10, and the value at which a mechanism's
    parameter leaves the model as without the mechanism (``off``; a nested model), if any. The fit's own
    `repro.identify.space.Parameter` is this, checked, with its scale's arithmetic."""

    name: str
    kind: str
    lo: float
    hi: float
    unit: str
    reason: str
    log: bool = False
    off: float | None = None
    """The value at which the parameter leaves the model as without the mechanism (a nested model), if any."""


@dataclass(frozen=True)
class Mechanism:
    """One switchable mechanism: ``fixed`` physics / workload overrides when on, ``free`` parameters, sources."""

    name: str
    title: str
    models: str
    source: str
    fixed_physics: Mapping[str, float] = field(default_factory=dict)
    fixed_workloads: Mapping[str, float] = field(default_factory=dict)
    free: tuple[Prior, ...] = ()
    requires: tuple[str, ...] = ()


WEIGHTS_READ_S = 6.17e9 / 696e9
"""One forward pass of Qwen2.5-3B reads its BF16 weights once: 6.17 GB at the A40's 696 GB/s (s). A
prefill step over a short prompt cannot take less."""

STEP_SHARE_FLOOR = WEIGHTS_READ_S / 0.0667
"""The least share of the stated 0.0667 s prefill base a step can be (`WEIGHTS_READ_S` of it: 0.133)."""

CATALOGUE: tuple[Mechanism, ...] = (
    Mechanism(
        "vllm_budget", "vLLM's own token budget on an A40",
        "each scheduler step batches at most 2,048 tokens (prompts chunked by it), as unmodified vLLM 0.12 "
        "sets it for `vllm serve` on a GPU under 70 GiB; off: the profile's pinned 8,192",
        "vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults: device memory < 70 GiB (the A40 has 48 GB) -> "
        "max_num_batched_tokens {LLM_CLASS: 8192, OPENAI_API_SERVER: 2048}, max_num_seqs 256; the paper runs "
        "'unmodified vLLM 0.12 engines' (§IV-A) and states no budget",
        fixed_physics={"max_num_batched_tokens": 2048}),
    Mechanism(
        "request_path", "The prefill base split between the step and the request",
        "of the stated prefill base (0.0667 s), the share `prefill_step_share` is the engine's step (one "
        "forward pass, shared by the batch); the rest is each request's own time outside the step loop (HTTP, "
        "tokenization and the response in the API server process, the proxy's hops), not shared and occupying "
        "no engine",
        "vllm/entrypoints/openai/serving_engine.py OpenAIServing._tokenize_prompt_input_async (`vllm serve` "
        "tokenizes each prompt in the API server process, on its event loop) and vllm/v1/engine/async_llm.py "
        "AsyncLLM.generate (the request handed to the engine core), vllm/v1/engine/core.py EngineCore.step (one "
        "forward pass per step for the whole batch), vllm/v1/engine/output_processor.py (detokenization per "
        "request); the paper's decode step on the same engine is 0.013237 s (§VI), and a step's forward pass "
        f"reads the weights once ({WEIGHTS_READ_S * 1e3:.1f} ms at 696 GB/s): a 67-ms step over a short prompt "
        "would be five such passes",
        free=(Prior("prefill_step_share", "physics", STEP_SHARE_FLOOR, 1.0, "share of 0.0667 s",
                   f"from one weights read ({WEIGHTS_READ_S * 1e3:.1f} ms, the A40's bandwidth) to the whole stated "
                   "base (the paper's §VI model)", off=1.0),)),
    Mechanism(
        "path_tail", "A serving path with a tail",
        "each request's serving path is lognormal (shape `serving_path_sigma`, mean as `request_path` sets "
        "it): load-independent SLO misses from slow HTTP hops, tokenization of long prompts, event-loop stalls",
        "vllm/entrypoints/openai/api_server.py (one asyncio event loop per API server: a request's HTTP, "
        "tokenization and streaming wait behind every other request's), the paper's round-robin losing 12 % "
        "of its requests at its lightest load (Fig. 5: 0.880)",
        free=(Prior("serving_path_sigma", "physics", 0.0, 1.5, "lognormal shape",
                   "from none to a path whose p99 is ~10x its median", off=0.0),),
        requires=("request_path",)),
    Mechanism(
        "shared_link", "KV pulls that share the links at both ends",
        "concurrent pulls move their bytes together: each at the link's bandwidth divided by the pulls in flight at "
        "the busier of its two ends (the prefill engine's outgoing link, the decode engine's incoming one), "
        "recomputed whenever a pull starts or ends (`repro.engine.links`); a pair's first pull would wait for its "
        "handshake (`transfer_handshake_s`), which the paper's harness pays before measuring (§IV: 'warmup of every "
        "prefill x decode pair'), so it stays 0 here",
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py NixlConnectorWorker.start_load_kv -> "
        "_read_blocks_for_req / _read_blocks (every READ posted at once, none waiting for another) and "
        "_pop_done_transfers (all polled each step); NixlConnectorWorker._background_nixl_handshake (one handshake "
        "per remote engine, the requests that need it wait on the same future); one PCIe Gen4 x16 link per A40",
        fixed_physics={"transfer_link_shared": 1}),
    Mechanism(
        "api_queue", "A prefill API server that serves one request at a time",
        "each request waits in its prefill engine's API server, first come first served, for `api_queue_s` plus "
        "`api_queue_per_token_s` per prompt token before its prompt reaches the engine: the delay is a queue that "
        "grows with load (under `path_tail` it is an independent draw); `api_queue_s` is part of the stated base "
        "(taken out of the serving path after the prefill), the per-token part is not",
        "vllm/entrypoints/openai/serving_engine.py OpenAIServing.__init__ (`_tokenizer_executor = "
        "ThreadPoolExecutor(max_workers=1)`: every prompt of the server is tokenized by one thread, "
        "_tokenize_prompt_input_async) and vllm/entrypoints/openai/api_server.py (one asyncio event loop per API "
        "server for every request's HTTP and AsyncLLM.add_request); on the CPU engines the same loop's time grew "
        "with load (mechanisms stream_admission and prefill_hop, docs/VALIDATION.md)",
        free=(Prior("api_queue_s", "physics", 0.0, 0.02, "s", "none to 20 ms of loop time per request (HTTP "
                    "parsing, the request's objects, the hand-off to the engine core)", off=0.0),
              Prior("api_queue_per_token_s", "physics", 0.0, 2e-5, "s/token", "none to 20 us/token (a Rust "
                    "tokenizer's 0.1 us/token with Python's overhead)", off=0.0)),
        requires=("request_path",)),
    Mechanism(
        "vllm_scheduler", "The decode engine's scheduler as vLLM's",
        "a request whose KV is being pulled holds its blocks but is not running: it takes no sequence slot and is "
        "never preempted (the most recently scheduled running request is); a step that preempted admits nobody "
        "and lets no pulled request join. Off: the most recently admitted request's pull is cancelled first",
        "vllm/v1/core/sched/scheduler.py Scheduler.schedule: RUNNING requests first, `self.running.pop()` preempted "
        "when allocate_slots fails (_preempt_request); WAITING requests only `if not preempted_reqs`; a request "
        "in WAITING_FOR_REMOTE_KVS stays in `self.waiting` (skipped until _update_waiting_for_remote_kv) and the "
        "running limit counts `self.running` alone",
        fixed_physics={"decode_scheduler_vllm": 1}),
    Mechanism(
        "resume_cache", "A preempted request resumes from the blocks still cached",
        "on resume a preempted request recomputes only the part of its context whose blocks were allocated to "
        "others since (its last blocks first); the full blocks left are prefix-cache hits. Off: the whole "
        "context is recomputed",
        "vllm/v1/core/block_pool.py BlockPool.free_blocks (freed blocks go to the free queue's tail, a request's "
        "last block first, keeping their hashes until allocated again), vllm/v1/core/kv_cache_manager.py "
        "KVCacheManager.get_computed_blocks (a resumed request, num_computed_tokens 0, looks its blocks up); "
        "prefix caching is on by default in vLLM's V1 engine",
        fixed_physics={"resume_prefix_cache": 1}),
    Mechanism(
        "first_token_path", "The stated base as the client's TTFT intercept",
        "the stated prefill base (0.0667 s) is the intercept of the TTFT a client measures through the "
        "disaggregated path, so the part the simulator already simulates on the decode side (one pull's setup and "
        "one decode step of a lone sequence: 14 ms with the A40 profile's estimates) is taken out of the prefill "
        "side's base; off: the base is the prefill side's alone",
        "the paper §III-B: 'a five-minute benchmark of the target cluster (prefill latency curve, ...) sets "
        "tau_pre', §IV: TTFT measured per request at the client; §VI: 'prefill base 0.005 -> 0.0667 s' fitted "
        "to the measured A40. A short prompt's forward pass is one weights read, "
        f"{WEIGHTS_READ_S * 1e3:.1f} ms, so most of the base lies outside the prefill step either way",
        fixed_physics={"base_counts_first_token": 1}),
    Mechanism(
        "attention_context", "Prefill attention over a prompt's earlier chunks",
        "a prefill chunk's attention grows with the tokens of its prompt before it: a chunk of k tokens after c "
        "done adds `prefill_ctx_s` x (k c + k (k + 1) / 2) seconds to its step",
        "vllm/v1/attention/backends/flash_attn.py FlashAttentionImpl.forward (causal attention of the chunk's "
        "queries over the cached keys of its prompt); Qwen2.5-3B: 36 layers x 16 heads x 128 dims x 2 (QK^T and "
        "AV) x 2 FLOPs = 0.29 MFLOP per token pair, at 30 to 150 TFLOP/s on an A40 (bf16 tensor-core peak 150)",
        free=(Prior("prefill_ctx_s", "physics", 2.0e-9, 1.0e-8, "s per token pair",
                    "0.29 MFLOP per pair at the A40's 150 TFLOP/s peak to a fifth of it", log=True),)),
    Mechanism(
        "document_tail", "Documents with a long tail",
        "the documents' prompt lengths spread wider (`documents_sigma` freed): a long prompt, chunked by the "
        "token budget, holds its prefill engine for several steps, and every prompt behind it waits",
        "vllm/v1/core/sched/scheduler.py Scheduler.schedule (RUNNING requests, a long prompt's next chunk among "
        "them, are scheduled before WAITING ones: head-of-line blocking on one engine); the paper's Table I "
        "(the workloads' lengths) is lost",
        free=(Prior("documents_sigma", "workloads", 0.3, 1.5, "lognormal shape",
                   "from lengths within ~1.5x of the median to a tail of 40x (clipped at 8,192 tokens)", off=0.5),)),
)
"""Every mechanism `repro identify --mechanisms` may name. Present in every model (not switchable, listed in
docs/IDENTIFY.md): continuous batching in both stages, chunked prefill, the decode step's KV read per context
token, recompute preemption, and decode admission that allocates a request's whole prompt and stops at the first
request that does not fit (head-of-line blocking: vllm/v1/core/sched/scheduler.py Scheduler.schedule, `if
new_blocks is None: break`, after KVCacheManager.allocate_slots for the external tokens)."""

SHARED_HOST = Mechanism(
    "shared_host", "Engines that share one machine's cores with the serving path",
    "every engine of the cluster and its serving path (the engines' API servers, the proxy, the load generator) "
    "run on one machine of `host_cores` cores: the serving path's CPU (a base, a cost per request, one per "
    "streamed token and one per decode step) runs first, the engines' steps share what is left, one core each at most "
    "(`Physics.host_stretch`); a step, a KV pull and a serving-path hop all stretch by the same factor. Its "
    "parameters are measured, not fitted: `repro.validation.host` books every process's CPU on the real cluster "
    "(`repro.live.run_account`) over an idle window and two differential probes (short and long outputs)",
    "this machine (2 cores; docs/VALIDATION.md): vLLM 0.32's CPU engines pin one OpenMP thread each "
    "(VLLM_CPU_OMP_THREADS_BIND, repro.cluster.launchers.vllm_cpu) and run the forward pass in a process of its "
    "own (VLLM::Worker); every token passes through the decode API server (vllm/v1/engine/output_processor.py, "
    "detokenization and the SSE chunk, one asyncio loop), the proxy and the client, all Python on the same cores; "
    "Linux's CFS lets a thread that slept (the serving path's) preempt one that computes (the worker)",
    free=(Prior("host_base_cores", "physics", 0.0, 64.0, "cores", "none to a whole machine's", off=0.0),
          Prior("host_cpu_per_request_s", "physics", 0.0, 1.0, "CPU s per request", "none to 1 s", off=0.0),
          Prior("host_cpu_per_token_s", "physics", 0.0, 0.01, "CPU s per token", "none to 10 ms", off=0.0),
          Prior("host_cpu_per_step_s", "physics", 0.0, 0.1, "CPU s per decode step", "none to 100 ms", off=0.0)))
"""Not in `CATALOGUE`: `repro identify` fits the paper's GPU testbed, whose engines own their GPUs (and whose
serving path runs on a host of its own); this mechanism is the CPU clusters' (`repro validate`), measured on
them. Off (``host_cores`` 0, the default of every profile) it leaves journals byte for byte."""

STREAM_ADMISSION = Mechanism(
    "stream_admission", "A decode API server that admits new requests between its streams",
    "a request reaching a decode engine's API server waits `admission_per_stream_s * n ** admission_exponent + "
    "admission_loop_s / (1 - admission_busy_per_stream * n)` before the engine core has it, `n` the sequences the "
    "engine streams (`Physics.admission_delay_s`: the time in one busy event loop); measured by "
    "`repro.validation.host.fit_admission` (the power law with the loop's own time; the event loop's pole is for "
    "profile files that set `admission_busy_per_stream`) from the engines' own account of their requests (the time "
    "between the API server's arrival and the engine core's queue) against the streams of each run of the training "
    "seed, probes up to the saturation's rate among them",
    "vLLM 0.32's CPU engines, measured here (docs/VALIDATION.md): the decode engine's frontend time per request "
    "(vllm:e2e_request_latency_seconds - request_queue_time - request_inference_time, repro.live.run_account) "
    "grows with the streams it runs (28-56 ms at 3-8 streams, 100 ms at 13.4 streams in the 1p1d record's "
    "admission table, data/validation/1p1d-cpu/validation.md, \"The shared host\"): one asyncio loop "
    "(vllm/entrypoints/openai/api_server.py) serves the new request's HTTP, tokenization and AsyncLLM.add_request "
    "between the output handler's per-step work for every stream "
    "(vllm/v1/engine/async_llm.py, output_handler; vllm/v1/engine/output_processor.py)",
    free=(Prior("admission_per_stream_s", "physics", 0.0, 0.1, "s", "none to 100 ms per stream", off=0.0),
          Prior("admission_exponent", "physics", 0.5, 3.0, "exponent", "from sublinear to cubic"),
          Prior("admission_loop_s", "physics", 0.0, 0.2, "s", "none to 200 ms through an idle loop", off=0.0),
          Prior("admission_busy_per_stream", "physics", 0.0, 1.0, "share of the loop",
                "none to a loop that one stream fills")))
"""Not in `CATALOGUE` either (see `SHARED_HOST`)."""

PREFILL_HOP = Mechanism(
    "prefill_hop", "A prefill leg whose hop outside the engine grows with the machine's streams",
    "a request's prefill leg spends `hop_loop_s + hop_per_stream_s * n ** hop_exponent` outside the prefill "
    "engine's core (after its prefill step), `n` the sequences every decode engine of the cluster streams "
    "(`Physics.prefill_hop_s`): the proxy's hop to the prefill API server and back and that server's HTTP, "
    "tokenization and one-token answer run in Python event loops on the cores the streams load; measured by "
    "`repro.validation.host.fit_hop` from each run of the training seed (probes up to the saturation's rate among "
    "them): the proxy's prefill leg (its journal) less the prefill engine's own queue and inference time (its "
    "account of its requests) against the cluster's streams",
    "vLLM 0.32's CPU engines, measured here (docs/VALIDATION.md): a request's prefill leg outside the prefill "
    "engine (the proxy's leg less the engine's queue and inference time) grows with the cluster's streams (18-48 "
    "ms at 3-8 streams, 100 ms at 13.5 streams in the 1p1d record's prefill hop table, "
    "data/validation/1p1d-cpu/validation.md, \"The shared host\"); it also follows the prefill engine's own "
    "arrivals, which the mechanism does not model (docs/VALIDATION.md, \"1p1d, the prefill leg\"); the proxy "
    "(repro.live.proxy, one asyncio loop relaying every stream's chunks) adds its own growing share",
    free=(Prior("hop_loop_s", "physics", 0.0, 0.2, "s", "none to 200 ms through idle loops", off=0.0),
          Prior("hop_per_stream_s", "physics", 0.0, 0.1, "s", "none to 100 ms per stream", off=0.0),
          Prior("hop_exponent", "physics", 0.5, 3.0, "exponent", "from sublinear to cubic")))
"""Not in `CATALOGUE` either (see `SHARED_HOST`)."""

MACHINE_DRIFT = Mechanism(
    "machine_drift", "A machine whose speed moves under the validation",
    "the whole machine (the engines' every prefill and decode coefficient, and the serving path's costs in CPU "
    "time: its CPU per request, token and step, the admission's and the prefill hop's event loops) runs at a speed "
    "that moves over the hour a validation takes: a judged run is simulated at the speed when it started "
    "(`repro.validation.drift`), read off the training trace, a trace no judged run replays, run before the judged "
    "runs, before each later pass and after the last (the speed at which each run's twin under the verdict's "
    "physics has its median TPOT), interpolated between them; the simulated saturation at the speed of the live "
    "saturation search, read off its own probes below the collapse (the training trace runs only after it). "
    "Variant drift-engines scales the engines alone (by each run's median TPOT over its twin's). No "
    "parameter is fitted on a judged run",
    "this machine (docs/VALIDATION.md): in the 1p1d-cpu validation of "
    "docs/validation-records/1p1d-cpu-epyc-avx2-6b0a5f5.md (a 2-core AMD EPYC, commit 6b0a5f5) the training trace "
    "measured a median TPOT of 11.5, 15.7 and 15.5 ms at +0, +22 and +42 min, and the simulator fitted on the runs "
    "of the first minutes had a TPOT bias of -10 % to -26 % (the simulator faster) on the judged runs that came "
    "after (that record's shared-host table); a calibration measures the engines at one moment, and the serving "
    "path's costs need not move with the engines' (the shipped records, data/validation/*/validation.md, give "
    "drift-engines beside drift-tracked)")
"""Not in `CATALOGUE` either (see `SHARED_HOST`): it has no `Physics` field, it chooses the physics of each run."""

UNSEEN_BY_CALIBRATION: tuple[str, ...] = ("prefill_step_share", "serving_path_sigma", "transfer_link_shared",
                                          "transfer_handshake_s", "api_queue_s", "api_queue_per_token_s",
                                          "decode_scheduler_vllm", "resume_prefix_cache", "base_counts_first_token",
                                          "prefill_ctx_s", *HOST_PARAMETERS)
"""Physics switches a calibration cannot see (it times whole requests): the router's constants stay."""

BY_NAME: dict[str, Mechanism] = {m.name: m for m in CATALOGUE}


def resolve(names: Sequence[str]) -> tuple[Mechanism, ...]:
    """The mechanisms named (in catalogue order); an unknown name, or one without what it requires, is a
    `ConfigError` naming the allowed."""
    bad = [n for n in names if n not in BY_NAME]
    if bad:
        raise ConfigError(f"mechanisms: unknown {bad}; allowed: {sorted(BY_NAME)}")
    chosen = {n for n in names}
    for n in chosen:
        missing = [r for r in BY_NAME[n].requires if r not in chosen]
        if missing:
            raise ConfigError(f"mechanisms: {n!r} needs {missing} switched on too")
    return tuple(m for m in CATALOGUE if m.name in chosen)


def fixed_overrides(mechs: Sequence[Mechanism]) -> tuple[dict[str, float], dict[str, float]]:
    """The physics and workload overrides the mechanisms fix when on."""
    physics: dict[str, float] = {}
    workloads: dict[str, float] = {}
    for m in mechs:
        physics.update(m.fixed_physics)
        workloads.update(m.fixed_workloads)
    return physics, workloads


def model_name(mechs: Sequence[Mechanism]) -> str:
    """A model's name: its mechanisms joined by ``+`` (``base`` for none)."""
    return "+".join(m.name for m in mechs) or "base"


_PATH_FACTORS: collections.OrderedDict[tuple[float, tuple[str, ...], tuple[float, ...]], list[float]] = (
    collections.OrderedDict())
PATH_FACTORS_KEPT = 16
"""Traces whose factors a process keeps (`path_factors`: every policy and cost model of a sweep over one trace
asks for the same ones)."""


def path_factors(ids: list[str], arrivals: list[float], sigma: float) -> list[float]:
    """Mechanism ``path_tail``: each request's serving-path factor, lognormal with mean 1 and shape
    ``sigma``, a fixed function of the request's id and arrival time (the same request, the same draw,
    whatever the policy; another trace's request of the same id, another draw). A new list each call; a
    trace's (64 requests or more) is computed once per process for its last `PATH_FACTORS_KEPT` traces (the key
    is the ids, the arrivals and ``sigma`` themselves)."""
    if len(ids) < 64:
        return _path_factors(ids, arrivals, sigma)
    key = (sigma, tuple(ids), tuple(arrivals))
    got = _PATH_FACTORS.get(key)
    if got is None:
        got = _PATH_FACTORS[key] = _path_factors(ids, arrivals, sigma)
        while len(_PATH_FACTORS) > PATH_FACTORS_KEPT:
            _PATH_FACTORS.popitem(last=False)
    else:
        _PATH_FACTORS.move_to_end(key)
    return list(got)


def _path_factors(ids: list[str], arrivals: list[float], sigma: float) -> list[float]:
    dist = NormalDist()
    out: list[float] = []
    for rid, at in zip(ids, arrivals, strict=True):
        u = (zlib.crc32(f"{rid}@{at!r}".encode()) + 0.5) / 4294967296.0
        out.append(math.exp(sigma * dist.inv_cdf(u) - 0.5 * sigma * sigma))
    return out


def catalogue_table(mechs: Sequence[Mechanism] = CATALOGUE) -> str:
    """The catalogue as the Markdown table docs/IDENTIFY.md prints (a test keeps the two the same): each
    mechanism's name, what it models, its switch or freed parameters with their priors, and its source."""
    def switch(m: Mechanism) -> str:
        parts = [f"`{k}` = {v:g}" for k, v in {**m.fixed_physics, **m.fixed_workloads}.items()]
        parts += [f"`{f.name}` [{f.lo:.3g}, {f.hi:.3g}] {f.unit}" for f in m.free]
        return "; ".join(parts)

    lines = ["| mechanism | what it models | switch / freed parameter [prior] | source |", "|---|---|---|---|"]
    for m in mechs:
        lines.append(f"| `{m.name}` | {m.title}: {m.models} | {switch(m)} | {m.source} |")
    return "\n".join(lines)


def mechanisms_off(phys: Physics, mechs: Sequence[Mechanism] = CATALOGUE) -> Physics:
    """``phys`` with the switches and freed parameters of ``mechs`` at the values that leave the model as without
    them (a switch at its field's default, a freed parameter at its ``off`` value or its field's default); the
    token budget (`vllm_budget`) stays the profile's. The base physics a test of the engine model compares with."""
    from dataclasses import fields as dc_fields
    from dataclasses import replace

    defaults = {f.name: f.default for f in dc_fields(Physics)}
    changes: dict[str, float] = {}
    for m in mechs:
        for name in m.fixed_physics:
            if name != "max_num_batched_tokens":
                changes[name] = defaults[name]
        for f in m.free:
            if f.kind == "physics":
                changes[f.name] = f.off if f.off is not None else defaults[f.name]
    return replace(phys, **changes)
