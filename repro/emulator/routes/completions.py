"""``POST /v1/completions`` and ``POST /v1/chat/completions``: vLLM 0.12's bodies, SSE framing and
errors, with the completion-request faults (crash, hang, errors, cut) applied here.

Request ids follow vLLM: the response id is ``cmpl-<X-Request-Id>`` (``chatcmpl-`` for chat; the
body's ``request_id``, else a random uuid hex when the header is absent) and the engine-internal
id, which a prefill engine returns as ``remote_request_id``, is ``cmpl-<id>-0`` for completions
(one per prompt) and ``chatcmpl-<id>`` for chat.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from repro.emulator.faults import error_due
from repro.emulator.model import OutputFunction, prompt_seed
from repro.emulator.routes.errors import ApiError, error_response
from repro.emulator.routes.kv_transfer import handoff_params, remote_params
from repro.emulator.routes.params import (
    ParsedRequest,
    check_model,
    completion_body,
    parse_chat,
    parse_completion,
    resolve_max_tokens,
)
from repro.emulator.routes.state import EmulatorState, emulator_state
from repro.emulator.seq import ABORTED, FINISHED, Seq
from repro.engine.mechanisms import path_factors

try:  # orjson is much faster for the per-chunk encoding; plain json works too
    import orjson

    def dumps_json(obj: Any) -> bytes:
        """Compact JSON bytes of ``obj``."""
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover
    def dumps_json(obj: Any) -> bytes:
        """Compact JSON bytes of ``obj``."""
        return json.dumps(obj, separators=(",", ":")).encode()


class StreamCut(Exception):
    """Raised inside a response body to close the connection mid-way (the ``cut:K`` fault)."""


class QuietCut(logging.Filter):
    """Keep the server log free of the tracebacks of deliberate ``cut:K`` connection closes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, StreamCut):
                return False
            exc = exc.__cause__ or exc.__context__ or (
                exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) and exc.exceptions else None)
        return True


logging.getLogger("uvicorn.error").addFilter(QuietCut())


def register(app: FastAPI) -> None:
    """Add this module's routes to ``app``."""
    app.post("/v1/completions")(completions)
    app.post("/v1/chat/completions")(chat_completions)


async def completions(request: Request) -> Response:
    return await serve_completion(emulator_state(request), request, chat=False)


async def chat_completions(request: Request) -> Response:
    return await serve_completion(emulator_state(request), request, chat=True)


class Completion:
    """One submitted request as its answer sees it: ids, the output function and the token counts
    (``usage``) and text (``text``) of the first n generated tokens (the EOS token counts as a
    token but renders no text)."""

    __slots__ = ("chat", "request_id", "resp_id", "rid", "created", "p", "seq", "ev", "out", "eos_pos")

    def __init__(self, chat: bool, request_id: str, resp_id: str, rid: str, created: int, p: ParsedRequest,
                 seq: Seq, ev: asyncio.Event, out: OutputFunction, eos_pos: int | None):
        self.chat = chat
        self.request_id = request_id  # X-Request-Id, else the body's request_id, else random
        self.resp_id = resp_id
        self.rid = rid
        self.created = created  # unix seconds
        self.p = p
        self.seq = seq
        self.ev = ev  # set by the engine whenever the sequence has news
        self.out = out
        self.eos_pos = eos_pos  # position of the EOS token when the model stops by itself

    def text(self, a: int, b: int) -> str:
        """Text of generated tokens ``a..b-1``."""
        eos_pos = self.eos_pos
        if eos_pos is not None and b > eos_pos:
            b = eos_pos
        return self.out.text(a, b) if b > a else ""

    def usage(self, n_gen: int) -> dict[str, int]:
        P = self.seq.P
        return {"prompt_tokens": P, "total_tokens": P + n_gen, "completion_tokens": n_gen}


