"""The router proxy's ASGI app and process: `create_app`, `serve`, `main`.

`create_app(cfg)` assembles the app: a `repro.live.proxy.core.Proxy` (router, pollers, journal)
as ``app.state.proxy``, started and stopped with the app's lifespan, and the HTTP routes of
`repro.live.proxy.routes` (``ROUTES``). `serve(cfg)` runs it with uvicorn on ``cfg.host:cfg.port``
behind `repro.web.hot_routes.HotRoutes` as the outermost ASGI app (`hot_app`): the completions, ``HOT_PATHS``,
skip FastAPI's router and middleware;
`main` is ``python -m repro.live.proxy --config FILE [--parent-pid N]``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from repro.live.proxy.config import API_KEY_ENV, ProxyConfig
from repro.live.proxy.core import Proxy
from repro.live.proxy.routes import HOT_PATHS, ROUTES
from repro.web.hot_routes import HotRoutes


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the app's proxy (engine client, pollers) while the app serves; stop it after. In the
    proxy process (``app.state.live_process``, set by `serve`) enter the live loop first
    (`repro.cluster.processes.enter_live_loop`: settled heap, real-time scheduling)."""
    proxy: Proxy = app.state.proxy
    if getattr(app.state, "live_process", False):
        from repro.cluster.processes import enter_live_loop

        enter_live_loop()
    proxy.start()
    try:
        yield
    finally:
        await proxy.stop()


def create_app(cfg: ProxyConfig) -> FastAPI:
    """The proxy's FastAPI app for ``cfg`` (nothing starts until the app's lifespan does)."""
    proxy = Proxy(cfg)
    app = FastAPI(title="calibrate-then-route proxy", lifespan=lifespan)
    app.state.proxy = proxy
    for method, path, handler in ROUTES:
        app.add_api_route(path, handler, methods=[method])
    return app


def hot_app(app: FastAPI) -> HotRoutes:
    """``app`` behind `HotRoutes` (outermost): the hot paths straight to their handlers, the rest to ``app``."""
    return HotRoutes(app, hot={(m, p): h for m, p, h in ROUTES if p in HOT_PATHS})


def serve(cfg: ProxyConfig) -> None:
    """Run the proxy in this process until interrupted (the process's entry: the lifespan enters the
    live loop, `repro.cluster.processes.enter_live_loop`)."""
    import uvicorn

    from repro.live.proxy.core import SERVER_KEEPALIVE_S

    app = create_app(cfg)
    app.state.live_process = True
    # clients close idle connections first (the load generator after 2 s): no reuse of a closed one
    uvicorn.run(hot_app(app), host=cfg.host, port=cfg.port, log_level="warning", access_log=False,
                timeout_keep_alive=SERVER_KEEPALIVE_S, proxy_headers=False)


def main(argv: list[str] | None = None) -> None:
    """``python -m repro.live.proxy``: read the `ProxyConfig` JSON file and serve it.

    ``--parent-pid N``: exit when process N is no longer this process's parent (the harness died).
    The bearer token comes from ``$REPRO_PROXY_API_KEY`` when the file has none.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m repro.live.proxy",
                                 description="Router proxy (config from a JSON file).")
    ap.add_argument("--config", required=True, help="ProxyConfig as JSON")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process is no longer our parent")
    args = ap.parse_args(argv)
    if args.parent_pid is not None:
        from repro.cluster.processes import orphaned

        if orphaned(args.parent_pid):
            return
    cfg = ProxyConfig.from_json(Path(args.config).read_text())
    if cfg.api_key is None:  # the harness passes the key in the environment, never in a file
        cfg.api_key = os.environ.get(API_KEY_ENV) or None
    serve(cfg)


if __name__ == "__main__":  # pragma: no cover
    main()
