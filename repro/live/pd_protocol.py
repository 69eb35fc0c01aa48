"""vLLM's two-step prefill/decode protocol (NixlConnector), as the reference P/D proxy speaks it.

Shared by the router proxy, the correctness gates and the calibration benchmark, so the exact
bodies are written once:

- prefill call: the client's body with ``stream: false``, ``max_tokens: 1`` (and
  ``max_completion_tokens: 1`` if present), ``stream_options`` and ``min_tokens`` removed, plus
  ``kv_transfer_params = {do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null,
  remote_block_ids: null, remote_host: null, remote_port: null}``;
- the prefill answer carries a top-level ``kv_transfer_params`` (``null`` when the first token
  ended the request: the decode engine then prefills locally);
- decode call: the client's own body plus that dict verbatim, with the same ``X-Request-Id``.

A proxy that must see when the decode starts (its first token) asks the decode engine for a stream
even for a client that did not (`streamed_body`, only where `rebuildable_from_stream` says the
non-streamed answer can be rebuilt exactly) and answers that client with the non-streamed JSON
rebuilt from the stream (`StreamAnswer`, fed by `SSEParser`).

`loads` / `dumps` are the JSON codec of the hot path (orjson, ~5-10x faster than the standard
library; whatever orjson refuses, e.g. integers beyond 64 bits or NaN literals, goes through the
standard library, so every document the standard library accepts is accepted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

REQUEST_ID_HEADER = "X-Request-Id"


def loads(data: bytes | str) -> Any:
    """Parse a JSON document (orjson; the standard library for what orjson refuses); ValueError if
    it is not JSON (RecursionError if nested too deeply for the standard library)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(obj: Any) -> bytes:
    """Serialize to compact JSON bytes (orjson; the standard library for what orjson refuses)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":")).encode()


def prefill_body(body: dict[str, Any]) -> dict[str, Any]:
    """The body sent to the prefill engine for a client body: a new top-level dict (the client's
    body is not modified; nested values are shared with it, and nothing here changes them)."""
    out = dict(body)
    out["stream"] = False
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    out.pop("stream_options", None)
    out.pop("min_tokens", None)
    out["kv_transfer_params"] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    return out


def decode_body(body: dict[str, Any], kv_transfer_params: dict[str, Any] | None) -> dict[str, Any]:
    """The body sent to the decode engine: the client's body plus the prefill's params verbatim."""
    out = dict(body)
    if kv_transfer_params is not None:
        out["kv_transfer_params"] = kv_transfer_params
    else:
        out.pop("kv_transfer_params", None)
    return out


def headers_for(request_id: str, api_key: str | None = None) -> dict[str, str]:
    """Engine-call headers: ``X-Request-Id`` (shared by both steps), and the bearer token if any."""
    h = {REQUEST_ID_HEADER: request_id}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    return h


@dataclass
class SSEUsage:
    """What a streamed answer carried: text, chunks with content, and the final usage if any."""

    text: str = ""
    content_chunks: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    errors: list[str] = field(default_factory=list)
    done: bool = False


class SSEParser:
    """Incremental parser of an OpenAI-style SSE stream (``data: {...}\\n\\n``, ``data: [DONE]``).

    ``answer``, if given, is fed every parsed event that is not an error (`StreamAnswer.add`)."""

    def __init__(self, answer: StreamAnswer | None = None) -> None:
        self._buf = b""
        self.usage = SSEUsage()
        self.answer = answer

    def feed(self, chunk: bytes) -> int:
        """Feed raw bytes; returns how many events with generated content were completed."""
        self._buf += chunk
        produced = 0
        while b"\n\n" in self._buf:
            event, self._buf = self._buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    self.usage.done = True
                    continue
                try:
                    obj = loads(data)
                except ValueError:
                    self.usage.errors.append("malformed SSE event")
                    continue
                if "error" in obj and not obj.get("choices"):
                    err = obj["error"]
                    self.usage.errors.append(err.get("message", str(err)) if isinstance(err, dict) else str(err))
                    continue
                if self.answer is not None:
                    self.answer.add(obj)
                if obj.get("usage"):
                    self.usage.completion_tokens = obj["usage"].get("completion_tokens")
                    self.usage.prompt_tokens = obj["usage"].get("prompt_tokens")
                for choice in obj.get("choices") or []:
                    piece = choice.get("text")
                    if piece is None:
                        piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        self.usage.text += piece
                        self.usage.content_chunks += 1
                        produced += 1
                    if choice.get("finish_reason"):
                        self.usage.finish_reason = choice["finish_reason"]
        return produced


def rebuildable_from_stream(path: str, body: dict[str, Any]) -> bool:
    """True when the non-streamed answer to ``body`` can be rebuilt exactly from its stream
    (`StreamAnswer`): one prompt and one choice (``n`` and ``best_of`` absent or 1, no beam search),
    no ``logprobs`` / ``top_logprobs`` / ``prompt_logprobs``, no ``echo``, no ``return_token_ids``,
    no ``stream_options`` (the engine refuses them without ``stream``: that 400 must stay), and for
    chat no ``tools`` / ``tool_choice`` / ``functions`` / ``function_call`` / ``response_format``."""
    get = body.get
    if get("n") not in (None, 1) or get("best_of") not in (None, 1) or get("use_beam_search"):
        return False
    if not (get("logprobs") is None or get("logprobs") is False) or get("top_logprobs") not in (None, 0):
        return False
    if get("prompt_logprobs") is not None or get("echo") or get("return_token_ids") \
            or get("stream_options") is not None:
        return False
    if path.endswith("/chat/completions"):
        return all(get(k) is None for k in ("tools", "tool_choice", "functions", "function_call", "response_format"))
    prompt = get("prompt")
    # several prompts (a list of strings or of token-id lists) get one choice each
    return not (isinstance(prompt, list) and len(prompt) > 1 and not all(type(t) is int for t in prompt))


def streamed_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking for a stream that ends with the usage event: a new top-level dict with
    ``stream: true`` and ``stream_options`` = the client's (if any) plus ``include_usage: true``."""
    out = dict(body)
    out["stream"] = True
    out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return out


