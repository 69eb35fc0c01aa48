"""One placed request's trip through its two engines, and the end of its journal row.

`Exchange.run` runs vLLM's two-step P/D flow (`repro.live.pd_protocol`) for a request the policy
placed on a (prefill, decode) pair:

1. the prefill call; a 4xx answer is the client's fault and goes back verbatim, any other failure
   is a 502. A connection that breaks before the answer starts (a keep-alive connection the engine
   had just closed: "Server disconnected", "Can not write request body") is retried once on a new one;
2. the decode call with the prefill's ``kv_transfer_params`` and the same ``X-Request-Id``. A
   streamed client's SSE stream is relayed chunk by chunk (`RelayResponse`); a stream cut midway
   ends with an SSE error event. A client that did not ask to stream gets one JSON answer: where
   `rebuildable_from_stream` allows (one choice, no logprobs, no echo, no tools), the decode engine
   is still asked for a stream (`streamed_body`: ``stream: true``, ``stream_options.include_usage``)
   and the client gets the non-streamed answer rebuilt from it (`StreamAnswer`: vLLM's non-streamed
   shape, the same keys and values), and a 502 JSON error if that stream is cut; otherwise the
   decode engine's non-streamed answer goes back byte for byte. An error status from the decode
   engine is read whole and passed on (a 5xx as a 502).

When the decode starts (the ledger's decode countdown). The router's ledger counts a request's
decode work down only from when its decode starts (`Router.decode_started`; the row's
``decode_started_s``). A deployed proxy sees that moment through the decode engine's first streamed
token: the first SSE event with content (`SSEParser.feed` > 0) that reaches the proxy, which is why
the decode engine streams even to a non-streaming client. For a streamed client that is also the
row's ``first_token_s``; a non-streamed client's ``first_token_s`` stays the time its whole answer
reached it. A stream that ends without any content, and a non-streamed decode answer (a request
whose answer cannot be rebuilt from a stream), start the decode when the answer ends, just before
``router.finish``: the best a proxy can see then. A request whose decode never produced a token
(cut, failed) has ``decode_started_s`` null.

No step has a time-out: a busy engine queues the request as long as it takes (overload is
queueing, not failure). Each step ends early only when its engine dies (`Proxy.kill`: refused
connections, or ``/metrics`` silent past the health window): then the request fails with a 502
whose reason names the engine and the cause.

Exactly once per request, whatever happens (engine failure, client disconnect, cancellation, a
bug), the ledger is settled (``router.finish``), the row is journaled (`Proxy.record`) and the
in-flight count drops. Row times are `Proxy.now` (physics seconds); token counts are the
engine's ``usage.completion_tokens``, else the streamed text counted with the tokenizer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from repro.journal_schema import tpot
from repro.live.pd_protocol import (
    SSEParser,
    StreamAnswer,
    decode_body,
    dumps,
    headers_for,
    loads,
    prefill_body,
    rebuildable_from_stream,
    streamed_body,
)
from repro.live.proxy.core import EngineDead
from repro.live.proxy.engine_client import Answer, ConnectTimeout, Disconnected, EngineError, PayloadError
from repro.workload.tokenizer import DEFAULT_TOKENIZER

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from repro.live.proxy.config import Endpoint
    from repro.live.proxy.core import Proxy
    from repro.routing.policies.base import Placement


def error_response(status: int, message: str, kind: str = "BadRequestError",
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """An OpenAI-style error answer: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status_code=status,
        headers=headers,
    )


def retriable(exc: BaseException) -> bool:
    """True for a connection that broke before any answer came (the engine closed an idle
    keep-alive connection as we reused it, or a connect that timed out): safe to send again."""
    return isinstance(exc, (Disconnected, ConnectTimeout))


def describe(exc: BaseException) -> str:
    """``"ExceptionType: message"`` for a journal reason (a bare timeout reads "timed out")."""
    text = str(exc) or ("timed out" if isinstance(exc, TimeoutError) else "")
    return f"{type(exc).__name__}: {text}"


