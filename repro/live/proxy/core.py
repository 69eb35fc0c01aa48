"""`Proxy`: the state of one proxy process, apart from HTTP.

It holds the shared `repro.routing.router.Router` (policy + ledger, the same object the simulator
drives), the output-length predictor, the engine client, one ``/metrics`` poller per engine, the
journal and the proxy's own Prometheus metrics.

Clock: `Proxy.now` is physics seconds since the proxy started (wall seconds x ``time_scale``); the
ledger and the journal use it. Health and failure cool-downs run on the wall clock (monotonic).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from repro.errors import ConfigError
from repro.experiment.journal import JournalWriter
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.routing.cost_model import CostModel
from repro.routing.policies import make_policy
from repro.routing.policies.base import Decision, Placement, RequestInfo
from repro.routing.router import Router

_KV_RE = re.compile(rb"^vllm:kv_cache_usage_perc\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
_RUN_RE = re.compile(rb"^vllm:num_requests_running\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
_WAIT_RE = re.compile(rb"^vllm:num_requests_waiting\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
HEAD_CHARS = 1000  # characters of the prompt the length predictor reads
KEEPALIVE_S = 2.0  # wall s an idle engine connection is kept (below the servers' 5 s)
SERVER_KEEPALIVE_S = 75  # wall s the proxy's own server keeps an idle client connection (above clients' pools)


class _Predict:
    """The proxy's output-length estimate for one request (same model and keyed noise as the sim)."""

    def __init__(self, cfg: ProxyConfig) -> None:
        self.kind = cfg.predictor
        self.model = None
        if self.kind in ("default", "constant"):
            from repro.routing.predictor import ConstantPredictor, NoisyPredictor, load_default

            base = ConstantPredictor(256.0) if self.kind == "constant" else load_default()
            self.model = (NoisyPredictor(base, cfg.predictor_noise, random_state=cfg.predictor_seed)
                          if cfg.predictor_noise > 0 else base)
        elif self.kind != "oracle":
            raise ConfigError(f"proxy: field 'predictor' must be default, constant or oracle, got {self.kind!r}")

    def __call__(self, prompt: str, prompt_tokens: int, max_tokens: int, request_id: str) -> float:
        """Predicted output tokens; ``oracle`` answers ``max_tokens``."""
        if self.kind == "oracle":
            return float(max_tokens)
        return self.model.predict_one(prompt[:HEAD_CHARS], prompt_tokens, key=request_id)


