"""Open-loop trace replay against any OpenAI-compatible URL (our proxy, one engine, another router).

Request ``i`` is sent at wall offset ``arrival_s / time_scale`` from the start of the replay,
never waiting for earlier answers (open loop: a slow server does not delay later sends). Every
request is a streaming ``/v1/completions`` call::

    {"model": M, "prompt": prompt_text(trace, i), "max_tokens": output_tokens, "ignore_eos": true,
     "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}

with ``X-Request-Id: <request_id>`` and ``X-SLO-Class: <slo_class>``. Prompt texts are rendered
before the clock starts; one `aiohttp.ClientSession` with an unbounded connection pool carries every
request, so the client is not the bottleneck.

Client-side measurements, journaled as each request ends (`repro.experiment.journal` schema, one row per
request sent, exactly once, also on timeouts and Ctrl-C)::

    arrival_s        planned arrival (the trace's arrival, physics s)
    prefill_start_s  actual send time; send - planned = the schedule lag
    first_token_s    first chunk with generated text
    finish_s         last chunk (or the moment the request failed)
    ttft_s / e2e_s   from the planned arrival; tpot_s as vLLM's benchmark defines it
    prefill_end_s, decode_start_s, predicted_output_tokens: null (a client cannot see them);
    preemptions: -1 (unknown); prefill/decode instance: the X-Prefill-Instance /
    X-Decode-Instance response headers when the server sets them (our proxy does)

Times are physics seconds: wall seconds since the start of the replay times ``time_scale`` (the
emulated engines' time-compression factor K; 1 for real engines).

Status: ``ok`` (``[DONE]`` seen and exactly ``max_tokens`` tokens), ``rejected`` (HTTP 429, or a
503 "rejected: ..." from our proxy; the reason keeps ``Retry-After``), or ``failed`` with the reason
(HTTP error with the server's message, transport error, timeout, stream cut without ``[DONE]``, an
error event in the stream, fewer tokens than ``max_tokens``, cancelled).

The report (`ReplayReport`) includes the schedule lag (p50/p99/max, wall seconds) and
``keeping_up``: false when the p99 lag exceeds ``lag_threshold_s`` (default 5 ms), i.e. the
client could not keep to the trace's schedule and the run's latencies are suspect.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import numpy as np
import pandas as pd

from repro.cluster.processes import (
    child_setup,
    enter_live_loop,
    live_nice,
    policy_name,
    run_sync,
    settle_heap,
    stop_process,
)
from repro.errors import ConfigError
from repro.experiment.journal import JournalWriter
from repro.journal_schema import empty_row, tpot
from repro.live.pd_protocol import SSEParser

if TYPE_CHECKING:
    from repro.workload.traces import Trace

SLO_HEADER = "X-SLO-Class"
PREFILL_INSTANCE_HEADER = "X-Prefill-Instance"
DECODE_INSTANCE_HEADER = "X-Decode-Instance"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_LAG_THRESHOLD_S = 0.005
_EARLY_WAKE_S = 0.001  # wake this much early and yield-spin the rest (asyncio timers are ms-coarse)


@dataclass
class ReplayReport:
    """What a replay did, and whether the client kept to the schedule (lags in wall seconds)."""

    url: str
    journal_path: str
    sent: int = 0
    ok: int = 0
    failed: int = 0
    rejected: int = 0
    not_sent: int = 0
    wall_s: float = 0.0
    physics_s: float = 0.0
    time_scale: float = 1.0
    lag_p50_s: float = float("nan")
    lag_p99_s: float = float("nan")
    lag_max_s: float = float("nan")
    lag_threshold_s: float = DEFAULT_LAG_THRESHOLD_S
    keeping_up: bool = True
    cancelled: bool = False
    reasons: dict[str, int] = field(default_factory=dict)
    sched_policy: str | None = None  # the replaying thread's scheduling policy when it started sending
    started_unix: float = float("nan")  # Unix time (s) of the replay's clock origin: a journal time t is this + t / K

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [
            f"replay against {self.url}: sent {self.sent}, ok {self.ok}, failed {self.failed}, "
            f"rejected {self.rejected}" + (f", not sent {self.not_sent}" if self.not_sent else "")
            + (" (cancelled)" if self.cancelled else ""),
            f"wall {self.wall_s:.2f} s (physics {self.physics_s:.2f} s at time scale {self.time_scale:g})",
            f"schedule lag (wall): p50 {_ms(self.lag_p50_s)}, p99 {_ms(self.lag_p99_s)}, max {_ms(self.lag_max_s)}"
            f" -> {'kept up' if self.keeping_up else 'DID NOT KEEP UP'} (p99 threshold {_ms(self.lag_threshold_s)})",
        ]
        for reason, n in sorted(self.reasons.items(), key=lambda kv: -kv[1])[:8]:
            out.append(f"  {n} x {reason}")
        out.append(f"journal: {self.journal_path}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _ms(v: float) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v * 1e3:.2f} ms"


class _Req:
    """The client-side record of one request (one journal row, written exactly once)."""

    __slots__ = ("i", "rid", "planned", "send", "first", "last", "tokens", "content_chunks", "status",
                 "reason", "prefill_instance", "decode_instance", "journaled", "max_tokens")

    def __init__(self, i: int, rid: str, planned: float, max_tokens: int):
        self.i = i
        self.rid = rid
        self.planned = planned
        self.max_tokens = max_tokens
        self.send: float | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.tokens = 0
        self.content_chunks = 0
        self.status: str | None = None
        self.reason: str | None = None
        self.prefill_instance: str | None = None
        self.decode_instance: str | None = None
        self.journaled = False


def _trace_frame(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    df = getattr(trace, "df", trace)
    if not isinstance(df, pd.DataFrame):
        raise ConfigError("loadgen: trace must be a repro.workload.traces.Trace or a DataFrame")
    need = ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "slo_class")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ConfigError(f"loadgen: trace is missing column(s) {missing}")
    return df


def render_prompts(trace: Trace | pd.DataFrame) -> list[str]:
    """Every request's exact prompt text (done before the clock starts)."""
    from repro.workload.traces import prompt_text

    df = _trace_frame(trace)
    if "family" in df.columns and "source_index" in df.columns:
        return [prompt_text(df, i) for i in range(len(df))]
    # a bare table without ShareGPT provenance: filler text of the exact length
    from repro.workload.traces import filler_text

    return [filler_text(int(n), 0) for n in df["prompt_tokens"]]


