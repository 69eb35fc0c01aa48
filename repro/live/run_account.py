"""Where a live run's time and CPU went: each engine's own account of its requests, and the CPU of every process.

- `request_times`: an engine's request-level histograms (vLLM 0.32's ``vllm:request_queue_time_seconds``,
  ``request_prefill_time_seconds``, ``request_decode_time_seconds``, ``request_inference_time_seconds``,
  ``e2e_request_latency_seconds``, ``time_to_first_token_seconds``: `vllm/v1/metrics/loggers.py`,
  ``PrometheusStatLogger``; the emulated engine exports the same) as sums and counts; `request_time_delta`
  turns two scrapes around a run into each engine's mean per request (seconds). vLLM times them from its
  ``RequestStateStats`` (`vllm/v1/metrics/stats.py`): queued -> scheduled (queue), scheduled -> first
  token (prefill), first -> last token (decode), scheduled -> last token (inference), and the API server's
  arrival -> finish (e2e) and arrival -> first token (TTFT). The e2e minus queue and inference is the time
  the request spent in the engine's frontend (the API server process: HTTP, tokenization, the hand-off to
  the engine core and the detokenized answer).
- `CpuAccount`: a sampler of ``/proc/<pid>/stat`` (every ``period_s``, and at its start and stop) that books
  each process's CPU seconds to a part of the run: each engine's frontend (the process the launcher
  started, vLLM's API server), its engine core (the child vLLM names ``VLLM::EngineCore``: the scheduler) and
  its workers (``VLLM::Worker``: the model's forward passes, on CPU a process of their own), the proxy, the
  load generator, the rest of the driver's process tree, and everything outside the run. A process that ends in between
  counts up to its last sample. ``shares`` divides by the machine's CPU time over the interval (wall x
  cores): what part of the machine's capacity each part took; ``series`` each part's CPU seconds since the
  start at every sample (with the samples' Unix times), so that a window of the run (its steady part, without
  the processes' start-up) can be booked alone (`repro.validation.host`).

Seconds throughout; CPU in CPU seconds.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

REQUEST_METRICS: tuple[str, ...] = (
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:time_to_first_token_seconds",
)
"""The request-level histograms of an engine (`request_times`)."""


def request_times(urls: Sequence[str], timeout_s: float = 30.0) -> dict[str, dict[str, tuple[float, float]]]:
    """Each engine's `REQUEST_METRICS` as (sum in s, count) now, by URL; an engine that does not answer, or a
    metric it does not export, is left out."""
    from repro.live.calibration_bench import parse_metrics

    out: dict[str, dict[str, tuple[float, float]]] = {}
    for url in urls:
        try:
            r = httpx.get(url.rstrip("/") + "/metrics", timeout=timeout_s)
        except httpx.HTTPError:
            continue
        if r.status_code != 200:
            continue
        m = parse_metrics(r.text)
        out[url] = {name: (m[f"{name}_sum"], m.get(f"{name}_count", 0.0)) for name in REQUEST_METRICS
                    if f"{name}_sum" in m}
    return out


def request_time_delta(before: Mapping[str, Mapping[str, tuple[float, float]]],
                       after: Mapping[str, Mapping[str, tuple[float, float]]],
                       names: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Per engine (``names``: URL -> engine name), the requests it finished between the two scrapes and each
    metric's mean per request (``<metric short name>_s``, e.g. ``queue_s``), with ``frontend_s`` = e2e -
    queue - inference where all three are there."""
    out: dict[str, dict[str, float]] = {}
    for url, name in names.items():
        b, a = before.get(url) or {}, after.get(url) or {}
        row: dict[str, float] = {}
        for metric in REQUEST_METRICS:
            if metric not in a or metric not in b:
                continue
            s, c = a[metric][0] - b[metric][0], a[metric][1] - b[metric][1]
            short = metric.removeprefix("vllm:").removeprefix("request_").removesuffix("_seconds")
            short = {"e2e_request_latency": "e2e", "queue_time": "queue", "prefill_time": "prefill",
                     "decode_time": "decode", "inference_time": "inference", "time_to_first_token": "ttft"}[short]
            row["requests"] = max(row.get("requests", 0.0), c)
            if c > 0:
                row[f"{short}_s"] = s / c
        if {"e2e_s", "queue_s", "inference_s"} <= set(row):
            row["frontend_s"] = row["e2e_s"] - row["queue_s"] - row["inference_s"]
        out[name] = row
    return out


