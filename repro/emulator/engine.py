"""The engine process's clock: runs `EngineCore` on the wall clock, K times faster than physics.

One asyncio task per engine loops: schedule a step, sleep until its end, apply it. Step ends are
absolute deadlines (``end = previous end + step / K``), so the small lateness of every
``sleep`` does not accumulate into drift; when the loop falls behind by more than
``max_lag_ms`` (an overloaded machine) it re-anchors at "now" and records the lag in
``emulator:scheduler_lag_seconds``. For the harness's validity verdict it also keeps, in wall
seconds, how late every step was applied (`AsyncEngine.lateness`, a histogram) and the time lost to
re-anchoring (``lost_wall_s``: the engine ran that much behind its physics); both are in
``GET /_emulator/state``. Every time the engine reports (metrics, TTFT) is physics
time: ``(wall - t0) x K``.

P/D: a prefill engine keeps the blocks of a ``do_remote_decode`` request until the decode engine
reads them through ``POST /_emulator/nixl/read`` (the stand-in for the NIXL read, which takes
the decode side's ``Physics.transfer_time_s`` and then frees the blocks) or until
``VLLM_NIXL_ABORT_REQUEST_TIMEOUT`` (480 s physics) passes. When the prefill engine runs in the
same process (`repro.emulator.server`'s ``--engines``), the read is the same call without HTTP
(`LOCAL_ENGINES`): same timing, same checks, one round trip less on a shared CPU.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import time
import uuid
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from repro.emulator.core import EngineCore
from repro.emulator.faults import Faults
from repro.emulator.http import RawClient
from repro.emulator.seq import PULLING, Seq
from repro.emulator.vllm_metrics import EngineMetrics
from repro.engine.links import Links
from repro.engine.physics import Physics
from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.vocab import DEFAULT_PROFILE


@dataclass
class EmulatorConfig:
    """Everything one emulated engine process is started with (the options of
    ``python -m repro.emulator``; `validate` checks them, `physics` applies the overrides)."""

    port: int = 8000
    host: str = "127.0.0.1"
    profile: str = DEFAULT_PROFILE
    time_scale: float = 1.0  # K: physics seconds per wall second
    engine_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    served_model_name: str | None = None
    side_channel_host: str | None = None
    side_channel_port: int | None = None
    stream_interval_tokens: int = 1
    stream_interval_ms: float = 0.0  # wall milliseconds; 0: off
    faults: tuple[str, ...] = ()  # "NAME[:ARG]" specs, see repro.emulator.faults
    eos_mean_tokens: int = 256  # mean natural output length (tokens) when EOS is honoured
    kv_budget_tokens: int | None = None
    num_gpu_blocks_override: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_lag_ms: float = 5.0  # wall milliseconds the step clock may fall behind before it re-anchors
    parent_pid: int | None = None
    log_level: str = "warning"
    api_key: str | None = field(default=None, repr=False)  # as vLLM's --api-key: /v1/* needs the bearer token

    def physics(self) -> Physics:
        """The profile's physics with this config's KV and batching overrides (raises `ConfigError`)."""
        phys = load_profile(self.profile).physics
        changes: dict[str, Any] = {}
        if self.num_gpu_blocks_override is not None:
            if self.num_gpu_blocks_override < 2:
                raise ConfigError("--num-gpu-blocks-override must be >= 2 (one block is reserved)")
            changes["kv_budget_tokens"] = (self.num_gpu_blocks_override - 1) * phys.block_size
        if self.kv_budget_tokens is not None:
            changes["kv_budget_tokens"] = int(self.kv_budget_tokens)
        if self.max_num_batched_tokens is not None:
            changes["max_num_batched_tokens"] = int(self.max_num_batched_tokens)
        if self.max_num_seqs is not None:
            changes["max_num_seqs"] = int(self.max_num_seqs)
        if changes:
            phys = phys.with_overrides(**changes)
        if phys.kv_budget_tokens < phys.block_size:
            raise ConfigError(f"kv_budget_tokens must be >= block_size ({phys.block_size})")
        return phys

    def validate(self) -> None:
        """Raise `ConfigError` for an option out of range or an unknown fault."""
        if not self.time_scale > 0:
            raise ConfigError(f"--time-scale must be > 0, got {self.time_scale}")
        if not (0 <= self.port < 65536):
            raise ConfigError(f"--port must be in 0..65535, got {self.port}")
        if self.stream_interval_tokens < 1:
            raise ConfigError(f"--stream-interval-tokens must be >= 1, got {self.stream_interval_tokens}")
        if self.stream_interval_ms < 0:
            raise ConfigError(f"--stream-interval-ms must be >= 0, got {self.stream_interval_ms}")
        Faults.parse(self.faults)

    @property
    def advertised_side_channel_host(self) -> str:
        """``remote_host`` of prefill answers: the option, ``$VLLM_NIXL_SIDE_CHANNEL_HOST``, else the
        bind host (127.0.0.1 for a wildcard bind)."""
        host = self.side_channel_host or os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST")
        if host:
            return host
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host


_EARLY_WAKE_S = 0.0005
LOCAL_ENGINES: dict[str, AsyncEngine] = {}  # engine id -> a running engine of this process
REQUEST_LOG_MAX = 200_000  # finished requests an engine remembers (oldest dropped first)
LATENESS_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)  # wall s


class AsyncEngine:
    """EngineCore + wall clock + the KV pull client.

    ``K`` is the time scale; `now` and every time the core sees are physics seconds;
    ``pull_timeout_s`` is the wall seconds a KV read's answer may take (the transfer time comes on top).
    """

    def __init__(self, cfg: EmulatorConfig, physics: Physics | None = None):
        cfg.validate()
        self.cfg = cfg
        self.physics = physics or cfg.physics()
        self.K = float(cfg.time_scale)
        # mechanism shared_link: the pulls whose bytes share this engine's incoming link (repro.engine.links.Links: one
        # source here, the prefill engines' own outgoing links are theirs), each pull's completion, the next wake-up
        self.links = Links(1, 1)
        self.api_lock = asyncio.Lock()  # mechanism api_queue: the API server serves one request at a time
        self._link_waiters: dict[int, asyncio.Future[None]] = {}
        self._link_timer: asyncio.TimerHandle | None = None
        self._link_ids = 0
        self.faults = Faults.parse(cfg.faults)
        self.model_name = cfg.served_model_name or self.physics.model
        self.engine_id = cfg.engine_id
        self.metrics = EngineMetrics(self.model_name, self.physics.max_model_len)
        timeout = float(os.environ.get("VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "480"))
        self.core = EngineCore(
            self.physics,
            stream_interval_tokens=cfg.stream_interval_tokens,
            stream_interval_s=cfg.stream_interval_ms / 1000.0 * self.K,
            slow_factor=self.faults.slow_factor,
            handoff_timeout_s=timeout,
            metrics=self.metrics,
        )
        m = self.metrics
        core = self.core
        m.gauges = {
            "vllm:num_requests_running": (lambda: core.num_running, "Number of requests in model execution batches."),
            "vllm:num_requests_waiting": (lambda: core.num_waiting, "Number of requests waiting to be processed."),
            "vllm:kv_cache_usage_perc": (lambda: core.pool.usage(), "KV-cache usage. 1 means 100 percent usage."),
        }
        m.info = {
            "block_size": str(self.physics.block_size),
            "num_gpu_blocks": str(self.physics.num_gpu_blocks_override),
            "num_gpu_blocks_override": str(self.physics.num_gpu_blocks_override),
            "enable_prefix_caching": "True",
            "cache_dtype": "auto",
        }
        self.t0 = time.monotonic()
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._client: RawClient | None = None
        self.pulls_ok = 0
        self.pulls_failed = 0
        self.prompt_mismatches = 0  # KV reads refused: the decode prompt differed from the prefilled one
        self.reading: dict[str, Seq] = {}
        self._pull_tasks: set[asyncio.Task] = set()
        self.pull_timeout_s = 60.0  # wall seconds; a pull that takes longer fails (local recompute)
        self.completion_requests = 0  # completion requests received (counts for crash:N / hang:N / errors:F)
        self.held_forever: list[Seq] = []  # kv-hold: handoffs read but never released
        self._running = asyncio.Event()  # cleared while the engine hangs
        self._running.set()
        self._fault_change: asyncio.Event | None = None
        self.requests: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG_MAX)  # finished requests (`log_request`)
        self.lateness = [0] * (len(LATENESS_BUCKETS_S) + 1)  # steps per wall-lateness bucket (last: +Inf)
        self.lost_wall_s = 0.0  # wall s the step clock gave up by re-anchoring
        self._arm(self.faults, at_start=True)

    # ---- faults ------------------------------------------------------------------------------
    # crash:N / hang:N from the command line fire when completion request N+1 arrives (so that an
    # engine started with ``hang`` still passes its start-up health check); switched at run time
    # they count from the switch and N=0 fires at once.
    def _arm(self, faults: Faults, at_start: bool) -> None:
        base = self.completion_requests + (1 if at_start else 0)
        self.hang_at = None if faults.hang_after is None else base + faults.hang_after
        self.crash_at = None if faults.crash_after is None else base + faults.crash_after
        self.error_base = self.completion_requests

    def set_faults(self, faults: Faults) -> None:
        """Switch faults at run time (the dev-mode ``POST /_emulator/faults``)."""
        self.faults = faults
        self.core.slow_factor = faults.slow_factor
        if not faults.kv_hold and self.held_forever:  # lifting kv-hold frees what it leaked
            for seq in self.held_forever:
                self.core.pool.release(seq.blocks)
                seq.blocks = []
            self.held_forever = []
            if self._wake is not None:
                self._wake.set()
        self._arm(faults, at_start=False)
        self.update_hang()
        if self._fault_change is not None:
            self._fault_change.set()
            self._fault_change = None

    async def faults_changed(self) -> None:
        """Wait for the next run-time fault switch (a dead-metrics:hang /metrics waits here)."""
        if self._fault_change is None:
            self._fault_change = asyncio.Event()
        await self._fault_change.wait()

    @property
    def hung(self) -> bool:
        return self.hang_at is not None and self.completion_requests >= self.hang_at

    @property
    def crash_due(self) -> bool:
        return self.crash_at is not None and self.completion_requests >= self.crash_at

    def update_hang(self) -> None:
        if self.hung:
            self._running.clear()
        else:
            self._running.set()
            if self._wake is not None:
                self._wake.set()

    async def wait_unhung(self) -> None:
        """Return only once the engine is not hung (never, for a hung engine left alone)."""
        while self.hung:
            await self._running.wait()
            if self.hung:
                self._running.clear()

    # ---- time --------------------------------------------------------------------------------
    def now(self) -> float:
        """Physics seconds since the engine started."""
        return (time.monotonic() - self.t0) * self.K

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the step loop and housekeeping (within the server's event loop)."""
        self._wake = asyncio.Event()
        self._client = RawClient()
        LOCAL_ENGINES[self.engine_id] = self
        self._tasks = [asyncio.create_task(self._loop()), asyncio.create_task(self._housekeeping())]

    async def stop(self) -> None:
        """Cancel the loops and close the pull client."""
        if LOCAL_ENGINES.get(self.engine_id) is self:
            del LOCAL_ENGINES[self.engine_id]
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks = []
        if self._client is not None:
            await self._client.close()
            self._client = None

    def submit(self, seq: Seq) -> None:
        """Queue ``seq`` (its ``arrival`` becomes now) and wake the loop."""
        seq.arrival = self.now()
        self.core.add(seq)
        self._wake.set()

    def log_request(self, request_id: str, seq: Seq) -> None:
        """Remember a completion request's physics times (``GET /_emulator/requests``; the harness
        subtracts them from the client's TTFT: `repro.live.validity.harness_latency`)."""
        self.requests.append({
            "request_id": request_id, "prefill_only": seq.prefill_only, "state": seq.state,
            "arrival_s": seq.arrival, "first_token_s": seq.first_token_t, "finish_s": seq.finish_t,
        })

    def abort(self, seq: Seq) -> None:
        """Drop ``seq`` wherever it is (the client went away) and free its blocks."""
        self.core.abort(seq, self.now())
        self._wake.set()

    # ---- the loop ----------------------------------------------------------------------------
    async def _loop(self) -> None:
        core = self.core
        K = self.K
        lag_tol = self.cfg.max_lag_ms / 1000.0
        mono = time.monotonic
        next_wall: float | None = None
        wake = self._wake
        running = self._running
        while True:
            if not running.is_set():  # hang fault: the engine is stuck
                await running.wait()
                next_wall = None
            plan = core.schedule((mono() - self.t0) * K)
            if plan is not None and plan.pulls:
                for seq in plan.pulls:
                    task = asyncio.create_task(self._pull(seq))
                    self._pull_tasks.add(task)  # keep a strong reference until it is done
                    task.add_done_callback(self._pull_tasks.discard)
            if plan is None or (not plan.items and not plan.n_dec):
                next_wall = None
                wake.clear()
                await wake.wait()
                continue
            wall = mono()
            if next_wall is None:
                start = wall
            else:
                late = wall - next_wall
                self.lateness[bisect_left(LATENESS_BUCKETS_S, late)] += 1
                if late > lag_tol:
                    self.metrics.on_lag(late * K)
                    self.lost_wall_s += late
                    start = wall
                else:
                    if late > 0:
                        self.metrics.on_lag(late * K)
                    start = next_wall
            end = start + plan.time_s / K
            # asyncio rounds timer waits up to the next millisecond; waking ~0.5 ms early makes
            # the delivery time unbiased (the step is still applied at its exact time ``end``)
            delay = end - mono() - _EARLY_WAKE_S
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            core.complete(plan, (end - self.t0) * K)
            next_wall = end

    async def _housekeeping(self) -> None:
        parent = self.cfg.parent_pid
        while True:
            await asyncio.sleep(0.5)
            if not self.faults.kv_hold:
                self.core.expire_handoffs(self.now())
            if parent is not None and os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.sleep(5.0)
                os._exit(0)  # graceful shutdown did not finish: leave anyway

    # ---- P/D: decode side --------------------------------------------------------------------
    def _pull_duration_s(self, tokens: int) -> float:
        """A KV pull's duration (physics s) from now, as the prefill engine is told it (it holds the blocks that
        long): with mechanism ``shared_link`` the estimate at the current share of the link (the pulls in flight
        and this one); the decode side itself waits for its bytes as they move (`_shared_pull`)."""
        ph = self.physics
        if not ph.transfer_link_shared:
            return ph.transfer_time_s(tokens)
        wire = tokens * ph.kv_bytes_per_token / ph.transfer_bandwidth_bytes_per_s
        return ph.transfer_latency_s + wire * (len(self.links.left) + 1)

    async def _shared_pull(self, tokens: int) -> None:
        """Mechanism ``shared_link``: wait out a pull's setup, then until its bytes are through this engine's link,
        shared equally with every pull in flight (rates recomputed as pulls start and end, as the simulator's)."""
        ph = self.physics
        await asyncio.sleep(ph.transfer_latency_s / self.K)
        self._link_ids += 1
        rid = self._link_ids
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._link_waiters[rid] = fut
        self.links.add(rid, float(tokens * ph.kv_bytes_per_token), 0, 0, ph.transfer_bandwidth_bytes_per_s,
                       self.now())
        self._link_kick()
        try:
            await fut
        finally:
            if rid in self.links.left:  # cancelled: its bytes stop moving
                self.links.remove(rid, self.now())
                self._link_waiters.pop(rid, None)
                self._link_kick()

    def _link_kick(self) -> None:
        if self._link_timer is not None:
            self._link_timer.cancel()
            self._link_timer = None
        wait = self.links.reschedule()
        if self.links.first >= 0:
            self._link_timer = asyncio.get_running_loop().call_later(wait / self.K, self._link_fire)

    def _link_fire(self) -> None:
        self._link_timer = None
        for rid in self.links.done(self.now()):
            fut = self._link_waiters.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
        self._link_kick()

    async def _pull(self, seq: Seq) -> None:
        params = seq.info["remote"]
        ok = False
        try:
            url = f"http://{_host_for_url(params['remote_host'])}:{int(params['remote_port'])}/_emulator/nixl/read"
            body = {
                "remote_engine_id": params["remote_engine_id"],
                "remote_request_id": params["remote_request_id"],
                "remote_block_ids": params["remote_block_ids"],
                "num_tokens": seq.transfer_tokens,
                "prompt_tokens": seq.P,
                "prompt_digest": prompt_digest(seq.prompt_ids),
                "duration_s": self._pull_duration_s(seq.transfer_tokens),
                "requester_engine_id": self.engine_id,
            }
            # The transfer starts now and ends duration/K wall seconds later; the prefill engine
            # accepts (or refuses) the read at once, so the HTTP round trip overlaps the transfer
            # instead of adding to it (x K in physics).
            done_at = time.monotonic() + body["duration_s"] / self.K
            local = LOCAL_ENGINES.get(str(params["remote_engine_id"]))
            if local is not None and local is not self:
                status, _ = await asyncio.wait_for(local.read_locally(body), self.pull_timeout_s)
            else:
                status, _ = await asyncio.wait_for(self._client.post_json(url, body), self.pull_timeout_s)
            ok = status == 200
            if ok and self.physics.transfer_link_shared:
                await self._shared_pull(seq.transfer_tokens)
            elif ok:
                rest = done_at - time.monotonic()
                if rest > 0:
                    await asyncio.sleep(rest)
        except Exception:
            ok = False
        if seq.state == PULLING:
            if ok:
                self.pulls_ok += 1
            else:
                self.pulls_failed += 1
        self.core.kv_arrived(seq, ok, self.now())
        self._wake.set()

    # ---- P/D: prefill side -------------------------------------------------------------------
    async def read_locally(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """`serve_read` for a decode engine of this process (a hung engine answers it no sooner
        than it would answer HTTP)."""
        if self.hung:
            await self.wait_unhung()
        return await self.serve_read(body)

    async def serve_read(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Handle a decode engine's KV read of a held request: refused (404/409) or accepted at
        once (200); the blocks stay held for the transfer time (``duration_s`` physics s, / K wall)
        from now. The reader times the transfer from its own send."""
        if body.get("remote_engine_id") != self.engine_id:
            return 404, {"error": f"engine id {body.get('remote_engine_id')!r} is not this engine ({self.engine_id!r})"}
        rid = body.get("remote_request_id")
        seq = self.core.handoffs.get(rid)
        if seq is None:
            return 404, {"error": f"no KV held for request {rid!r} (unknown, already read, or expired)"}
        blocks = body.get("remote_block_ids")
        if blocks is not None and list(blocks) != list(seq.blocks):
            return 409, {"error": "remote_block_ids do not match the blocks held for this request"}
        n, digest = body.get("prompt_tokens"), body.get("prompt_digest")
        if (n is not None and n != seq.P) or (digest is not None and digest != prompt_digest(seq.prompt_ids)):
            # Real vLLM (0.32, NixlConnector) does not check this: a longer decode prompt trips an
            # assertion in the NIXL worker and kills the decode engine; an equal-length different one
            # decodes on the wrong KV. The emulator refuses the read and counts it, so tests can assert
            # that the router never sends one.
            self.prompt_mismatches += 1
            return 409, {"error": f"the decode request's prompt ({n} tokens) differs from the prompt prefilled "
                                  f"for {rid!r} ({seq.P} tokens)"}
        del self.core.handoffs[rid]
        self.reading[rid] = seq
        try:
            duration = max(0.0, float(body.get("duration_s") or 0.0))
        except (TypeError, ValueError):
            duration = 0.0
        # accepted now; the blocks stay held until the transfer is over (duration / K wall s)
        asyncio.get_running_loop().call_later(duration / self.K, self._read_done, rid, seq)
        return 200, {"ok": True, "num_blocks": len(blocks or []), "request_id": rid}

    def _read_done(self, rid: str, seq: Seq) -> None:
        """A KV read's transfer time has passed: free the blocks (kept for good under ``kv-hold``)."""
        self.reading.pop(rid, None)
        if self.faults.kv_hold:  # the leak: the blocks stay allocated for good
            self.held_forever.append(seq)
        else:
            self.core.pool.release(seq.blocks)
            seq.blocks = []
        self._wake.set()


def prompt_digest(ids: list[int]) -> str:
    """A short digest of a prompt's token ids (what a KV read must match)."""
    return hashlib.blake2b(",".join(map(str, ids)).encode(), digest_size=8).hexdigest()


def _host_for_url(host: str) -> str:
    host = str(host)
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host
