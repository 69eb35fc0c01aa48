"""Fuzzing at volume: >= 10,000 mostly-invalid HTTP requests at the router proxy and as many at an
emulated engine, then a check of the proxy's journal against what the fuzzer was answered.

Usage: python benchmarks/fuzz_volume.py [--requests 10000] [--concurrency 32] [--seed 0] [--time-scale 50]
                                        [--deadline 30] [--skip KIND,...] [--internal] [--out DIR]

One 1p1d emulated cluster (``launch("1p1d", "emulated", time_scale=50, eos_mean_tokens=8)``) and one
proxy (``proxy_process``; bearer token on, journal on, constant predictor), all on 127.0.0.1. The
same seeded list of cases goes to each target in turn (the proxy, then the decode engine directly),
``--concurrency`` requests in flight (aiohttp). The cases, by kind (share of the requests):

- ``fuzz`` (55%): hypothesis bodies and headers of ``tests/test_fuzz_http.py`` (``body_strategy``,
  ``headers``) on the two completion routes, drawn with ``@given`` under ``--seed``; lengths
  clamped so nothing generates more than 8 tokens (the correct bearer token added in 80% of them);
- ``valid`` (14%): valid completion and chat bodies (max_tokens 1..8, streamed or not, usage or not);
- ``headers`` (10%): valid bodies with odd headers: long ids (to 7,000 chars), two ``X-Request-Id``
  in one request, non-ASCII and odd-character ids, garbage ``X-SLO-Class``, wrong, missing or
  doubled ``Authorization``, odd ``Content-Type`` / ``Content-Encoding``, 100 junk headers;
- ``broken`` (6%): truncated JSON, invalid UTF-8, NaN/Infinity, empty body, scalars, trailing
  garbage, duplicate keys, 5,000-digit and 1e400 numbers, 200k-character prompts;
- ``deep`` (1%): JSON nested 500 to 100,000 levels deep;
- ``routes`` (7.5%): unknown paths (random, long, encoded, case-changed), wrong and odd methods, the
  read-only GET endpoints, query strings;
- ``tokenizer`` (2%): vLLM's ``/tokenize`` and ``/detokenize`` with fuzzed bodies (404 on the proxy);
- ``pairs`` (3%): two valid streamed requests sent at once with the same ``X-Request-Id``;
- ``abort`` (1%): valid streamed requests the client abandons after the first chunk;
- ``big`` (0.5%): bodies over the proxy's 4 MiB limit, prompts over its 1M-character limit
  (1 MiB prompts for the engine).

3% of the POST bodies go out chunked. The engine's internal KV side channel
(``/_emulator/nixl/read``) is fuzzed only with ``--internal``; the dev-mode routes that change the
engine (``/_emulator/faults``, ``/reset_prefix_cache``) never.

Counted per target: requests sent, the status-code histogram, 5xx, hangs (no complete answer within
``--deadline`` wall seconds), no-answers (the connection broke) and bad 200s (a stream without
``[DONE]`` or with an error event, a JSON answer that does not parse). Then the proxy's accounting:
every answer that carries ``X-Request-Id`` came from a request that passed admission (401/400/409/413
refusals carry none) and must have exactly one journal row, with a matching status (200 -> ok,
429 -> rejected, anything else -> failed; a request the client abandoned may be either); journal ids
are unique except for the ``pairs`` ids whose two requests did not overlap; the proxy's in-flight
count returns to 0 and both engines drain. Exit 1 on any 5xx, hang, no-answer, bad 200 or accounting
mismatch; the failures are printed grouped, one request and answer per group, and a request that got
no answer is sent once more on a fresh connection to tell a broken connection from a broken request.
``--out DIR`` keeps the proxy's journal and log and every failure as JSONL.

Measured here (2 CPU cores; seed 0, time scale 50; engines in one shared process). Its first run
(at 68b1392) FAILED with 86 (proxy) and 85 (emulator) 5xx and 122 no-answers: JSON nested >= ~1,000
levels made ``json.loads`` raise RecursionError, which neither the proxy's ``admit`` nor the engine's
body parsers caught (plain-text 500); a ``prompt`` nested ~500 levels passed the proxy's validation
and overflowed ``copy.deepcopy`` in ``pd_protocol.prefill_body``; the engine's ``/tokenize`` answered
500 to ``{"messages": [5]}`` or a non-string content, ``/detokenize`` to ``{"tokens": ["a", null]}``,
``/_emulator/nixl/read`` to a JSON body that is not an object; every no-answer was a keep-alive
connection uvicorn closed after such a 500. Each is now a 400 (regression cases in
``tests/test_fuzz_http.py``). After the fixes, ``python benchmarks/fuzz_volume.py`` (62 s) PASSES::

    target        sent       2xx       3xx       4xx       5xx     hangs     noans    bad200    wall_s
    proxy        10000      3556        11      6433         0         0         0         0      17.7
    emulator     10000      4469        15      5516         0         0         0         0      14.1
    proxy accounting: journal rows 3921, unique ids 3921 (duplicates: 0 from same-id pairs that did not
    overlap, 0 other), routed-and-answered 3921, missing 0, extra 0, status mismatches 0 -> balanced
    after the run: proxy healthy, in_flight 0; engines healthy and drained
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import string
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from multidict import CIMultiDict
from yarl import URL

from repro.cluster.launchers import launch
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import free_port, proxy_process

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests/ is a package: reuse its fuzz strategies
    sys.path.insert(0, str(ROOT))
from tests.test_fuzz_http import MODEL, body_strategy  # noqa: E402
from tests.test_fuzz_http import headers as header_strategy  # noqa: E402

API_KEY = "fuzz-volume-key"
AUTH = ("Authorization", f"Bearer {API_KEY}")
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
MAX_GEN = 8  # no case may ask an engine for more tokens than this
SHARES = {"fuzz": 0.55, "valid": 0.14, "headers": 0.10, "broken": 0.06, "deep": 0.01, "routes": 0.075,
          "tokenizer": 0.02, "pairs": 0.03, "abort": 0.01, "big": 0.005}
INTERNAL_SHARE = 0.02  # --internal: share of the engine's requests that go to its KV side channel
FORBIDDEN = ("/_emulator/faults", "/reset_prefix_cache", "/_emulator/nixl")  # never hit by chance
WORDS = ("the route request prefill decode cache token engine queue policy latency budget tight loose "
         "model prompt stream usage hello world calibrate serve answer").split()


# ---- cases ----------------------------------------------------------------------------------------
@dataclass
class Case:
    """One request (or, for ``pairs``, one of two sent at once)."""

    index: int
    kind: str
    variant: str
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes | None = None
    chunked: bool = False
    abort: bool = False  # read the first chunk, then close the connection
    group: int | None = None  # cases of one group go out together
    skip_auto: tuple[str, ...] = ()  # aiohttp's automatic headers to leave out

    def describe(self, limit: int = 300) -> str:
        body = self.body or b""
        shown = body if len(body) <= limit else body[: limit // 2] + b" ... " + body[-limit // 4:]
        hdrs = [(k, v if len(v) <= 120 else f"{v[:60]}...({len(v)} chars)") for k, v in self.headers]
        return (f"case {self.index} [{self.kind}/{self.variant}] {self.method} {self.path[:200]} "
                f"headers={hdrs} body({len(body)} bytes{', chunked' if self.chunked else ''})={shown!r}")


@dataclass
class Result:
    case: Case
    status: int | None  # None: no answer (see `error`)
    error: str | None = None  # "hang" or "no answer: ..." or "bad 200: ..."
    body: bytes = b""
    rid: str | None = None  # the answer's X-Request-Id header (latin-1, as the server wrote it)
    wall_s: float = 0.0


def hypothesis_pool(n: int, seed: int) -> list[tuple[Any, dict[str, str], bool]]:
    """``n`` (body, headers, chat) examples of the test module's strategies, half per route."""
    pool: list[tuple[Any, dict[str, str], bool]] = []

    def collect(chat: bool) -> None:
        @hypothesis_seed(seed * 2 + int(chat))
        @settings(max_examples=math.ceil(n / 2), deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(body=body_strategy(chat), hdrs=header_strategy)
        def one(body: Any, hdrs: dict[str, str]) -> None:
            pool.append((body, hdrs, chat))

        one()

    collect(False)
    collect(True)
    return pool


def clamp(body: Any) -> Any:
    """Keep a fuzzed body cheap: at most `MAX_GEN` tokens asked for (as ``tests/test_fuzz_http.py``)."""
    if not isinstance(body, dict):
        return body
    has_max = False
    for key in ("max_tokens", "max_completion_tokens", "min_tokens"):
        v = body.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            if MAX_GEN < v < 10**6:
                body[key] = MAX_GEN
            has_max |= key != "min_tokens"
        elif isinstance(v, float) and math.isfinite(v) and v.is_integer():
            if MAX_GEN < v < 1e6:
                body[key] = float(MAX_GEN)
            has_max |= key != "min_tokens"
    if body.get("ignore_eos") and not has_max:
        body["ignore_eos"] = False  # else the engine would generate up to the context length
    return body


def to_bytes(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


class Builder:
    """Builds the seeded case list of one target (the same rng draws for both targets)."""

    def __init__(self, target: str, rng: random.Random, pool: list[tuple[Any, dict[str, str], bool]]) -> None:
        self.target = target
        self.rng = rng
        self.pool = pool
        self.next_pool = 0
        self.index = 0

    # helpers
    def rid(self, tag: str = "") -> str:
        return f"fv-{self.target[0]}{self.index}{tag}"

    def words(self, lo: int, hi: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(lo, hi)))

    def from_pool(self) -> tuple[Any, dict[str, str], bool]:
        item = self.pool[self.next_pool % len(self.pool)]
        self.next_pool += 1
        body, hdrs, chat = item
        return clamp(json.loads(json.dumps(body)) if not isinstance(body, bytes) else body), dict(hdrs), chat

    def valid_body(self, chat: bool, stream: bool | None = None, ignore_eos: bool | None = None) -> dict[str, Any]:
        rng = self.rng
        body: dict[str, Any] = {}
        if rng.random() < 0.9:
            body["model"] = MODEL
        if chat:
            msgs: list[dict[str, Any]] = []
            if rng.random() < 0.3:
                msgs.append({"role": "system", "content": self.words(1, 10)})
            content: Any = self.words(1, 40)
            if rng.random() < 0.2:
                content = [{"type": "text", "text": self.words(1, 10)} for _ in range(rng.randint(1, 3))]
            msgs.append({"role": "user", "content": content})
            body["messages"] = msgs
        else:
            r = rng.random()
            prompt: Any = self.words(1, 60)
            if r < 0.15:
                prompt = [rng.randint(0, 5000) for _ in range(rng.randint(1, 50))]
            elif r < 0.25:
                prompt = [prompt]
            body["prompt"] = prompt
            if rng.random() < 0.1:
                body["echo"] = True
        key = "max_completion_tokens" if chat and rng.random() < 0.3 else "max_tokens"
        body[key] = rng.randint(1, MAX_GEN)
        stream = rng.random() < 0.5 if stream is None else stream
        if stream or rng.random() < 0.3:
            body["stream"] = stream
        if stream and rng.random() < 0.5:
            body["stream_options"] = {"include_usage": rng.random() < 0.5}
        temp = rng.choice([0, 0.0, None, 0.7, 1.0, "absent"])
        if temp != "absent":
            body["temperature"] = temp
        if rng.random() < 0.3:
            body["seed"] = rng.randint(0, 2**31)
        body["ignore_eos"] = rng.random() < 0.5 if ignore_eos is None else ignore_eos
        if rng.random() < 0.2:
            body["min_tokens"] = rng.randint(0, body[key])
        return body

    def base_headers(self, tag: str = "") -> list[tuple[str, str]]:
        rng = self.rng
        h = [AUTH, ("Content-Type", "application/json")]
        if rng.random() < 0.8:
            h.append(("X-Request-Id", self.rid(tag)))
        if rng.random() < 0.5:
            h.append(("X-SLO-Class", rng.choice(["tight", "loose"])))
        if rng.random() < 0.2:
            h.append(("X-Workload-Family", rng.choice(["chat", "code", "rag", "fuzz"])))
        return h

    def case(self, kind: str, variant: str, method: str, path: str, headers: list[tuple[str, str]],
             body: bytes | None = None, **kw: Any) -> Case:
        chunked = body is not None and method == "POST" and self.rng.random() < 0.03 and kind != "big"
        c = Case(self.index, kind, variant, method, path, headers, body, chunked=chunked, **kw)
        return c

    # kinds
    def fuzz(self) -> list[Case]:
        body, hdrs, chat = self.from_pool()
        out: list[tuple[str, str]] = []
        for k, v in hdrs.items():
            if k == "X-Request-Id" and v:
                v = f"{v}~{self.rid()}"  # keep the odd characters, make the id unique
            if k == "Authorization" and self.rng.random() < 0.8:
                continue
            out.append((k, v))
        if not any(k == "Authorization" for k, _ in out):
            out.append(AUTH)
        variant = type(body).__name__ if not isinstance(body, dict) else "object"
        return [self.case("fuzz", variant, "POST", CHAT if chat else COMPLETIONS, out, to_bytes(body))]

    def valid(self) -> list[Case]:
        chat = self.rng.random() < 0.5
        body = self.valid_body(chat)
        variant = ("chat" if chat else "completion") + ("-stream" if body.get("stream") else "")
        return [self.case("valid", variant, "POST", CHAT if chat else COMPLETIONS, self.base_headers(),
                          to_bytes(body))]

    def odd_headers(self) -> list[Case]:
        rng = self.rng
        chat = rng.random() < 0.5
        body = self.valid_body(chat)
        h = [AUTH, ("Content-Type", "application/json")]
        rid = self.rid()
        skip: tuple[str, ...] = ()
        variant = rng.choice(["long-id", "two-ids", "odd-id", "non-ascii-id", "empty-id", "slo-garbage", "two-slo",
                              "auth-missing", "auth-wrong", "auth-doubled", "content-type", "no-content-type",
                              "content-encoding", "junk-headers", "family-odd"])
        if variant == "long-id":
            h.append(("X-Request-Id", "L" * rng.randint(200, 7000) + rid))
        elif variant == "two-ids":
            h += [("X-Request-Id", rid + "-a"), ("X-Request-Id", rid + "-b")]
        elif variant == "odd-id":
            odd = "".join(rng.choice(string.punctuation + " ") for _ in range(rng.randint(1, 30)))
            h.append(("X-Request-Id", f"{odd}{rid}{odd}"))
        elif variant == "non-ascii-id":
            h.append(("X-Request-Id", rid + rng.choice(["é", "日本", "\u00ff\u00fe", "🙂", "ß"])))
        elif variant == "empty-id":
            h.append(("X-Request-Id", ""))
        elif variant == "slo-garbage":
            h += [("X-Request-Id", rid), ("X-SLO-Class", rng.choice(
                ["TIGHT", "Loose", "", "tight,loose", "medium", "ｔｉｇｈｔ", "x" * 500, "0", "null", "tight;q=1"]))]
        elif variant == "two-slo":
            h += [("X-Request-Id", rid), ("X-SLO-Class", "tight"), ("X-SLO-Class", "loose")]
        elif variant == "auth-missing":
            h = [("Content-Type", "application/json"), ("X-Request-Id", rid)]
        elif variant == "auth-wrong":
            wrong = rng.choice([f"bearer {API_KEY}", "Bearer", f"Bearer  {API_KEY}", "Basic Zm9vOmJhcg==",
                                f"Bearer {API_KEY}x", f"Token {API_KEY}", "Bearer " + "k" * 4000])
            h = [("Authorization", wrong), ("Content-Type", "application/json"), ("X-Request-Id", rid)]
        elif variant == "auth-doubled":
            pair = [AUTH, ("Authorization", "Bearer wrong")]
            rng.shuffle(pair)
            h = [*pair, ("Content-Type", "application/json"), ("X-Request-Id", rid)]
        elif variant == "content-type":
            ctype = rng.choice(["text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded",
                                "application/json; charset=latin-1", "garbage", ""])
            h = [AUTH, ("Content-Type", ctype), ("X-Request-Id", rid)]
        elif variant == "no-content-type":
            h = [AUTH, ("X-Request-Id", rid)]
            skip = ("Content-Type",)
        elif variant == "content-encoding":
            h += [("X-Request-Id", rid), ("Content-Encoding", rng.choice(["gzip", "br", "deflate", "identity"]))]
        elif variant == "junk-headers":
            h += [("X-Request-Id", rid)] + [(f"X-Junk-{i}", "j" * rng.randint(0, 60)) for i in range(100)]
        else:  # family-odd
            h += [("X-Request-Id", rid), ("X-Workload-Family", rng.choice(["", "é" * 50, "f" * 3000, "a,b", "{}"]))]
        return [self.case("headers", variant, "POST", CHAT if chat else COMPLETIONS, h, to_bytes(body),
                          skip_auto=skip)]

    def broken(self) -> list[Case]:
        rng = self.rng
        chat = rng.random() < 0.5
        good = json.dumps(self.valid_body(chat))
        key = "messages" if chat else "prompt"
        head = good[:-1].encode()  # the valid body without its closing brace
        variant = rng.choice(["truncated", "bad-utf8", "nan", "infinity", "empty", "scalar", "trailing", "bom",
                              "dup-keys", "digits", "1e400", "negative", "zero", "long-prompt", "many-ids"])
        if variant == "truncated":
            raw = good[: rng.randint(0, len(good) - 1)].encode()
        elif variant == "bad-utf8":
            raw = rng.choice([good[:-1].encode() + b', "mo\xff\xfedel": 1}',
                              b'{"prompt": "\xc3\x28\xa0\xa1", "max_tokens": 2}',
                              b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}], "max_tokens": 2}'])
        elif variant == "nan":
            raw = head + rng.choice([b', "temperature": NaN}', b', "max_tokens": NaN}', b', "seed": NaN}'])
        elif variant == "infinity":
            raw = head + rng.choice([b', "max_tokens": Infinity}', b', "temperature": -Infinity}'])
        elif variant == "empty":
            raw = rng.choice([b"", b" ", b"\n\n", b"{}", b"{"])
        elif variant == "scalar":
            raw = rng.choice([b"null", b"[]", b'"prompt"', b"123", b"true", b"[{}]", b"-0", b"1e999"])
        elif variant == "trailing":
            raw = good.encode() + rng.choice([b"}}}", b" garbage", b"\x00", b", {}", b"\n{\"a\":1}"])
        elif variant == "bom":
            raw = "\ufeff".encode() + good.encode()
        elif variant == "dup-keys":
            raw = head + f', "{key}": {rng.choice(["5", "null", "[]", "{}"])}}}'.encode()
        elif variant == "digits":
            raw = head + f', "{rng.choice(["max_tokens", "seed", "temperature"])}": {"9" * 5000}}}'.encode()
        elif variant == "1e400":
            raw = head + f', "{rng.choice(["max_tokens", "seed", "temperature", "n"])}": 1e400}}'.encode()
        elif variant == "negative":
            raw = head + f', "{rng.choice(["max_tokens", "min_tokens", "seed", "n"])}": -{2**70}}}'.encode()
        elif variant == "zero":
            raw = head + f', "{rng.choice(["max_tokens", "max_completion_tokens", "n"])}": 0}}'.encode()
        elif variant == "long-prompt":
            text = "w " * 100_000
            body = {"model": MODEL, "max_tokens": 2}
            body.update({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text})
            raw = to_bytes(body)
        else:  # many-ids: a long list of token ids
            ids = [rng.randint(-10, 300_000) for _ in range(10_000)]
            raw = to_bytes({"model": MODEL, "max_tokens": 2, "prompt": ids})
        return [self.case("broken", variant, "POST", CHAT if chat else COMPLETIONS, self.base_headers(), raw)]

    def deep(self) -> list[Case]:
        rng = self.rng
        depth = rng.choice([500, 2000, 20_000, 100_000])
        variant = rng.choice(["array", "object", "in-prompt", "in-messages"])
        if variant == "array":
            raw = "[" * depth + "]" * depth
        elif variant == "object":
            raw = '{"a":' * depth + "1" + "}" * depth
        elif variant == "in-prompt":
            raw = '{"model": "' + MODEL + '", "max_tokens": 2, "prompt": ' + "[" * depth + "]" * depth + "}"
        else:
            nested = "[" * depth + '"x"' + "]" * depth
            raw = '{"max_tokens": 2, "messages": [{"role": "user", "content": ' + nested + "}]}"
        path = CHAT if variant == "in-messages" else COMPLETIONS
        return [self.case("deep", f"{variant}-{depth}", "POST", path, self.base_headers(), raw.encode())]

    def random_path(self) -> str:
        rng = self.rng
        r = rng.random()
        known = [COMPLETIONS, CHAT, "/health", "/metrics", "/v1/models"]
        if r < 0.35:  # a known path, mutated
            p = rng.choice(known)
            return rng.choice([p.upper(), p + "/", "/" + p, p + "/x", "/api" + p, p + "/../completions",
                               "/" + p[1:].replace("/", "%2F"), p + "%00", p + ";a=b"])
        if r < 0.7:  # random printable text, percent-encoded where it must be
            text = "".join(rng.choice(string.printable[:94] + " éß日") for _ in range(rng.randint(1, 60)))
            return "/" + quote(text, safe="/%:@!$&'()*+,;=-._~")
        if r < 0.8:
            return "/" + "a" * rng.randint(1000, 6000)
        if r < 0.9:
            return rng.choice(["/", "//", "/.", "/..%2f..%2fetc%2fpasswd", "/%", "/%zz", "/v1", "/v1/", "/docs",
                               "/openapi.json", "/redoc", "/v1/completions%20", "/%2e%2e/health", "/*"])
        return "/" + "/".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))

    def routes(self) -> list[Case]:
        rng = self.rng
        engine = self.target == "emulator"
        r = rng.random()
        h = [AUTH] if rng.random() < 0.8 else []
        if r < 0.2:  # read-only endpoints
            gets = ["/health", "/metrics", "/v1/models"] + (
                ["/version", "/ping", "/_emulator/state", "/_emulator/info", "/is_sleeping"] if engine else [])
            path = rng.choice(gets)
            if rng.random() < 0.2:
                path += "?" + quote(self.words(1, 3), safe="=&") + rng.choice(["", "&a=%ff", "&&", "=x"])
            return [self.case("routes", "get", "GET", path, h)]
        if r < 0.45:  # wrong or odd method on a known path
            method = rng.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "PROPFIND", "POST"])
            path = rng.choice([COMPLETIONS, CHAT, "/health", "/metrics", "/v1/models"])
            if method == "POST" and path in (COMPLETIONS, CHAT):
                method = "GET"
            body = to_bytes(self.valid_body(path == CHAT)) if method in ("PUT", "PATCH", "POST", "DELETE") else None
            return [self.case("routes", f"method-{method}", method, path, h, body)]
        if r < 0.55:  # the completion routes with a query string
            chat = rng.random() < 0.5
            query = rng.choice(["stream=true", "max_tokens=99999", "a=%ff%fe", "x" * 2000, "&&&=", "model=%00"])
            return [self.case("routes", "query", "POST", (CHAT if chat else COMPLETIONS) + "?" + query,
                              self.base_headers(), to_bytes(self.valid_body(chat)))]
        method = rng.choice(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS"])
        while True:
            path = self.random_path()
            low = path.lower().replace("%2f", "/").replace("%5f", "_")
            if not any(f in low for f in FORBIDDEN):
                break
        body = to_bytes(self.valid_body(False)) if method in ("POST", "PUT") else None
        return [self.case("routes", "unknown-path", method, path, h, body)]

    def tokenizer(self) -> list[Case]:
        """vLLM's ``/tokenize`` and ``/detokenize`` with fuzzed bodies (on the proxy: unknown paths)."""
        rng = self.rng
        path = rng.choice(["/tokenize", "/detokenize"])
        if rng.random() < 0.5:
            body, _, _ = self.from_pool()
            raw = to_bytes(body)
        else:
            raw = to_bytes(rng.choice([
                {"tokens": ["a", None]}, {"tokens": [1e30, -5]}, {"tokens": "abc"}, {"tokens": [2**70]},
                {"prompt": 5}, {"messages": "x"}, {"messages": [{"role": "user", "content": 5}]},
                {"messages": [5]}, {"prompt": "hello", "return_token_strs": True}, {"tokens": [1, 2, 3]},
                {"model": 7, "prompt": "x"}, {"messages": [{"role": "user"}]}, {"tokens": [-1, 10**9]},
            ]))
        return [self.case("tokenizer", path[1:], "POST", path, [AUTH, ("Content-Type", "application/json")], raw)]

    def internal(self) -> list[Case]:
        body, _, _ = self.from_pool()
        raw = to_bytes(body) if self.rng.random() < 0.5 else to_bytes(self.rng.choice([
            {"remote_engine_id": "x", "remote_request_id": "y"}, {"remote_block_ids": 5}, {"duration_s": "x"},
            {}, [], {"remote_engine_id": None, "remote_request_id": None, "duration_s": 1e9},
        ]))
        return [self.case("internal", "nixl-read", "POST", "/_emulator/nixl/read",
                          [("Content-Type", "application/json")], raw)]

    def pairs(self) -> list[Case]:
        chat = self.rng.random() < 0.5
        rid = self.rid("-pair")
        group = self.index
        out = []
        for _ in range(2):
            body = self.valid_body(chat, stream=True, ignore_eos=True)
            body["max_tokens" if not chat else "max_completion_tokens"] = MAX_GEN
            body.pop("max_tokens" if chat else "max_completion_tokens", None)
            h = [AUTH, ("Content-Type", "application/json"), ("X-Request-Id", rid)]
            out.append(self.case("pairs", "same-id", "POST", CHAT if chat else COMPLETIONS, h, to_bytes(body),
                                 group=group))
            self.index += 1
        self.index -= 1
        return out

    def abort(self) -> list[Case]:
        chat = self.rng.random() < 0.5
        body = self.valid_body(chat, stream=True, ignore_eos=True)
        body["max_tokens"] = MAX_GEN
        body.pop("max_completion_tokens", None)
        return [self.case("abort", "after-first-chunk", "POST", CHAT if chat else COMPLETIONS,
                          self.base_headers(), to_bytes(body), abort=True)]

    def big(self) -> list[Case]:
        rng = self.rng
        chat = rng.random() < 0.5
        if self.target == "proxy" and rng.random() < 0.5:
            variant, text = "over-4MiB", "x" * (4 * 1024 * 1024 + 1)
        elif self.target == "proxy":
            variant, text = "over-1M-chars", "y" * 1_000_001
        else:
            variant, text = "1MiB-prompt", "word " * 210_000
        body: dict[str, Any] = {"model": MODEL, "max_tokens": 2}
        body.update({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text})
        return [self.case("big", variant, "POST", CHAT if chat else COMPLETIONS, self.base_headers(),
                          to_bytes(body))]

    def build(self, n: int, shares: dict[str, float]) -> list[list[Case]]:
        """``n`` requests in groups (a pair is one group of two), kinds in seeded random order."""
        counts = {k: int(n * s) for k, s in shares.items() if k != "fuzz"}
        counts["pairs"] = counts.get("pairs", 0) // 2  # each pair is two requests
        counts["fuzz"] = n - sum(c * (2 if k == "pairs" else 1) for k, c in counts.items())
        kinds = [k for k, c in counts.items() for _ in range(c)]
        self.rng.shuffle(kinds)
        makers = {"fuzz": self.fuzz, "valid": self.valid, "headers": self.odd_headers, "broken": self.broken,
                  "deep": self.deep, "routes": self.routes, "pairs": self.pairs, "abort": self.abort,
                  "big": self.big, "tokenizer": self.tokenizer, "internal": self.internal}
        groups = []
        for kind in kinds:
            groups.append(makers[kind]())
            self.index += 1
        return groups


def shares_for(target: str, skip: set[str], internal: bool) -> dict[str, float]:
    shares = {k: v for k, v in SHARES.items() if k not in skip or k == "fuzz"}
    if internal and target == "emulator":
        shares["internal"] = INTERNAL_SHARE
    return shares


# ---- sending --------------------------------------------------------------------------------------
def check_200(case: Case, content_type: str, body: bytes) -> str | None:
    """Why a 200 answer to a completion request is not a complete answer (None if it is)."""
    if case.path.split("?")[0] not in (COMPLETIONS, CHAT) or case.method != "POST":
        return None
    if content_type.startswith("text/event-stream"):
        if not body.rstrip().endswith(b"data: [DONE]"):
            return "stream without data: [DONE]"
        for line in body.splitlines():
            if line.startswith(b"data: {"):
                try:
                    event = json.loads(line[6:])
                except ValueError:
                    return "stream with an event that is not JSON"
                if "error" in event:
                    return "stream with an error event"
        return None
    try:
        json.loads(body)
    except ValueError:
        return "answer is not JSON"
    return None


async def send_one(session: aiohttp.ClientSession, base: str, case: Case, deadline: float) -> Result:
    data: Any = case.body
    if case.chunked and case.body is not None:
        raw = case.body
        sizes = random.Random(case.index)

        async def chunks() -> Any:
            i = 0
            while i < len(raw):
                j = i + sizes.randint(1, 64)
                yield raw[i:j]
                i = j

        data = chunks()
    t = time.perf_counter()
    try:
        async with asyncio.timeout(deadline):
            async with session.request(case.method, URL(base + case.path, encoded=True),
                                       headers=CIMultiDict(case.headers), data=data, allow_redirects=False,
                                       skip_auto_headers=case.skip_auto or None) as resp:
                rid = next((v.decode("latin-1") for k, v in resp.raw_headers if k.lower() == b"x-request-id"), None)
                if case.abort:
                    body = await resp.content.readany()
                    resp.close()
                    return Result(case, resp.status, None, body, rid, time.perf_counter() - t)
                body = await resp.read()
                error = check_200(case, resp.headers.get("content-type", ""), body) if resp.status == 200 else None
                return Result(case, resp.status, error and f"bad 200: {error}", body, rid, time.perf_counter() - t)
    except TimeoutError:
        return Result(case, None, "hang", b"", None, time.perf_counter() - t)
    except (aiohttp.ClientError, OSError) as exc:
        return Result(case, None, f"no answer: {type(exc).__name__}: {exc}", b"", None, time.perf_counter() - t)


async def drive(base: str, groups: list[list[Case]], concurrency: int, deadline: float,
                label: str) -> tuple[list[Result], float]:
    queue: asyncio.Queue[list[Case]] = asyncio.Queue()
    for g in groups:
        queue.put_nowait(g)
    results: list[Result] = []
    total = sum(len(g) for g in groups)
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    t0 = time.perf_counter()
    next_report = [1000]

    async def worker(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            group = queue.get_nowait()
            results.extend(await asyncio.gather(*(send_one(session, base, c, deadline) for c in group)))
            if len(results) >= next_report[0]:
                next_report[0] += 1000
                print(f"  {label}: {len(results)}/{total} in {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                      flush=True)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return results, time.perf_counter() - t0


# ---- checks ---------------------------------------------------------------------------------------
@dataclass
class Accounting:
    rows: int = 0
    unique: int = 0
    answered: int = 0  # answers that carried an X-Request-Id (routed)
    missing: int = 0
    extra: int = 0
    dup_unexpected: int = 0
    dup_pairs: int = 0
    status_mismatch: int = 0
    unrouted: int = 0  # a 200/429/502/503 completion answer without X-Request-Id
    id_echo_mismatch: int = 0  # the answer's id differs from the single non-empty id the fuzzer sent
    padded_ids: int = 0  # journal ids with leading or trailing blanks (compared without them)
    journal_status: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        return not (self.missing or self.extra or self.dup_unexpected or self.status_mismatch or self.unrouted
                    or self.id_echo_mismatch or self.problems)


def account(results: list[Result], journal: Path) -> Accounting:
    rows = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if journal.exists() else []
    a = Accounting(rows=len(rows))
    # The proxy's HTTP parser (httptools) keeps a header value's trailing blanks, so the journal may hold
    # "id " while every client parser strips the echoed header to "id": compare without them.
    a.padded_ids = sum(r["request_id"] != r["request_id"].strip(" \t") for r in rows)
    for r in rows:
        r["request_id"] = r["request_id"].strip(" \t")
    j_ids = Counter(r["request_id"] for r in rows)
    a.unique = len(j_ids)
    a.journal_status = Counter(r["status"] for r in rows)
    answers: dict[str, list[Result]] = {}
    for r in results:
        if r.rid is not None:
            answers.setdefault(r.rid.strip(" \t"), []).append(r)
    routed = Counter({k: len(v) for k, v in answers.items()})
    a.answered = sum(routed.values())
    missing, extra = routed - j_ids, j_ids - routed
    a.missing, a.extra = sum(missing.values()), sum(extra.values())
    for rid in list(missing)[:5]:
        a.problems.append(f"missing from the journal: id {rid[:80]!r} answered {routed[rid]}x, "
                          f"journaled {j_ids[rid]}x: {answers[rid][0].case.describe(200)}")
    for rid, n in list(extra.items())[:5]:
        a.problems.append(f"journal row(s) nobody was answered for: id {rid[:80]!r} x{n}")
    pair_ids = {r.rid.strip(" \t") for r in results if r.case.kind == "pairs" and r.rid is not None}
    for rid, n in j_ids.items():
        if n > 1:
            if rid in pair_ids:
                a.dup_pairs += 1
            else:
                a.dup_unexpected += 1
                if a.dup_unexpected <= 5:
                    a.problems.append(f"duplicate journal id {rid[:80]!r} x{n}")
    by_id: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_id.setdefault(row["request_id"], []).append(row)
    for rid, rs in answers.items():
        js = sorted(row["status"] for row in by_id.get(rid, []))
        if len(js) != len(rs):
            continue  # counted as missing/extra
        if any(r.case.abort for r in rs):
            continue  # abandoned by the client: ok or failed
        want = sorted("ok" if r.status == 200 else "rejected" if r.status == 429 else "failed" for r in rs)
        if want != js:
            a.status_mismatch += 1
            if a.status_mismatch <= 5:
                a.problems.append(f"id {rid[:80]!r}: answered {[r.status for r in rs]}, journaled {js}")
    for r in results:
        on_route = r.case.method == "POST" and r.case.path.split("?")[0] in (COMPLETIONS, CHAT)
        if on_route and r.status in (200, 429, 502, 503) and r.rid is None:
            a.unrouted += 1
            a.problems.append(f"answered {r.status} without X-Request-Id: {r.case.describe(200)}")
        sent = [v for k, v in r.case.headers if k.lower() == "x-request-id"]
        if r.rid is not None and len(sent) == 1 and sent[0].strip() and r.case.kind != "fuzz" \
                and sent[0].isascii() and r.rid != sent[0].strip():
            a.id_echo_mismatch += 1
            a.problems.append(f"sent id {sent[0][:60]!r}, answered with {r.rid[:60]!r}")
    return a


def settle(proxy_url: str, engines: list[Any], wait_s: float = 30.0) -> list[str]:
    """Wait for the proxy's in-flight count and the engines' queues to reach 0; what did not."""
    deadline = time.monotonic() + wait_s
    problems: list[str] = []
    with httpx.Client(timeout=5.0, trust_env=False) as c:
        while True:
            problems = []
            h = c.get(proxy_url + "/health")
            if h.status_code != 200:
                problems.append(f"proxy /health {h.status_code}: {h.text[:300]}")
            elif h.json().get("in_flight") != 0:
                problems.append(f"proxy in_flight {h.json().get('in_flight')}")
            for e in engines:
                s = c.get(e.url + "/_emulator/state").json()
                if s["running"] or s["waiting"] or s["pulling"]:
                    problems.append(f"{e.name}: running {s['running']}, waiting {s['waiting']}, "
                                    f"pulling {s['pulling']}")
                if c.get(e.url + "/health").status_code != 200:
                    problems.append(f"{e.name}: /health not 200")
            if not problems or time.monotonic() > deadline:
                return problems
            time.sleep(0.5)


# ---- report ---------------------------------------------------------------------------------------
def summarize(target: str, results: list[Result], wall: float) -> dict[str, Any]:
    codes = Counter(r.status for r in results if r.status is not None)
    return {
        "target": target, "sent": len(results),
        "2xx": sum(n for c, n in codes.items() if 200 <= c < 300),
        "3xx": sum(n for c, n in codes.items() if 300 <= c < 400),
        "4xx": sum(n for c, n in codes.items() if 400 <= c < 500),
        "5xx": sum(n for c, n in codes.items() if c >= 500),
        "hangs": sum(r.error == "hang" for r in results),
        "noans": sum(bool(r.error and r.error.startswith("no answer")) for r in results),
        "bad200": sum(bool(r.error and r.error.startswith("bad 200")) for r in results),
        "wall_s": wall, "codes": dict(sorted(codes.items())),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = ["target", "sent", "2xx", "3xx", "4xx", "5xx", "hangs", "noans", "bad200", "wall_s"]
    print("  ".join(f"{c:>8}" if c != "target" else f"{c:<8}" for c in cols))
    for r in rows:
        cells = [f"{r['target']:<8}"] + [f"{r[c]:>8}" for c in cols[1:-1]] + [f"{r['wall_s']:>8.1f}"]
        print("  ".join(cells))
    for r in rows:
        print(f"{r['target']} status codes: {r['codes']}")


def failures(results: list[Result]) -> list[Result]:
    return [r for r in results if (r.status is not None and r.status >= 500) or r.error]


def print_failures(target: str, results: list[Result], retried: dict[int, Result]) -> None:
    """The failures grouped by (status or error, kind, variant, method, path), one example each."""
    groups: dict[tuple[str, ...], list[Result]] = {}
    for r in failures(results):
        what = str(r.status) if r.status is not None else (r.error or "?").split(":")[0]
        variant = "" if r.case.kind == "fuzz" else r.case.variant.rstrip("0123456789").rstrip("-")
        key = (what, r.case.kind, variant, r.case.method,
               r.case.path.split("?")[0][:60])
        groups.setdefault(key, []).append(r)
    bad = failures(results)
    print(f"\n{target}: {len(bad)} failure(s) in {len(groups)} group(s):")
    for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        r = rs[0]
        print(f"  {len(rs):>5} x {' '.join(k for k in key if k)}")
        print(f"        e.g. {r.case.describe()}")
        print(f"        answer: {r.status} {r.error or ''} {r.body[:200]!r}")
        if r.error and r.error.startswith("no answer"):
            again = Counter(str(retried[x.case.index].status or retried[x.case.index].error)
                            for x in rs if x.case.index in retried)
            print(f"        sent again on a fresh connection: {dict(again)}")


async def resend(base: str, results: list[Result], deadline: float) -> dict[int, Result]:
    """The requests that got no answer, sent again one by one, each on a new connection."""
    out: dict[int, Result] = {}
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        for r in results:
            if r.error and r.error.startswith("no answer"):
                out[r.case.index] = await send_one(session, base, r.case, deadline)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000, help="requests per target (default 10000)")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight (default 32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-scale", type=float, default=50.0, help="engines' and proxy's time scale (default 50)")
    ap.add_argument("--deadline", type=float, default=30.0, help="wall s a request may take before it is a hang")
    ap.add_argument("--skip", default="", help="comma-separated kinds to leave out (e.g. deep)")
    ap.add_argument("--internal", action="store_true", help="also fuzz the engine's KV side channel")
    ap.add_argument("--targets", default="proxy,emulator", help="comma-separated: proxy, emulator")
    ap.add_argument("--out", type=Path, default=None, help="keep the proxy journal and failures.jsonl here")
    args = ap.parse_args(argv)
    skip = {k for k in args.skip.split(",") if k}
    unknown = skip - (set(SHARES) - {"fuzz"})
    if unknown:
        ap.error(f"--skip: unknown kind(s) {sorted(unknown)}; kinds: {sorted(set(SHARES) - {'fuzz'})}")
    targets = [t for t in args.targets.split(",") if t]
    if set(targets) - {"proxy", "emulator"}:
        ap.error("--targets: proxy and/or emulator")

    t_all = time.perf_counter()
    n_fuzz = int(args.requests * SHARES["fuzz"]) + 200
    t = time.perf_counter()
    pool = hypothesis_pool(n_fuzz, args.seed)
    print(f"hypothesis: {len(pool)} (body, headers) examples in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    plan = {tg: Builder(tg, random.Random(args.seed), pool).build(args.requests, shares_for(tg, skip, args.internal))
            for tg in targets}

    all_results: dict[str, list[Result]] = {}
    retried: dict[str, dict[int, Result]] = {}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fuzz-volume-") as tmpd:
        work = args.out or Path(tmpd)
        work.mkdir(parents=True, exist_ok=True)
        journal = work / "proxy.jsonl"
        if journal.exists():
            journal.unlink()
        with launch("1p1d", "emulated", time_scale=args.time_scale, eos_mean_tokens=8) as inst:
            cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in inst], journal=str(journal),
                              time_scale=args.time_scale, port=free_port(), predictor="constant", api_key=API_KEY)
            with proxy_process(cfg, work) as proxy_url:
                decode = next(i for i in inst if i.role == "decode")
                bases = {"proxy": proxy_url, "emulator": decode.url}
                for tg in targets:
                    res, wall = asyncio.run(drive(bases[tg], plan[tg], args.concurrency, args.deadline, tg))
                    all_results[tg] = res
                    rows.append(summarize(tg, res, wall))
                    retried[tg] = asyncio.run(resend(bases[tg], res, args.deadline))
                settle_problems = settle(proxy_url, inst)
            acc = account(all_results["proxy"] + list(retried["proxy"].values()), journal) \
                if "proxy" in all_results else None
        if args.out:
            with open(work / "failures.jsonl", "w") as fh:
                for tg, res in all_results.items():
                    for r in failures(res):
                        fh.write(json.dumps({"target": tg, "case": r.case.describe(2000), "status": r.status,
                                             "error": r.error, "body": r.body[:2000].decode("utf-8", "replace")})
                                 + "\n")

    print()
    print_table(rows)
    ok = True
    for tg, res in all_results.items():
        kinds: dict[str, Counter] = {}
        for r in res:
            kinds.setdefault(r.case.kind, Counter())[r.status if r.status is not None else (r.error or "?")[:12]] += 1
        print(f"{tg} by kind: "
              + "; ".join(f"{k} {dict(sorted(v.items(), key=str))}" for k, v in sorted(kinds.items())))
    for tg, res in all_results.items():
        if failures(res):
            ok = False
            print_failures(tg, res, retried[tg])
    if acc is not None:
        print(f"proxy accounting: journal rows {acc.rows}, unique ids {acc.unique} "
              f"(duplicates: {acc.dup_pairs} from same-id pairs that did not overlap, {acc.dup_unexpected} other), "
              f"routed-and-answered {acc.answered}, missing {acc.missing}, extra {acc.extra}, "
              f"status mismatches {acc.status_mismatch}, unrouted answers {acc.unrouted}, "
              f"id echo mismatches {acc.id_echo_mismatch} -> {'balanced' if acc.balanced else 'NOT balanced'}")
        if acc.padded_ids:
            print(f"  note: {acc.padded_ids} journal id(s) keep the sent header's trailing blanks (the echoed "
                  "X-Request-Id reaches clients without them); compared without them")
        print(f"proxy journal statuses: {dict(acc.journal_status)}")
        for p in acc.problems[:10]:
            print(f"  ! {p}")
        ok &= acc.balanced
    if settle_problems:
        ok = False
        print("after the run: " + "; ".join(settle_problems))
    else:
        print("after the run: proxy healthy, in_flight 0; engines healthy and drained")
    print(f"total wall {time.perf_counter() - t_all:.0f} s -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