class Proxy:
    """State of one proxy: router, engine client, journal, poller, metrics.

    `start` (inside a running event loop) opens the engine client and starts the pollers; `stop`
    ends them and closes the journal. Between the two, ``client`` is set.
    """

    def __init__(self, cfg: ProxyConfig) -> None:
        self.cfg = cfg
        self.prefill = [e for e in cfg.endpoints if e.role == "prefill"]
        self.decode = [e for e in cfg.endpoints if e.role == "decode"]
        cm = CostModel.load(cfg.cost_model)
        if cfg.kv_capacity_tokens:
            cm = cm.with_overrides(kv_capacity_tokens=cfg.kv_capacity_tokens)
        self.cost_model = cm
        policy = make_policy(cfg.policy, cm, **cfg.policy_options)
        self.router = Router(policy, cm, [e.name for e in self.prefill], [e.name for e in self.decode])
        self.predict = _Predict(cfg)
        self.t0 = time.monotonic()
        self.journal = JournalWriter(cfg.journal) if cfg.journal else None
        self.client: aiohttp.ClientSession | None = None
        self._poller: asyncio.Task[None] | None = None
        self._poll_failures: dict[str, int] = {e.name: 0 for e in cfg.endpoints}
        self._down_until: dict[str, float] = {e.name: 0.0 for e in cfg.endpoints}  # wall (monotonic)
        self.engine_stats: dict[str, dict[str, float]] = {e.name: {} for e in cfg.endpoints}
        self.in_flight = 0
        self.registry = CollectorRegistry()
        r = self.registry
        labels = ["role", "instance"]
        self.m_decisions = Counter("repro_proxy_decisions", "Placements per instance", labels, registry=r)
        self.m_decision_s = Histogram(
            "repro_proxy_decision_seconds", "Policy decision latency (wall s)", registry=r,
            buckets=(5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 5e-3, 1e-2),
        )
        self.m_requests = Counter("repro_proxy_requests", "Requests by final status", ["status"], registry=r)
        self.m_backlog = Gauge("repro_proxy_backlog_seconds", "Ledger seconds of backlog (physics s)", labels,
                               registry=r)
        self.m_inflight = Gauge("repro_proxy_in_flight", "Ledger in-flight requests", labels, registry=r)
        self.m_healthy = Gauge("repro_proxy_instance_healthy", "1 if the instance answers", labels, registry=r)
        self.m_kv = Gauge("repro_proxy_kv_usage", "Last polled KV usage (0..1)", labels, registry=r)

    # ---- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Open the engine client and start polling (call inside the event loop that serves)."""
        # aiohttp, not httpx, for the engine calls: ~0.2 ms of CPU per request instead of ~1.4 ms
        # (benchmarks/bench_proxy.py), which matters on a 2-core machine hosting the engines too.
        # Idle connections are dropped after KEEPALIVE_S, before the engine's server closes them
        # (uvicorn's and vLLM's default: 5 s). With aiohttp's default (15 s) a request could go out on a
        # connection the engine had just closed: measured on real vLLM, "Can not write request body"
        # failed a prefill call at light load.
        connector = aiohttp.TCPConnector(limit=0, force_close=False, enable_cleanup_closed=True,
                                         keepalive_timeout=KEEPALIVE_S)
        timeout = aiohttp.ClientTimeout(total=None, connect=self.cfg.connect_timeout_s,
                                        sock_read=self.cfg.read_timeout_s)
        self.client = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        self._poller = asyncio.create_task(self.poll_forever())

    async def stop(self) -> None:
        """Stop polling, close the engine client and the journal."""
        if self._poller is not None:
            self._poller.cancel()
        if self.client is not None:
            await self.client.close()
        if self.journal is not None:
            self.journal.close()

    # ---- clock ------------------------------------------------------------------------------
    def now(self) -> float:
        """Physics seconds since the proxy started."""
        return (time.monotonic() - self.t0) * self.cfg.time_scale

    def role_index(self, name: str) -> tuple[str, int]:
        """(role, index in that role's pool) of the engine called ``name``; KeyError if none."""
        for role, pool in (("prefill", self.prefill), ("decode", self.decode)):
            for i, e in enumerate(pool):
                if e.name == name:
                    return role, i
        raise KeyError(name)

    # ---- decisions ----------------------------------------------------------------------------
    def decide(self, request: RequestInfo) -> Decision:
        """Ask the policy (through the router, which charges the ledger on a placement) where
        ``request`` goes; records the decision latency (wall seconds) and the placement counts."""
        t = time.perf_counter()
        decision = self.router.route(request, self.now())
        self.m_decision_s.observe(time.perf_counter() - t)
        if isinstance(decision, Placement):
            self.m_decisions.labels("prefill", self.prefill[decision.prefill].name).inc()
            self.m_decisions.labels("decode", self.decode[decision.decode].name).inc()
        return decision

    # ---- poller -----------------------------------------------------------------------------
    async def poll_forever(self) -> None:
        """One polling loop per engine, so that a hung engine does not delay the polls of the others."""
        await asyncio.gather(*(self._poll_loop(e) for e in self.cfg.endpoints))

    async def _poll_loop(self, e: Endpoint) -> None:
        wall = max(self.cfg.poll_interval_s / self.cfg.time_scale, self.cfg.min_poll_wall_s)
        while True:
            await self.poll_one(e)
            await asyncio.sleep(wall)

    async def poll_one(self, e: Endpoint) -> None:
        """Read one engine's ``/metrics``. Health rules: a poll that fails (refused, non-200, or
        no answer within ``poll_timeout_s``) ``unhealthy_after`` times in a row marks the engine
        unhealthy (a dead ``/metrics`` alone is enough: the policies need its load, and a stale
        view routes blind); the first good poll marks it healthy again, unless a request failed
        on it less than ``failure_cooldown_s`` ago."""
        assert self.client is not None
        role, i = self.role_index(e.name)
        timeout = aiohttp.ClientTimeout(total=self.cfg.poll_timeout_s,
                                        connect=min(self.cfg.connect_timeout_s, self.cfg.poll_timeout_s))
        try:
            async with self.client.get(e.url.rstrip("/") + "/metrics", timeout=timeout) as r:
                text = await r.read()
                if r.status != 200:
                    raise aiohttp.ClientResponseError(r.request_info, (), status=r.status)
            m = _KV_RE.search(text)
            if m:
                usage = float(m.group(1))
                self.router.observe_kv(role, i, usage, self.now())
                self.m_kv.labels(role, e.name).set(usage)
            stats = {}
            for key, rx in (("running", _RUN_RE), ("waiting", _WAIT_RE)):
                mm = rx.search(text)
                if mm:
                    stats[key] = float(mm.group(1))
            self.engine_stats[e.name] = stats
            self._poll_failures[e.name] = 0
            if not self.router.is_healthy(role, i) and time.monotonic() >= self._down_until[e.name]:
                self.router.set_health(role, i, True)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            self._poll_failures[e.name] += 1
            if self._poll_failures[e.name] >= self.cfg.unhealthy_after:
                self.router.set_health(role, i, False)
        self.m_healthy.labels(role, e.name).set(1.0 if self.router.is_healthy(role, i) else 0.0)

    def mark_failed(self, e: Endpoint) -> None:
        """A request failed on ``e`` at the transport level (refused, reset, timed out, cut): skip
        it until a poll succeeds after ``failure_cooldown_s``. (An HTTP 5xx answer does not mark
        the engine: it is alive and answering; the request alone fails.)"""
        self._down_until[e.name] = time.monotonic() + self.cfg.failure_cooldown_s
        role, i = self.role_index(e.name)
        self.router.set_health(role, i, False)
        self.m_healthy.labels(role, e.name).set(0.0)

    def health(self) -> dict[str, bool]:
        """Engine name -> whether the policies may use it now."""
        return {e.name: self.router.is_healthy(*self.role_index(e.name)) for e in self.cfg.endpoints}

    # ---- journal ----------------------------------------------------------------------------
    def record(self, row: dict[str, Any]) -> None:
        """Count the row's final status and append it to the journal (if any), flushed."""
        self.m_requests.labels(row["status"]).inc()
        if self.journal is not None:
            self.journal.write(row)

    def refresh_gauges(self) -> None:
        """Set the backlog (physics seconds) and in-flight gauges from the ledger's view now."""
        now = self.now()
        view = self.router.view(now)
        for role, pool in (("prefill", view.prefill), ("decode", view.decode)):
            for s in pool:
                self.m_backlog.labels(role, s.name).set(s.backlog_s)
                self.m_inflight.labels(role, s.name).set(s.in_flight)
