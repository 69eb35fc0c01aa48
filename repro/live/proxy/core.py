"""`Proxy`: the state of one proxy process, apart from HTTP.

It holds the shared `repro.routing.router.Router` (policy + ledger, the same object the simulator
drives), the output-length predictor, the engine client, one ``/metrics`` poller per engine, the
journal and the proxy's own Prometheus metrics.

Clock: `Proxy.now` is physics seconds since the proxy started (wall seconds x ``time_scale``); the
ledger and the journal use it. Health runs on the wall clock (monotonic).

Health: overload is queueing, not failure. A busy engine (its ``/metrics`` answers, its queue
grows) stays in rotation and its requests wait as long as it takes. An engine is **dead** when

- a connection to it is refused (no process listens: a poll or a request finds out), or
- its ``/metrics`` has not answered 200 for ``health_window_s`` wall seconds;

then its in-flight requests fail at once (502, the reason in the journal: `EngineDead`), the
policies skip it, and the first good poll brings it back. A request whose connection breaks
(reset, cut stream) fails alone, with the reason; the poller decides about the engine.

Validity: the proxy measures what would make its numbers about the machine rather than the router:
its event loop's lag (a 20 ms wall ticker's overshoot) and the gaps between good ``/metrics`` polls
of each engine (`Proxy.validity`, in ``GET /health``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from repro.errors import ConfigError, PolicyError
from repro.experiment.journal import JournalWriter
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.proxy.engine_client import CannotConnect, EngineClient
from repro.live.proxy.scrape import Scraper, metrics_query
from repro.routing.cost_model import CostModel
from repro.routing.policies import make_policy
from repro.routing.policies.base import Decision, Placement, RequestInfo
from repro.routing.router import Router

_KV_RE = re.compile(rb"^vllm:kv_cache_usage_perc\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
_RUN_RE = re.compile(rb"^vllm:num_requests_running\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
_WAIT_RE = re.compile(rb"^vllm:num_requests_waiting\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
# the samples the poller reads: asked for by name (``/metrics?name[]=...``), so an engine that honours the
# filter (the emulator, prometheus-client's exposition app) renders and sends ~0.5 KB instead of its whole
# exposition (~32 KB on the emulator: ~0.3 ms of its CPU per poll); one that ignores it sends everything
POLLED_METRICS = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")
HEAD_CHARS = 1000  # characters of the prompt the length predictor reads
LAG_TICK_S = 0.02  # wall s between event-loop lag samples
VALIDITY_SAMPLES = 100_000  # lag / poll-gap samples kept (the latest: ~33 min of ticks)
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


class EngineDead(Exception):
    """The engine a request was on died (refused connections, or ``/metrics`` silent past the
    health window); the message names the engine and why."""


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
        self.router = Router(policy, cm, [e.name for e in self.prefill], [e.name for e in self.decode],
                             label=cfg.policy)
        self.policy_errors = 0  # requests whose decision broke the policy contract (PolicyError)
        self.first_policy_error: str | None = None  # the first one's message
        self.predict = _Predict(cfg)
        self.t0 = time.monotonic()
        self.journal = JournalWriter(cfg.journal) if cfg.journal else None
        self.client: aiohttp.ClientSession | None = None  # /v1/models and https polls
        self.engines: EngineClient | None = None  # the P/D calls
        self._poller: asyncio.Task[None] | None = None
        t0 = time.monotonic()
        self._last_ok: dict[str, float] = {e.name: t0 for e in cfg.endpoints}  # wall: last 200 from /metrics
        self._death: dict[str, asyncio.Future[str] | None] = {e.name: None for e in cfg.endpoints}
        self.dead_reason: dict[str, str] = {}  # engine -> why it is dead now
        self.deaths: list[dict[str, Any]] = []  # every death: engine, wall s since start, reason
        # bounded (the last VALIDITY_SAMPLES of each): a proxy may serve for days
        self.poll_gaps: dict[str, deque[float]] = {e.name: deque(maxlen=VALIDITY_SAMPLES)
                                                   for e in cfg.endpoints}  # wall s between good polls
        self.loop_lags: deque[float] = deque(maxlen=VALIDITY_SAMPLES)  # wall s: how late the lag ticker woke
        self._lag_task: asyncio.Task[None] | None = None
        self._scrapers = {e.name: Scraper(e.url, cfg.connect_timeout_s, metrics_query(POLLED_METRICS))
                          for e in cfg.endpoints}
        self.engine_stats: dict[str, dict[str, float]] = {e.name: {} for e in cfg.endpoints}
        self.in_flight = 0
        self.registry = CollectorRegistry()
        r = self.registry
        labels = ["role", "instance"]
        self.m_decisions = Counter("repro_proxy_decisions", "Placements per instance", labels, registry=r)
        self.m_decision_s = Histogram(
            "repro_proxy_decision_seconds", "Policy decision time: wall s of each Policy.place call", registry=r,
            buckets=(5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 5e-3, 1e-2),
        )
        self.m_policy_errors = Counter("repro_proxy_policy_errors", "Decisions that broke the policy contract "
                                       "(an exception in place, an invalid placement)", registry=r)
        self.m_requests = Counter("repro_proxy_requests", "Requests by final status", ["status"], registry=r)
        self.m_backlog = Gauge("repro_proxy_backlog_seconds", "Ledger seconds of backlog (physics s)", labels,
                               registry=r)
        self.m_inflight = Gauge("repro_proxy_in_flight", "Ledger in-flight requests", labels, registry=r)
        self.m_healthy = Gauge("repro_proxy_instance_healthy", "1 if the instance answers", labels, registry=r)
        self.m_kv = Gauge("repro_proxy_kv_usage", "Last polled KV usage (0..1)", labels, registry=r)
        # the labelled children the hot paths touch, looked up once (a ``labels()`` call costs ~5 us)
        self._where = {e.name: (role, i) for role, pool in (("prefill", self.prefill), ("decode", self.decode))
                       for i, e in enumerate(pool)}
        self._placed = {(role, i): self.m_decisions.labels(role, pool[i].name)
                        for role, pool in (("prefill", self.prefill), ("decode", self.decode))
                        for i in range(len(pool))}
        self._kv_gauge = {e.name: self.m_kv.labels(*self._where_name(e.name)) for e in cfg.endpoints}
        self._healthy_gauge = {e.name: self.m_healthy.labels(*self._where_name(e.name)) for e in cfg.endpoints}
        self._by_status: dict[str, Any] = {}

    # ---- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Open the engine clients and start polling (call inside the event loop that serves)."""
        # The P/D calls go through `EngineClient` (httptools on kept-alive connections: cheaper than
        # aiohttp's client, itself ~0.2 ms of CPU per request cheaper than httpx's); aiohttp serves the
        # rare calls (/v1/models, polls of https engines).
        # Idle connections are dropped after KEEPALIVE_S, before the engine's server closes them
        # (uvicorn's and vLLM's default: 5 s). With aiohttp's default (15 s) a request could go out on a
        # connection the engine had just closed: measured on real vLLM, "Can not write request body"
        # failed a prefill call at light load.
        connector = aiohttp.TCPConnector(limit=0, force_close=False, enable_cleanup_closed=True,
                                         keepalive_timeout=KEEPALIVE_S)
        # no read time-out: an engine that is alive may take as long as its queue takes
        timeout = aiohttp.ClientTimeout(total=None, connect=self.cfg.connect_timeout_s)
        self.client = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        self.engines = EngineClient(self.cfg.connect_timeout_s, KEEPALIVE_S)
        now = time.monotonic()
        self._last_ok = {name: now for name in self._last_ok}
        self._poller = asyncio.create_task(self.poll_forever())
        self._lag_task = asyncio.create_task(self._lag_ticker())

    async def stop(self) -> None:
        """Stop polling, close the engine client and the journal."""
        for task in (self._poller, self._lag_task):
            if task is not None:
                task.cancel()
        for scraper in self._scrapers.values():
            scraper.close()
        if self.client is not None:
            await self.client.close()
        if self.engines is not None:
            self.engines.close()
        if self.journal is not None:
            self.journal.close()

    # ---- clock ------------------------------------------------------------------------------
    def now(self) -> float:
        """Physics seconds since the proxy started."""
        return (time.monotonic() - self.t0) * self.cfg.time_scale

    def role_index(self, name: str) -> tuple[str, int]:
        """(role, index in that role's pool) of the engine called ``name``; KeyError if none."""
        return self._where[name]

    def _where_name(self, name: str) -> tuple[str, str]:
        """(role, name): the labels of engine ``name``'s metrics."""
        return self._where[name][0], name

    # ---- decisions ----------------------------------------------------------------------------
    def decide(self, request: RequestInfo) -> Decision:
        """Ask the policy (through the router, which charges the ledger on a placement) where
        ``request`` goes; records the decision time (the router's timing of ``place``, wall seconds)
        and the placement counts. A policy that breaks its contract: `repro.errors.PolicyError`,
        counted (`policy_failed`) and raised."""
        try:
            decision = self.router.route(request, self.now())
        except PolicyError as exc:
            self.policy_failed(str(exc))
            raise
        self.m_decision_s.observe(self.router.times.last_ns * 1e-9)
        if isinstance(decision, Placement):
            self._placed["prefill", decision.prefill].inc()
            self._placed["decode", decision.decode].inc()
        return decision

    def policy_failed(self, message: str) -> None:
        """Count a decision that broke the policy contract; the first one's message is kept (``GET
        /health``'s ``policy_errors``: a live run stops on it, `repro.live.run`)."""
        self.policy_errors += 1
        self.m_policy_errors.inc()
        if self.first_policy_error is None:
            self.first_policy_error = message

    def policy_report(self) -> dict[str, Any]:
        """What ``GET /health`` says about the policy: its decision times so far (``p50_us``, ``p99_us``,
        ``max_us``, ``n``) and the decisions that broke its contract (``count``, the ``first`` message)."""
        return {"decision_time": self.router.decision_time(),
                "policy_errors": {"count": self.policy_errors, "first": self.first_policy_error}}

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
        """Read one engine's ``/metrics`` (waiting at most until the engine's health window ends).
        A 200 records its load and brings a dead engine back; a refused connection kills it at
        once; any other failure kills it only once no poll has succeeded for ``health_window_s``."""
        assert self.client is not None
        role, i = self.role_index(e.name)
        window = self.cfg.health_window_s
        start = time.monotonic()
        wait = max(self._last_ok[e.name] + window - start, 0.05)
        try:
            scraper = self._scrapers[e.name]
            if scraper.fallback:
                timeout = aiohttp.ClientTimeout(total=wait, connect=min(self.cfg.connect_timeout_s, wait))
                async with self.client.get(scraper.url, timeout=timeout) as r:
                    status, text = r.status, await r.read()
            else:
                status, text = await scraper.get(wait)
            if status != 200:
                raise ValueError(f"/metrics answered HTTP {status}")
            now = time.monotonic()
            m = _KV_RE.search(text)
            if m:
                usage = float(m.group(1))
                self.router.observe_kv(role, i, usage, self.now())
                self._kv_gauge[e.name].set(usage)
            stats = {}
            for key, rx in (("running", _RUN_RE), ("waiting", _WAIT_RE)):
                mm = rx.search(text)
                if mm:
                    stats[key] = float(mm.group(1))
            self.engine_stats[e.name] = stats
            self.poll_gaps[e.name].append(now - self._last_ok[e.name])
            self._last_ok[e.name] = now
            if e.name in self.dead_reason:
                self.revive(e)
        except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
            self.kill(e, f"connection refused ({getattr(exc, 'os_error', None) or exc})")
        except (aiohttp.ClientError, TimeoutError, ValueError, OSError, asyncio.IncompleteReadError) as exc:
            silent = time.monotonic() - self._last_ok[e.name]
            if silent >= window:
                what = "no answer" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
                self.kill(e, f"/metrics silent for {silent:.1f} s ({what})")
        self._healthy_gauge[e.name].set(1.0 if self.router.is_healthy(role, i) else 0.0)

    # ---- life and death -----------------------------------------------------------------------
    def death_of(self, e: Endpoint) -> asyncio.Future[str]:
        """A future that resolves (to the reason) when ``e`` is next declared dead; already resolved
        if it is dead now."""
        fut = self._death[e.name]
        if fut is None:
            fut = self._death[e.name] = asyncio.get_running_loop().create_future()
            if e.name in self.dead_reason:
                fut.set_result(self.dead_reason[e.name])
        return fut

    def kill(self, e: Endpoint, reason: str) -> None:
        """Declare ``e`` dead: the policies skip it and its in-flight requests fail with ``reason``."""
        if e.name in self.dead_reason:
            return
        self.dead_reason[e.name] = f"{e.name} dead: {reason}"
        self.deaths.append({"engine": e.name, "at_wall_s": time.monotonic() - self.t0, "reason": reason})
        role, i = self.role_index(e.name)
        self.router.set_health(role, i, False)
        self.m_healthy.labels(role, e.name).set(0.0)
        fut = self._death[e.name]
        if fut is not None and not fut.done():
            fut.set_result(self.dead_reason[e.name])

    def revive(self, e: Endpoint) -> None:
        """``e`` answered a poll again: back in rotation."""
        self.dead_reason.pop(e.name, None)
        self._death[e.name] = None
        role, i = self.role_index(e.name)
        self.router.set_health(role, i, True)
        self.m_healthy.labels(role, e.name).set(1.0)

    def refused(self, e: Endpoint, exc: BaseException) -> bool:
        """If ``exc`` (from a call to ``e``) is a refused connection, declare ``e`` dead; True if so."""
        if isinstance(exc, (aiohttp.ClientConnectorError, CannotConnect)):
            self.kill(e, f"connection refused ({getattr(exc, 'os_error', None) or exc})")
            return True
        return False

    # ---- validity ---------------------------------------------------------------------------------
    async def _lag_ticker(self) -> None:
        """Sample the event loop's lag: how much later than asked a ``LAG_TICK_S`` sleep returns."""
        mono = time.monotonic
        while True:
            t = mono()
            await asyncio.sleep(LAG_TICK_S)
            self.loop_lags.append(mono() - t - LAG_TICK_S)

    def validity(self) -> dict[str, Any]:
        """What the proxy measured about the machine (wall seconds): its event loop's lag
        (p50/p99/max over `LAG_TICK_S` ticks), the gaps between good polls of an engine beyond
        the poll period (p99/max over all engines), the engines that died, and the proxy's own
        scheduling priority (niceness and its session's autogroup niceness; `repro.cluster.processes`)
        and the objects its startup exempted from garbage collection (`settle_heap`)."""
        import gc
        import os

        import numpy as np

        from repro.cluster.processes import priority_of

        lags = np.asarray(self.loop_lags or [0.0], dtype=float)
        period = max(self.cfg.poll_interval_s / self.cfg.time_scale, self.cfg.min_poll_wall_s)
        gaps = [g for v in self.poll_gaps.values() for g in v]
        excess = np.maximum(np.asarray(gaps or [period]) - period, 0.0)
        return {
            "loop_lag_samples": len(self.loop_lags),
            "loop_lag_p50_s": float(np.percentile(lags, 50)),
            "loop_lag_p99_s": float(np.percentile(lags, 99)),
            "loop_lag_max_s": float(lags.max()),
            "poll_period_s": period,
            "poll_gap_excess_p99_s": float(np.percentile(excess, 99)),
            "poll_gap_excess_max_s": float(excess.max()),
            "deaths": list(self.deaths),
            "priority": priority_of(os.getpid()),
            "gc_frozen_objects": gc.get_freeze_count(),  # > 0: the process settled its startup heap
        }

    def health(self) -> dict[str, bool]:
        """Engine name -> whether the policies may use it now."""
        return {e.name: self.router.is_healthy(*self.role_index(e.name)) for e in self.cfg.endpoints}

    # ---- journal ----------------------------------------------------------------------------
    def record(self, row: dict[str, Any]) -> None:
        """Count the row's final status and append it to the journal (if any), flushed."""
        status = row["status"]
        counter = self._by_status.get(status)
        if counter is None:
            counter = self._by_status[status] = self.m_requests.labels(status)
        counter.inc()
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
