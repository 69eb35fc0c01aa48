"""The emulated engine's HTTP API: vLLM 0.12's OpenAI-compatible server, P/D with NixlConnector.

`create_app` assembles one FastAPI app from the route modules of `repro.emulator.routes`
(the hot ones, `HOT_ROUTES`, answered by `repro.web.hot_routes.HotRoutes` without FastAPI's router):

- `repro.emulator.routes.completions`: ``POST /v1/completions``, ``POST /v1/chat/completions``
  (streaming SSE and not), with `repro.emulator.routes.params` validating the bodies.
- `repro.emulator.routes.service`: ``GET /health``, ``/ping``, ``/version``, ``/v1/models``,
  ``/metrics``, ``POST /tokenize``, ``/detokenize``.
- `repro.emulator.routes.kv_transfer`: ``POST /_emulator/nixl/read`` (the decode engine's KV read,
  standing in for NIXL) and the ``kv_transfer_params`` of both P/D sides.
- `repro.emulator.routes.admin`: ``GET /_emulator/state`` (allocator and queue state, for tests)
  and ``/_emulator/info``; with ``VLLM_SERVER_DEV_MODE=1`` also ``POST /reset_prefix_cache``,
  ``GET /is_sleeping`` and ``/_emulator/faults`` (GET the active fault switches, POST
  ``{"faults": [...]}`` to replace them at run time; see `repro.emulator.faults`); 404 otherwise,
  as in vLLM.

With ``--api-key KEY`` (or ``$VLLM_API_KEY``), as vLLM, every ``/v1/*`` request needs
``Authorization: Bearer KEY`` (else 401 ``{"error": "Unauthorized"}``); the other endpoints stay open.

The side channel: vLLM's prefill answer names ``remote_host``/``remote_port`` of its NIXL side
channel (``VLLM_NIXL_SIDE_CHANNEL_HOST``/``PORT``). The emulator has no NIXL, so its "side
channel" is an HTTP listener serving the same app: by default the engine's own HTTP port (then
``remote_port`` IS the HTTP port), or a second listener on ``--side-channel-port`` /
``VLLM_NIXL_SIDE_CHANNEL_PORT`` when one is given. A decode engine reads the KV with
``POST http://remote_host:remote_port/_emulator/nixl/read``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from repro.emulator.engine import AsyncEngine, EmulatorConfig
from repro.emulator.routes import admin, completions, kv_transfer, service
from repro.emulator.routes.state import EmulatorState
from repro.web.hot_routes import HotRoutes

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send


class EngineGate:
    """Raw ASGI middleware in front of every route: a hung engine answers nothing (but the fault
    switch ``/_emulator/faults``); vLLM's ``--api-key`` check (``/v1/*`` needs
    ``Authorization: Bearer <key>``, else 401)."""

    def __init__(self, inner: ASGIApp, state: EmulatorState):
        self.inner = inner
        self.engine = state.engine
        self.api_key = state.api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            engine = self.engine
            if engine.hung and path != admin.FAULTS_PATH:
                await engine.wait_unhung()
            api_key = self.api_key
            if api_key and path.startswith("/v1") and scope.get("method") != "OPTIONS":
                auth = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
                if auth != b"Bearer " + api_key.encode():
                    await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                    return
        await self.inner(scope, receive, send)


# every request of a live run passes three of these, and the proxy polls /metrics every few ms
HOT_ROUTES = {
    ("POST", "/v1/completions"): completions.completions,
    ("POST", "/v1/chat/completions"): completions.chat_completions,
    ("POST", kv_transfer.NIXL_READ_PATH): kv_transfer.nixl_read,
    ("GET", "/metrics"): service.metrics,
}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run the engine's step loop while the (main) server runs; in an engine process
    (``app.state.live_process``, set by `repro.emulator.server.serve`) enter the live loop first
    (`repro.cluster.processes.enter_live_loop`: settled heap, real-time scheduling)."""
    engine: AsyncEngine = app.state.engine
    if getattr(app.state, "live_process", False):
        from repro.cluster.processes import enter_live_loop

        enter_live_loop()
    await engine.start()
    try:
        yield
    finally:
        await engine.stop()


def create_app(cfg: EmulatorConfig, engine: AsyncEngine | None = None) -> FastAPI:
    """The ASGI app of one emulated engine (``engine``: an existing one, else one built from ``cfg``).

    ``app.state`` holds ``emulator`` (the `EmulatorState`), ``engine`` and ``side_channel_port``
    (None: the HTTP port serves the side channel). The environment is read here, once.
    """
    state = EmulatorState.create(cfg, engine or AsyncEngine(cfg))
    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.emulator = state
    app.state.engine = state.engine
    app.state.side_channel_port = state.side_port
    app.add_middleware(HotRoutes, hot=HOT_ROUTES)  # inside the gate: a hung engine answers nothing
    app.add_middleware(EngineGate, state=state)
    completions.register(app)
    service.register(app)
    if state.dev_mode:
        admin.register_dev(app)
    kv_transfer.register(app)
    admin.register(app)
    return app
