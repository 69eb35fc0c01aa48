"""The proxy's HTTP routes (`ROUTES`, mounted by `repro.live.proxy.app.create_app`).

``POST /v1/completions`` and ``/v1/chat/completions`` (`serve_completion`):

1. admit (`admit`): bearer token (401), body size (413), JSON (400), fields (`validate_body`:
   400), ``X-SLO-Class`` tight | loose (400; default loose), request id = ``X-Request-Id`` or a
   fresh uuid (409 if that id is in flight), prompt length in characters (413);
2. open the journal row (`open_row`): arrival (physics s), prompt tokens counted with the
   tokenizer, the predicted output length;
3. ask the policy (`Proxy.decide`); a rejection (the policy's explicit decision, e.g. the
   admission guard) is journaled and answered 429 with ``Retry-After`` in wall seconds (`reject`).
   When every engine of a pool is dead there is nothing to decide: the request fails with 503 and
   the engines' reasons (`unservable`); overload never rejects a request by itself. A decision that
   breaks the policy contract (`repro.errors.PolicyError`: ``place`` raised, or named no usable
   instance) fails the request with 500 and the error (type ``PolicyError``; journaled as failed,
   reason ``policy error: ...``); the proxy goes on serving, and ``GET /health`` counts them
   (``policy_errors``: a live run stops on the first, `repro.live.run`);
4. a placement runs the P/D exchange (`repro.live.proxy.relay.Exchange`).

``GET /health`` (200 when at least one prefill and one decode engine are alive, else 503; the
body names the dead engines' reasons, the proxy's validity measurements, the policy's decision
times and its contract errors, `Proxy.policy_report`),
``GET /metrics`` (Prometheus text) and ``GET /v1/models`` (forwarded to the first decode engine
that answers). Errors are OpenAI-style (`error_response`). The proxy object is
``request.app.state.proxy``.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from repro.errors import PolicyError
from repro.live.pd_protocol import headers_for, loads, prompt_of
from repro.live.proxy.config import ProxyConfig
from repro.live.proxy.core import Proxy
from repro.live.proxy.relay import Exchange, error_response
from repro.routing.policies.base import NO_HEALTHY, Placement, Rejection, RequestInfo
from repro.workload.tokenizer import DEFAULT_TOKENIZER


def validate_body(path: str, body: Any) -> str | None:
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
            if isinstance(content, list) and not all(isinstance(p, dict) and isinstance(p.get("text", ""), str)
                                                     for p in content):
                return f"field 'messages[{i}].content' parts must be objects with a string 'text'"
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, (str, list)) or (isinstance(prompt, list) and not prompt):
            return "field 'prompt' is required: a string, a list of strings or a list of token ids"
        if isinstance(prompt, list) and not (
            all(isinstance(t, str) for t in prompt)
            or _token_ids(prompt)
            or (len(prompt) == 1 and isinstance(prompt[0], list) and _token_ids(prompt[0]))
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


def _token_ids(xs: list[Any]) -> bool:
    """True for a non-empty list of integers (token ids; booleans are not)."""
    return bool(xs) and all(isinstance(t, int) and not isinstance(t, bool) for t in xs)


def authorized(cfg: ProxyConfig, request: Request) -> bool:
    """True when no key is configured, or the request carries ``Authorization: Bearer <key>``."""
    if not cfg.api_key:
        return True
    return request.headers.get("authorization", "") == f"Bearer {cfg.api_key}"


class Refusal(Exception):
    """A request refused before routing; `response` is the OpenAI-style error answer."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.response = error_response(status, message, kind)


@dataclass
class Admitted:
    """A completion request that passed `admit`: its validated body, id, SLO class and prompt text."""

    path: str
    body: dict[str, Any]
    request_id: str
    slo_class: str
    prompt: str
    family: str | None  # X-Workload-Family (journaled as is)


