"""Proxy overhead side by side: the direct P/D client, vLLM's reference proxy design, vllm-router
(Rust, P/D mode) and our proxy (round_robin, marginal_cost), interleaved, in one sitting.

Usage: python3 -m benchmarks.bench_proxy [--rates 50,100,200] [--seconds 7] [--passes 2]
       [--time-scale 50] [--modes direct,vllm-ref,vllm-router,ours-rr,ours-mc] [--stream both]
       [--old-tree /work/main] [--out table.md]

One 1p1d emulated cluster at a high time scale (engine time is small, so overheads dominate); a
~41-token prompt, ``max_tokens`` 8 with ``ignore_eos``. Each cell is an open-loop Poisson stream at
one rate for ``--seconds`` wall seconds, the same arrival times for every mode, non-streaming (e2e)
and streaming (TTFT: the first chunk with content). The modes:

- ``direct``: the client runs vLLM's two-step P/D flow itself (no proxy): the reference;
- ``vllm-ref``: vLLM's reference disaggregated proxy design, FastAPI + httpx round-robin
  (`benchmarks/baseline_proxy.py`);
- ``vllm-router``: the Rust ``vllm-router`` in P/D mode, round-robin (`repro.live.external_router`);
- ``ours-rr`` / ``ours-mc``: our proxy (`repro.live.proxy`, journal and ``/metrics`` poller on)
  with policy round_robin / marginal_cost;
- ``--old-tree DIR`` adds ``old-rr`` / ``old-mc``: our proxy as checked out in DIR (e.g. the main
  branch), against the same engines, for before/after in the same sitting.

Each proxy is started fresh for each (pass, rate) and serves that rate's two cells; passes run
the modes in alternating order. Per cell: added p50/p99 = the mode's percentile minus the direct
client's in the same pass, rate and streaming mode (wall ms); the proxy process's CPU per request
(utime + stime of the process listening on its port and of its descendants, from /proc, ms per
request sent); HTTP errors (non-200, a broken exchange, or no answer within `CLIENT_TIMEOUT_S`);
the client's schedule lag (p99 of the actual send time minus the scheduled one, ms: above a few ms
the client, not the proxy, was late);
and the box's busy fraction (1 - idle share of /proc/stat's CPU time). Prints a markdown table;
asserts nothing. The policy decision time alone is `benchmarks/bench_router.py`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import numpy as np

from repro.cluster.launchers import launch
from repro.live.external_router import external_router, find_vllm_router, vllm_router_template
from repro.live.pd_protocol import SSEParser, decode_body, headers_for, prefill_body
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import free_port, proxy_process
from repro.workload.tokenizer import DEFAULT_TOKENIZER

MODEL = "Qwen/Qwen2.5-3B-Instruct"
PROMPT = "Please route this short request to a prefill engine and then a decode engine, thanks. " * 2 + "Go now."
MODES = ("direct", "vllm-ref", "vllm-router", "ours-rr", "ours-mc")
CLIENT_TIMEOUT_S = 10.0  # wall s: a request not answered by then is an error (a saturated proxy's
# backlog would otherwise take minutes to drain; the table then shows it as errors, not as latency)


# ---- the box, from /proc ---------------------------------------------------------------------------
def listener_pid(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` (127.0.0.1 or any address), from /proc."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{f[9]}]")
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields from 3 (state) on


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants now."""
    children: dict[int, list[int]] = {}
    for p in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        st = _stat(p)
        if st:
            children.setdefault(int(st[1]), []).append(p)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system, own + waited-for children) used so far by ``pids``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        st = _stat(p)
        if st:
            total += sum(int(x) for x in st[11:15])  # utime stime cutime cstime
    return total / tick


def box_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole box so far (busy = all but idle and iowait)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(f[:8])
    return total - f[3] - f[4], total


# ---- the client ------------------------------------------------------------------------------------
@dataclass
class Cell:
    """One measured cell: latencies (wall s: e2e, or TTFT when streaming), errors, schedule lags."""

    lat: list[float] = field(default_factory=list)
    errors: int = 0
    lags: list[float] = field(default_factory=list)
    sent: int = 0
    cpu_ms_per_req: float | None = None
    busy: float = 0.0

    def pct(self, q: float) -> float:
        return float(np.percentile(self.lat, q)) * 1e3 if self.lat else float("nan")

    def lag_p99_ms(self) -> float:
        return float(np.percentile(self.lags, 99)) * 1e3 if self.lags else float("nan")


def body_for(stream: bool) -> dict:
    return {"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "ignore_eos": True, "temperature": 0,
            "stream": stream}


async def _read(r: aiohttp.ClientResponse, stream: bool) -> float:
    """Read a whole answer; the perf_counter time of its first content (stream) or of its end (not)."""
    if not stream:
        await r.read()
        return time.perf_counter()
    parser, first = SSEParser(), None
    async for chunk in r.content.iter_any():
        if parser.feed(chunk) and first is None:
            first = time.perf_counter()
    if first is None or not parser.usage.done:
        raise ValueError("stream ended without content or [DONE]")
    return first


