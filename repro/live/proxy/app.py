"""The router proxy: an OpenAI-compatible front for a prefill/decode-disaggregated vLLM cluster.

Per request (``POST /v1/completions`` or ``/v1/chat/completions``):

1. read the body (size-limited; malformed JSON or fields -> 400 with an OpenAI-style error);
   request id = ``X-Request-Id`` or a fresh uuid; SLO class = ``X-SLO-Class`` (tight | loose,
   default loose); prompt tokens counted with the tokenizer; output length predicted;
2. ask the policy through the shared `repro.routing.router.Router` (the same object the simulator drives)
   with a view built from the ledger and the polled engine metrics; a rejection -> 429 with
   ``Retry-After``;
3. run vLLM's two-step P/D flow (`repro.live.pd_protocol`): prefill call, then the decode call with the
   prefill's ``kv_transfer_params``, both with the same ``X-Request-Id``; stream the decode answer
   back byte for byte (``text/event-stream``) or return its JSON;
4. settle the ledger and append one journal row (flushed), with proxy-side timestamps of each step.

The response carries ``X-Request-Id``, ``X-Prefill-Instance`` and ``X-Decode-Instance``.

A poller reads every engine's ``/metrics`` (``vllm:kv_cache_usage_perc`` etc.) every
``poll_interval_s`` of physics time (never more often than ``min_poll_wall_s`` of wall time); an
engine that does not answer is marked unhealthy and skipped by the policies until it answers again.
Requests in flight to a failing engine are journaled as failed with the reason and answered with
502 (or an SSE error event if streaming had begun); nothing hangs: every engine call has timeouts.

Clock: ``time_scale`` K says the engines run physics K times faster than the wall clock (emulated
engines with ``--time-scale K``; 1 for real vLLM). The ledger and the journal use physics seconds
(wall seconds x K) from the proxy's start.

Exposes ``GET /health``, ``GET /metrics`` (Prometheus: decisions per instance, decision latency,
backlog seconds, in-flight, requests by status) and ``GET /v1/models`` (forwarded). Binds
127.0.0.1 unless told otherwise. With ``api_key`` set, clients must send ``Authorization: Bearer
<key>``, and the key is forwarded to the engines (as vLLM's ``--api-key`` expects).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from repro.errors import ConfigError
from repro.experiment.journal import JournalWriter, tpot
from repro.live.pd_protocol import SSEParser, decode_body, headers_for, prefill_body, prompt_of
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import Placement, RequestInfo, make_policy
from repro.routing.router import Router
from repro.workload.tokenizer import DEFAULT_TOKENIZER

_KV_RE = re.compile(rb"^vllm:kv_cache_usage_perc\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
_RUN_RE = re.compile(rb"^vllm:num_requests_running\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
_WAIT_RE = re.compile(rb"^vllm:num_requests_waiting\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
HEAD_CHARS = 1000
API_KEY_ENV = "REPRO_PROXY_API_KEY"


@dataclass
class Endpoint:
    name: str
    role: str  # prefill | decode
    url: str


@dataclass
class ProxyConfig:
    """Everything a proxy process needs (serialisable to JSON for ``python -m repro.live.proxy.app``)."""

    endpoints: list[Endpoint]
    policy: str = "marginal_cost"
    policy_options: dict[str, Any] = field(default_factory=dict)
    cost_model: str = "calibrated"
    predictor: str = "default"  # default | constant | oracle(max_tokens; only for experiments)
    predictor_noise: float = 0.0
    predictor_seed: int = 0
    journal: str | None = None
    time_scale: float = 1.0
    poll_interval_s: float = 0.05  # physics seconds
    min_poll_wall_s: float = 0.02
    connect_timeout_s: float = 2.0  # wall
    prefill_timeout_s: float = 60.0  # wall
    read_timeout_s: float = 60.0  # wall, between decode chunks
    unhealthy_after: int = 1  # consecutive failed polls
    poll_timeout_s: float = 1.0  # wall: a /metrics poll that takes longer counts as failed
    failure_cooldown_s: float = 2.0  # wall: an engine a request failed on stays out this long at least
    max_body_bytes: int = 4 * 1024 * 1024
    max_prompt_chars: int = 1_000_000
    api_key: str | None = field(default=None, repr=False)  # never logged; not written by the harness either
    host: str = "127.0.0.1"
    port: int = 8000
    kv_capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        self.endpoints = [e if isinstance(e, Endpoint) else Endpoint(**e) for e in self.endpoints]
        roles = [e.role for e in self.endpoints]
        for e in self.endpoints:
            if e.role not in ("prefill", "decode"):
                raise ConfigError(f"proxy: endpoint {e.name!r} field 'role' must be prefill or decode, got {e.role!r}")
            if not e.url.startswith(("http://", "https://")):
                raise ConfigError(f"proxy: endpoint {e.name!r} field 'url' must start with http:// or https://")
        if "prefill" not in roles or "decode" not in roles:
            raise ConfigError("proxy: field 'endpoints' needs at least one prefill and one decode engine")
        if not self.time_scale > 0:
            raise ConfigError(f"proxy: field 'time_scale' must be > 0, got {self.time_scale!r}")
        if not self.poll_interval_s > 0:
            raise ConfigError(f"proxy: field 'poll_interval_s' must be > 0, got {self.poll_interval_s!r}")
        for name in ("connect_timeout_s", "prefill_timeout_s", "read_timeout_s", "poll_timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
                raise ConfigError(f"proxy: field '{name}' must be a finite number of seconds > 0, got {v!r}")
        if isinstance(self.failure_cooldown_s, bool) or not isinstance(self.failure_cooldown_s, (int, float)) \
                or not 0 <= self.failure_cooldown_s < math.inf:
            raise ConfigError(f"proxy: field 'failure_cooldown_s' must be >= 0, got {self.failure_cooldown_s!r}")
        if isinstance(self.unhealthy_after, bool) or not isinstance(self.unhealthy_after, int) or self.unhealthy_after < 1:
            raise ConfigError(f"proxy: field 'unhealthy_after' must be an integer >= 1, got {self.unhealthy_after!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "ProxyConfig":
        raw = json.loads(text)
        return cls(**raw)


def _error(status: int, message: str, kind: str = "BadRequestError", headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status_code=status,
        headers=headers,
    )


class _Predict:
    """The proxy's output-length estimate for one request (same model and keyed noise as the sim)."""

    def __init__(self, cfg: ProxyConfig) -> None:
        self.kind = cfg.predictor
        self.model = None
        if self.kind in ("default", "constant"):
            from repro.routing.predictor import ConstantPredictor, NoisyPredictor, load_default

            base = ConstantPredictor(256.0) if self.kind == "constant" else load_default()
            self.model = NoisyPredictor(base, cfg.predictor_noise, random_state=cfg.predictor_seed) if cfg.predictor_noise > 0 else base
        elif self.kind != "oracle":
            raise ConfigError(f"proxy: field 'predictor' must be default, constant or oracle, got {self.kind!r}")

    def __call__(self, prompt: str, prompt_tokens: int, max_tokens: int, request_id: str) -> float:
        if self.kind == "oracle":
            return float(max_tokens)
        return self.model.predict_one(prompt[:HEAD_CHARS], prompt_tokens, key=request_id)


