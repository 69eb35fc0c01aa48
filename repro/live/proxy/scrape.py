"""The poller's ``GET /metrics``: one kept-alive HTTP/1.1 connection per engine, no client library.

The proxy reads every engine's ``/metrics`` each poll period (50 ms physics: 25 ms wall at time scale
2, six engines: 240 scrapes a second). Through aiohttp's client each scrape cost ~0.4 ms of the
proxy's CPU (15% of its busy time at 16 req/s on 2p4d); this writes one prepared request on a
persistent connection and reads the answer (``Content-Length`` or chunked). ``https://`` engines are
scraped with aiohttp instead (`Scraper.fallback`).

Errors: a refused connection raises `ConnectionRefusedError`; a closed or broken connection, a
malformed answer or a time-out raises `OSError` / `asyncio.IncompleteReadError` / `TimeoutError` /
`ValueError`; the connection is then dropped and the next scrape opens a new one.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlencode, urlsplit


def metrics_query(names: tuple[str, ...]) -> str:
    """The ``name[]=`` query that asks a Prometheus endpoint for only the samples ``names``:
    prometheus-client's exposition app (``make_asgi_app``, older vLLM's ``/metrics``) and the emulated
    engine honour it; an endpoint that ignores it (newer vLLM's ``/metrics`` is
    prometheus-fastapi-instrumentator's route) answers everything, which the poller reads the same."""
    return urlencode([("name[]", n) for n in names])


class Scraper:
    """``GET <url>/metrics[?query]`` on one kept-alive connection (`get` -> (status, body bytes)).

    ``query``: an already-encoded query string (e.g. `metrics_query`'s), sent as is."""

    def __init__(self, base_url: str, connect_timeout_s: float = 2.0, query: str = "") -> None:
        u = urlsplit(base_url)
        self.fallback = u.scheme == "https"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.fallback else 80)
        host_header = u.netloc.rsplit("@", 1)[-1]
        path = (u.path.rstrip("/") or "") + "/metrics" + (f"?{query}" if query else "")
        self.url = f"{base_url.rstrip('/')}/metrics" + (f"?{query}" if query else "")  # for the fallback
        self.request = f"GET {path} HTTP/1.1\r\nHost: {host_header}\r\nAccept: */*\r\n\r\n".encode()
        self.connect_timeout_s = connect_timeout_s
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def get(self, timeout_s: float) -> tuple[int, bytes]:
        """One scrape within ``timeout_s`` wall seconds."""
        try:
            async with asyncio.timeout(timeout_s):  # no task per scrape (asyncio.wait_for makes one)
                return await self._get()
        except BaseException:
            self.close()
            raise

    async def _get(self) -> tuple[int, bytes]:
        if self._conn is None or self._conn[1].is_closing():
            self._conn = await asyncio.wait_for(asyncio.open_connection(self.host, self.port),
                                                self.connect_timeout_s)
        r, w = self._conn
        w.write(self.request)
        line = await r.readline()
        if not line:
            raise ConnectionResetError("the engine closed the connection")
        parts = line.split()
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise ValueError(f"not an HTTP status line: {line[:80]!r}")
        status = int(parts[1])
        length, chunked, keep = None, False, True
        while True:
            h = await r.readline()
            if h in (b"\r\n", b""):
                break
            k, _, v = h.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
            elif k == b"connection" and b"close" in v.lower():
                keep = False
        if chunked:
            body = bytearray()
            while True:
                size = int((await r.readline()).split(b";")[0], 16)
                if size == 0:
                    while (await r.readline()) not in (b"\r\n", b""):  # trailers
                        pass
                    break
                body += await r.readexactly(size)
                await r.readexactly(2)
            data = bytes(body)
        elif length is not None:
            data = await r.readexactly(length)
        else:
            data = await r.read()
            keep = False
        if not keep:
            self.close()
        return status, data

    def close(self) -> None:
        """Drop the connection (the next `get` opens a new one)."""
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None
