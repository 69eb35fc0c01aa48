"""The emulated engine's HTTP API: vLLM 0.12's OpenAI-compatible server, P/D with NixlConnector.

Endpoints (as ``vllm serve``): ``POST /v1/completions``, ``POST /v1/chat/completions`` (streaming
SSE and not), ``GET /health``, ``GET /v1/models``, ``GET /version``, ``POST /tokenize``,
``POST /detokenize``, ``GET /metrics``, and ``POST /reset_prefix_cache`` only when
``VLLM_SERVER_DEV_MODE=1`` (404 otherwise, as in vLLM).

Emulator-only endpoints live under ``/_emulator/``: ``nixl/read`` (the decode engine's KV read,
standing in for NIXL), ``state`` (allocator and queue state, for tests) and ``info``; with
``VLLM_SERVER_DEV_MODE=1`` also ``faults`` (GET the active fault switches, POST
``{"faults": [...]}`` to replace them at run time; see `repro.emulator.faults`).

With ``--api-key KEY`` (or ``$VLLM_API_KEY``), as vLLM, every ``/v1/*`` request needs
``Authorization: Bearer KEY`` (else 401 ``{"error": "Unauthorized"}``); the other endpoints stay open.

Request ids follow vLLM: the response id is ``cmpl-<X-Request-Id>`` (``chatcmpl-`` for chat;
a random uuid hex when the header is absent) and the engine-internal id, which a prefill engine
returns as ``remote_request_id``, is ``cmpl-<id>-0`` for completions (one per prompt) and
``chatcmpl-<id>`` for chat.

The side channel: vLLM's prefill answer names ``remote_host``/``remote_port`` of its NIXL side
channel (``VLLM_NIXL_SIDE_CHANNEL_HOST``/``PORT``). The emulator has no NIXL, so its "side
channel" is an HTTP listener serving the same app: by default the engine's own HTTP port (then
``remote_port`` IS the HTTP port), or a second listener on ``--side-channel-port`` /
``VLLM_NIXL_SIDE_CHANNEL_PORT`` when one is given. A decode engine reads the KV with
``POST http://remote_host:remote_port/_emulator/nixl/read``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from repro.emulator.core import ABORTED, FINISHED, Seq
from repro.emulator.engine import AsyncEngine, EmulatorConfig
from repro.emulator.faults import Faults, error_due
from repro.emulator.metrics import render
from repro.emulator.model import (
    TOKENIZER,
    OutputFunction,
    detokenize,
    message_text,
    prompt_seed,
    render_chat,
)
from repro.errors import ConfigError

try:  # orjson is much faster for the per-chunk encoding; plain json works too
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover
    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

VLLM_VERSION = "0.12.0"
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class _StreamCut(Exception):
    """Raised inside a response body to close the connection mid-way (the ``cut:K`` fault)."""


class _QuietCut(logging.Filter):
    """Keep the server log free of the tracebacks of deliberate ``cut:K`` connection closes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, _StreamCut):
                return False
            exc = exc.__cause__ or exc.__context__ or (exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) and exc.exceptions else None)
        return True


logging.getLogger("uvicorn.error").addFilter(_QuietCut())


