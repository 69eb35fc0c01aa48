"""P/D KV transfer over HTTP (vLLM's NixlConnector protocol, without NIXL).

- Prefill side: a ``do_remote_decode`` request's answer carries the ``kv_transfer_params`` that
  name the held blocks and the side channel (`handoff_params`), and ``POST /_emulator/nixl/read``
  serves the decode engine's read of them (`repro.emulator.engine.AsyncEngine.serve_read`).
- Decode side: `remote_params` decides whether an incoming ``kv_transfer_params`` is a usable
  ``do_remote_prefill`` (then the engine pulls the KV instead of prefilling).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from repro.emulator.routes.state import EmulatorState, emulator_state

if TYPE_CHECKING:
    from repro.emulator.seq import Seq

NIXL_READ_PATH = "/_emulator/nixl/read"


def register(app: FastAPI) -> None:
    """Add this module's routes to ``app``."""
    app.post(NIXL_READ_PATH)(nixl_read)


async def nixl_read(request: Request) -> JSONResponse:
    """The decode engine's read of held KV, answered at once: 200 (the blocks stay held for the
    transfer time, physics s / K wall, and the reader waits it out from its own send), or 404/409
    with ``{"error": ...}``; 400 for a body that is not JSON."""
    engine = emulator_state(request).engine
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError):
        return JSONResponse({"error": "bad body"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
    status, payload = await engine.serve_read(body)
    return JSONResponse(payload, status_code=status)


def remote_params(kv: dict[str, Any] | None) -> dict[str, Any] | None:
    """``kv`` when it asks for a remote prefill with everything a pull needs, else None (vLLM logs
    "Got invalid KVTransferParams" and prefills locally)."""
    if not kv or not kv.get("do_remote_prefill"):
        return None
    if not kv.get("remote_block_ids"):
        return None
    needed = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")
    if not all(kv.get(k) is not None for k in needed):
        return None
    return kv


def handoff_params(state: EmulatorState, seq: Seq, rid: str, request: Request) -> dict[str, Any] | None:
    """The ``kv_transfer_params`` of a finished prefill-only request whose KV this engine holds for
    the decode engine (None when it holds none). Under the ``kv-drop`` fault the blocks are
    released at once, so the decode engine's read will fail."""
    if seq.kv_params is None:
        return None
    engine = state.engine
    kv_out = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": seq.kv_params["remote_block_ids"],
        "remote_engine_id": engine.engine_id,
        "remote_request_id": rid,
        "remote_host": state.side_host,
        "remote_port": state.advertised_port(request),
        "tp_size": 1,
    }
    if engine.faults.kv_drop:
        engine.core.release_handoff(rid)
    return kv_out
