"""Correctness gates, run before any measured run (the paper's §IV-B).

Four gates, in this order (`run_gates`, which collects them in a `GatesReport`), each returning a
`GateResult` with one row per instance (or per prefill x decode pair) and raising `GateFailure` (a
`ConfigError`: the CLI prints one line and exits 2) whose message names the instance and what
differed:

1. `reset_prefix_caches`: ``POST /reset_prefix_cache`` on every engine, so that no run profits from
   the prefix cache of the one before. vLLM serves that route only with ``VLLM_SERVER_DEV_MODE=1``;
   a 404 fails the gate with a message saying so.
2. `warm_up`: one two-step P/D request through every prefill x decode pair (every engine serves
   the same model; every prefill answer carries ``kv_transfer_params``, i.e. the engine runs with
   the NixlConnector; every decode answer has the requested tokens).
3. `token_contract`: on every decode instance, a streaming P/D request with ``ignore_eos`` and
   ``max_tokens=N`` must produce exactly N tokens: the final ``usage.completion_tokens`` and the
   streamed pieces (per-chunk ``continuous_usage_stats`` counts, else one token per content chunk)
   both show N, the finish reason is ``length`` and the stream ends with ``[DONE]``. The text is
   also re-tokenized with the engine's ``POST /tokenize`` and the count recorded (a real BPE
   tokenizer need not re-tokenize generated text to the same count, so by default a mismatch
   there is reported, not failed; ``strict_retokenize=True`` fails it).
4. `greedy_equivalence`: the same prompts at temperature 0 through every decode instance (the
   prefill instance fixed) must give identical outputs. The expected output of a prompt is the
   one most decode instances give; on a tie (e.g. two decode instances) the plain, non-P/D output
   of the fixed prefill instance breaks it. The failure names the odd instance(s) and shows the
   first differing position and text.

`run_gates` also resets the prefix caches once more at the end (``reset_after``), so that the
measured run starts with caches that hold nothing, not even the gates' prompts.

Every function exists in a sync form (``warm_up(...)``) and an async one (``warm_up_async(...)``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from repro.cluster.processes import run_sync
from repro.errors import ConfigError
from repro.live.pd_protocol import decode_body, headers_for, prefill_body

if TYPE_CHECKING:
    from repro.cluster.topology import Instance

COMPLETIONS = "/v1/completions"
DEFAULT_TIMEOUT_S = 120.0


class GateFailure(ConfigError):
    """A gate failed; ``gate`` and ``instance`` say which and where, ``report`` (the gate's
    `GateResult`) has the details. `run_gates` also sets ``gates``: the `GatesReport` so far."""

    def __init__(self, message: str, *, gate: str, instance: str | None = None, report: GateResult | None = None):
        super().__init__(message)
        self.gate = gate
        self.instance = instance
        self.report = report
        self.gates: GatesReport | None = None


@dataclass
class Check:
    """One row of a gate's result: an instance (or a ``prefill->decode`` pair) and what was found;
    ``latency_s``: wall seconds of the gate's requests there (None if none answered)."""

    instance: str
    ok: bool
    detail: str
    latency_s: float | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class GateResult:
    """The outcome of one gate: one `Check` per instance (or pair), ``passed`` when all are ok,
    a one-line ``message`` (the first failure, or a summary) and its wall ``duration_s``."""

    gate: str
    passed: bool = True
    checks: list[Check] = field(default_factory=list)
    message: str = ""
    duration_s: float = 0.0

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GatesReport:
    """The outcomes of all gates of one `run_gates` call: ``reports`` lists their `GateResult`
    in order; ``gates_report[gate_name]`` looks one up by name."""

    reports: list[GateResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.reports)

    def __getitem__(self, gate: str) -> GateResult:
        for r in self.reports:
            if r.gate == gate:
                return r
        raise KeyError(gate)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "reports": [r.to_dict() for r in self.reports]}

    def render_text(self) -> str:
        return render_text(self)


