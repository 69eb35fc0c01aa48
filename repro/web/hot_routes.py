"""`HotRoutes`: a raw ASGI middleware that answers a few hot routes without the framework's router.

The emulated engines and the router proxy are FastAPI apps. Their few hot routes (completions,
the KV read, ``/metrics``) carry every request of a live run, several times, and on a time-scaled
emulated cluster each wall millisecond a request spends in Python HTTP layers counts K times in
physics (docs/VALIDITY.md, "harness latency"). `HotRoutes` sends those requests straight to
their handler functions (``handler(request) -> Response``), skipping FastAPI's routing, dependency
solving and the middleware inside it; everything else goes on to the app as before.

Two placements: added as middleware (``app.add_middleware(HotRoutes, hot=...)``), middleware
added after it (outside it) still runs for every route, and so does Starlette's outermost error
middleware (an exception in a handler is a 500); or as the outermost ASGI app
(``HotRoutes(app, hot)`` given to the server), a hot request skips all of the app's middleware
(FastAPI's own included: ~15% of the proxy's CPU per request), ``request.app`` is ``app``, and an
exception in a handler reaches the server, which answers 500 if no response started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

Handler = Callable[[Request], Awaitable[Response]]


class HotRoutes:
    """Answer ``(method, path)`` in ``hot`` with its handler, pass anything else to ``inner``.

    A handler takes only the `Request` (whose ``.app`` is the outer app, as in a routed call) and
    returns a `Response`; it must not rely on FastAPI's dependency injection or path parameters.
    """

    def __init__(self, inner: ASGIApp, hot: Mapping[tuple[str, str], Handler]):
        self.inner = inner
        self.hot = dict(hot)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            handler = self.hot.get((scope["method"], scope["path"]))
            if handler is not None:
                if "app" not in scope:  # outermost: the handler's request.app is the inner app
                    scope["app"] = self.inner
                response = await handler(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.inner(scope, receive, send)