def proc_table() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (parent pid, start time in ticks, CPU ticks, name), from ``/proc``."""
    out = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            text = (d / "stat").read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1:text.rfind(")")]
        rest = text[text.rfind(")") + 2:].split()
        try:
            out[int(d.name)] = (int(rest[1]), int(rest[19]), int(rest[11]) + int(rest[12]), name)
        except (IndexError, ValueError):
            continue
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class CpuAccount:
    """CPU seconds of a live run's parts over an interval (see the module docstring). ``engines``: engine name ->
    the pid of the process its launcher started (an engine of another machine, or without a pid, is not
    seen); ``driver``: the pid whose process tree holds the proxy and the load generator (default: this
    process). Use `start`, then `stop` (or as a context manager); `shares` after."""

    def __init__(self, engines: Mapping[str, int], *, driver: int | None = None, period_s: float = 1.0) -> None:
        self.engines = {name: int(pid) for name, pid in engines.items() if pid}
        self.driver = driver or os.getpid()
        self.period_s = period_s
        self.tick = os.sysconf("SC_CLK_TCK")
        self.cores = os.cpu_count() or 1
        self._first: dict[tuple[int, int], int] = {}
        self._last: dict[tuple[int, int], int] = {}
        self._part: dict[tuple[int, int], str] = {}
        self._times: list[float] = []  # Unix time of every sample
        self._series: list[dict[str, float]] = []  # each part's CPU seconds since the start, at every sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = 0.0

    def _classify(self, pid: int, table: dict[int, tuple[int, int, int, str]]) -> str:
        chain, p = [], pid
        while p in table and p not in chain and len(chain) < 64:
            chain.append(p)
            if p in self.engines.values() or p == self.driver:
                break
            p = table[p][0]
        root = chain[-1] if chain else pid
        for name, epid in self.engines.items():
            if root == epid:
                comm = table[pid][3]
                return (f"{name}:core" if "EngineCor" in comm else f"{name}:worker" if comm.startswith("VLLM::")
                        else f"{name}:frontend")
        if root == self.driver:
            if pid == self.driver:
                return "driver"
            comm, cmd = table[pid][3], _cmdline(pid)
            if "repro.cli.loadgen" in cmd:
                return "loadgen"
            if "repro.live.proxy" in cmd:
                return "proxy"
            # engines the driver started but the run was not told of (a cluster held for a whole validation):
            # booked by role, all engines together
            if "EngineCor" in comm:
                return "engines:core"
            if comm.startswith("VLLM::"):
                return "engines:worker"
            if "vllm.entrypoints" in cmd or "repro.emulator" in cmd:
                return "engines:frontend"
            return "driver"
        return "outside"

    def _sample(self) -> None:
        table = proc_table()
        for pid, (_, start, cpu, _) in table.items():
            key = (pid, start)
            if key not in self._part:
                self._part[key] = self._classify(pid, table)
                self._first[key] = cpu if self._thread is None else 0  # started during the interval: all of it
            self._last[key] = cpu
        self._times.append(time.time())
        self._series.append(self.cpu_s())

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def start(self) -> CpuAccount:
        self._sample()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="cpu-account", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self._t1 = time.monotonic()

    def __enter__(self) -> CpuAccount:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds per part (sorted by name)."""
        out: dict[str, float] = {}
        for key, part in self._part.items():
            out[part] = out.get(part, 0.0) + (self._last[key] - self._first.get(key, 0)) / self.tick
        return dict(sorted(out.items()))

    def series(self) -> dict[str, Any]:
        """``t_unix`` (every sample's Unix time, s) and ``cpu_s``: per part, its CPU seconds since the start at
        each sample (0 before it was first seen)."""
        parts = sorted({p for row in self._series for p in row})
        return {"t_unix": [round(t, 3) for t in self._times],
                "cpu_s": {p: [round(row.get(p, 0.0), 3) for row in self._series] for p in parts}}

    def shares(self) -> dict[str, Any]:
        """``wall_s``, ``cores``, ``cpu_s`` per part, and ``share`` per part: its CPU seconds over the machine's
        (wall x cores); ``idle`` is what no process took."""
        wall = max(self._t1 - self._t0, 1e-9)
        cpu = self.cpu_s()
        share = {k: v / (wall * self.cores) for k, v in cpu.items()}
        share["idle"] = max(0.0, 1.0 - sum(share.values()))
        return {"wall_s": wall, "cores": self.cores, "cpu_s": cpu, "share": share}