async def serve_completion(state: EmulatorState, request: Request, *, chat: bool) -> Response:
    """Count the request for the faults, validate it, submit it to the engine and answer (SSE when
    ``stream``). Errors are vLLM's error bodies."""
    engine = state.engine
    engine.completion_requests += 1
    if engine.crash_due:  # crash fault: die like a segfaulted engine (connections reset)
        os._exit(1)
    if engine.hung:  # hang fault: this request (and every later one) is never answered
        engine.update_hang()
        await engine.wait_unhung()
    try:
        body = completion_body(await request.body())
        check_model(body, state.model_name)
        p = parse_chat(body, state.model_name) if chat else parse_completion(body)
        max_tokens = resolve_max_tokens(p, state.max_model_len)
    except ApiError as e:
        return e.response()
    faults = engine.faults
    if faults.error_fraction and error_due(engine.completion_requests - engine.error_base, faults.error_fraction):
        return error_response("injected fault (errors): internal server error", "InternalServerError", 500)
    ph = engine.physics
    # mechanism api_queue: one request at a time, FCFS, on the prefill leg (the simulator's; a decode engine's own
    # API server time is mechanism stream_admission's)
    if (ph.api_queue_s or ph.api_queue_per_token_s) and remote_params(p.kv) is None:
        async with engine.api_lock:
            await asyncio.sleep((ph.api_queue_s + ph.api_queue_per_token_s * len(p.prompt_ids)) / engine.K)
    c = submit(state, request, body, p, max_tokens, chat)
    if p.stream:
        return StreamingResponse(stream_body(state, c), media_type="text/event-stream")
    return await full_body(state, c, request)


def submit(state: EmulatorState, request: Request, body: dict[str, Any], p: ParsedRequest, max_tokens: int,
           chat: bool) -> Completion:
    """Name the request, decide its output (greedy unless ``temperature`` > 0 or unset; its
    length: ``max_tokens``, or where the model emits EOS) and hand it to the engine."""
    engine = state.engine
    header_id = request.headers.get("x-request-id")
    base = header_id if header_id is not None else (
        body.get("request_id") if isinstance(body.get("request_id"), str) else uuid.uuid4().hex)
    resp_id = f"chatcmpl-{base}" if chat else f"cmpl-{base}"
    rid = unique_rid(state, resp_id if chat else f"{resp_id}-0")
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
    return Completion(chat, base, resp_id, rid, created, p, seq, ev, out, eos_pos)


def unique_rid(state: EmulatorState, rid: str) -> str:
    """``rid``, with a random suffix when the engine already knows a request by that id."""
    engine = state.engine
    core = engine.core
    if rid in core.live or rid in core.handoffs or rid in engine.reading:
        rid = f"{rid}-{uuid.uuid4().hex[:8]}"
    return rid


