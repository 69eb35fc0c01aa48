"""Emulator-only introspection and vLLM's dev-mode endpoints.

Always: ``GET /_emulator/state`` (allocator and queue state, for tests), ``GET /_emulator/requests``
(each finished request's physics times: the harness measures its own latency with them) and
``GET /_emulator/info``.
Only with ``VLLM_SERVER_DEV_MODE=1`` (`register_dev`; 404 otherwise, as in vLLM):
``POST /reset_prefix_cache``, ``GET /is_sleeping`` and ``GET``/``POST /_emulator/faults`` (read or
replace the fault switches at run time, see `repro.emulator.faults`).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from repro.cluster.processes import priority_of
from repro.emulator.engine import LATENESS_BUCKETS_S
from repro.emulator.faults import Faults
from repro.emulator.routes.errors import error_response
from repro.emulator.routes.state import emulator_state
from repro.errors import ConfigError

FAULTS_PATH = "/_emulator/faults"
REQUESTS_PATH = "/_emulator/requests"


def register(app: FastAPI) -> None:
    """Add the introspection routes (always served) to ``app``."""
    app.get("/_emulator/state")(state)
    app.get(REQUESTS_PATH)(requests)
    app.get("/_emulator/info")(info)


def register_dev(app: FastAPI) -> None:
    """Add the dev-mode routes (``VLLM_SERVER_DEV_MODE=1`` only) to ``app``."""
    app.post("/reset_prefix_cache")(reset_prefix_cache)
    app.get("/is_sleeping")(is_sleeping)
    app.get(FAULTS_PATH)(get_faults)
    app.post(FAULTS_PATH)(set_faults)


async def state(request: Request) -> JSONResponse:
    """Block and queue counts (blocks, requests), pull outcomes, the physics clock (seconds), step
    lateness and the objects exempt from garbage collection (`repro.cluster.processes.settle_heap`)."""
    engine = emulator_state(request).engine
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
        "prompt_mismatches": engine.prompt_mismatches,
        "physics_now_s": engine.now(),
        "time_scale": engine.K,
        "step_lateness": {"buckets_wall_s": list(LATENESS_BUCKETS_S), "counts": list(engine.lateness),
                          "lost_wall_s": engine.lost_wall_s},
        "gc_frozen_objects": gc.get_freeze_count(),  # > 0: the process settled its startup heap
        "priority": priority_of(os.getpid()),  # scheduling policy and niceness (repro.cluster.processes)
    })


async def requests(request: Request) -> JSONResponse:
    """The completion requests this engine finished or aborted, oldest first (at most
    `repro.emulator.engine.REQUEST_LOG_MAX`): ``request_id`` (X-Request-Id), ``prefill_only``, ``state`` and the physics
    times (seconds on this engine's clock) ``arrival_s``, ``first_token_s``, ``finish_s``."""
    engine = emulator_state(request).engine
    return JSONResponse({"time_scale": engine.K, "physics_now_s": engine.now(), "requests": list(engine.requests)})


async def info(request: Request) -> JSONResponse:
    """How this engine was started: model, profile, time scale, faults, side channel, physics."""
    st = emulator_state(request)
    engine, cfg = st.engine, st.cfg
    return JSONResponse({
        "engine_id": engine.engine_id,
        "model": st.model_name,
        "profile": st.physics.name,
        "time_scale": engine.K,
        "faults": engine.faults.names(),
        "side_channel": {"host": st.side_host, "port": st.side_port},
        "stream_interval_tokens": cfg.stream_interval_tokens,
        "stream_interval_ms": cfg.stream_interval_ms,
        "physics": st.physics.to_dict(),
        "dev_mode": st.dev_mode,
        "pid": os.getpid(),
    })


async def reset_prefix_cache(request: Request) -> Response:
    emulator_state(request).engine.core.reset_prefix_cache()
    return Response(status_code=200)


async def is_sleeping() -> JSONResponse:
    return JSONResponse({"is_sleeping": False})


async def get_faults(request: Request) -> JSONResponse:
    return JSONResponse({"faults": emulator_state(request).faults.names()})


async def set_faults(request: Request) -> JSONResponse:
    """Replace the whole fault set with ``{"faults": ["NAME[:ARG]", ...]}`` (``[]`` clears it);
    answers the new set. ``crash:0`` answers, then the process exits 50 ms later."""
    engine = emulator_state(request).engine
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
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