# ---- GET routes ---------------------------------------------------------------------------------
async def health(request: Request) -> Response:
    """200 ``{"status": "ok"}`` if a prefill and a decode engine are healthy, else 503 ``degraded``;
    the body also names the constants the router prices with (``cost_model``: seconds, bytes, tokens)
    and the ``poll_interval_s`` (physics s) of its ``/metrics`` poller."""
    proxy: Proxy = request.app.state.proxy
    healthy = proxy.health()
    ok_p = any(healthy[e.name] for e in proxy.prefill)
    ok_d = any(healthy[e.name] for e in proxy.decode)
    body = {"status": "ok" if ok_p and ok_d else "degraded", "instances": healthy, "in_flight": proxy.in_flight,
            "dead": dict(proxy.dead_reason), "cost_model": proxy.cost_model.to_dict(),
            "poll_interval_s": proxy.cfg.poll_interval_s, "validity": proxy.validity(), **proxy.policy_report()}
    return JSONResponse(body, status_code=200 if ok_p and ok_d else 503)


async def metrics(request: Request) -> Response:
    """The proxy's Prometheus metrics (gauges refreshed from the ledger now)."""
    proxy: Proxy = request.app.state.proxy
    proxy.refresh_gauges()
    return Response(generate_latest(proxy.registry), media_type=CONTENT_TYPE_LATEST)


async def models(request: Request) -> Response:
    """The first decode engine's ``/v1/models`` answer, verbatim (503 if none answers)."""
    proxy: Proxy = request.app.state.proxy
    if not authorized(proxy.cfg, request):
        return error_response(401, "missing or wrong bearer token", "AuthenticationError")
    assert proxy.client is not None
    for e in proxy.decode:
        try:
            async with proxy.client.get(e.url.rstrip("/") + "/v1/models",
                                        headers=headers_for("models", proxy.cfg.api_key)) as r:
                return Response(await r.read(), status_code=r.status, media_type="application/json")
        except (aiohttp.ClientError, TimeoutError):
            continue
    return error_response(503, "no decode engine answers", "ServiceUnavailableError")