async def drive(send, arrivals: np.ndarray, cell: Cell) -> None:
    """Open loop: call ``send(i)`` at ``arrivals[i]`` wall seconds from now; fills ``cell``."""
    start = time.perf_counter()

    async def one(i: int) -> None:
        t = time.perf_counter()
        cell.lags.append(t - start - arrivals[i])
        try:
            await send(i, t)
        except (aiohttp.ClientError, TimeoutError, ValueError):  # a benchmark counts every failure
            cell.errors += 1

    tasks = []
    for i, at in enumerate(arrivals):
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    cell.sent = len(tasks)
    await asyncio.gather(*tasks)


async def client_cell(url: str | None, pre: str, dec: str, arrivals: np.ndarray, stream: bool, tag: str,
                      on_start=None) -> Cell:
    """One cell through ``url`` (None: the direct two-step flow to ``pre`` then ``dec``); a short warm-up
    at 20 req/s first (not measured); ``on_start()`` is called when the measured part starts."""
    body = body_for(stream)
    cell = Cell()
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as c:
        async def send(i: int, t0: float, record: bool = True) -> None:
            rid = f"{tag}-{i}-{'w' if not record else 'm'}"
            if url is None:
                headers = headers_for(rid)
                async with c.post(pre + "/v1/completions", json=prefill_body(body), headers=headers) as r:
                    if r.status != 200:
                        raise ValueError(f"prefill HTTP {r.status}")
                    kv = (await r.json()).get("kv_transfer_params")
                target, payload = dec + "/v1/completions", decode_body(body, kv)
            else:
                headers = {"X-Request-Id": rid}
                target, payload = url + "/v1/completions", body
            async with c.post(target, json=payload, headers=headers) as r:
                if r.status != 200:
                    raise ValueError(f"HTTP {r.status}")
                at = await _read(r, stream)
                if record:
                    cell.lat.append(at - t0)

        warm = Cell()
        await drive(lambda i, t0: send(10_000_000 + i, t0, False), np.arange(10) / 20.0, warm)
        if on_start:
            on_start()
        await drive(send, arrivals, cell)
    return cell


# ---- the proxies -----------------------------------------------------------------------------------
@contextmanager
def serving(mode: str, inst, pre: str, dec: str, time_scale: float, tmp: Path,
            old_tree: str | None) -> Iterator[str | None]:
    """The base URL of ``mode``'s proxy in front of the engines (None for ``direct``), stopped after."""
    if mode == "direct":
        yield None
    elif mode == "vllm-ref":  # started, health-checked and stopped like any external router
        root = Path(__file__).resolve().parents[1]
        template = (f"env PYTHONPATH={shlex.quote(str(root))} {shlex.quote(sys.executable)} "
                    f"{shlex.quote(str(root / 'benchmarks' / 'baseline_proxy.py'))} --port {{port}} "
                    "{prefill_urls:--prefill} {decode_urls:--decode}")
        with external_router(template, [pre], [dec], log_path=tmp / "vllm-ref.log") as url:
            yield url
    elif mode == "vllm-router":
        with external_router(vllm_router_template("round_robin"), [pre], [dec],
                             log_path=tmp / "vllm-router.log") as url:
            yield url
    else:
        tree_dir, policy = (old_tree, mode[4:]) if mode.startswith("old-") else (None, mode[5:])
        policy = {"rr": "round_robin", "mc": "marginal_cost"}[policy]
        cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in inst], journal=str(tmp / f"{mode}.jsonl"),
                          time_scale=time_scale, port=free_port(), policy=policy)
        here = os.getcwd()
        if tree_dir:  # `python -m repro.live.proxy` imports repro from the working directory
            os.chdir(tree_dir)
        try:
            ctx = proxy_process(cfg, tmp / mode)
            url = ctx.__enter__()
        finally:
            os.chdir(here)
        try:
            yield url
        finally:
            ctx.__exit__(None, None, None)


def measure_cell(url: str | None, pre: str, dec: str, arrivals: np.ndarray, stream: bool, tag: str) -> Cell:
    """`client_cell` plus the proxy's CPU (process tree of its port's listener) and the box's busy share."""
    pids: list[int] = []
    marks: dict[str, float | tuple[int, int]] = {}
    if url is not None:
        pid = listener_pid(urlsplit(url).port or 80)
        pids = tree(pid) if pid else []

    def on_start() -> None:
        marks["cpu"] = cpu_s(pids)
        marks["box"] = box_ticks()

    cell = asyncio.run(client_cell(url, pre, dec, arrivals, stream, tag, on_start))
    busy1, total1 = box_ticks()
    busy0, total0 = marks["box"]
    cell.busy = (busy1 - busy0) / max(total1 - total0, 1)
    if pids:
        cell.cpu_ms_per_req = (cpu_s(pids) - marks["cpu"]) * 1e3 / max(cell.sent, 1)
    return cell