# ---- rendering ---------------------------------------------------------------------------------
def render_text(report: GatesReport | GateResult) -> str:
    """Plain-text rendering: one line per gate, one indented line per instance."""
    reports = report.reports if isinstance(report, GatesReport) else [report]
    lines = []
    for r in reports:
        lines.append(f"[{'PASS' if r.passed else 'FAIL'}] {r.gate} ({r.duration_s:.2f} s)"
                     + (f": {r.message}" if r.message else ""))
        for c in r.checks:
            lat = f" {c.latency_s * 1e3:.0f} ms" if c.latency_s is not None else ""
            lines.append(f"    {'ok  ' if c.ok else 'FAIL'} {c.instance:<24}{lat:>8}  {c.detail}")
    return "\n".join(lines)


# ---- helpers -----------------------------------------------------------------------------------
def _split(instances: Iterable[Instance]) -> tuple[list[Instance], list[Instance]]:
    insts = list(instances)
    prefills = [i for i in insts if getattr(i, "role", None) == "prefill"]
    decodes = [i for i in insts if getattr(i, "role", None) == "decode"]
    return prefills, decodes


def _url(inst: Instance) -> str:
    return str(inst.url).rstrip("/")


def _client(timeout_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout_s, trust_env=False,
                             limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))


def _msg(r: httpx.Response) -> str:
    try:
        j = r.json()
        if isinstance(j, dict) and isinstance(j.get("error"), dict):
            return str(j["error"].get("message"))[:300]
        return json.dumps(j)[:300]
    except ValueError:
        return r.text[:300]


def gate_prompt(i: int, n_words: int) -> str:
    """A fixed, deterministic prompt (the same on every run and machine), ~n_words words."""
    from repro.workload.traces import filler_text

    return f"Gate prompt {i}. Continue the following text.\n" + filler_text(n_words, 97 * i + 13)


async def _models(client: httpx.AsyncClient, inst: Instance, api_key: str | None) -> str:
    r = await client.get(_url(inst) + "/v1/models", headers=headers_for("models", api_key))
    r.raise_for_status()
    return r.json()["data"][0]["id"]


async def _prefill(client: httpx.AsyncClient, p: Instance, path: str, body: dict, rid: str,
                   api_key: str | None) -> tuple[dict, dict | None]:
    r = await client.post(_url(p) + path, json=prefill_body(body), headers=headers_for(rid, api_key))
    if r.status_code != 200:
        raise _HttpError(f"HTTP {r.status_code} from {p.name} (prefill call): {_msg(r)}")
    j = r.json()
    if "kv_transfer_params" not in j:
        raise _HttpError(f"{p.name} answered the prefill call without 'kv_transfer_params': is it started with "
                         f"--kv-transfer-config '{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}}'?")
    return j, j.get("kv_transfer_params")


async def _prefill_then_decode(client: httpx.AsyncClient, p: Instance, d: Instance, path: str, body: dict, rid: str,
                               api_key: str | None) -> tuple[httpx.Response, dict | None]:
    """One disaggregated request as the proxy makes it (`repro.live.pd_protocol`): the prefill call on ``p``, then
    the decode call on ``d`` with the prefill's ``kv_transfer_params``, one ``X-Request-Id``. The decode answer
    (status 200) and those params (None: the decode engine prefilled locally); any other status of either call is
    an `_HttpError` naming the engine and the call."""
    _, kv = await _prefill(client, p, path, body, rid, api_key)
    r = await client.post(_url(d) + path, json=decode_body(body, kv), headers=headers_for(rid, api_key))
    if r.status_code != 200:
        raise _HttpError(f"HTTP {r.status_code} from {d.name} (decode call, prefill {p.name}): {_msg(r)}")
    return r, kv


class _HttpError(Exception):
    pass