class Proxy:
    """State of one proxy: router, engine client, journal, poller, metrics."""

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
        self._poll_failures: dict[str, int] = {e.name: 0 for e in cfg.endpoints}
        self._down_until: dict[str, float] = {e.name: 0.0 for e in cfg.endpoints}  # wall (monotonic)
        self.engine_stats: dict[str, dict[str, float]] = {e.name: {} for e in cfg.endpoints}
        self.in_flight = 0
        self.registry = CollectorRegistry()
        r = self.registry
        self.m_decisions = Counter("repro_proxy_decisions", "Placements per instance", ["role", "instance"], registry=r)
        self.m_decision_s = Histogram(
            "repro_proxy_decision_seconds", "Policy decision latency (wall s)", registry=r,
            buckets=(5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 5e-3, 1e-2),
        )
        self.m_requests = Counter("repro_proxy_requests", "Requests by final status", ["status"], registry=r)
        self.m_backlog = Gauge("repro_proxy_backlog_seconds", "Ledger seconds of backlog (physics s)", ["role", "instance"], registry=r)
        self.m_inflight = Gauge("repro_proxy_in_flight", "Ledger in-flight requests", ["role", "instance"], registry=r)
        self.m_healthy = Gauge("repro_proxy_instance_healthy", "1 if the instance answers", ["role", "instance"], registry=r)
        self.m_kv = Gauge("repro_proxy_kv_usage", "Last polled KV usage (0..1)", ["role", "instance"], registry=r)

    # ---- clock ------------------------------------------------------------------------------
    def now(self) -> float:
        """Physics seconds since the proxy started."""
        return (time.monotonic() - self.t0) * self.cfg.time_scale

    def role_index(self, name: str) -> tuple[str, int]:
        for role, pool in (("prefill", self.prefill), ("decode", self.decode)):
            for i, e in enumerate(pool):
                if e.name == name:
                    return role, i
        raise KeyError(name)

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
        try:
            async with self.client.get(
                e.url.rstrip("/") + "/metrics",
                timeout=aiohttp.ClientTimeout(total=self.cfg.poll_timeout_s, connect=min(self.cfg.connect_timeout_s, self.cfg.poll_timeout_s)),
            ) as r:
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
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
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

    # ---- journal ----------------------------------------------------------------------------
    def record(self, row: dict[str, Any]) -> None:
        self.m_requests.labels(row["status"]).inc()
        if self.journal is not None:
            self.journal.write(row)

    def refresh_gauges(self) -> None:
        now = self.now()
        view = self.router.view(now)
        for role, pool in (("prefill", view.prefill), ("decode", view.decode)):
            for s in pool:
                self.m_backlog.labels(role, s.name).set(s.backlog_s)
                self.m_inflight.labels(role, s.name).set(s.in_flight)


