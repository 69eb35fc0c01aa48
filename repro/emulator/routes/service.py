"""vLLM's service endpoints: ``GET /health``, ``/ping``, ``/version``, ``/v1/models``, ``/metrics``
and ``POST /tokenize``, ``/detokenize``."""

from __future__ import annotations

import json
import time
import uuid
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from repro.emulator.model import TOKENIZER, detokenize, render_chat
from repro.emulator.routes.errors import ApiError, error_response, validation_error
from repro.emulator.routes.params import check_model
from repro.emulator.routes.state import emulator_state

VLLM_VERSION = "0.12.0"


def register(app: FastAPI) -> None:
    """Add this module's routes to ``app``."""
    app.get("/health")(health)
    app.get("/ping")(ping)
    app.get("/version")(version)
    app.get("/v1/models")(models)
    app.post("/tokenize")(tokenize)
    app.post("/detokenize")(detok)
    app.get("/metrics")(metrics)


async def health() -> Response:
    return Response(status_code=200)


async def ping() -> Response:
    return Response(status_code=200)


async def version() -> JSONResponse:
    return JSONResponse({"version": VLLM_VERSION})


async def models(request: Request) -> JSONResponse:
    """The one served model (``max_model_len`` in tokens, ``created`` in unix seconds)."""
    state = emulator_state(request)
    now = int(time.time())
    return JSONResponse({"object": "list", "data": [{
        "id": state.model_name, "object": "model", "created": now, "owned_by": "vllm", "root": state.physics.model,
        "parent": None, "max_model_len": state.max_model_len,
        "permission": [{
            "id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": now,
            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
            "organization": "*", "group": None, "is_blocking": False,
        }],
    }]})


async def tokenize(request: Request) -> JSONResponse:
    """Token ids of ``prompt``, or of ``messages`` rendered with the chat template."""
    state = emulator_state(request)
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError) as exc:
        return error_response(f"JSON decode error: {'nested too deeply' if isinstance(exc, RecursionError) else exc}",
                              "Bad Request")
    if not isinstance(body, dict):
        return error_response("Input should be a valid dictionary", "Bad Request")
    try:
        check_model(body, state.model_name)
        if "messages" in body:
            msgs = body["messages"]
            if not isinstance(msgs, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                      for m in msgs):
                raise ApiError("messages must be a list of objects with a string 'role'", param="messages")
            try:
                text = render_chat(msgs, state.model_name, bool(body.get("add_generation_prompt", True)))
            except ValueError as exc:
                raise ApiError(str(exc), param="messages") from None
        else:
            text = body.get("prompt")
            if not isinstance(text, str):
                raise validation_error("Field required", ("prompt",), text, "missing")
    except ApiError as e:
        return e.response()
    ids = TOKENIZER.encode(text)
    strs = TOKENIZER.pieces(text) if body.get("return_token_strs") else None
    return JSONResponse({"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids, "token_strs": strs})


async def detok(request: Request) -> JSONResponse:
    """Text of ``tokens`` (ids outside the output vocabulary render as '')."""
    try:
        body = json.loads(await request.body())
        tokens = body["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise TypeError("tokens")
    except Exception:
        return error_response("tokens: a list of token ids is required", "Bad Request")
    return JSONResponse({"prompt": detokenize(tokens)})


async def metrics(request: Request) -> Response:
    """Prometheus text (times in physics seconds); ``?name[]=N&name[]=M`` keeps only the samples
    named (prometheus-client's exposition filter); the ``dead-metrics`` fault answers
    500 or waits for the next fault switch."""
    state = emulator_state(request)
    dead = state.faults.dead_metrics
    if dead == "hang":
        await state.engine.faults_changed()
    elif dead == "500":
        return error_response("injected fault (dead-metrics)", "InternalServerError", 500)
    query = request.scope.get("query_string")
    names = parse_qs(query.decode("latin-1")).get("name[]") if query else None
    return Response(state.engine.metrics.text(names), media_type="text/plain; version=0.0.4; charset=utf-8")
