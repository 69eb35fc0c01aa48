"""`EngineClient`: the proxy's HTTP/1.1 client for its calls to the engines (the P/D exchange).

Each engine call is one ``POST`` on a kept-alive connection: the request is written in one piece
(``Content-Length`` body), the answer parsed by httptools (the C parser uvicorn uses), its body
read whole (`Answer.read`) or chunk by chunk as it arrives (`Answer.iter_any`, the SSE relay).
Through aiohttp's client the two calls of a request cost ~20% of the proxy's CPU per request
(benchmarks/bench_proxy.py, py-spy); this does the same work in a few Python calls. ``https://``
engines work too (TLS through asyncio).

Connections: idle ones are kept per (scheme, host, port) and reused if idle for less than
``keepalive_s`` wall seconds (below the engines' own 5 s: a connection the engine closed is not
reused); a connection whose answer was not read to its end, or that failed, is closed.

Errors (all `EngineError`, whose message reads like aiohttp's): `CannotConnect` (refused: no
process listens, or no route to it),
`ConnectTimeout` (the engine did not accept within ``connect_timeout_s``), `Disconnected` (the
connection closed or broke before the answer's head: nothing was answered, safe to send again),
`PayloadError` (the answer was cut or malformed after its head).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from urllib.parse import urlsplit

import httptools


class EngineError(Exception):
    """A call to an engine failed (see the module docstring for the kinds)."""


class CannotConnect(EngineError):
    """No connection could be made: refused (no process listens at the engine's address) or unreachable."""


class ConnectTimeout(EngineError):
    """The engine did not accept the connection in time."""


class Disconnected(EngineError):
    """The connection closed or broke before the answer's head arrived."""


class PayloadError(EngineError):
    """The answer was cut or malformed after its head arrived."""


class Answer:
    """One engine answer: ``status`` and ``headers`` (lowercase bytes names), then the body."""

    def __init__(self, conn: _Conn, status: int, headers: dict[bytes, bytes]) -> None:
        self.status = status
        self.headers = headers
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._complete = False
        self._error: EngineError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._released = False

    # fed by the connection
    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._wake()

    def _finish(self) -> None:
        self._complete = True
        self._wake()

    def _fail(self, exc: EngineError) -> None:
        if not self._complete and self._error is None:
            self._error = exc
        self._wake()

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # read by the caller
    async def iter_any(self):
        """The body's bytes as they arrive; raises `PayloadError` if the answer is cut."""
        while True:
            while self._chunks:
                yield self._chunks.popleft()
            if self._complete:
                return
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read(self) -> bytes:
        """The whole body; raises `PayloadError` if the answer is cut."""
        while not self._complete:
            if self._error is not None:
                raise self._error
            await self._wait()
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data

    def release(self) -> None:
        """Done with the answer: its connection goes back to the pool if the answer was read to its
        end and the connection may be kept, else it is closed. Idempotent."""
        if self._released:
            return
        self._released = True
        self._conn.done(self._complete and self._error is None and not self._chunks)

    def close(self) -> None:
        """Close the connection now (a pending read raises `PayloadError`). Idempotent."""
        self._fail(PayloadError("Connection closed"))
        self._released = True
        self._conn.done(False)


class _Conn(asyncio.Protocol):
    """One kept-alive connection to an engine, parsing the answers with httptools."""

    def __init__(self, client: EngineClient, key: tuple[str, str, int]) -> None:
        self.client = client
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.head: asyncio.Future[Answer] | None = None  # the answer's head, while awaited
        self.answer: Answer | None = None  # the answer being received
        self.headers: dict[bytes, bytes] = {}
        self.closed = False
        self.idle_since = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"malformed answer: {exc}")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail("Server disconnected" + (f" ({exc})" if exc else ""))

    def _fail(self, message: str) -> None:
        if self.head is not None and not self.head.done():
            self.head.set_exception(Disconnected(message))
        elif self.answer is not None:
            self.answer._fail(PayloadError(message))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.answer = Answer(self, self.parser.get_status_code(), self.headers)
        self.headers = {}
        if self.head is not None and not self.head.done():
            self.head.set_result(self.answer)

    def on_body(self, body: bytes) -> None:
        if self.answer is not None:
            self.answer._feed(bytes(body))

    def on_message_complete(self) -> None:
        if self.answer is not None:
            if not self.parser.should_keep_alive():
                self.closed = True  # the engine closes it after this answer
            self.answer._finish()

    # life cycle
    def done(self, reusable: bool) -> None:
        """The caller is done with the current answer: back to the pool, or closed."""
        self.answer = None
        self.head = None
        if reusable and not self.closed and self.transport is not None and not self.transport.is_closing():
            self.client.put(self)
        else:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class EngineClient:
    """``POST`` to the engines on kept-alive connections (see the module docstring).

    ``connect_timeout_s`` and ``keepalive_s`` are wall seconds. No read time-out: an engine that is
    alive may take as long as its queue takes (the proxy ends a call early when the engine dies).
    """

    def __init__(self, connect_timeout_s: float, keepalive_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._targets: dict[str, tuple[tuple[str, str, int], bytes, bytes]] = {}
        self._ssl: ssl.SSLContext | None = None

    def _target(self, url: str) -> tuple[tuple[str, str, int], bytes, bytes]:
        """(pool key, request-target, Host header) of ``url``, parsed once."""
        t = self._targets.get(url)
        if t is None:
            u = urlsplit(url)
            port = u.port or (443 if u.scheme == "https" else 80)
            path = (u.path or "/") + (f"?{u.query}" if u.query else "")
            t = self._targets[url] = ((u.scheme, u.hostname or "127.0.0.1", port), path.encode(),
                                      u.netloc.rsplit("@", 1)[-1].encode())
        return t

    def put(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, []).append(conn)

    async def _connect(self, key: tuple[str, str, int]) -> tuple[_Conn, bool]:
        """A connection to ``key`` and whether it is a reused one."""
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_s and not conn.transport.is_closing():
                return conn, True
            conn.close()
        scheme, host, port = key
        ctx = None
        if scheme == "https":
            ctx = self._ssl = self._ssl or ssl.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(lambda: _Conn(self, key), host, port, ssl=ctx)
        except TimeoutError:
            raise ConnectTimeout(f"Connection timeout to host {host}:{port}") from None
        except OSError as exc:
            why = exc.strerror or exc
            raise CannotConnect(f"Cannot connect to host {host}:{port} ssl:{bool(ctx)} [{why}]") from None
        return conn, False

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        """Send ``body`` (JSON bytes; ``headers`` must name its Content-Type) to ``url``; the answer
        once its head arrived (read or release it). Raises `EngineError`."""
        key, path, host = self._target(url)
        conn, _ = await self._connect(key)
        head = b"".join(b"%s: %s\r\n" % (k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
        conn.head = asyncio.get_running_loop().create_future()
        conn.transport.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n%s\r\n%s"
                             % (path, host, len(body), head, body))
        try:
            return await conn.head
        except BaseException:
            conn.head = None
            conn.close()
            raise

    def close(self) -> None:
        """Close every idle connection."""
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