def _validate(path: str, body: Any) -> str | None:
    """A vLLM-like validation message, or None if the body is acceptable (a body that passes is
    safe for the proxy itself; the engine validates the rest and answers 400 through us)."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if path.endswith("/chat/completions"):
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return "field 'messages' is required: a non-empty list"
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                return f"field 'messages[{i}]' must be an object with a string 'role'"
            content = m.get("content")
            if content is not None and not isinstance(content, (str, list)):
                return f"field 'messages[{i}].content' must be a string or a list of parts"
            if isinstance(content, list) and not all(isinstance(p, dict) and isinstance(p.get("text", ""), str) for p in content):
                return f"field 'messages[{i}].content' parts must be objects with a string 'text'"
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, (str, list)) or (isinstance(prompt, list) and not prompt):
            return "field 'prompt' is required: a string, a list of strings or a list of token ids"
        if isinstance(prompt, list) and not (
            all(isinstance(t, str) for t in prompt)
            or all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
            or (len(prompt) == 1 and isinstance(prompt[0], list))
        ):
            return "field 'prompt' must be a string, a list of strings or a list of token ids"
    for key in ("max_tokens", "max_completion_tokens"):
        mt = body.get(key)
        if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or mt < 1):
            return f"field '{key}' must be an integer >= 1, got {mt!r}"
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        return f"field 'stream' must be a boolean, got {stream!r}"
    if "stream_options" in body and body["stream_options"] is not None and not isinstance(body["stream_options"], dict):
        return "field 'stream_options' must be an object"
    kv = body.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, dict):
        return "field 'kv_transfer_params' must be an object"
    return None


def create_app(cfg: ProxyConfig) -> FastAPI:
    proxy = Proxy(cfg)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # aiohttp, not httpx, for the engine calls: ~0.2 ms of CPU per request instead of ~1.4 ms
        # (benchmarks/bench_proxy.py), which matters on a 2-core machine hosting the engines too.
        connector = aiohttp.TCPConnector(limit=0, force_close=False, enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=None, connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s)
        proxy.client = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        poller = asyncio.create_task(proxy.poll_forever())
        try:
            yield
        finally:
            poller.cancel()
            await proxy.client.close()
            if proxy.journal is not None:
                proxy.journal.close()

    app = FastAPI(title="calibrate-then-route proxy", lifespan=lifespan)
    app.state.proxy = proxy

    def authorized(request: Request) -> bool:
        if not cfg.api_key:
            return True
        return request.headers.get("authorization", "") == f"Bearer {cfg.api_key}"

    @app.get("/health")
    async def health() -> Response:
        healthy = {e.name: proxy.router.is_healthy(*proxy.role_index(e.name)) for e in cfg.endpoints}
        ok_p = any(healthy[e.name] for e in proxy.prefill)
        ok_d = any(healthy[e.name] for e in proxy.decode)
        body = {"status": "ok" if ok_p and ok_d else "degraded", "instances": healthy, "in_flight": proxy.in_flight}
        return JSONResponse(body, status_code=200 if ok_p and ok_d else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        proxy.refresh_gauges()
        return Response(generate_latest(proxy.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "missing or wrong bearer token", "AuthenticationError")
        assert proxy.client is not None
        for e in proxy.decode:
            try:
                async with proxy.client.get(e.url.rstrip("/") + "/v1/models", headers=headers_for("models", cfg.api_key)) as r:
                    return Response(await r.read(), status_code=r.status, media_type="application/json")
            except (aiohttp.ClientError, asyncio.TimeoutError):
                continue
        return _error(503, "no decode engine answers", "ServiceUnavailableError")

    async def handle(path: str, request: Request) -> Response:
        if not authorized(request):
            return _error(401, "missing or wrong bearer token", "AuthenticationError")
        raw = await request.body()
        if len(raw) > cfg.max_body_bytes:
            return _error(413, f"request body of {len(raw)} bytes exceeds the limit of {cfg.max_body_bytes}")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return _error(400, f"malformed JSON body: {exc}")
        problem = _validate(path, body)
        if problem:
            return _error(400, problem)
        slo = request.headers.get("x-slo-class", "loose")
        if slo not in ("tight", "loose"):
            return _error(400, f"header 'X-SLO-Class' must be tight or loose, got {slo!r}")
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        if rid in proxy.router.ledger:  # the ledger (and the journal) key on the id: one in flight at a time
            return _error(409, f"a request with X-Request-Id {rid[:200]!r} is already in flight", "ConflictError")
        prompt = prompt_of(path, body)
        if len(prompt) > cfg.max_prompt_chars:
            return _error(413, f"prompt of {len(prompt)} characters exceeds the limit of {cfg.max_prompt_chars}")
        arrival = proxy.now()
        prompt_tokens = DEFAULT_TOKENIZER.count(prompt)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        row: dict[str, Any] = {
            "request_id": rid, "family": request.headers.get("x-workload-family"), "slo_class": slo,
            "prompt_tokens": prompt_tokens, "output_tokens": max_tokens, "arrival_s": arrival, "preemptions": -1,
        }
        predicted = proxy.predict(prompt, prompt_tokens, max_tokens, rid)
        row["predicted_output_tokens"] = predicted
        req = RequestInfo(rid, prompt_tokens, predicted, slo, arrival)
        t = time.perf_counter()
        decision = proxy.router.route(req, proxy.now())
        proxy.m_decision_s.observe(time.perf_counter() - t)
        if not isinstance(decision, Placement):
            retry = decision.retry_after_s
            row.update(status="rejected", reason=decision.reason, generated_tokens=0)
            proxy.record(row)
            headers = {"Retry-After": str(max(1, math.ceil(retry / cfg.time_scale)) if retry else 1), "X-Request-Id": rid}
            return _error(429 if "healthy" not in decision.reason else 503, f"rejected: {decision.reason}", "RateLimitError", headers)
        pe, de = proxy.prefill[decision.prefill], proxy.decode[decision.decode]
        proxy.m_decisions.labels("prefill", pe.name).inc()
        proxy.m_decisions.labels("decode", de.name).inc()
        row.update(prefill_instance=pe.name, decode_instance=de.name)
        out_headers = {"X-Request-Id": rid, "X-Prefill-Instance": pe.name, "X-Decode-Instance": de.name}
        engine_headers = headers_for(rid, cfg.api_key)
        assert proxy.client is not None
        proxy.in_flight += 1

        def fail(reason: str, status: int, message: str | None = None) -> Response:
            now = proxy.now()
            proxy.router.finish(rid, now)
            row.update(status="failed", reason=reason, finish_s=now, generated_tokens=row.get("generated_tokens", 0))
            proxy.record(row)
            proxy.in_flight -= 1
            return _error(status, message or reason, "BadGatewayError" if status >= 500 else "BadRequestError", out_headers)

        async def serve_placed() -> Response:
            # 1. prefill
            row["prefill_start_s"] = proxy.now()
            try:
                async with proxy.client.post(
                    pe.url.rstrip("/") + path, json=prefill_body(body), headers=engine_headers,
                    timeout=aiohttp.ClientTimeout(total=cfg.prefill_timeout_s, connect=cfg.connect_timeout_s),
                ) as r:
                    status, content = r.status, await r.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                proxy.mark_failed(pe)
                return fail(f"prefill {pe.name}: {_describe(exc)}", 502)
            if status != 200:
                detail = content[:500].decode("utf-8", "replace")
                if 400 <= status < 500:  # the client's request is bad: pass vLLM's answer through
                    now = proxy.now()
                    proxy.router.finish(rid, now)
                    row.update(status="failed", reason=f"prefill {pe.name}: HTTP {status}: {detail}", finish_s=now, generated_tokens=0)
                    proxy.record(row)
                    proxy.in_flight -= 1
                    return Response(content, status_code=status, media_type="application/json", headers=out_headers)
                return fail(f"prefill {pe.name}: HTTP {status}: {detail}", 502)
            try:
                kv = json.loads(content).get("kv_transfer_params")
            except (ValueError, AttributeError):
                return fail(f"prefill {pe.name}: answer is not a JSON object", 502)
            now = proxy.now()
            proxy.router.prefill_done(rid, now)
            row["prefill_end_s"] = now
            dbody = decode_body(body, kv)

            # 2. decode
            row["decode_start_s"] = proxy.now()
            try:
                upstream = await proxy.client.post(de.url.rstrip("/") + path, json=dbody, headers=engine_headers)
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                proxy.mark_failed(de)
                return fail(f"decode {de.name}: {_describe(exc)}", 502)
            if upstream.status != 200 or not body.get("stream"):
                try:
                    content = await upstream.read()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    proxy.mark_failed(de)
                    return fail(f"decode {de.name}: {_describe(exc)}", 502)
                finally:
                    upstream.release()
                if upstream.status != 200:
                    detail = content[:500].decode("utf-8", "replace")
                    return fail(f"decode {de.name}: HTTP {upstream.status}: {detail}", 502 if upstream.status >= 500 else upstream.status)
                now = proxy.now()
                try:
                    usage = json.loads(content).get("usage") or {}
                except (ValueError, AttributeError):
                    usage = {}
                _finish_ok(proxy, row, rid, now, now, int(usage.get("completion_tokens") or 0))
                return Response(content, status_code=200, media_type="application/json", headers=out_headers)

            parser = SSEParser()
            st: dict[str, Any] = {"outcome": None, "first": None}  # outcome: None until the row is journaled

            def abandon() -> None:  # the response ended without the relay journaling the row
                if st["outcome"] is None:
                    st["outcome"] = "client disconnected"
                    upstream.release()
                    _finish_failed(proxy, row, rid, st["first"], parser, "client disconnected")

            async def relay() -> AsyncIterator[bytes]:
                first = None
                try:
                    async for chunk in upstream.content.iter_any():
                        if parser.feed(chunk) and first is None:
                            first = st["first"] = proxy.now()
                        yield chunk
                    if not parser.usage.done:
                        raise aiohttp.ClientPayloadError("stream ended without [DONE]")
                    now = proxy.now()
                    tokens = parser.usage.completion_tokens
                    if tokens is None:
                        tokens = DEFAULT_TOKENIZER.count(parser.usage.text)
                    st["outcome"] = "ok"
                    _finish_ok(proxy, row, rid, first if first is not None else now, now, tokens)
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    proxy.mark_failed(de)
                    reason = f"decode {de.name}: stream cut: {_describe(exc)}"
                    st["outcome"] = reason
                    _finish_failed(proxy, row, rid, first, parser, reason)
                    err = {"error": {"message": reason, "type": "BadGatewayError", "code": 502}}
                    yield f"data: {json.dumps(err)}\n\n".encode()
                finally:
                    upstream.release()
                    abandon()  # the client went away (generator closed or cancelled)

            return _Relay(relay(), abandon, status_code=200, media_type="text/event-stream", headers=out_headers)

        try:
            return await serve_placed()
        except BaseException as exc:  # never lose a request: journal it, settle the ledger
            if row.get("status") is None:
                if isinstance(exc, asyncio.CancelledError):
                    fail("cancelled (client went away or proxy stopping)", 499)
                else:
                    return fail(f"proxy error: {_describe(exc)}", 500)
            raise

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle("/v1/completions", request)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await handle("/v1/chat/completions", request)

    return app


class _Relay(StreamingResponse):
    """A streamed answer whose row is journaled even if its body is never iterated (a client
    that disconnects before the first byte)."""

    def __init__(self, content: Any, on_end: Any, **kw: Any) -> None:
        super().__init__(content, **kw)
        self._on_end = on_end

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_end()


def _finish_ok(proxy: Proxy, row: dict[str, Any], rid: str, first: float, now: float, tokens: int) -> None:
    proxy.router.finish(rid, now)
    arrival = row["arrival_s"]
    ttft = first - arrival
    e2e = now - arrival
    row.update(
        status="ok", first_token_s=first, finish_s=now, ttft_s=ttft, e2e_s=e2e,
        tpot_s=tpot(e2e, ttft, tokens), generated_tokens=tokens,
    )
    proxy.record(row)
    proxy.in_flight -= 1


def _describe(exc: BaseException) -> str:
    text = str(exc) or ("timed out" if isinstance(exc, asyncio.TimeoutError) else "")
    return f"{type(exc).__name__}: {text}"


def _finish_failed(proxy: Proxy, row: dict[str, Any], rid: str, first: float | None, parser: SSEParser, reason: str) -> None:
    now = proxy.now()
    proxy.router.finish(rid, now)
    tokens = parser.usage.completion_tokens or DEFAULT_TOKENIZER.count(parser.usage.text)
    row.update(status="failed", reason=reason, first_token_s=first, finish_s=now, generated_tokens=tokens)
    proxy.record(row)
    proxy.in_flight -= 1


def endpoints_from_cluster(cluster: str | Path) -> list[Endpoint]:
    """Endpoints from a `repro cluster up` state file (JSON) or a cluster YAML with URLs."""
    path = Path(cluster)
    if path.suffix == ".json":
        from repro.cluster.launchers import load_state

        state = load_state(path)
        return [Endpoint(i.name, i.role, i.url) for i in state["instances"]]
    from repro.cluster.topology import parse_topology

    topo = parse_topology(path)
    missing = [i.name for i in topo.instances if not i.url]
    if missing:
        raise ConfigError(f"cluster {path}: instances {missing} have no 'url'; start them with `repro cluster up` and pass its state file")
    return [Endpoint(i.name, i.role, i.url) for i in topo.instances]


def serve(cfg: ProxyConfig) -> None:
    """Run the proxy in this process until interrupted."""
    import uvicorn

    uvicorn.run(create_app(cfg), host=cfg.host, port=cfg.port, log_level="warning", access_log=False)


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m repro.live.proxy", description="Router proxy (config from a JSON file).")
    ap.add_argument("--config", required=True, help="ProxyConfig as JSON")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process is no longer our parent")
    args = ap.parse_args(argv)
    if args.parent_pid is not None:
        import os

        from repro.cluster.processes import die_with_parent

        die_with_parent()
        if os.getppid() != args.parent_pid:
            return
    cfg = ProxyConfig.from_json(Path(args.config).read_text())
    if cfg.api_key is None:  # the harness passes the key in the environment, never in a file
        import os

        cfg.api_key = os.environ.get(API_KEY_ENV) or None
    serve(cfg)


if __name__ == "__main__":  # pragma: no cover
    main()