class ApiError(Exception):
    def __init__(self, message: str, err_type: str = "BadRequestError", status: int = 400, param: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.err_type = err_type
        self.status = status
        self.param = param


def error_response(message: str, err_type: str = "BadRequestError", status: int = 400, param: Optional[str] = None) -> JSONResponse:
    """vLLM's ``ErrorResponse``: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse({"error": {"message": message, "type": err_type, "param": param, "code": status}}, status_code=status)


def _validation(msg: str, loc: tuple, value: Any, kind: str = "value_error") -> ApiError:
    """The shape vLLM gives a request-model validation failure (HTTP 400, type 'Bad Request')."""
    detail = [{"type": kind, "loc": ("body",) + loc, "msg": msg, "input": value}]
    return ApiError(f"{detail}", err_type="Bad Request", status=400)


# ---- request parsing -----------------------------------------------------------------------------
def _get_int(body: dict, key: str, default: Optional[int]) -> Optional[int]:
    if key not in body or body[key] is None:
        return default
    v = body[key]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise _validation("Input should be a valid integer", (key,), v, "int_type")
    return v


def _get_float(body: dict, key: str, default: Optional[float]) -> Optional[float]:
    if key not in body or body[key] is None:
        return default
    v = body[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _validation("Input should be a valid number", (key,), v, "float_type")
    return float(v)


def _get_bool(body: dict, key: str, default: bool) -> bool:
    if key not in body or body[key] is None:
        return default
    v = body[key]
    if not isinstance(v, bool):
        if v in (0, 1):
            return bool(v)
        raise _validation("Input should be a valid boolean", (key,), v, "bool_type")
    return v


class Parsed:
    __slots__ = ("prompt_ids", "prompt_text", "max_tokens", "explicit_max", "ignore_eos", "min_tokens",
                 "temperature", "seed", "stream", "include_usage", "continuous_usage", "kv", "echo")


def _common(body: dict, p: Parsed, *, chat: bool) -> None:
    p.ignore_eos = _get_bool(body, "ignore_eos", False)
    p.min_tokens = _get_int(body, "min_tokens", 0) or 0
    p.temperature = _get_float(body, "temperature", None)
    p.seed = _get_int(body, "seed", None)
    if p.seed is not None and not (_LONG_MIN <= p.seed <= _LONG_MAX):
        raise _validation("Input should be less than or equal to 9223372036854775807", ("seed",), p.seed)
    p.stream = _get_bool(body, "stream", False)
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise _validation("Input should be a valid dictionary or instance of StreamOptions", ("stream_options",), so, "model_type")
        if not p.stream:
            raise _validation("Value error, Stream options can only be defined when `stream=True`.", (), body)
        p.include_usage = bool(so.get("include_usage", True) if so.get("include_usage") is not None else True)
        p.continuous_usage = bool(so.get("continuous_usage_stats") or False)
    else:
        p.include_usage = False
        p.continuous_usage = False
    n = _get_int(body, "n", 1)
    if n != 1:
        raise ApiError("n > 1 is not supported by the emulated engine", param="n")
    if body.get("logprobs") not in (None, False) or body.get("prompt_logprobs") is not None:
        raise ApiError("logprobs are not supported by the emulated engine", param="logprobs")
    if body.get("use_beam_search"):
        raise ApiError("beam search is not supported by the emulated engine")
    kv = body.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, dict):
        raise _validation("Input should be a valid dictionary", ("kv_transfer_params",), kv, "dict_type")
    p.kv = kv
    if chat:
        mct = _get_int(body, "max_completion_tokens", None)
        mt = _get_int(body, "max_tokens", None)
        p.explicit_max = mct if mct is not None else mt
    else:
        p.explicit_max = _get_int(body, "max_tokens", 16)


def parse_completion(body: dict) -> Parsed:
    p = Parsed()
    if "prompt" not in body or body["prompt"] is None:
        if body.get("prompt_embeds") is not None:
            raise ApiError("prompt_embeds are not supported by the emulated engine")
        raise _validation("Value error, Either prompt or prompt_embeds must be provided and non-empty.", (), body)
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        p.prompt_text = prompt
        p.prompt_ids = TOKENIZER.encode(prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        p.prompt_text = detokenize(prompt)
        p.prompt_ids = list(prompt)
    elif isinstance(prompt, list):
        raise ApiError("batched prompts (a list of several prompts) are not supported by the emulated engine", param="prompt")
    else:
        raise _validation("Input should be a valid string", ("prompt",), prompt, "string_type")
    if not p.prompt_ids:
        raise ApiError("The prompt cannot be empty.", param="prompt")
    _common(body, p, chat=False)
    p.echo = _get_bool(body, "echo", False)
    if body.get("suffix") is not None:
        raise ApiError("suffix is not currently supported")
    return p


def parse_chat(body: dict, model_name: str) -> Parsed:
    p = Parsed()
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise _validation("Field required" if msgs is None else "Input should be a valid list", ("messages",), msgs,
                          "missing" if msgs is None else "list_type")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _validation("Input should be a valid message with a 'role'", ("messages", i), m)
        try:
            message_text(m.get("content"))
        except ValueError as exc:
            raise ApiError(str(exc), param="messages") from None
    p.prompt_text = render_chat(msgs, model_name, _get_bool(body, "add_generation_prompt", True))
    p.prompt_ids = TOKENIZER.encode(p.prompt_text)
    _common(body, p, chat=True)
    p.echo = False
    return p


# ---- the app ------------------------------------------------------------------------------------
def create_app(cfg: EmulatorConfig, engine: Optional[AsyncEngine] = None) -> FastAPI:
    engine = engine or AsyncEngine(cfg)
    phys = engine.physics
    model_name = engine.model_name
    max_model_len = phys.max_model_len
    dev_mode = os.environ.get("VLLM_SERVER_DEV_MODE", "0") not in ("", "0", "false", "False")
    side_host = cfg.advertised_side_channel_host
    env_port = os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT")
    side_port = cfg.side_channel_port if cfg.side_channel_port is not None else (int(env_port) if env_port else None)
    registry = engine.metrics.registry()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine
    api_key = cfg.api_key or os.environ.get("VLLM_API_KEY") or None

    class Gate:
        """Raw ASGI middleware: a hung engine answers nothing (but the fault switch); vLLM's
        ``--api-key`` check (``/v1/*`` needs ``Authorization: Bearer <key>``, else 401)."""

        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] == "http":
                path = scope["path"]
                if engine.hung and path != "/_emulator/faults":
                    await engine.wait_unhung()
                if api_key and path.startswith("/v1") and scope.get("method") != "OPTIONS":
                    auth = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
                    if auth != b"Bearer " + api_key.encode():
                        await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                        return
            await self.inner(scope, receive, send)

    app.add_middleware(Gate)
    app.state.side_channel_port = side_port  # None: the HTTP port serves the side channel

    def advertised_port(request: Request) -> int:
        if side_port is not None:
            return side_port
        server = request.scope.get("server")
        return int(server[1]) if server else cfg.port

    def check_model(body: dict) -> None:
        m = body.get("model")
        if m not in (None, "") and m != model_name:
            raise ApiError(f"The model `{m}` does not exist.", err_type="NotFoundError", status=404, param="model")

    def resolve_max_tokens(p: Parsed) -> int:
        P = len(p.prompt_ids)
        if P >= max_model_len:
            raise ApiError(
                f"This model's maximum context length is {max_model_len} tokens. However, your request has "
                f"{P} input tokens. Please reduce the length of the input messages.",
                param="input_tokens",
            )
        if p.explicit_max is not None:
            if p.explicit_max < 1:
                raise ApiError(f"max_tokens must be at least 1, got {p.explicit_max}.", param="max_tokens")
            if P + p.explicit_max > max_model_len:
                raise ApiError(
                    f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                    f"{P + p.explicit_max} tokens ({P} in the messages, {p.explicit_max} in the completion). "
                    f"Please reduce the length of the messages or completion.",
                    param="max_tokens",
                )
            max_tokens = p.explicit_max
        else:
            max_tokens = max_model_len - P
        if p.temperature is not None and p.temperature < 0:
            raise ApiError(f"temperature must be non-negative, got {p.temperature}.", param="temperature")
        if p.min_tokens < 0:
            raise ApiError(f"min_tokens must be greater than or equal to 0, got {p.min_tokens}.", param="min_tokens")
        if p.min_tokens > max_tokens:
            raise ApiError(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {p.min_tokens}.",
                           param="min_tokens")
        return max_tokens

    def remote_params(kv: Optional[dict]) -> Optional[dict]:
        if not kv or not kv.get("do_remote_prefill"):
            return None
        if not kv.get("remote_block_ids"):
            return None
        needed = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")
        if not all(kv.get(k) is not None for k in needed):
            return None  # vLLM logs "Got invalid KVTransferParams" and prefills locally
        return kv

    def unique_rid(rid: str) -> str:
        core = engine.core
        if rid in core.live or rid in core.handoffs or rid in engine.reading:
            rid = f"{rid}-{uuid.uuid4().hex[:8]}"
        return rid

    async def handle(request: Request, chat: bool):
        engine.completion_requests += 1
        if engine.crash_due:  # crash fault: die like a segfaulted engine (connections reset)
            os._exit(1)
        if engine.hung:  # hang fault: this request (and every later one) is never answered
            engine.update_hang()
            await engine.wait_unhung()
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except (ValueError, UnicodeDecodeError) as exc:
            return error_response(str(_validation(f"JSON decode error: {exc}", (0,), raw.decode("utf-8", "replace")[:200], "json_invalid")),
                                  err_type="Bad Request")
        if not isinstance(body, dict):
            return error_response(str(_validation("Input should be a valid dictionary or object to extract fields from", (), body, "model_attributes_type")),
                                  err_type="Bad Request")
        try:
            check_model(body)
            p = parse_chat(body, model_name) if chat else parse_completion(body)
            max_tokens = resolve_max_tokens(p)
        except ApiError as e:
            return error_response(e.message, e.err_type, e.status, e.param)
        faults = engine.faults
        if faults.error_fraction and error_due(engine.completion_requests - engine.error_base, faults.error_fraction):
            return error_response("injected fault (errors): internal server error", "InternalServerError", 500)

        header_id = request.headers.get("x-request-id")
        base = header_id if header_id is not None else (body.get("request_id") if isinstance(body.get("request_id"), str) else uuid.uuid4().hex)
        resp_id = f"chatcmpl-{base}" if chat else f"cmpl-{base}"
        rid = unique_rid(resp_id if chat else f"{resp_id}-0")
        created = int(time.time())

        greedy = p.temperature is not None and p.temperature == 0.0
        salt = 0
        if not greedy:
            salt = (p.seed if p.seed is not None else uuid.uuid4().int) & ((1 << 64) - 1) or 1
        out = OutputFunction(prompt_seed(p.prompt_ids), salt=salt, diverge=engine.faults.diverge)
        if p.ignore_eos:
            target, kind = max_tokens, "length"
        else:
            natural = max(out.natural_length(engine.cfg.eos_mean_tokens), p.min_tokens)
            target, kind = (natural, "stop") if natural <= max_tokens else (max_tokens, "length")
        kv = p.kv
        remote = remote_params(kv)
        prefill_only = bool(kv and kv.get("do_remote_decode"))
        ev = asyncio.Event()
        seq = Seq(rid, p.prompt_ids, target=target, finish_kind=kind, max_tokens=max_tokens,
                  prefill_only=prefill_only, remote=remote, stream=p.stream, notify=ev.set, out=out,
                  info={"remote": remote})
        engine.submit(seq)
        eos_pos = target - 1 if kind == "stop" else None

        def text_of(a: int, b: int) -> str:
            if eos_pos is not None and b > eos_pos:
                b = eos_pos
            return out.text(a, b) if b > a else ""

        def usage(n_gen: int) -> dict:
            P = seq.P
            return {"prompt_tokens": P, "total_tokens": P + n_gen, "completion_tokens": n_gen}

        if p.stream:
            return StreamingResponse(stream_body(seq, ev, chat, resp_id, created, p, text_of, usage),
                                     media_type="text/event-stream")
        try:
            while seq.state not in (FINISHED, ABORTED):
                ev.clear()
                await ev.wait()
        except asyncio.CancelledError:
            engine.abort(seq)
            raise
        if seq.state == ABORTED:
            return error_response("Request was aborted", "InternalServerError", 500)
        n_gen = seq.g
        text = text_of(0, n_gen)
        kv_out = None
        if seq.kv_params is not None:
            kv_out = {
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_block_ids": seq.kv_params["remote_block_ids"],
                "remote_engine_id": engine.engine_id,
                "remote_request_id": rid,
                "remote_host": side_host,
                "remote_port": advertised_port(request),
                "tp_size": 1,
            }
            if engine.faults.kv_drop:
                engine.core.release_handoff(rid)
        u = usage(n_gen)
        u["prompt_tokens_details"] = None
        if chat:
            payload = {
                "id": resp_id, "object": "chat.completion", "created": created, "model": model_name,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                                "audio": None, "function_call": None, "tool_calls": [], "reasoning_content": None},
                    "logprobs": None, "finish_reason": seq.finish_reason, "stop_reason": None, "token_ids": None,
                }],
                "service_tier": None, "system_fingerprint": None, "usage": u,
                "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": kv_out,
            }
        else:
            if p.echo:
                text = p.prompt_text + text
            payload = {
                "id": resp_id, "object": "text_completion", "created": created, "model": model_name,
                "choices": [{
                    "index": 0, "text": text, "logprobs": None, "finish_reason": seq.finish_reason,
                    "stop_reason": None, "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None,
                }],
                "service_tier": None, "system_fingerprint": None, "usage": u, "kv_transfer_params": kv_out,
            }
        data = _dumps(payload)
        cut = engine.faults.cut_after
        if cut is not None and n_gen > cut:  # cut fault: half the body, then the connection closes

            async def half():
                yield data[: len(data) // 2]
                raise _StreamCut("cut fault")

            return StreamingResponse(half(), media_type="application/json", headers={"content-length": str(len(data))})
        return Response(data, media_type="application/json")

    async def stream_body(seq: Seq, ev: asyncio.Event, chat: bool, resp_id: str, created: int, p: Parsed, text_of, usage):
        core = engine.core
        sent = 0
        head_sent = False
        obj = "chat.completion.chunk" if chat else "text_completion"
        try:
            while True:
                st = seq.state
                done = st == FINISHED
                if st == ABORTED:
                    err = {"error": {"message": "Request was aborted", "type": "InternalServerError", "param": None, "code": 500}}
                    yield b"data: " + _dumps(err) + b"\n\n"
                    break
                g = seq.g if done else core.generated(seq)
                cut = engine.faults.cut_after
                cut_now = cut is not None and g > cut
                if cut_now:  # cut fault: send up to the K-th token, then close the connection
                    g, done = max(cut, sent), False
                if g > sent or done:
                    fr = seq.finish_reason if done else None
                    text = text_of(sent, g)
                    if chat:
                        if not head_sent:
                            first = {"id": resp_id, "object": obj, "created": created, "model": model_name,
                                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                  "logprobs": None, "finish_reason": None}],
                                     "prompt_token_ids": None}
                            if p.continuous_usage:
                                first["usage"] = usage(0)
                            yield b"data: " + _dumps(first) + b"\n\n"
                            head_sent = True
                        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": fr}
                        if done:
                            choice["stop_reason"] = None
                        chunk = {"id": resp_id, "object": obj, "created": created, "model": model_name, "choices": [choice]}
                        if p.continuous_usage:
                            chunk["usage"] = usage(g)
                    else:
                        if p.echo and not head_sent:
                            text = p.prompt_text + text
                            head_sent = True
                        chunk = {"id": resp_id, "object": obj, "created": created, "model": model_name,
                                 "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": fr,
                                              "stop_reason": None, "prompt_token_ids": None, "token_ids": None}],
                                 "usage": usage(g) if p.continuous_usage else None}
                    yield b"data: " + _dumps(chunk) + b"\n\n"
                    sent = g
                if cut_now:
                    raise _StreamCut("cut fault")
                if done:
                    if p.include_usage:
                        final = {"id": resp_id, "object": obj, "created": created, "model": model_name,
                                 "choices": [], "usage": usage(sent)}
                        yield b"data: " + _dumps(final) + b"\n\n"
                    break
                ev.clear()
                await ev.wait()
            yield b"data: [DONE]\n\n"
        finally:
            if seq.state not in (FINISHED, ABORTED):
                engine.abort(seq)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await handle(request, chat=True)

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/ping")
    async def ping():
        return Response(status_code=200)

    @app.get("/version")
    async def version():
        return JSONResponse({"version": VLLM_VERSION})

    @app.get("/v1/models")
    async def models():
        now = int(time.time())
        return JSONResponse({"object": "list", "data": [{
            "id": model_name, "object": "model", "created": now, "owned_by": "vllm", "root": phys.model,
            "parent": None, "max_model_len": max_model_len,
            "permission": [{
                "id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": now,
                "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                "organization": "*", "group": None, "is_blocking": False,
            }],
        }]})

    @app.post("/tokenize")
    async def tokenize(request: Request):
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            return error_response(f"JSON decode error: {exc}", "Bad Request")
        if not isinstance(body, dict):
            return error_response("Input should be a valid dictionary", "Bad Request")
        try:
            check_model(body)
            if "messages" in body:
                msgs = body["messages"]
                if not isinstance(msgs, list):
                    raise ApiError("messages must be a list", param="messages")
                text = render_chat(msgs, model_name, bool(body.get("add_generation_prompt", True)))
            else:
                text = body.get("prompt")
                if not isinstance(text, str):
                    raise _validation("Field required", ("prompt",), text, "missing")
        except ApiError as e:
            return error_response(e.message, e.err_type, e.status, e.param)
        ids = TOKENIZER.encode(text)
        strs = TOKENIZER.pieces(text) if body.get("return_token_strs") else None
        return JSONResponse({"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": strs})

    @app.post("/detokenize")
    async def detok(request: Request):
        try:
            body = json.loads(await request.body())
            tokens = body["tokens"]
            assert isinstance(tokens, list)
        except Exception:
            return error_response("tokens: a list of token ids is required", "Bad Request")
        return JSONResponse({"prompt": detokenize(tokens)})

    @app.get("/metrics")
    async def metrics():
        dead = engine.faults.dead_metrics
        if dead == "hang":
            await engine.faults_changed()
        elif dead == "500":
            return error_response("injected fault (dead-metrics)", "InternalServerError", 500)
        return Response(render(registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    if dev_mode:
        @app.post("/reset_prefix_cache")
        async def reset_prefix_cache():
            engine.core.reset_prefix_cache()
            return Response(status_code=200)

        @app.get("/is_sleeping")
        async def is_sleeping():
            return JSONResponse({"is_sleeping": False})

        @app.get("/_emulator/faults")
        async def get_faults():
            return JSONResponse({"faults": engine.faults.names()})

        @app.post("/_emulator/faults")
        async def set_faults(request: Request):
            try:
                body = json.loads(await request.body())
            except (ValueError, UnicodeDecodeError) as exc:
                return error_response(f"JSON decode error: {exc}", "Bad Request")
            specs = body.get("faults") if isinstance(body, dict) else None
            if not isinstance(specs, list):
                return error_response('body must be {"faults": ["NAME[:ARG]", ...]}', "Bad Request", param="faults")
            try:
                faults = Faults.parse(specs)
            except ConfigError as exc:
                return error_response(str(exc), "Bad Request", param="faults")
            engine.set_faults(faults)
            if engine.crash_due:  # crash:0 switched at run time: answer, then die
                asyncio.get_running_loop().call_later(0.05, os._exit, 1)
            return JSONResponse({"faults": faults.names()})

    @app.post("/_emulator/nixl/read")
    async def nixl_read(request: Request):
        try:
            body = json.loads(await request.body())
        except ValueError:
            return JSONResponse({"error": "bad body"}, status_code=400)
        status, payload = await engine.serve_read(body)
        return JSONResponse(payload, status_code=status)

    @app.get("/_emulator/state")
    async def state():
        core = engine.core
        return JSONResponse({
            "engine_id": engine.engine_id,
            "running": core.num_running,
            "waiting": core.num_waiting,
            "pulling": len(core.pulling),
            "used_blocks": core.pool.num_used,
            "free_blocks": core.pool.num_free,
            "num_blocks": core.pool.num_blocks,
            "kv_cache_usage_perc": core.pool.usage(),
            "held_for_decode": {rid: list(s.blocks) for rid, s in core.handoffs.items()},
            "being_read": sorted(engine.reading),
            "cached_blocks": len(core.pool.cached),
            "num_preemptions": core.num_preemptions,
            "steps": core.steps,
            "pulls_ok": engine.pulls_ok,
            "pulls_failed": engine.pulls_failed,
            "physics_now_s": engine.now(),
        })

    @app.get("/_emulator/info")
    async def info():
        return JSONResponse({
            "engine_id": engine.engine_id,
            "model": model_name,
            "profile": phys.name,
            "time_scale": engine.K,
            "faults": engine.faults.names(),
            "side_channel": {"host": side_host, "port": side_port},
            "stream_interval_tokens": cfg.stream_interval_tokens,
            "stream_interval_ms": cfg.stream_interval_ms,
            "physics": phys.to_dict(),
            "dev_mode": dev_mode,
            "pid": os.getpid(),
        })

    return app
