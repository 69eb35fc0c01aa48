"""Sweep wall time on each executor, and the proof that they write the same bytes.

Usage: python benchmarks/bench_sweep.py [--runs 200] [--requests 2000] [--jobs N] [--address HOST:PORT]
                                        [--skip serial,local,ray]

A grid of ``--runs`` simulated specs (mixed workload on 2p4d; policies x seeds x rates) is swept into a
fresh folder by each executor in turn: ``serial`` (one process), ``local`` (``--jobs`` worker processes,
default one per core) and ``ray`` (a Ray head this script starts on 127.0.0.1 with ``--jobs`` CPUs, or
the cluster at ``--address``). Prints each executor's wall seconds, runs per second and speed-up over
serial, and whether every journal and manifest is byte-identical to the first executor's (sha256 of
each file). Workers are started and warmed on a few tiny runs first, untimed. The simulation cache is
off, so every run is simulated. Asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import os
import tempfile
import time
from pathlib import Path

os.environ["REPRO_SIM_CACHE"] = "off"

from repro.experiment.executor import RayExecutor, SerialExecutor, local_ray_head, make_executor  # noqa: E402
from repro.experiment.runner import sweep  # noqa: E402
from repro.experiment.spec import RunSpec  # noqa: E402

POLICIES = ("round_robin", "least_loaded", "length_threshold", "marginal_cost", "marginal_cost_plus")


def grid(runs: int, requests: int) -> list[RunSpec]:
    base = RunSpec(workload="mixed", topology="2p4d", n_requests=requests)
    combos = itertools.product(range(1, 10_000), (12.0, 16.0, 20.0, 24.0), POLICIES)
    return [base.replace(seed=s, rate=r, policy=p) for s, r, p in itertools.islice(combos, runs)]


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--address", default=None, help="a running Ray head (default: start one here on 127.0.0.1)")
    ap.add_argument("--skip", default="", help="executors to leave out, comma list")
    args = ap.parse_args()
    specs = grid(args.runs, args.requests)
    skip = set(filter(None, args.skip.split(",")))
    print(f"{len(specs)} sim runs x {args.requests:,} requests (mixed, 2p4d, {len(POLICIES)} policies), "
          f"{os.cpu_count()} cores here, jobs {args.jobs}")
    print(f"{'executor':28s} {'wall s':>8s} {'runs/s':>8s} {'vs serial':>9s}  files identical to the first")
    first: dict[str, str] | None = None
    serial_s = None
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        for kind in ("serial", "local", "ray"):
            if kind in skip:
                continue
            if kind == "serial":
                ex = SerialExecutor()
            elif kind == "local":
                ex = stack.enter_context(make_executor("local", args.jobs))
            else:
                address = args.address or stack.enter_context(local_ray_head(cpus=args.jobs))
                ex = stack.enter_context(RayExecutor(address, None if args.address else args.jobs))
            if kind != "serial":  # workers started and warm before the clock starts (imports, Ray's upload)
                sweep(grid(2 * ex.jobs, 50), Path(tmp) / f"warm-{kind}", progress=False, executor=ex)
            out = Path(tmp) / kind
            t0 = time.perf_counter()
            sweep(specs, out, progress=False, executor=ex)
            wall = time.perf_counter() - t0
            files = digest(out)
            if first is None:
                first, same = files, "(reference)"
            else:
                same = "yes" if files == first else f"NO ({sum(files.get(k) != v for k, v in first.items())} differ)"
            serial_s = wall if kind == "serial" else serial_s
            ratio = f"{serial_s / wall:8.2f}x" if serial_s else "       -"
            print(f"{ex.describe():28s} {wall:8.1f} {len(specs) / wall:8.2f} {ratio}  {same} ({len(files)} files)")


if __name__ == "__main__":
    main()