async def full_body(state: EmulatorState, c: Completion, request: Request) -> Response:
    """The non-streamed answer, once the request finished (a client that goes away aborts it)."""
    engine = state.engine
    seq, ev, p, chat = c.seq, c.ev, c.p, c.chat
    try:
        while seq.state not in (FINISHED, ABORTED):
            ev.clear()
            await ev.wait()
    except asyncio.CancelledError:
        engine.abort(seq)
        raise
    finally:
        engine.log_request(c.request_id, seq)
    if seq.state == ABORTED:
        return error_response("Request was aborted", "InternalServerError", 500)
    path = engine.physics.serving_path_s
    if seq.prefill_only and path > 0.0:  # mechanism request_path: the answer's own time outside the engine
        sigma = engine.physics.serving_path_sigma
        factor = path_factors([c.rid], [0.0], sigma)[0] if sigma else 1.0
        await asyncio.sleep(path * factor / engine.K)
    n_gen = seq.g
    text = c.text(0, n_gen)
    kv_out = handoff_params(state, seq, c.rid, request)
    u: dict[str, Any] = c.usage(n_gen)
    u["prompt_tokens_details"] = None
    if chat:
        payload = {
            "id": c.resp_id, "object": "chat.completion", "created": c.created, "model": state.model_name,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                            "audio": None, "function_call": None, "tool_calls": [], "reasoning": None,
                            "reasoning_content": None},  # vLLM 0.12's ChatMessage serializes both
                "logprobs": None, "finish_reason": seq.finish_reason, "stop_reason": None, "token_ids": None,
            }],
            "service_tier": None, "system_fingerprint": None, "usage": u,
            "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": kv_out,
        }
    else:
        if p.echo:
            text = p.prompt_text + text
        payload = {
            "id": c.resp_id, "object": "text_completion", "created": c.created, "model": state.model_name,
            "choices": [{
                "index": 0, "text": text, "logprobs": None, "finish_reason": seq.finish_reason,
                "stop_reason": None, "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None,
            }],
            "service_tier": None, "system_fingerprint": None, "usage": u, "kv_transfer_params": kv_out,
        }
    data = dumps_json(payload)
    cut = engine.faults.cut_after
    if cut is not None and n_gen > cut:  # cut fault: half the body, then the connection closes

        async def half() -> AsyncIterator[bytes]:
            yield data[: len(data) // 2]
            raise StreamCut("cut fault")

        return StreamingResponse(half(), media_type="application/json", headers={"content-length": str(len(data))})
    return Response(data, media_type="application/json")


async def stream_body(state: EmulatorState, c: Completion) -> AsyncIterator[bytes]:
    """SSE events as tokens appear (every ``--stream-interval-tokens``), the usage event when asked
    for, then ``data: [DONE]``. A stream left early (client gone, cut fault) aborts the request.

    The events due at one wake-up go out in one write (the last chunk, the usage event and
    ``[DONE]`` together): one send per wake-up instead of up to three, the same bytes on the wire."""
    engine = state.engine
    core = engine.core
    model_name = state.model_name
    seq, ev, p, chat, resp_id, created = c.seq, c.ev, c.p, c.chat, c.resp_id, c.created
    text_of, usage = c.text, c.usage
    sent = 0
    head_sent = False
    obj = "chat.completion.chunk" if chat else "text_completion"
    parts: list[bytes] = []
    try:
        while True:
            st = seq.state
            done = st == FINISHED
            if st == ABORTED:
                err = {"error": {"message": "Request was aborted", "type": "InternalServerError", "param": None,
                                 "code": 500}}
                parts.append(b"data: " + dumps_json(err) + b"\n\n")
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
                        first: dict[str, Any] = {
                            "id": resp_id, "object": obj, "created": created, "model": model_name,
                            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "logprobs": None, "finish_reason": None}],
                            "prompt_token_ids": None}
                        if p.continuous_usage:
                            first["usage"] = usage(0)
                        parts.append(b"data: " + dumps_json(first) + b"\n\n")
                        head_sent = True
                    choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "logprobs": None,
                                              "finish_reason": fr}
                    if done:
                        choice["stop_reason"] = None
                    chunk: dict[str, Any] = {"id": resp_id, "object": obj, "created": created, "model": model_name,
                                             "choices": [choice]}
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
                parts.append(b"data: " + dumps_json(chunk) + b"\n\n")
                sent = g
            if cut_now:
                yield b"".join(parts)
                raise StreamCut("cut fault")
            if done:
                if p.include_usage:
                    final = {"id": resp_id, "object": obj, "created": created, "model": model_name,
                             "choices": [], "usage": usage(sent)}
                    parts.append(b"data: " + dumps_json(final) + b"\n\n")
                break
            if parts:
                yield b"".join(parts)
                parts.clear()
            ev.clear()
            await ev.wait()
        parts.append(b"data: [DONE]\n\n")
        yield b"".join(parts)
    finally:
        if seq.state not in (FINISHED, ABORTED):
            engine.abort(seq)
        engine.log_request(c.request_id, seq)
