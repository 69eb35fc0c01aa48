"""Proxy overhead: added latency vs going straight to the engines, the highest sustained rate, and
the policy decision time, with a minimal round-robin FastAPI + httpx proxy as the baseline.

Usage: python benchmarks/bench_proxy.py [--rates 50,100,200] [--seconds 8] [--time-scale 50]

One 1p1d emulated cluster at a high time scale (so engine time is small and overheads dominate).
For each rate, the same open-loop stream of small non-streaming requests (max_tokens 2) is sent
(a) directly (the client runs the two-step P/D flow itself), (b) through the baseline proxy,
(c) through our proxy (policy marginal_cost, journal on, metrics poller on). Added latency =
percentile of (b) or (c) minus the same percentile of (a), in wall milliseconds. Then our proxy is
pushed up a rate ladder until it stops keeping up. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import numpy as np

from repro.cluster.launchers import launch
from repro.live.pd_protocol import decode_body, headers_for, prefill_body
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import free_port, proxy_process
from repro.routing.cost_model import CostModel
from repro.routing.policies import PAPER_POLICIES, make_policy
from repro.routing.policies.base import RequestInfo
from repro.routing.router import Router

MODEL = "Qwen/Qwen2.5-3B-Instruct"
BODY = {
    "model": MODEL, "prompt": "route this request please " * 8, "max_tokens": 2, "ignore_eos": True, "temperature": 0,
}


async def drive(rate: float, seconds: float, send) -> tuple[list[float], int, float]:
    """Open loop at ``rate`` for ``seconds``: latencies (s), failures, p99 schedule lag (s)."""
    n = int(rate * seconds)
    lat: list[float] = []
    lags: list[float] = []
    fails = 0
    start = time.perf_counter()

    async def one(i: int) -> None:
        nonlocal fails
        t = time.perf_counter()
        lags.append(t - (start + i / rate))
        try:
            await send(i)
            lat.append(time.perf_counter() - t)
        except Exception:  # a benchmark counts every failure
            fails += 1

    tasks = []
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return lat, fails, float(np.percentile(lags, 99)) if lags else 0.0


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) * 1e3 if xs else float("nan")


async def measure(
    mode: str, url: str | None, pre: str, dec: str, rate: float, seconds: float
) -> tuple[list[float], int, float]:
    """The client is aiohttp in every mode (cheap enough that it is not the bottleneck)."""
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as c:
        if mode == "direct":  # the client runs vLLM's two-step P/D flow itself
            async def send(i: int) -> None:
                headers = headers_for(f"d{rate}-{i}")
                async with c.post(pre + "/v1/completions", json=prefill_body(BODY), headers=headers) as r:
                    r.raise_for_status()
                    kv = (await r.json()).get("kv_transfer_params")
                async with c.post(dec + "/v1/completions", json=decode_body(BODY, kv), headers=headers) as r:
                    r.raise_for_status()
                    await r.read()
        else:
            async def send(i: int) -> None:
                async with c.post(url + "/v1/completions", json=BODY,
                                  headers={"X-Request-Id": f"{mode}{rate}-{i}"}) as r:
                    r.raise_for_status()
                    await r.read()
        await drive(min(rate, 20), 1.0, send)  # warm connections
        return await drive(rate, seconds, send)


def decision_times(n: int = 20000) -> None:
    print("\npolicy decision time, 4 prefill x 4 decode (8 instances), router.route incl. view + ledger (us)")
    cm = CostModel.load("calibrated")
    rng = np.random.default_rng(0)
    for name in PAPER_POLICIES:
        router = Router(make_policy(name, cm), cm, [f"p{i}" for i in range(4)], [f"d{i}" for i in range(4)])
        times = []
        for k in range(n):
            now = k * 0.01
            for i in range(4):
                router.observe_kv("decode", i, float(rng.random()) * 0.8, now)
            req = RequestInfo(f"r{k}", int(rng.integers(10, 4000)), float(rng.integers(10, 3000)),
                              "tight" if k % 2 else "loose", now)
            t = time.perf_counter()
            router.route(req, now)
            times.append(time.perf_counter() - t)
            if k >= 64:
                router.finish(f"r{k - 64}", now)
        us = np.asarray(times) * 1e6
        print(f"   {name:18s} p50 {np.percentile(us, 50):6.1f}   p99 {np.percentile(us, 99):6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="50,100,200")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--time-scale", type=float, default=50.0)
    ap.add_argument("--ladder", default="200,300,400,600,800")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    with launch("1p1d", launcher="emulated", time_scale=args.time_scale) as inst, tempfile.TemporaryDirectory() as tmp:
        pre = next(i.url for i in inst if i.role == "prefill")
        dec = next(i.url for i in inst if i.role == "decode")
        base_port = free_port()
        base = subprocess.Popen([sys.executable, str(Path(__file__).with_name("baseline_proxy.py")),
                                 "--port", str(base_port), "--prefill", pre, "--decode", dec])
        cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in inst], journal=f"{tmp}/j.jsonl",
                          time_scale=args.time_scale, port=free_port())
        try:
            with proxy_process(cfg, Path(tmp)) as ours:
                base_url = f"http://127.0.0.1:{base_port}"
                for _ in range(50):
                    try:
                        if httpx.get(base_url + "/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        time.sleep(0.1)
                print(f"added latency over the direct P/D path (wall ms), 1p1d emulated at time scale "
                      f"{args.time_scale:g}, {args.seconds:g} s per point")
                print(f"   {'rate':>5s} | {'direct p50/p99':>15s} | {'baseline +p50/+p99':>19s} | "
                      f"{'ours +p50/+p99':>15s} | failures d/b/o")
                for rate in rates:
                    res = {}
                    for mode, url in (("direct", None), ("baseline", base_url), ("ours", ours)):
                        res[mode] = asyncio.run(measure(mode, url, pre, dec, rate, args.seconds))
                    d, b, o = res["direct"][0], res["baseline"][0], res["ours"][0]
                    print(
                        f"   {rate:5.0f} | {pct(d, 50):6.2f} / {pct(d, 99):6.2f} | "
                        f"{pct(b, 50) - pct(d, 50):+8.2f} / {pct(b, 99) - pct(d, 99):+8.2f} |"
                        f" {pct(o, 50) - pct(d, 50):+6.2f} / {pct(o, 99) - pct(d, 99):+6.2f} | "
                        f"{res['direct'][1]}/{res['baseline'][1]}/{res['ours'][1]}"
                    )
                print("\nrate ladder through our proxy "
                      "(sustained = no failures, client lag p99 < 20 ms, p99 < 4x the first point's)")
                first_p99 = None
                best = 0.0
                for rate in [float(r) for r in args.ladder.split(",")]:
                    lat, fails, lag = asyncio.run(measure("ours", ours, pre, dec, rate, args.seconds))
                    p99 = pct(lat, 99)
                    first_p99 = first_p99 or p99
                    ok = fails == 0 and lag < 0.02 and p99 < 4 * first_p99
                    print(f"   {rate:5.0f} req/s: p50 {pct(lat, 50):6.2f} ms  p99 {p99:7.2f} ms  failures {fails}  "
                          f"client lag p99 {lag * 1e3:6.1f} ms  {'sustained' if ok else 'NOT sustained'}")
                    if not ok:
                        break
                    best = rate
                print(f"   highest sustained rate: {best:g} req/s")
        finally:
            base.terminate()
            base.wait(10)
    decision_times()


if __name__ == "__main__":
    main()