class RelayResponse(StreamingResponse):
    """A streamed answer whose row is journaled even if its body is never iterated (a client
    that disconnects before the first byte): ``on_end`` runs when the response ends, however.

    Relayed without Starlette's per-response task group (anyio: ~15% of the proxy's CPU per
    streamed request): the chunks are sent from the request's own task, and one plain watcher task
    waits for the client's ``http.disconnect`` and then cancels the relay (the body iterator sees
    the cancellation, as under Starlette); a client that went away ends the response quietly."""

    def __init__(self, content: AsyncIterator[bytes], on_end: Callable[[], None], **kw: Any) -> None:
        super().__init__(content, **kw)
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        relay = asyncio.current_task()
        assert relay is not None
        state = {"streaming": True, "gone": False}

        async def watch() -> None:  # the request body was read whole: next comes the disconnect
            while (await receive())["type"] != "http.disconnect":
                pass
            if state["streaming"]:  # after the last chunk, a disconnect is the normal end
                state["gone"] = True
                relay.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            state["streaming"] = False
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not state["gone"] or relay.uncancel() > 0:  # cancelled from elsewhere too: propagate
                raise
        finally:
            state["streaming"] = False
            watcher.cancel()
            self._on_end()


class Exchange:
    """The P/D exchange of one placed request (see the module docstring).

    ``row`` is the request's journal row so far (id, arrival, token counts, prediction); the
    exchange adds the placement, the proxy-side timestamps of each step and the outcome.
    """

    def __init__(self, proxy: Proxy, path: str, body: dict[str, Any], row: dict[str, Any],
                 placement: Placement) -> None:
        self.proxy = proxy
        self.cfg = proxy.cfg
        self.path = path
        self.body = body
        self.row = row
        self.rid: str = row["request_id"]
        self.pe = proxy.prefill[placement.prefill]
        self.de = proxy.decode[placement.decode]
        row.update(prefill_instance=self.pe.name, decode_instance=self.de.name)
        self.out_headers = {"X-Request-Id": self.rid, "X-Prefill-Instance": self.pe.name,
                            "X-Decode-Instance": self.de.name}
        self.engine_headers = headers_for(self.rid, self.cfg.api_key)
        self.engine_headers["Content-Type"] = "application/json"  # the bodies go out as `dumps` bytes
        self.upstream: Answer | None = None  # the decode answer, once it started
        self.parser = SSEParser()  # of the decode stream (relayed, or rebuilt into one answer)
        # stream from the decode engine (to see its first token) even when the client did not ask to
        self.streamed = bool(body.get("stream")) or rebuildable_from_stream(path, body)
        self.first_token_s: float | None = None  # physics s: the first streamed chunk with content
        self.outcome: str | None = None  # of the stream: None until the relay journaled the row
        self.died: str | None = None  # the decode engine's death, when it cut the relayed stream

    async def run(self) -> Response:
        """Serve the request; the row is journaled exactly once (see the module docstring)."""
        assert self.proxy.client is not None
        self.proxy.in_flight += 1
        try:
            return await self._serve()
        except BaseException as exc:  # never lose a request: journal it, settle the ledger
            if self.row.get("status") is None:
                if isinstance(exc, asyncio.CancelledError):
                    self.fail("cancelled (client went away or proxy stopping)", 499)
                else:
                    return self.fail(f"proxy error: {describe(exc)}", 500)
            raise

    async def _serve(self) -> Response:
        kv = await self._prefill()
        if isinstance(kv, Response):
            return kv
        body = self.body
        if self.streamed and not body.get("stream"):
            body = streamed_body(body)
            self.parser.answer = StreamAnswer(self.path.endswith("/chat/completions"))
        return await self._decode(decode_body(body, kv))

    # ---- 1. prefill -----------------------------------------------------------------------------
    async def _prefill(self) -> dict[str, Any] | None | Response:
        """The prefill's ``kv_transfer_params`` (None: the decode engine prefills locally), or the
        answer to the client when the request ends here."""
        proxy, pe, row = self.proxy, self.pe, self.row
        assert proxy.client is not None
        row["prefill_start_s"] = proxy.now()
        engines, url, body, headers = proxy.engines, pe.url.rstrip("/") + self.path, \
            dumps(prefill_body(self.body)), self.engine_headers

        async def call() -> tuple[int, bytes]:
            r = await engines.post(url, body, headers)
            try:
                return r.status, await r.read()
            finally:
                r.release()

        for attempt in (1, 2):
            try:
                status, content = await self.on(pe, call())
                break
            except EngineDead as exc:
                return self.fail(f"prefill {exc}", 502)
            except (EngineError, TimeoutError) as exc:
                if proxy.refused(pe, exc) or attempt == 2 or not retriable(exc):
                    return self.fail(f"prefill {pe.name}: {describe(exc)}", 502)
        if status != 200:
            detail = content[:500].decode("utf-8", "replace")
            if 400 <= status < 500:  # the client's request is bad: pass vLLM's answer through
                now = proxy.now()
                proxy.router.finish(self.rid, now)
                row.update(status="failed", reason=f"prefill {pe.name}: HTTP {status}: {detail}", finish_s=now,
                           generated_tokens=0)
                proxy.record(row)
                proxy.in_flight -= 1
                return Response(content, status_code=status, media_type="application/json", headers=self.out_headers)
            return self.fail(f"prefill {pe.name}: HTTP {status}: {detail}", 502)
        try:
            kv = loads(content).get("kv_transfer_params")
        except (ValueError, AttributeError):
            return self.fail(f"prefill {pe.name}: answer is not a JSON object", 502)
        now = proxy.now()
        proxy.router.prefill_done(self.rid, now)
        row["prefill_end_s"] = now
        return kv

    async def on(self, e: Endpoint, aw: Any) -> Any:
        """Await ``aw`` (a coroutine calling engine ``e``) unless ``e`` dies
        first: then cancel it and raise `EngineDead` with the reason.

        No task per call: the engine's death cancels the task awaiting here (as `asyncio.timeout`
        does); a cancellation from outside (the client went away) propagates as itself."""
        death = self.proxy.death_of(e)
        if death.done():
            aw.close()
            raise EngineDead(death.result())
        task = asyncio.current_task()
        assert task is not None
        state = {"waiting": True, "fired": False}

        def cut(_: asyncio.Future[str]) -> None:  # may run after the await ended: then a no-op
            if state["waiting"]:
                state["fired"] = True
                task.cancel()

        death.add_done_callback(cut)
        try:
            return await aw
        except asyncio.CancelledError:
            if state["fired"] and task.uncancel() == 0:
                raise EngineDead(death.result()) from None
            raise
        finally:
            state["waiting"] = False
            death.remove_done_callback(cut)

    # ---- 2. decode ------------------------------------------------------------------------------
    async def _decode(self, dbody: dict[str, Any]) -> Response:
        proxy, de = self.proxy, self.de
        assert proxy.client is not None
        self.row["decode_start_s"] = proxy.now()
        try:
            upstream = await self.on(de, proxy.engines.post(de.url.rstrip("/") + self.path, dumps(dbody),
                                                            self.engine_headers))
        except EngineDead as exc:
            return self.fail(f"decode {exc}", 502)
        except (EngineError, TimeoutError) as exc:
            proxy.refused(de, exc)
            return self.fail(f"decode {de.name}: {describe(exc)}", 502)
        self.upstream = upstream
        if upstream.status != 200 or not self.streamed:
            return await self._whole_answer(upstream)
        if not self.body.get("stream"):
            return await self._rebuilt_answer(upstream)
        return RelayResponse(self._relay(upstream), self._abandon, status_code=200, media_type="text/event-stream",
                             headers=self.out_headers)

    async def _whole_answer(self, upstream: Answer) -> Response:
        """A non-streamed decode answer (or an error answer): read it whole and pass it on."""
        proxy, de = self.proxy, self.de
        try:
            content = await self.on(de, upstream.read())
        except EngineDead as exc:
            return self.fail(f"decode {exc}", 502)
        except (EngineError, TimeoutError) as exc:
            return self.fail(f"decode {de.name}: {describe(exc)}", 502)
        finally:
            upstream.release()
        if upstream.status != 200:
            detail = content[:500].decode("utf-8", "replace")
            return self.fail(f"decode {de.name}: HTTP {upstream.status}: {detail}",
                             502 if upstream.status >= 500 else upstream.status)
        now = proxy.now()
        try:
            usage = loads(content).get("usage") or {}
        except (ValueError, AttributeError):
            usage = {}
        self.decode_started(now)  # a non-streamed decode: the best the proxy sees
        self.finish_ok(now, now, int(usage.get("completion_tokens") or 0))
        return Response(content, status_code=200, media_type="application/json", headers=self.out_headers)

    async def _rebuilt_answer(self, upstream: Answer) -> Response:
        """The decode stream of a client that did not ask to stream, read to its end (the decode
        starts at its first content event), answered as one non-streamed JSON (`StreamAnswer`)."""
        proxy, de, parser = self.proxy, self.de, self.parser
        answer = parser.answer
        assert answer is not None

        async def read() -> None:
            async for chunk in upstream.iter_any():
                if parser.feed(chunk) and "decode_started_s" not in self.row:
                    self.decode_started(proxy.now())

        reason = None
        try:
            await self.on(de, read())
            if not parser.usage.done:
                raise PayloadError("stream ended without [DONE]")
        except EngineDead as exc:
            reason = f"decode {exc}: stream cut"
        except (EngineError, TimeoutError) as exc:
            reason = f"decode {de.name}: stream cut: {describe(exc)}"
        finally:
            upstream.release()
        if reason is None and parser.usage.errors:  # e.g. vLLM's "Request was aborted" event
            reason = f"decode {de.name}: stream error: {parser.usage.errors[0][:500]}"
        if reason is not None:
            self.finish_failed(None, reason)
            return error_response(502, reason, "BadGatewayError", self.out_headers)
        content = dumps(answer.payload())
        now = proxy.now()
        tokens = parser.usage.completion_tokens
        if tokens is None:
            tokens = DEFAULT_TOKENIZER.count(parser.usage.text)
        if "decode_started_s" not in self.row:  # no content at all: the decode started by its end
            self.decode_started(now)
        self.finish_ok(now, now, tokens)
        return Response(content, status_code=200, media_type="application/json", headers=self.out_headers)

    async def _relay(self, upstream: Answer) -> AsyncIterator[bytes]:
        """The decode stream, chunk by chunk; journals the row when the stream ends or is cut."""
        proxy, parser = self.proxy, self.parser
        first = None
        death = proxy.death_of(self.de)

        def cut(fut: asyncio.Future[str]) -> None:  # the decode engine died: end the stream now
            self.died = fut.result()
            upstream.close()

        death.add_done_callback(cut)
        try:
            async for chunk in upstream.iter_any():
                if parser.feed(chunk) and first is None:
                    first = self.first_token_s = proxy.now()
                    self.decode_started(first)
                yield chunk
            if not parser.usage.done:
                raise PayloadError("stream ended without [DONE]")
            now = proxy.now()
            tokens = parser.usage.completion_tokens
            if tokens is None:
                tokens = DEFAULT_TOKENIZER.count(parser.usage.text)
            self.outcome = "ok"
            if first is None:  # no content at all: the decode started by its end
                self.decode_started(now)
            self.finish_ok(first if first is not None else now, now, tokens)
        except (EngineError, TimeoutError) as exc:
            reason = (f"decode {self.died}: stream cut" if self.died
                      else f"decode {self.de.name}: stream cut: {describe(exc)}")
            self.outcome = reason
            self.finish_failed(first, reason)
            err = {"error": {"message": reason, "type": "BadGatewayError", "code": 502}}
            yield b"data: " + dumps(err) + b"\n\n"
        finally:
            death.remove_done_callback(cut)
            upstream.release()
            self._abandon()  # the client went away (generator closed or cancelled)

    def _abandon(self) -> None:
        """The response ended without the relay journaling the row: the client went away."""
        if self.outcome is None:
            self.outcome = "client disconnected"
            assert self.upstream is not None
            self.upstream.release()
            self.finish_failed(self.first_token_s, "client disconnected")

    # ---- the row's times ----------------------------------------------------------------------------
    def decode_started(self, now: float) -> None:
        """The decode began at ``now`` (physics s): the ledger's countdown of its decode work starts."""
        self.proxy.router.decode_started(self.rid, now)
        self.row["decode_started_s"] = now

    # ---- the end of the row -----------------------------------------------------------------------
    def fail(self, reason: str, status: int, message: str | None = None) -> Response:
        """Journal the request as failed with ``reason``; the error answer (``status``) for the client."""
        proxy = self.proxy
        now = proxy.now()
        proxy.router.finish(self.rid, now)
        self.row.update(status="failed", reason=reason, finish_s=now,
                        generated_tokens=self.row.get("generated_tokens", 0))
        proxy.record(self.row)
        proxy.in_flight -= 1
        return error_response(status, message or reason, "BadGatewayError" if status >= 500 else "BadRequestError",
                              self.out_headers)

    def finish_ok(self, first: float, now: float, tokens: int) -> None:
        """Journal a served request: first token at ``first``, last at ``now`` (physics s), ``tokens`` generated."""
        proxy, row = self.proxy, self.row
        proxy.router.finish(self.rid, now)
        arrival = row["arrival_s"]
        ttft = first - arrival
        e2e = now - arrival
        row.update(
            status="ok", first_token_s=first, finish_s=now, ttft_s=ttft, e2e_s=e2e,
            tpot_s=tpot(e2e, ttft, tokens), generated_tokens=tokens,
        )
        proxy.record(row)
        proxy.in_flight -= 1

    def finish_failed(self, first: float | None, reason: str) -> None:
        """Journal a stream that did not complete, with the tokens it carried so far."""
        proxy, usage = self.proxy, self.parser.usage
        now = proxy.now()
        proxy.router.finish(self.rid, now)
        tokens = usage.completion_tokens or DEFAULT_TOKENIZER.count(usage.text)
        self.row.update(status="failed", reason=reason, first_token_s=first, finish_s=now, generated_tokens=tokens)
        proxy.record(self.row)
        proxy.in_flight -= 1