# ---- completions --------------------------------------------------------------------------------
async def completions(request: Request) -> Response:
    """``POST /v1/completions``."""
    return await serve_completion("/v1/completions", request)


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``."""
    return await serve_completion("/v1/chat/completions", request)


async def serve_completion(path: str, request: Request) -> Response:
    """Admit, route, and serve (or refuse) one completion request; see the module docstring."""
    proxy: Proxy = request.app.state.proxy
    try:
        req = await admit(proxy, path, request)
    except Refusal as refusal:
        return refusal.response
    row, info = open_row(proxy, req)
    dead = unservable(proxy)
    if dead:
        return fail_unservable(proxy, row, dead)
    try:
        decision = proxy.decide(info)
    except PolicyError as exc:  # the policy broke its contract: this request fails, the proxy serves on
        return fail(proxy, row, 500, f"policy error: {exc}", "PolicyError")
    if not isinstance(decision, Placement):
        if decision.reason == NO_HEALTHY:  # every engine of a pool died (a race with `unservable`)
            return fail_unservable(proxy, row, unservable(proxy) or decision.reason)
        return reject(proxy, row, decision)
    return await Exchange(proxy, path, req.body, row, decision).run()


async def admit(proxy: Proxy, path: str, request: Request) -> Admitted:
    """Read and check a completion request; raises `Refusal` (401, 400, 409 or 413)."""
    cfg = proxy.cfg
    if not authorized(cfg, request):
        raise Refusal(401, "missing or wrong bearer token", "AuthenticationError")
    raw = await request.body()
    if len(raw) > cfg.max_body_bytes:
        raise Refusal(413, f"request body of {len(raw)} bytes exceeds the limit of {cfg.max_body_bytes}")
    try:
        body = loads(raw)
    except ValueError as exc:
        raise Refusal(400, f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise Refusal(400, "malformed JSON body: nested too deeply") from None
    problem = validate_body(path, body)
    if problem:
        raise Refusal(400, problem)
    slo = request.headers.get("x-slo-class", "loose")
    if slo not in ("tight", "loose"):
        raise Refusal(400, f"header 'X-SLO-Class' must be tight or loose, got {slo!r}")
    rid = (request.headers.get("x-request-id") or "").strip() or uuid.uuid4().hex
    if rid in proxy.router.ledger:  # the ledger (and the journal) key on the id: one in flight at a time
        raise Refusal(409, f"a request with X-Request-Id {rid[:200]!r} is already in flight", "ConflictError")
    prompt = prompt_of(path, body)
    if len(prompt) > cfg.max_prompt_chars:
        raise Refusal(413, f"prompt of {len(prompt)} characters exceeds the limit of {cfg.max_prompt_chars}")
    return Admitted(path, body, rid, slo, prompt, request.headers.get("x-workload-family"))


def open_row(proxy: Proxy, req: Admitted) -> tuple[dict[str, Any], RequestInfo]:
    """The request's journal row so far (arrival in physics s, prompt tokens, the requested and the
    predicted output tokens) and what the policy sees of it."""
    arrival = proxy.now()
    prompt_tokens = DEFAULT_TOKENIZER.count(req.prompt)
    max_tokens = int(req.body.get("max_tokens") or req.body.get("max_completion_tokens") or 16)
    row: dict[str, Any] = {
        "request_id": req.request_id, "family": req.family, "slo_class": req.slo_class,
        "prompt_tokens": prompt_tokens, "output_tokens": max_tokens, "arrival_s": arrival, "preemptions": -1,
    }
    predicted = proxy.predict(req.prompt, prompt_tokens, max_tokens, req.request_id)
    row["predicted_output_tokens"] = predicted
    return row, RequestInfo(req.request_id, prompt_tokens, predicted, req.slo_class, arrival)


def unservable(proxy: Proxy) -> str | None:
    """Why no request can be served now (a pool whose engines are all dead, with their reasons), or None."""
    for role, pool in (("prefill", proxy.prefill), ("decode", proxy.decode)):
        if all(e.name in proxy.dead_reason for e in pool):
            return f"no live {role} engine ({'; '.join(proxy.dead_reason[e.name] for e in pool)})"
    return None


def fail_unservable(proxy: Proxy, row: dict[str, Any], reason: str) -> Response:
    """Journal a request that no live engine could take as failed; 503 with the reason."""
    return fail(proxy, row, 503, reason, "ServiceUnavailableError")


def fail(proxy: Proxy, row: dict[str, Any], status: int, reason: str, kind: str) -> Response:
    """Journal a request that fails before any engine saw it (``reason``); answer ``status`` with it."""
    row.update(status="failed", reason=reason, generated_tokens=0, finish_s=row["arrival_s"])
    proxy.record(row)
    return error_response(status, reason, kind, {"X-Request-Id": row["request_id"]})


def reject(proxy: Proxy, row: dict[str, Any], decision: Rejection) -> Response:
    """Journal a request the policy rejected; 429 with ``Retry-After`` in whole wall seconds (the
    policy's physics-second hint / ``time_scale``, at least 1)."""
    retry = decision.retry_after_s
    row.update(status="rejected", reason=decision.reason, generated_tokens=0)
    proxy.record(row)
    headers = {"Retry-After": str(max(1, math.ceil(retry / proxy.cfg.time_scale)) if retry else 1),
               "X-Request-Id": row["request_id"]}
    return error_response(429, f"rejected: {decision.reason}", "RateLimitError", headers)


ROUTES = (  # (method, path, handler)
    ("GET", "/health", health),
    ("GET", "/metrics", metrics),
    ("GET", "/v1/models", models),
    ("POST", "/v1/completions", completions),
    ("POST", "/v1/chat/completions", chat_completions),
)
HOT_PATHS = ("/v1/completions", "/v1/chat/completions")  # every request of a run: no FastAPI router