# ---- the table -------------------------------------------------------------------------------------
def fmt(xs: list[float | None], spec: str = "+.1f") -> str:
    return "/".join("-" if x is None or x != x else format(x, spec) for x in xs)


def table(res: dict, rates: list[float], modes: list[str], streams: list[bool], passes: int) -> str:
    """The markdown table: one row per (rate, mode); pass values joined with '/'."""
    ps = range(passes)
    kinds = [("NS e2e", False), ("S TTFT", True)]
    kinds = [k for k in kinds if k[1] in streams]
    head = ["rate", "mode"]
    for name, _ in kinds:
        head += [f"{name} +p50", "+p99"]
    head += ["CPU ms/req " + "/".join("NS" if not s else "S" for s in streams), "errors", "lag p99 ms", "busy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rate in rates:
        for mode in modes:
            cells = {(p, s): res.get((p, rate, mode, s)) for p in ps for s in streams}
            row = [f"{rate:g}", mode]
            for _, s in kinds:
                for q in (50, 99):
                    vals = []
                    for p in ps:
                        c, d = cells[(p, s)], res.get((p, rate, "direct", s))
                        if c is None or d is None:
                            vals.append(None)
                        elif mode == "direct":
                            vals.append(c.pct(q))
                        else:
                            vals.append(c.pct(q) - d.pct(q))
                    row.append(fmt(vals, ".1f" if mode == "direct" else "+.1f"))
            row.append(" ; ".join(fmt([cells[(p, s)].cpu_ms_per_req if cells[(p, s)] else None for p in ps], ".2f")
                                  for s in streams))
            row.append(fmt([sum(cells[(p, s)].errors for s in streams if cells[(p, s)]) for p in ps], "d"))
            row.append(fmt([max(cells[(p, s)].lag_p99_ms() for s in streams if cells[(p, s)]) for p in ps], ".1f"))
            row.append(fmt([float(np.mean([cells[(p, s)].busy for s in streams if cells[(p, s)]])) for p in ps],
                           ".2f"))
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="50,100,200", help="req/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=7.0, help="wall seconds of load per cell")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--time-scale", type=float, default=50.0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--stream", choices=("both", "off", "only"), default="both")
    ap.add_argument("--old-tree", default=None, help="also run our proxy from this checkout (old-rr, old-mc)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if "direct" not in modes:
        modes.insert(0, "direct")
    if args.old_tree:
        modes += ["old-rr", "old-mc"]
    if "vllm-router" in modes and find_vllm_router() is None:
        print("vllm-router not found (pip install vllm-router, or $REPRO_VLLM_ROUTER): skipped", file=sys.stderr)
        modes.remove("vllm-router")
    streams = {"both": [False, True], "off": [False], "only": [True]}[args.stream]
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    res: dict = {}
    t_start = time.monotonic()
    with launch("1p1d", launcher="emulated", time_scale=args.time_scale) as inst, \
            tempfile.TemporaryDirectory() as tmp:
        pre = next(i.url for i in inst if i.role == "prefill")
        dec = next(i.url for i in inst if i.role == "decode")
        for p in range(args.passes):
            order = modes if p % 2 == 0 else modes[::-1]
            for rate in rates:
                rng = np.random.default_rng([args.seed, int(rate)])
                n = int(rate * args.seconds)
                arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
                for mode in order:
                    with serving(mode, inst, pre, dec, args.time_scale, Path(tmp), args.old_tree) as url:
                        for s in streams:
                            c = measure_cell(url, pre, dec, arrivals, s, f"{mode}-{p}-{rate:g}-{int(s)}")
                            res[(p, rate, mode, s)] = c
                            print(f"pass {p + 1} rate {rate:g} {mode:12s} {'S ' if s else 'NS'}: "
                                  f"p50 {c.pct(50):7.1f} p99 {c.pct(99):7.1f} ms, errors {c.errors}, "
                                  f"cpu {c.cpu_ms_per_req or 0:.2f} ms/req, lag p99 {c.lag_p99_ms():.1f} ms, "
                                  f"busy {c.busy:.2f}", file=sys.stderr, flush=True)
    n_tok = DEFAULT_TOKENIZER.count(PROMPT)
    text = (f"1p1d emulated, time scale {args.time_scale:g}, {n_tok}-token prompt, max_tokens 8 ignore_eos, "
            f"{args.seconds:g} s Poisson per cell, {args.passes} interleaved passes (values pass1/pass2/...), "
            f"{time.monotonic() - t_start:.0f} s in all.\n"
            "direct: absolute ms; others: added ms over direct (same pass). CPU: the proxy process per request "
            "sent (NS ; S). errors: both streaming modes. busy: the box's busy fraction.\n\n"
            + table(res, rates, modes, streams, args.passes))
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
