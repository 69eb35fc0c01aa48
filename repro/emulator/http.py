"""A minimal asyncio HTTP/1.1 client (POST JSON, keep-alive, chunked responses).

httpx costs about 1 ms of CPU per request and more per streamed response; on a 2-core machine
hosting six engines, a proxy and a load generator that overhead shows up directly as TTFT error.
This client does only what the emulator's KV pulls and the benchmark's load generator need, at a
fraction of the cost. It is not a general HTTP client (no redirects, TLS, proxies or retries).
"""

from __future__ import annotations

import asyncio
import json
import time


class RawClient:
    """Keep-alive POST client. ``post`` yields ``(status, b"")`` first, then
    ``(monotonic time, bytes)`` for each body piece as it arrives."""

    def __init__(self, connect_timeout: float = 10.0):
        self.idle: dict[tuple[str, int], list] = {}
        self.connect_timeout = connect_timeout

    async def _open(self, host: str, port: int):
        return await asyncio.wait_for(asyncio.open_connection(host, port), self.connect_timeout)

    async def _send(self, host: str, port: int, payload: bytes):
        """Send on a pooled connection (retrying once on a fresh one if it went stale)."""
        pool = self.idle.setdefault((host, port), [])
        while pool:
            r, w = pool.pop()
            if w.is_closing() or r.at_eof():
                w.close()
                continue
            try:
                w.write(payload)
                line = await r.readline()
                if line:
                    return r, w, line
            except (ConnectionError, OSError):
                pass
            w.close()
        r, w = await self._open(host, port)
        w.write(payload)
        line = await r.readline()
        if not line:
            w.close()
            raise ConnectionError(f"{host}:{port} closed the connection")
        return r, w, line

    async def post(self, url: str, obj: dict, headers: dict | None = None):
        rest = url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.rpartition(":")
        host = host.strip("[]")
        body = json.dumps(obj).encode()
        head = [f"POST /{path} HTTP/1.1", f"Host: {hostport}", "Content-Type: application/json",
                f"Content-Length: {len(body)}"]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}")
        r, w, status_line = await self._send(host, int(port), ("\r\n".join(head) + "\r\n\r\n").encode() + body)
        ok = False
        try:
            status = int(status_line.split()[1])
            length = None
            chunked = False
            keep = True
            while True:
                line = await r.readline()
                if line in (b"\r\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                k = k.strip().lower()
                if k == "content-length":
                    length = int(v)
                elif k == "transfer-encoding" and "chunked" in v.lower():
                    chunked = True
                elif k == "connection" and "close" in v.lower():
                    keep = False
            yield status, b""
            if chunked:
                while True:
                    size = int((await r.readline()).split(b";")[0], 16)
                    if size == 0:
                        await r.readline()
                        break
                    data = await r.readexactly(size)
                    await r.readexactly(2)
                    yield time.monotonic(), data
            elif length is not None:
                data = await r.readexactly(length)
                yield time.monotonic(), data
            else:
                data = await r.read()
                keep = False
                yield time.monotonic(), data
            ok = keep
        finally:
            if ok:
                self.idle[(host, int(port))].append((r, w))
            else:
                w.close()

    async def post_json(self, url: str, obj: dict, headers: dict | None = None) -> tuple[int, bytes]:
        status, buf = 0, b""
        first = True
        async for a, b in self.post(url, obj, headers):
            if first:
                status, first = a, False
            else:
                buf += b
        return status, buf

    async def close(self) -> None:
        for pool in self.idle.values():
            for _, w in pool:
                w.close()
        self.idle.clear()
