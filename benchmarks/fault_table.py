"""Each emulator fault driven through the proxy by the load generator: what happens, in a table.

    python benchmarks/fault_table.py [--requests 24] [--rate 2.5] [--time-scale 5]

An emulated 1p2d cluster (127.0.0.1) and one proxy with short time-outs; per fault a short open-loop
replay (streaming requests, as every live run) with the fault switched on 0.3 s in through the
dev-mode ``POST /_emulator/faults``, then lifted. Columns: the fault and where it was injected,
what the client saw (status counts, main reason), what the proxy's journal recorded, and whether
the accounting balanced (sent = ok + failed + rejected, client report = client journal, the
proxy journal has no unknown or duplicate request; `repro.live.run.check_live_accounting`). The
crash runs last (it leaves the engine dead).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

from repro.cluster.launchers import launch
from repro.experiment.journal import read as read_journal
from repro.experiment.metrics import AccountingError
from repro.live.loadgen import replay
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import check_live_accounting, free_port, proxy_process

FAULTS = [  # (label, engine, switch)
    ("none", None, []),
    ("slow:3", "decode-1", ["slow:3"]),
    ("errors:0.5", "prefill-0", ["errors:0.5"]),
    ("cut:8", "decode-1", ["cut:8"]),
    ("hang", "decode-1", ["hang"]),
    ("hang", "prefill-0", ["hang"]),
    ("dead-metrics:500", "decode-1", ["dead-metrics:500"]),
    ("dead-metrics:hang", "decode-1", ["dead-metrics:hang"]),
    ("kv-hold", "prefill-0", ["kv-hold"]),
    ("kv-drop", "prefill-0", ["kv-drop"]),
    ("diverge", "decode-1", ["diverge"]),
    ("crash", "decode-1", ["crash"]),
]


def trace(n: int, rate: float, seed: int, prefix: str) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "request_id": [f"{prefix}-{i:03d}" for i in range(n)],
        "arrival_s": np.cumsum(rng.exponential(1.0 / rate, n)),
        "prompt_tokens": rng.integers(100, 700, n),
        "output_tokens": rng.integers(40, 200, n),
        "slo_class": rng.choice(["tight", "loose"], n),
    })


def summary(statuses: pd.Series, reasons: pd.Series) -> str:
    c = Counter(statuses.astype(str))
    parts = [f"{k} {c[k]}" for k in ("ok", "failed", "rejected") if c.get(k)]
    top = Counter(_short(r) for r in reasons.dropna().astype(str)).most_common(1)
    return ", ".join(parts) + (f" ({top[0][0]})" if top else "")


def _short(reason: str) -> str:
    for key in ("stream cut", "HTTP 500", "HTTP 502", "HTTP 503", "HTTP 429", "Timeout", "timeout", "stream error",
                "injected"):
        if key in reason:
            if reason.startswith(("prefill ", "decode ")):
                return reason.split(":")[0] + ": " + key
            return key
    return reason[:40]


async def one(label, engine, switch, rig, args, k):
    tmp = rig["tmp"]
    df = trace(args.requests, args.rate, k, f"f{k}")
    engines = rig["engines"]

    async def inject():
        await asyncio.sleep(0.3)
        if engine:
            async with httpx.AsyncClient(timeout=5) as c:
                await c.post(engines[engine] + "/_emulator/faults", json={"faults": switch})

    t = time.monotonic()
    task = asyncio.create_task(inject())
    rep = await replay(df, rig["url"], journal_path=tmp / f"client-{k}.jsonl", time_scale=args.time_scale,
                       model=rig["model"], timeout_s=30.0)
    await task
    wall = time.monotonic() - t
    client = read_journal(tmp / f"client-{k}.jsonl")
    proxy = read_journal(rig["journal"])
    proxy = proxy[proxy.request_id.str.startswith(f"f{k}-")]
    try:
        check_live_accounting(rep, client, proxy)
        balanced = f"yes ({rep.sent} = {rep.ok} + {rep.failed} + {rep.rejected})"
    except AccountingError as exc:
        balanced = f"NO: {exc}"
    return (f"{label} @ {engine or '-'}", summary(client.status, client.reason), summary(proxy.status, proxy.reason),
            balanced, wall)


async def lift(rig, wait_s: float = 8.0):
    async with httpx.AsyncClient(timeout=5) as c:
        alive = []
        for name, url in rig["engines"].items():
            try:
                await c.post(url + "/_emulator/faults", json={"faults": []})
                alive.append(name)
            except httpx.HTTPError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            h = (await c.get(rig["url"] + "/health")).json()["instances"]
            if all(h[n] for n in alive):
                return
            await asyncio.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--rate", type=float, default=2.5,
                    help="physics requests/s (24 at 2.5 span ~2 s wall at time scale 5)")
    ap.add_argument("--time-scale", type=float, default=5.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fault-table-"))
    topo = {"name": "faults", "instances": [{"role": "prefill", "count": 1, "kv_budget_tokens": 6000},
                                            {"role": "decode", "count": 2}]}
    rows = []
    with launch(topo, "emulated", time_scale=args.time_scale, shared_process=False) as inst:  # crash kills one
        cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in inst], journal=str(tmp / "proxy.jsonl"),
                          time_scale=args.time_scale, port=free_port(), policy="round_robin", connect_timeout_s=1.0,
                          health_window_s=1.0)
        with proxy_process(cfg, tmp) as url:
            model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
            rig = {"url": url, "engines": {i.name: i.url for i in inst}, "tmp": tmp, "journal": tmp / "proxy.jsonl",
                   "model": model}
            for k, (label, engine, switch) in enumerate(FAULTS):
                rows.append(asyncio.run(one(label, engine, switch, rig, args, k)))
                asyncio.run(lift(rig))
    head = ("fault @ engine", "what the client saw", "what the proxy journal recorded", "accounting balanced", "wall s")
    table = [head] + [(a, b, c, d, f"{w:.1f}") for a, b, c, d, w in rows]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in table[1:]:
        print("| " + " | ".join(r) + " |")
    print(f"\n{args.requests} streaming requests per fault at {args.rate:g} req/s physics, "
          f"time scale {args.time_scale:g}; "
          f"journals under {tmp}")


if __name__ == "__main__":
    main()