def _first_diff(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n if len(a) != len(b) else -1


def _approx_tokens(text: str) -> int:
    from repro.workload.tokenizer import DEFAULT_TOKENIZER

    return DEFAULT_TOKENIZER.count(text)


def _excerpt(s: str, at: int, width: int = 40) -> str:
    return repr(s[at:at + width] + ("..." if len(s) > at + width else ""))


# ---- 1. prefix-cache reset ---------------------------------------------------------------------
async def reset_prefix_caches_async(instances: Sequence[Instance], *, api_key: str | None = None,
                                    timeout_s: float = 30.0, gate: str = "reset_prefix_cache") -> GateResult:
    """POST /reset_prefix_cache on every engine; raises GateFailure naming an engine that refuses."""
    rep = GateResult(gate)
    t0 = time.monotonic()
    async with _client(timeout_s) as client:
        async def one(inst: Instance) -> Check:
            t = time.monotonic()
            try:
                r = await client.post(_url(inst) + "/reset_prefix_cache", headers=headers_for("reset", api_key))
            except httpx.HTTPError as exc:
                return Check(inst.name, False, f"{inst.url} unreachable: {type(exc).__name__}: {exc}")
            lat = time.monotonic() - t
            if r.status_code == 404:
                return Check(inst.name, False, f"POST /reset_prefix_cache is 404 at {inst.url}: start the engine with "
                                               f"VLLM_SERVER_DEV_MODE=1 (vLLM serves that route only in dev mode)", lat)
            if r.status_code != 200:
                return Check(inst.name, False, f"POST /reset_prefix_cache -> HTTP {r.status_code}: {_msg(r)}", lat)
            return Check(inst.name, True, "prefix cache reset", lat)

        rep.checks = list(await asyncio.gather(*(one(i) for i in instances)))
    rep.duration_s = time.monotonic() - t0
    _conclude(rep)
    return rep


def _conclude(rep: GateResult) -> None:
    bad = rep.failed
    if not bad:
        rep.passed = True
        rep.message = rep.message or f"{len(rep.checks)} checked"
        return
    rep.passed = False
    first = bad[0]
    more = f" (and {len(bad) - 1} more: {', '.join(c.instance for c in bad[1:])})" if len(bad) > 1 else ""
    rep.message = f"{first.instance}: {first.detail}{more}"
    raise GateFailure(f"gate {rep.gate} failed on {rep.message}", gate=rep.gate, instance=first.instance, report=rep)


# ---- 2. warm-up --------------------------------------------------------------------------------
async def warm_up_async(prefills: Sequence[Instance], decodes: Sequence[Instance], *, model: str | None = None,
                        api_key: str | None = None, path: str = COMPLETIONS, max_tokens: int = 4,
                        timeout_s: float = DEFAULT_TIMEOUT_S) -> GateResult:
    """One P/D request through every prefill x decode pair (and: all engines serve one model)."""
    rep = GateResult("warm_up")
    t0 = time.monotonic()
    async with _client(timeout_s) as client:
        # every engine must serve the same model
        names: dict[str, str] = {}
        for inst in list(prefills) + list(decodes):
            try:
                names[inst.name] = await _models(client, inst, api_key)
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
                rep.checks.append(Check(inst.name, False, f"GET /v1/models failed: {type(exc).__name__}: {exc}"))
        if not rep.failed:
            want = model or Counter(names.values()).most_common(1)[0][0]
            for name, got in names.items():
                if got != want:
                    rep.checks.append(Check(name, False, f"serves model {got!r}, the others {want!r}"))
            model = want
        if rep.failed:
            rep.duration_s = time.monotonic() - t0
            _conclude(rep)

        async def pair(p: Instance, d: Instance, k: int) -> Check:
            label = f"{p.name}->{d.name}"
            rid = f"gate-warmup-{k}-{uuid.uuid4().hex[:8]}"
            body = {"model": model, "prompt": gate_prompt(100 + k, 48), "max_tokens": max_tokens,
                    "ignore_eos": True, "temperature": 0}
            t = time.monotonic()
            try:
                r, kv = await _prefill_then_decode(client, p, d, path, body, rid, api_key)
                j = r.json()
            except _HttpError as exc:
                return Check(label, False, str(exc))
            except httpx.HTTPError as exc:
                return Check(label, False, f"transport error: {type(exc).__name__}: {exc}")
            lat = time.monotonic() - t
            n = (j.get("usage") or {}).get("completion_tokens")
            if n != max_tokens:
                return Check(label, False, f"decode answer has {n} tokens, asked for {max_tokens}", lat)
            if kv is None:
                return Check(label, True, f"{max_tokens} tokens (prefill returned kv_transfer_params=null: "
                                          f"the decode engine prefilled locally)", lat, {"kv": False})
            return Check(label, True, f"{max_tokens} tokens, KV handed over", lat, {"kv": True})

        pairs = [(p, d) for p in prefills for d in decodes]
        rep.checks = list(await asyncio.gather(*(pair(p, d, k) for k, (p, d) in enumerate(pairs))))
    rep.duration_s = time.monotonic() - t0
    rep.message = ""
    _conclude(rep)
    rep.message = f"{len(rep.checks)} prefill x decode pairs, model {model!r}"
    return rep


# ---- 3. token contract -------------------------------------------------------------------------
def _sse_events(raw: bytes) -> tuple[list[Any], bool]:
    """All ``data:`` events of an SSE body (parsed JSON), and whether ``[DONE]`` ended it."""
    events: list[Any] = []
    done = False
    for block in raw.split(b"\n\n"):
        for line in block.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                continue
            try:
                events.append(json.loads(data))
            except ValueError:
                events.append({"error": {"message": f"malformed SSE event {data[:80]!r}"}})
    return events, done


async def token_contract_async(prefills: Sequence[Instance], decodes: Sequence[Instance], *, n_tokens: int = 64,
                               model: str | None = None, api_key: str | None = None,
                               path: str = COMPLETIONS, timeout_s: float = DEFAULT_TIMEOUT_S,
                               strict_retokenize: bool = False) -> GateResult:
    """Every decode instance streams exactly ``n_tokens`` tokens for ``ignore_eos`` + ``max_tokens``."""
    if n_tokens < 2:
        raise ConfigError(f"token_contract: n_tokens must be >= 2, got {n_tokens}")
    rep = GateResult("token_contract")
    t0 = time.monotonic()
    async with _client(timeout_s) as client:
        if model is None:
            model = await _models(client, decodes[0], api_key)

        async def one(k: int, d: Instance) -> Check:
            p = prefills[k % len(prefills)]
            label = d.name
            rid = f"gate-contract-{k}-{uuid.uuid4().hex[:8]}"
            body = {"model": model, "prompt": gate_prompt(200 + k, 64), "max_tokens": n_tokens, "ignore_eos": True,
                    "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            t = time.monotonic()
            try:
                raw = (await _prefill_then_decode(client, p, d, path, body, rid, api_key))[0].content
            except _HttpError as exc:
                return Check(label, False, str(exc))
            except httpx.HTTPError as exc:
                return Check(label, False, f"transport error: {type(exc).__name__}: {exc}")
            lat = time.monotonic() - t
            events, done = _sse_events(raw)
            errors = [e["error"].get("message") if isinstance(e.get("error"), dict) else str(e.get("error"))
                      for e in events if isinstance(e, dict) and e.get("error")]
            text = ""
            chunks = 0
            cumulative: list[int] = []
            final_usage = None
            finish = None
            for e in events:
                if not isinstance(e, dict) or e.get("error"):
                    continue
                choices = e.get("choices") or []
                usage = e.get("usage")
                if not choices and usage:
                    final_usage = usage.get("completion_tokens")
                for c in choices:
                    piece = c.get("text")
                    if piece is None:
                        piece = (c.get("delta") or {}).get("content")
                    if piece:
                        text += piece
                        chunks += 1
                        if usage and usage.get("completion_tokens") is not None:
                            cumulative.append(int(usage["completion_tokens"]))
                    if c.get("finish_reason"):
                        finish = c["finish_reason"]
            streamed = cumulative[-1] if cumulative and len(cumulative) == chunks else chunks
            how = "continuous usage" if cumulative and len(cumulative) == chunks else "content chunks"
            retok = None
            try:
                tr = await client.post(_url(d) + "/tokenize", json={"model": model, "prompt": text,
                                                                    "add_special_tokens": False})
                if tr.status_code == 200:
                    retok = tr.json().get("count")
            except httpx.HTTPError:
                retok = None
            data = {"usage_completion_tokens": final_usage, "streamed_tokens": streamed, "streamed_by": how,
                    "content_chunks": chunks, "retokenized": retok, "finish_reason": finish, "done": done,
                    "prefill": p.name}
            problems = []
            if errors:
                problems.append(f"error event in the stream: {errors[0]}")
            if not done:
                problems.append("stream ended without [DONE]")
            if final_usage != n_tokens:
                problems.append(f"usage.completion_tokens = {final_usage}, expected {n_tokens}")
            if streamed != n_tokens:
                problems.append(f"streamed pieces carry {streamed} tokens ({how}), expected {n_tokens}")
            if cumulative and any(b < a for a, b in zip(cumulative, cumulative[1:], strict=False)):
                problems.append("per-chunk usage decreases")
            if finish != "length":
                problems.append(f"finish_reason {finish!r}, expected 'length'")
            if strict_retokenize and retok is not None and retok != n_tokens:
                problems.append(f"the streamed text re-tokenizes to {retok} tokens, expected {n_tokens}")
            if problems:
                return Check(label, False, "; ".join(problems) + f" (prefill {p.name})", lat, data)
            note = "" if retok in (None, n_tokens) else f"; note: text re-tokenizes to {retok}"
            return Check(label, True, f"{n_tokens} tokens (usage and stream, {how}){note}", lat, data)

        rep.checks = list(await asyncio.gather(*(one(k, d) for k, d in enumerate(decodes))))
    rep.duration_s = time.monotonic() - t0
    _conclude(rep)
    rep.message = f"{len(decodes)} decode instances x {n_tokens} tokens"
    return rep


# ---- 4. greedy equivalence ---------------------------------------------------------------------
async def greedy_equivalence_async(prefills: Sequence[Instance], decodes: Sequence[Instance], *, n_prompts: int = 3,
                                   max_tokens: int = 32, model: str | None = None, api_key: str | None = None,
                                   path: str = COMPLETIONS, timeout_s: float = DEFAULT_TIMEOUT_S,
                                   prompts: Sequence[str] | None = None) -> GateResult:
    """Same prompts, temperature 0, through every decode instance (prefill fixed): identical outputs."""
    rep = GateResult("greedy_equivalence")
    t0 = time.monotonic()
    p = prefills[0]
    prompts = list(prompts) if prompts is not None else [gate_prompt(300 + k, 24 + 150 * k) for k in range(n_prompts)]
    async with _client(timeout_s) as client:
        if model is None:
            model = await _models(client, decodes[0], api_key)

        def body_of(prompt: str) -> dict:
            return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}

        async def via(d: Instance, k: int) -> tuple[str | None, str | None, float]:
            rid = f"gate-greedy-{k}-{d.name}-{uuid.uuid4().hex[:8]}"
            body = body_of(prompts[k])
            t = time.monotonic()
            try:
                r, _ = await _prefill_then_decode(client, p, d, path, body, rid, api_key)
                return r.json()["choices"][0]["text"], None, time.monotonic() - t
            except _HttpError as exc:
                return None, str(exc), time.monotonic() - t
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
                return None, f"{type(exc).__name__}: {exc}", time.monotonic() - t

        async def local(k: int) -> str | None:
            try:
                r = await client.post(_url(p) + path, json=body_of(prompts[k]),
                                      headers=headers_for(f"gate-greedy-ref-{k}-{uuid.uuid4().hex[:8]}", api_key))
                return r.json()["choices"][0]["text"] if r.status_code == 200 else None
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                return None

        results = await asyncio.gather(*(via(d, k) for d in decodes for k in range(len(prompts))))
        out: dict[str, list] = {d.name: [] for d in decodes}
        it = iter(results)
        for d in decodes:
            for _ in range(len(prompts)):
                out[d.name].append(next(it))
        # expected output per prompt: the majority of decode instances; a tie is broken by the
        # prefill instance's own (non-P/D) output
        expected: list[str | None] = []
        how: list[str] = []
        for k in range(len(prompts)):
            texts = [out[d.name][k][0] for d in decodes if out[d.name][k][0] is not None]
            counts = Counter(texts).most_common()
            if not counts:
                expected.append(None)
                how.append("no answers")
                continue
            if len(counts) == 1 or counts[0][1] > counts[1][1]:
                expected.append(counts[0][0])
                how.append("majority of decode instances" if len(counts) > 1 else "all decode instances agree")
                continue
            ref = await local(k)
            top = [t for t, c in counts if c == counts[0][1]]
            if ref is not None and ref in top:
                expected.append(ref)
                how.append(f"tie broken by {p.name}'s own output")
            else:
                expected.append(None)
                how.append("no majority")
        for d in decodes:
            bad = []
            lat = 0.0
            for k in range(len(prompts)):
                text, err, t = out[d.name][k]
                lat += t
                if err is not None:
                    bad.append(f"prompt {k}: {err}")
                    continue
                want = expected[k]
                if want is None:
                    others = {o.name: out[o.name][k][0] for o in decodes if o is not d}
                    if any(o != text for o in others.values()):
                        bad.append(f"prompt {k}: outputs differ across decode instances and no majority exists "
                                   f"({', '.join(o.name for o in decodes)})")
                    continue
                if text != want:
                    at = _first_diff(text, want)
                    tok = _approx_tokens(want[:at])
                    bad.append(f"prompt {k}: output differs at character {at} (~token {tok}; expected = {how[k]}): "
                               f"got {_excerpt(text, at)}, expected {_excerpt(want, at)}")
            if bad:
                more = f" (and {len(bad) - 1} more prompt(s))" if len(bad) > 1 else ""
                rep.checks.append(Check(d.name, False, bad[0] + more,
                                        lat, {"prefill": p.name}))
            else:
                rep.checks.append(Check(d.name, True, f"{len(prompts)} prompts x {max_tokens} tokens identical", lat,
                                        {"prefill": p.name}))
    rep.duration_s = time.monotonic() - t0
    _conclude(rep)
    rep.message = f"{len(decodes)} decode instances, prefill {p.name}, {len(prompts)} prompts"
    return rep


# ---- all of them -------------------------------------------------------------------------------
async def run_gates_async(instances: Sequence[Instance], *, n_tokens: int = 64, n_prompts: int = 3,
                          greedy_tokens: int = 32, model: str | None = None, api_key: str | None = None,
                          reset: bool = True, reset_after: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S,
                          path: str = COMPLETIONS,
                          on_report: Callable[[GateResult], None] | None = None) -> GatesReport:
    """Reset, warm-up, token contract, greedy equivalence (then reset again); stops at the first failure.

    ``on_report(GateResult)`` is called after each gate (passed or failed) for progress display.
    On failure the raised GateFailure carries ``.gates`` (the `GatesReport` so far).
    """
    prefills, decodes = _split(instances)
    if not prefills or not decodes:
        raise ConfigError(f"gates: need at least one prefill and one decode instance, got "
                          f"{[(getattr(i, 'name', '?'), getattr(i, 'role', '?')) for i in instances]}")
    out = GatesReport()

    async def step(coro: Awaitable[GateResult]) -> None:
        try:
            rep = await coro
        except GateFailure as exc:
            if exc.report is not None:
                out.reports.append(exc.report)
                if on_report:
                    on_report(exc.report)
            exc.gates = out
            raise
        out.reports.append(rep)
        if on_report:
            on_report(rep)

    every = prefills + decodes
    if reset:
        await step(reset_prefix_caches_async(every, api_key=api_key))
    await step(warm_up_async(prefills, decodes, model=model, api_key=api_key, path=path, timeout_s=timeout_s))
    await step(token_contract_async(prefills, decodes, n_tokens=n_tokens, model=model, api_key=api_key, path=path,
                                    timeout_s=timeout_s))
    await step(greedy_equivalence_async(prefills, decodes, n_prompts=n_prompts, max_tokens=greedy_tokens, model=model,
                                        api_key=api_key, path=path, timeout_s=timeout_s))
    if reset and reset_after:
        await step(reset_prefix_caches_async(every, api_key=api_key, gate="reset_prefix_cache (after)"))
    return out


# ---- sync forms --------------------------------------------------------------------------------
def reset_prefix_caches(instances: Sequence[Instance], **kw: Any) -> GateResult:
    """Sync form of `reset_prefix_caches_async`."""
    return run_sync(reset_prefix_caches_async(instances, **kw))


def warm_up(prefills: Sequence[Instance], decodes: Sequence[Instance], **kw: Any) -> GateResult:
    """Sync form of `warm_up_async`."""
    return run_sync(warm_up_async(prefills, decodes, **kw))


def token_contract(prefills: Sequence[Instance], decodes: Sequence[Instance], **kw: Any) -> GateResult:
    """Sync form of `token_contract_async`."""
    return run_sync(token_contract_async(prefills, decodes, **kw))


def greedy_equivalence(prefills: Sequence[Instance], decodes: Sequence[Instance], **kw: Any) -> GateResult:
    """Sync form of `greedy_equivalence_async`."""
    return run_sync(greedy_equivalence_async(prefills, decodes, **kw))


def run_gates(instances: Sequence[Instance], **kw: Any) -> GatesReport:
    """Sync form of `run_gates_async`: all gates in order; raises `GateFailure` at the first failure."""
    return run_sync(run_gates_async(instances, **kw))