class StreamAnswer:
    """The non-streamed answer of one request, rebuilt from its SSE stream's events (`add`, e.g.
    through ``SSEParser(answer=...)``), in vLLM 0.12's non-streamed shape (`payload`).

    Exact for a request `rebuildable_from_stream` accepts (one choice, no logprobs, no tools):
    ``id``, ``created`` and ``model`` are the stream's (its first event's); the choice's text (chat:
    ``message.content``; ``message.reasoning`` and ``reasoning_content``, which vLLM 0.12 fills alike,
    from the deltas' reasoning when a reasoning parser sent any), ``finish_reason`` and
    ``stop_reason`` are the stream's; ``usage`` is the final usage event's (with
    ``prompt_tokens_details``, null unless the stream had it; the whole ``usage`` is null if the
    stream had none). The fields a non-streamed answer without those options carries as null
    (``logprobs``, ``token_ids``, ``prompt_logprobs``, ``prompt_token_ids``, ``kv_transfer_params``,
    ``service_tier``, ``system_fingerprint``) are null; chat's ``tool_calls`` is ``[]``."""

    __slots__ = ("chat", "head", "pieces", "reasoning", "finish_reason", "stop_reason", "usage")

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.head: dict[str, Any] | None = None  # the first event
        self.pieces: list[str] = []  # the generated text
        self.reasoning: list[str] = []  # chat: the reasoning text, if any
        self.finish_reason: str | None = None
        self.stop_reason: Any = None  # vLLM: the stop string or token id that ended the output
        self.usage: dict[str, Any] | None = None

    def add(self, event: dict[str, Any]) -> None:
        """Take in one parsed stream event (a chunk, or the final usage event)."""
        if self.head is None:
            self.head = event
        if event.get("usage"):
            self.usage = event["usage"]
        for choice in event.get("choices") or ():
            if self.chat:
                delta = choice.get("delta") or {}
                piece = delta.get("content")
                thought = delta.get("reasoning") or delta.get("reasoning_content")
                if thought:
                    self.reasoning.append(thought)
            else:
                piece = choice.get("text")
            if piece:
                self.pieces.append(piece)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
            if choice.get("stop_reason") is not None:
                self.stop_reason = choice["stop_reason"]

    def payload(self) -> dict[str, Any]:
        """The answer as a non-streamed request would have got it (a JSON-ready dict)."""
        head = self.head or {}
        text = "".join(self.pieces)
        usage = None
        if self.usage is not None:
            usage = dict(self.usage)
            usage.setdefault("prompt_tokens_details", None)
        if self.chat:
            reasoning = "".join(self.reasoning) or None
            return {
                "id": head.get("id"), "object": "chat.completion", "created": head.get("created"),
                "model": head.get("model"),
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                                "audio": None, "function_call": None, "tool_calls": [], "reasoning": reasoning,
                                "reasoning_content": reasoning},
                    "logprobs": None, "finish_reason": self.finish_reason, "stop_reason": self.stop_reason,
                    "token_ids": None,
                }],
                "service_tier": None, "system_fingerprint": None, "usage": usage,
                "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None,
            }
        return {
            "id": head.get("id"), "object": "text_completion", "created": head.get("created"),
            "model": head.get("model"),
            "choices": [{
                "index": 0, "text": text, "logprobs": None, "finish_reason": self.finish_reason,
                "stop_reason": self.stop_reason, "token_ids": None, "prompt_logprobs": None,
                "prompt_token_ids": None,
            }],
            "service_tier": None, "system_fingerprint": None, "usage": usage, "kv_transfer_params": None,
        }


async def pd_request(
    client: httpx.AsyncClient,
    prefill_url: str,
    decode_url: str,
    path: str,
    body: dict[str, Any],
    request_id: str,
    api_key: str | None = None,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Run one non-streaming request through the two-step P/D flow; returns the decode answer JSON.

    Raises httpx.HTTPStatusError / httpx.TransportError on failure.
    """
    headers = headers_for(request_id, api_key)
    r = await client.post(prefill_url.rstrip("/") + path, json=prefill_body(body), headers=headers, timeout=timeout_s)
    r.raise_for_status()
    kv = r.json().get("kv_transfer_params")
    plain = dict(body)
    plain["stream"] = False
    r2 = await client.post(decode_url.rstrip("/") + path, json=decode_body(plain, kv), headers=headers,
                           timeout=timeout_s)
    r2.raise_for_status()
    return r2.json()


def prompt_of(path: str, body: dict[str, Any]) -> str:
    """The prompt text a router reads from a completions or chat body (for length prediction)."""
    if path.endswith("/chat/completions"):
        parts = []
        for m in body.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
        return "\n".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], str):
            return "\n".join(prompt)
        return ""
    return prompt if isinstance(prompt, str) else ""
