"""The proxy's engine client (`repro.live.proxy.engine_client`) against hand-written HTTP/1.1 servers."""

import asyncio

import pytest

from repro.live.proxy.engine_client import CannotConnect, Disconnected, EngineClient, PayloadError
from repro.live.run import free_port

H = {"Content-Type": "application/json", "X-Request-Id": "r1"}


async def serve(answers):
    """A server whose n-th request on a connection gets ``answers[n]`` (bytes, or a callable(writer))
    written back; records (connection number, request head) pairs."""
    seen = []
    conns = []

    async def handle(reader, writer):
        k = len(conns)
        conns.append(writer)
        for answer in answers:
            head = await reader.readuntil(b"\r\n\r\n")
            n = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
            body = await reader.readexactly(n)
            seen.append((k, head, body))
            if callable(answer):
                await answer(writer)
            else:
                writer.write(answer)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def test_reuses_the_connection_and_reads_whole_and_chunked_answers():
    async def chunked(w):
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b"data: 1\n\n", b"data: [DONE]\n\n"):
            w.write(b"%x\r\n%s\r\n" % (len(part), part))
            await w.drain()
            await asyncio.sleep(0.01)
        w.write(b"0\r\n\r\n")

    async def go():
        server, url, seen = await serve([ok(b'{"a":1}'), chunked])
        client = EngineClient(2.0, 2.0)
        a = await client.post(url + "/v1/completions", b'{"x":1}', H)
        assert a.status == 200 and await a.read() == b'{"a":1}'
        a.release()
        b = await client.post(url + "/v1/completions", b'{"y":22}', H)
        parts = [c async for c in b.iter_any()]
        b.release()
        client.close()
        server.close()
        return seen, parts

    seen, parts = asyncio.run(go())
    assert [k for k, _, _ in seen] == [0, 0]  # one connection, kept alive
    assert seen[0][1].startswith(b"POST /v1/completions HTTP/1.1\r\n") and b"X-Request-Id: r1" in seen[0][1]
    assert [body for _, _, body in seen] == [b'{"x":1}', b'{"y":22}']
    assert b"".join(parts) == b"data: 1\n\ndata: [DONE]\n\n" and len(parts) >= 2  # as it arrived


def test_refused_disconnected_and_cut_answers_raise_their_kinds():
    async def close_now(w):
        w.close()

    async def cut(w):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
        await w.drain()
        w.close()

    async def go():
        client = EngineClient(2.0, 2.0)
        with pytest.raises(CannotConnect):
            await client.post(f"http://127.0.0.1:{free_port()}/v1/completions", b"{}", H)
        server, url, _ = await serve([close_now])
        with pytest.raises(Disconnected):  # nothing answered: safe to send again
            await client.post(url + "/x", b"{}", H)
        server.close()
        server, url, _ = await serve([cut])
        a = await client.post(url + "/x", b"{}", H)
        with pytest.raises(PayloadError):
            await a.read()
        a.release()
        server.close()

    asyncio.run(go())


def test_an_unread_answer_closes_its_connection_and_an_idle_one_expires():
    async def go():
        server, url, seen = await serve([ok(b"1" * 10), ok(b"2"), ok(b"3")])
        client = EngineClient(2.0, 0.2)
        a = await client.post(url + "/x", b"{}", H)
        a.release()  # released before the body was read: not reused
        b = await client.post(url + "/x", b"{}", H)
        assert await b.read() == b"1" * 10
        b.release()
        await asyncio.sleep(0.3)  # idle past keepalive_s: a new connection
        c = await client.post(url + "/x", b"{}", H)
        assert await c.read() == b"1" * 10
        c.release()
        client.close()
        server.close()
        return [k for k, _, _ in seen]

    assert asyncio.run(go()) == [0, 1, 2]