async def first_model(client: aiohttp.ClientSession, url: str, api_key: str | None = None) -> str:
    """The first model id served at ``url`` (``GET /v1/models``)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        async with client.get(url.rstrip("/") + "/v1/models", headers=headers,
                              timeout=aiohttp.ClientTimeout(total=10.0)) as r:
            r.raise_for_status()
            return (await r.json(content_type=None))["data"][0]["id"]
    except (TimeoutError, aiohttp.ClientError, KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"loadgen: --url {url}: cannot read the model from GET /v1/models ({exc}); "
                          f"pass --model") from None


def _error_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:300].strip()
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj))
        if isinstance(err, dict):
            return str(err.get("message", err))[:300]
        return str(err)[:300]
    return str(obj)[:300]


class ReplayProgress(Protocol):
    """What `replay` reports its progress to (``progress(n)`` makes one for ``n`` requests): each request
    that ended (``ok`` / ``failed`` / ``rejected``), then the end. The command line's is a progress bar
    (`repro.cli.loadgen`)."""

    def advance(self, status: str) -> None: ...

    def close(self) -> None: ...


async def replay(
    trace: Trace | pd.DataFrame,
    url: str,
    *,
    journal_path: str | Path,
    path: str = "/v1/completions",
    time_scale: float = 1.0,
    model: str | None = None,
    api_key: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    slo_header: bool = True,
    progress: Callable[[int], ReplayProgress] | None = None,
    lag_threshold_s: float = DEFAULT_LAG_THRESHOLD_S,
    prompts: Sequence[str] | None = None,
    extra_body: dict[str, Any] | None = None,
    live_process: bool = False,
) -> ReplayReport:
    """Replay ``trace`` open-loop against ``url``; journal every request; return the report.

    ``live_process``: this process is a load generator of its own (``python -m
    repro.cli.loadgen``): once the requests are prepared it enters the live loop
    (`repro.cluster.processes.enter_live_loop`: real-time scheduling); otherwise (a notebook, a
    test) only the heap is settled for the replay.

    ``prompts`` (optional) replaces the rendered prompt texts (one per request). ``progress`` (optional):
    ``progress(n)`` makes the `ReplayProgress` told of each request that ends.
    On cancellation (Ctrl-C) every request in flight is journaled as failed ("cancelled") and the
    CancelledError propagates.
    """
    if not time_scale > 0:
        raise ConfigError(f"loadgen: time_scale must be > 0, got {time_scale}")
    if not timeout_s > 0:
        raise ConfigError(f"loadgen: timeout_s must be > 0, got {timeout_s}")
    df = _trace_frame(trace)
    n = len(df)
    texts = list(prompts) if prompts is not None else render_prompts(df)
    if len(texts) != n:
        raise ConfigError(f"loadgen: {len(texts)} prompts for {n} requests")
    rids = df["request_id"].astype(str).tolist()
    arrivals = df["arrival_s"].to_numpy(dtype=float)
    if n and (np.any(np.diff(arrivals) < 0) or arrivals[0] < 0):
        order = np.argsort(arrivals, kind="stable")
    else:
        order = np.arange(n)
    outs = df["output_tokens"].astype(int).tolist()
    slos = df["slo_class"].astype(str).tolist()
    prompts_n = df["prompt_tokens"].astype(int).tolist()
    families = df["family"].astype(str).tolist() if "family" in df.columns else [None] * n
    target = url.rstrip("/") + path
    K = float(time_scale)

    report = ReplayReport(url=url, journal_path=str(journal_path), time_scale=K, lag_threshold_s=lag_threshold_s)
    writer = JournalWriter(journal_path)
    # aiohttp rather than httpx: ~0.2 ms of client CPU per request instead of ~1.4 ms (and more per
    # stream), so that on a 2-core machine the load generator is not what limits the run
    client = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0),  # < servers' 5 s: never reuse a closed one
        timeout=aiohttp.ClientTimeout(total=None, connect=min(30.0, timeout_s), sock_read=timeout_s),
        auto_decompress=False,
    )
    records: dict[int, _Req] = {}
    tasks: set[asyncio.Task] = set()
    bar = None
    froze = False
    try:
        if model is None:
            model = await first_model(client, url, api_key)
        bodies = []
        for i in range(n):
            body = {"model": model, "prompt": texts[i], "max_tokens": int(outs[i]), "ignore_eos": True,
                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
            if extra_body:
                body.update(extra_body)
            bodies.append(json.dumps(body).encode())
        if progress is not None:
            bar = progress(n)
        # a full collection of the trace, prompts and imports would stall the schedule
        if live_process:
            report.sched_policy = enter_live_loop()
        else:
            settle_heap()
            report.sched_policy = policy_name(0)
        froze = True
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        report.started_unix = time.time()

        def now() -> float:
            return loop.time() - t0

        def finish(rec: _Req, status: str, reason: str | None) -> None:
            if rec.journaled:
                return
            rec.journaled = True
            if rec.status is None:
                rec.status, rec.reason = status, reason
            rec.last = rec.last if (rec.status == "ok" and rec.last is not None) else now()
            _journal(writer, rec, K, families[rec.i], slos[rec.i], prompts_n[rec.i])
            if rec.status == "ok":
                report.ok += 1
            elif rec.status == "rejected":
                report.rejected += 1
            else:
                report.failed += 1
            if rec.reason:
                key = _reason_key(rec.reason)
                report.reasons[key] = report.reasons.get(key, 0) + 1
            if bar is not None:
                bar.advance(rec.status)

        async def one(rec: _Req) -> None:
            headers = {"X-Request-Id": rec.rid, "Content-Type": "application/json"}
            if slo_header:
                headers[SLO_HEADER] = slos[rec.i]
            if api_key:
                headers["Authorization"] = f"Bearer {api_key}"
            rec.send = now()
            try:
                async with asyncio.timeout(timeout_s):
                    await _stream(client, target, bodies[rec.i], headers, rec, now)
            except TimeoutError:  # the overall timeout, and also a socket read timeout (a TimeoutError too)
                rec.status, rec.reason = "failed", f"timeout after {timeout_s:g} s wall ({rec.tokens} tokens received)"
            except asyncio.CancelledError:
                rec.status, rec.reason = "failed", "cancelled"
                finish(rec, "failed", "cancelled")
                raise
            except aiohttp.ClientError as exc:
                rec.status, rec.reason = "failed", f"transport error: {type(exc).__name__}: {exc}"[:300]
            except Exception as exc:  # never lose a request to an unexpected error
                rec.status, rec.reason = "failed", f"client error: {type(exc).__name__}: {exc}"[:300]
            finish(rec, rec.status or "failed", rec.reason)

        lags: list[float] = []
        try:
            for i in order.tolist():
                planned = arrivals[i] / K
                delay = planned - now()
                if delay > _EARLY_WAKE_S:
                    await asyncio.sleep(delay - _EARLY_WAKE_S)
                while now() < planned:
                    await asyncio.sleep(0)
                rec = _Req(i, rids[i], planned, int(outs[i]))
                records[i] = rec
                report.sent += 1
                lags.append(now() - planned)
                task = asyncio.create_task(one(rec))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
        except asyncio.CancelledError:
            report.cancelled = True
            for t in list(tasks):
                t.cancel()
            if tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
            for rec in records.values():
                finish(rec, "failed", "cancelled")
            raise
        finally:
            report.wall_s = now()
            report.physics_s = report.wall_s * K
            report.not_sent = n - report.sent
            # the send lag: measured when the task actually started sending (if it did)
            real = [rec.send - rec.planned for rec in records.values() if rec.send is not None]
            lag = np.asarray(real if len(real) == len(lags) else lags, dtype=float)
            if lag.size:
                report.lag_p50_s = float(np.percentile(lag, 50))
                report.lag_p99_s = float(np.percentile(lag, 99))
                report.lag_max_s = float(lag.max())
                report.keeping_up = bool(report.lag_p99_s <= lag_threshold_s)
    finally:
        if froze:
            gc.unfreeze()
        with contextlib.suppress(Exception):
            await client.close()
        writer.close()
        if bar is not None:
            bar.close()
    return report


async def _stream(client: aiohttp.ClientSession, target: str, body: bytes, headers: dict[str, str], rec: _Req,
                  now: Callable[[], float]) -> None:
    async with client.post(target, data=body, headers=headers) as resp:
        rec.prefill_instance = resp.headers.get(PREFILL_INSTANCE_HEADER) or None
        rec.decode_instance = resp.headers.get(DECODE_INSTANCE_HEADER) or None
        if resp.status != 200:
            data = await resp.read()
            msg = _error_message(data)
            if resp.status == 429 or (resp.status == 503 and msg.startswith("rejected")):  # refused by the router
                ra = resp.headers.get("Retry-After")
                rec.status = "rejected"
                rec.reason = f"HTTP 429: {msg}" + (f" (Retry-After: {ra})" if ra is not None else "")
            else:
                rec.status = "failed"
                rec.reason = f"HTTP {resp.status}: {msg}"
            return
        parser = SSEParser()
        async for chunk in resp.content.iter_any():
            produced = parser.feed(chunk)
            if produced:
                t = now()
                if rec.first is None:
                    rec.first = t
                rec.last = t
                rec.content_chunks = parser.usage.content_chunks
            u = parser.usage
            rec.tokens = u.completion_tokens if u.completion_tokens is not None else u.content_chunks
        u = parser.usage
        rec.tokens = u.completion_tokens if u.completion_tokens is not None else u.content_chunks
        if u.errors:
            rec.status, rec.reason = "failed", f"stream error: {u.errors[0]}"[:300]
        elif not u.done:
            rec.status, rec.reason = "failed", f"stream cut without [DONE] after {rec.tokens} tokens"
        elif rec.tokens < rec.max_tokens:
            rec.status, rec.reason = "failed", f"short output: {rec.tokens} of {rec.max_tokens} tokens"
        elif rec.tokens > rec.max_tokens:
            rec.status, rec.reason = "failed", f"long output: {rec.tokens} tokens for max_tokens {rec.max_tokens}"
        else:
            rec.status, rec.reason = "ok", None


def _reason_key(reason: str) -> str:
    if reason.startswith("HTTP "):
        return reason[:8]
    for prefix in ("timeout", "transport error", "stream cut", "stream error", "short output", "long output",
                   "cancelled", "client error"):
        if reason.startswith(prefix):
            return prefix
    return reason[:40]


def _journal(writer: JournalWriter, rec: _Req, K: float, family: str | None, slo: str, prompt_tokens: int) -> None:
    row = empty_row()
    arrival = rec.planned * K
    row.update(
        request_id=rec.rid,
        family=family,
        slo_class=slo,
        prompt_tokens=int(prompt_tokens),
        output_tokens=int(rec.max_tokens),
        predicted_output_tokens=None,
        prefill_instance=rec.prefill_instance,
        decode_instance=rec.decode_instance,
        status=rec.status,
        reason=rec.reason,
        arrival_s=arrival,
        prefill_start_s=rec.send * K if rec.send is not None else None,
        prefill_end_s=None,
        decode_start_s=None,
        generated_tokens=int(rec.tokens),
        preemptions=-1,
    )
    if rec.first is not None:
        row["first_token_s"] = rec.first * K
        row["ttft_s"] = rec.first * K - arrival
    finish_t = rec.last if rec.last is not None else rec.send
    if finish_t is not None:
        row["finish_s"] = finish_t * K
        row["e2e_s"] = finish_t * K - arrival
    if rec.status == "ok" and rec.first is not None:
        row["tpot_s"] = tpot(row["e2e_s"], row["ttft_s"], int(rec.tokens))
    writer.write(row)


def replay_sync(trace: Trace | pd.DataFrame, url: str, **kwargs: Any) -> ReplayReport:
    """`replay` under ``asyncio.run`` (Ctrl-C: in-flight requests are journaled, then it re-raises)."""
    return run_sync(replay(trace, url, **kwargs))


def replay_process(trace: Trace, url: str, *, journal_path: str | Path, work_dir: str | Path,
                   time_scale: float = 1.0, progress: bool = False,
                   lag_threshold_s: float = DEFAULT_LAG_THRESHOLD_S) -> ReplayReport:
    """`replay` in a process of its own (``python -m repro.cli.loadgen``): the same replay, journal
    and report as `replay_sync`, but the client's event loop shares no interpreter with the caller.

    Why: in a Jupyter kernel (or any busy harness) the caller's interpreter also runs the kernel's
    threads and holds the GIL at times; a replay there lagged its schedule by 11-16 ms p99 on a
    2-core machine, which made live runs invalid at time scale 2. Its own process keeps the send lag
    to the replay's own work.

    ``work_dir`` receives ``trace.parquet`` (the trace the child replays), ``loadgen.json`` (the
    report) and ``loadgen.log`` (the child's output; with ``progress`` its progress bar goes to this
    process's stderr instead). The child runs at the live runs' priority (`live_nice`) and dies with
    this process; Ctrl-C here interrupts it, it journals its in-flight requests as failed
    ("cancelled"), and the KeyboardInterrupt propagates.
    A child that fails raises RuntimeError with the end of its log.
    """
    import signal
    import subprocess
    import sys

    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    trace_path = trace.save(work / "trace.parquet")
    report_path = work / "loadgen.json"
    report_path.unlink(missing_ok=True)
    log_path = work / "loadgen.log"
    cmd = [sys.executable, "-m", "repro.cli.loadgen", "--url", url, "--trace", str(trace_path),
           "--journal", str(journal_path), "--time-scale", repr(float(time_scale)),
           "--lag-threshold-ms", repr(lag_threshold_s * 1e3), "--report-json", str(report_path),
           "--parent-pid", str(os.getpid()), "--progress" if progress else "--no-progress"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=None if progress else subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=child_setup(live_nice()))
        try:
            rc = proc.wait()
        except BaseException as exc:  # Ctrl-C (or any error) here: the child journals what is in flight, then ends
            if isinstance(exc, KeyboardInterrupt):
                print("stopping: the load generator journals its requests in flight as failed (cancelled); "
                      "up to 30 s, Ctrl-C again to stop it at once", file=sys.stderr, flush=True)
            try:
                stop_process(proc, signal.SIGINT, timeout=30.0)
            except KeyboardInterrupt:  # the second Ctrl-C: at once (what it journaled so far stays)
                stop_process(proc, signal.SIGKILL, timeout=5.0)
            raise
    if rc != 0 or not report_path.exists():
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"load generator exited with code {rc}; {log_path} ends with:\n{tail}")
    return ReplayReport(**json.loads(report_path.read_text()))
