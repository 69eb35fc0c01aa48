"""Decision time of the router at production scale: `Router.route` (view + policy + ledger charge).

For pools of 8, 32, 128 and 512 instances (split 1:3 prefill:decode), each policy routes a steady
stream at 1,000 decisions per second of router clock, each request finishing after 4 s of that
clock (so the ledger holds a realistic in-flight book, ~4,000 requests), KV usage polled every
50 ms. Prints p50 / p99 wall-clock time per decision in microseconds (absolute numbers vary between
machines and with other load on this one; compare columns of one run, not machines).

``--baseline COMMIT`` also times the router of that commit (its ``repro/`` exported with
``git archive`` into a temporary folder, timed by this same script in a subprocess with that folder
on PYTHONPATH), cell by cell next to the current one, so that old and new share the machine's
conditions; ``--repeat N`` repeats every cell and prints the range over the repeats (min-max).
A baseline's exact scorer without the vectorized pricing (e.g. ``17da849``'s) is slow at 512 instances
(~45 ms a decision on the 2-core development machine, commit 93f3086: a minute and a half per cell at
the default 1,000 decisions).

    python benchmarks/bench_router.py                              # every size, the policies below
    python benchmarks/bench_router.py --sizes 128,512 --policies marginal_cost,marginal_cost:sample_d=2 \\
        --baseline 17da849 --repeat 3 --clock cpu

A policy is a registry name, optionally with integer options: ``marginal_cost:sample_d=2``.
The goal: p99 <= 200 us at 128 instances (32p96d) for the paper's scorer (``marginal_cost``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np

from repro.routing.cost_model import CostModel
from repro.routing.policies import make_policy
from repro.routing.policies.base import Placement, RequestInfo
from repro.routing.router import Router

POLICIES = ("round_robin", "least_loaded", "length_threshold", "marginal_cost", "marginal_cost:sample_d=2",
            "marginal_cost_batching", "marginal_cost_plus")
ROOT = Path(__file__).resolve().parents[1]


def parse_policy(spec: str) -> tuple[str, dict[str, int]]:
    """``name[:key=int,...]`` -> (name, options)."""
    name, _, opts = spec.partition(":")
    options = {k: int(v) for k, v in (kv.split("=") for kv in opts.split(",") if kv)}
    return name, options


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
"""wall: elapsed time (what a request waits; includes being descheduled by other load on the
machine); cpu: this thread's CPU time (the router's own work, without preemption by other processes)."""


def bench(policy: str, instances: int, decisions: int, rate: float = 1000.0, seed: int = 0,
          clock: str = "wall") -> np.ndarray:
    """Seconds (on ``clock``, `CLOCKS`) of each of ``decisions`` `Router.route` calls (after as many
    warm-up decisions)."""
    timer = CLOCKS[clock]
    n_p = max(1, instances // 4)
    n_d = instances - n_p
    cm = CostModel.load("calibrated")
    name, options = parse_policy(policy)
    router = Router(make_policy(name, cm, **options), cm, [f"p{i}" for i in range(n_p)],
                    [f"d{i}" for i in range(n_d)])
    rng = random.Random(seed)
    live: deque[tuple[float, str]] = deque()  # (finish time, request id), in finish order
    out = np.empty(decisions)
    now, last_poll = 0.0, -1.0
    for k in range(2 * decisions):
        now += rng.expovariate(rate)
        while live and live[0][0] <= now:  # settle what finished (prefill done just before)
            _, rid = live.popleft()
            router.prefill_done(rid, now)
            router.finish(rid, now)
        if now - last_poll >= 0.05:
            for i in range(n_d):
                router.observe_kv("decode", i, rng.random() * 0.9, now)
            last_poll = now
        req = RequestInfo(f"r{k}", rng.randint(50, 4000), float(rng.randint(10, 1500)),
                          "tight" if rng.random() < 0.5 else "loose", now)
        t0 = timer()
        decision = router.route(req, now)
        dt = timer() - t0
        if k >= decisions:
            out[k - decisions] = dt
        if isinstance(decision, Placement):
            live.append((now + 4.0, req.request_id))  # FIFO: every request lives 4 s of router clock
    return out


def percentiles(policy: str, instances: int, decisions: int, clock: str = "wall") -> tuple[float, float]:
    """(p50, p99) of `bench` in microseconds."""
    t = bench(policy, instances, decisions, clock=clock) * 1e6
    return float(np.percentile(t, 50)), float(np.percentile(t, 99))


def export_commit(commit: str, into: Path) -> Path:
    """``repro/`` (and its data) of ``commit`` under ``into`` (git archive), for PYTHONPATH."""
    tar = into / "src.tar"
    with tar.open("wb") as fh:
        subprocess.run(["git", "-C", str(ROOT), "archive", commit, "repro", "data"], stdout=fh, check=True)
    with tarfile.open(tar) as tf:
        tf.extractall(into, filter="data")
    return into


def baseline_cell(src: Path, policy: str, instances: int, decisions: int, clock: str) -> tuple[float, float] | None:
    """(p50, p99) of the router exported in ``src`` (this script in a subprocess), or None if that
    commit's router does not run the policy (e.g. an option it did not have)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, __file__, "--cell", policy, str(instances), str(decisions),
                          "--clock", clock],
                         capture_output=True, text=True, env=env, cwd=src)
    if out.returncode != 0:
        return None
    p50, p99 = json.loads(out.stdout.strip().splitlines()[-1])
    return p50, p99


