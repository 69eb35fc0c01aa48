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
    """Incremental parser of an OpenAI-style SSE stream (``data: {...}\\n\\n``, ``data: [DONE]``)."""

    def __init__(self) -> None:
        self._buf = b""
        self.usage = SSEUsage()

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
