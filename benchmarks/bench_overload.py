"""Overload and soak: is the proxy still responsive, is its memory bounded, is nothing lost?

    python benchmarks/bench_overload.py                      # 2x saturation (32 req/s), ~60 s wall
    python benchmarks/bench_overload.py --soak 600           # ten minutes at the operating point (16 req/s)
    python benchmarks/bench_overload.py --rate 32 --duration 60 --time-scale 2 --policy marginal_cost

An emulated 2p4d cluster (127.0.0.1) behind the proxy (its own process, default time-outs), the
``mixed`` workload replayed open loop by the load generator. Meanwhile a sampler thread calls the
proxy's ``GET /health`` every 0.2 s (latency p50/p99/max and any failure or non-answer within 2 s)
and reads the proxy's RSS from ``/proc/<pid>/status`` every second. At the end: sent = ok + failed
+ rejected is checked on the load generator's report, its journal and the proxy's journal
(`repro.live.run.check_live_accounting`; a mismatch exits non-zero), and the memory trajectory is
printed (start, after warm-up, peak, end; growth from the end of the first tenth of the run).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from repro.cluster.launchers import launch
from repro.experiment.journal import read as read_journal
from repro.experiment.metrics import AccountingError
from repro.live.loadgen import replay_sync
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import check_live_accounting, free_port, proxy_process
from repro.workload.traces import make_trace

SATURATION_RATE = 16.0  # mixed workload on 2p4d: the operating point (req/s physics)


def proxy_pid(conf: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"repro.live.proxy" in cmd and str(conf).encode() in cmd:
                return int(entry.name)
    return None


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


class Sampler(threading.Thread):
    def __init__(self, url: str, pid: int, period_s: float = 0.2):
        super().__init__(daemon=True)
        self.url, self.pid, self.period = url, pid, period_s
        self.stop = threading.Event()
        self.health: list[float] = []  # seconds
        self.health_failures = 0
        self.rss: list[tuple[float, float]] = []  # (elapsed s, MiB)
        self.t0 = time.monotonic()

    def run(self) -> None:
        last_rss = -1.0
        with httpx.Client(timeout=2.0) as c:
            while not self.stop.is_set():
                t = time.perf_counter()
                try:
                    r = c.get(self.url + "/health")
                    if r.status_code != 200:
                        self.health_failures += 1
                    self.health.append(time.perf_counter() - t)
                except httpx.HTTPError:
                    self.health_failures += 1
                now = time.monotonic() - self.t0
                if now - last_rss >= 1.0:
                    try:
                        self.rss.append((now, rss_mib(self.pid)))
                    except OSError:
                        pass
                    last_rss = now
                self.stop.wait(self.period)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=None, help="req/s physics (default: 2 x 16, or 16 with --soak)")
    ap.add_argument("--duration", type=float, default=60.0, help="wall seconds of arrivals (default 60)")
    ap.add_argument("--soak", type=float, default=None, metavar="S", help="soak: S wall seconds at the operating point")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--policy", default="marginal_cost")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    args = ap.parse_args()
    duration = args.soak if args.soak is not None else args.duration
    rate = args.rate if args.rate is not None else (SATURATION_RATE if args.soak is not None else 2 * SATURATION_RATE)
    K = args.time_scale
    n = max(1, int(rate * duration * K))  # arrivals span `duration` wall seconds
    trace = make_trace("mixed", args.seed, rate, n)
    tmp = Path(tempfile.mkdtemp(prefix="overload-"))
    print(f"{'soak' if args.soak is not None else 'overload'}: 2p4d emulated, mixed at {rate:g} req/s physics "
          f"({n} requests over ~{duration:g} s wall, time scale {K:g}), policy {args.policy}; files in {tmp}",
          flush=True)
    with launch("2p4d", "emulated", time_scale=K) as inst:
        cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in inst], policy=args.policy,
                          journal=str(tmp / "proxy.jsonl"), time_scale=K, port=free_port())
        with proxy_process(cfg, tmp) as url:
            pid = proxy_pid(tmp / "proxy.json")
            sampler = Sampler(url, pid)
            sampler.start()
            t = time.monotonic()
            report = replay_sync(trace, url, journal_path=tmp / "client.jsonl", time_scale=K, timeout_s=300.0)
            wall = time.monotonic() - t
            time.sleep(1.0)
            sampler.stop.set()
            sampler.join()
    client = read_journal(tmp / "client.jsonl")
    proxy = read_journal(tmp / "proxy.jsonl")
    try:
        counts = check_live_accounting(report, client, proxy)
        balanced, ok = (f"yes: sent {report.sent} = ok {counts['ok']} + failed {counts['failed']} "
                        f"+ rejected {counts['rejected']}"), True
    except AccountingError as exc:
        balanced, ok = f"NO: {exc}", False
    lost = report.sent - len(client)
    h = np.asarray(sampler.health) * 1e3
    rss = sampler.rss
    mib = np.asarray([m for _, m in rss])
    warm = mib[max(0, len(mib) // 10)] if len(mib) else float("nan")
    fig = {
        "rate": rate, "time_scale": K, "requests": n, "wall_s": wall, "sent": report.sent, "ok": report.ok,
        "failed": report.failed, "rejected": report.rejected, "lost": lost, "accounting": balanced,
        "reasons": report.reasons, "keeping_up": report.keeping_up, "lag_p99_ms": report.lag_p99_s * 1e3,
        "health_samples": int(h.size), "health_failures": sampler.health_failures,
        "health_p50_ms": float(np.percentile(h, 50)) if h.size else None,
        "health_p99_ms": float(np.percentile(h, 99)) if h.size else None,
        "health_max_ms": float(h.max()) if h.size else None,
        "rss_start_mib": float(mib[0]) if len(mib) else None, "rss_after_warmup_mib": float(warm),
        "rss_peak_mib": float(mib.max()) if len(mib) else None, "rss_end_mib": float(mib[-1]) if len(mib) else None,
        "rss_growth_after_warmup_mib": float(mib[-1] - warm) if len(mib) else None,
        "proxy_rows": len(proxy),
    }
    print(f"requests: sent {report.sent}, ok {report.ok}, failed {report.failed}, rejected {report.rejected}, "
          f"lost {lost} (wall {wall:.1f} s; client kept to schedule: {report.keeping_up}, "
          f"lag p99 {fig['lag_p99_ms']:.1f} ms)")
    for reason, k in sorted(report.reasons.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {k} x {reason}")
    print(f"accounting balanced: {balanced}")
    if h.size:
        print(f"/health during the run: {h.size} samples, p50 {fig['health_p50_ms']:.1f} ms, "
              f"p99 {fig['health_p99_ms']:.1f} ms, "
              f"max {fig['health_max_ms']:.1f} ms, failures {sampler.health_failures}")
    if len(mib):
        step = max(1, len(rss) // 10)
        traj = ", ".join(f"{t:.0f}s {m:.0f}" for t, m in rss[::step])
        print(f"proxy RSS MiB: start {mib[0]:.0f}, after warm-up {warm:.0f}, peak {mib.max():.0f}, end {mib[-1]:.0f} "
              f"(growth after warm-up {mib[-1] - warm:+.1f} MiB); over time: {traj}")
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2, default=str) + "\n")
    return 0 if ok and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