def cell_text(values: list[tuple[float, float]]) -> str:
    """``p50 / p99``, or ``lo-hi / lo-hi`` over repeats."""
    if not values:
        return "n/a"
    p50 = [v[0] for v in values]
    p99 = [v[1] for v in values]

    def span(x: list[float]) -> str:
        return f"{min(x):.0f}" if len(x) == 1 else f"{min(x):.0f}-{max(x):.0f}"

    return f"{span(p50)} / {span(p99)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,32,128,512", help="instances per cluster, comma-separated")
    ap.add_argument("--decisions", type=int, default=1000, help="timed decisions per (policy, size)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated; name[:key=int]")
    ap.add_argument("--baseline", metavar="COMMIT", help="also time the router of this commit (e.g. 17da849)")
    ap.add_argument("--repeat", type=int, default=1, help="times each cell is measured (ranges printed)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall: elapsed time; cpu: the thread's CPU time (without preemption by other load)")
    ap.add_argument("--cell", nargs=3, metavar=("POLICY", "INSTANCES", "DECISIONS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cell:  # the baseline's worker: one cell, as JSON
        print(json.dumps(percentiles(args.cell[0], int(args.cell[1]), int(args.cell[2]), args.clock)))
        return
    sizes = [int(x) for x in args.sizes.split(",")]
    policies = [p for p in args.policies.split(",") if p]
    with tempfile.TemporaryDirectory() as tmp:
        src = export_commit(args.baseline, Path(tmp)) if args.baseline else None
        print(f"Router.route {args.clock} time per decision, p50 / p99 in us ({args.decisions} timed decisions "
              f"at 1,000/s of router clock, ~4,000 in flight; pools 1:3; {args.repeat} repeat(s), ranges over them)")
        if src is not None:
            print(f"'old' = commit {args.baseline}, 'new' = this tree; measured alternately, cell by cell")
        head = f"{'policy':<26}{'':<5}" + "".join(f"{f'{s} ({max(1, s // 4)}p{s - max(1, s // 4)}d)':>28}"
                                                  for s in sizes)
        print(head)
        for p in policies:
            new: list[list[tuple[float, float]]] = [[] for _ in sizes]
            old: list[list[tuple[float, float]]] = [[] for _ in sizes]
            for _ in range(args.repeat):
                for j, s in enumerate(sizes):
                    if src is not None:
                        cell = baseline_cell(src, p, s, args.decisions, args.clock)
                        if cell is not None:
                            old[j].append(cell)
                    new[j].append(percentiles(p, s, args.decisions, args.clock))
            rows = [("new", new)] if src is None else [("old", old), ("new", new)]
            for label, cells in rows:
                print(f"{p:<26}{label:<5}" + "".join(f"{cell_text(c):>28}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
