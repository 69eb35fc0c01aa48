"""Decision time of the router at production scale: `Router.route` (view + policy + ledger charge).

For pools of 8, 32, 128 and 512 instances (split 1:3 prefill:decode), each policy routes a steady
stream at 1,000 decisions per second of router clock, each request finishing after a few seconds
of that clock (so the ledger holds a realistic in-flight book, ~O(4,000) requests), KV usage polled
every 50 ms. Prints p50 / p99 wall-clock time per decision in microseconds, side by side in one run
(absolute numbers vary between machines; compare columns, not machines).

    python benchmarks/bench_router.py                     # every size, the paper's four + ours
    python benchmarks/bench_router.py --sizes 8,128 --decisions 2000 --policies marginal_cost

Issue 15's goal: p99 <= 200 us at 128 instances (32p96d) for the paper's scorer.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque

import numpy as np

from repro.routing.cost_model import CostModel
from repro.routing.policies import make_policy
from repro.routing.policies.base import Placement, RequestInfo
from repro.routing.router import Router

POLICIES = ("round_robin", "least_loaded", "length_threshold", "marginal_cost", "marginal_cost_batching",
            "marginal_cost_plus")


def bench(policy: str, instances: int, decisions: int, rate: float = 1000.0, seed: int = 0) -> np.ndarray:
    """Wall seconds of each of ``decisions`` `Router.route` calls (after as many warm-up decisions)."""
    n_p = max(1, instances // 4)
    n_d = instances - n_p
    cm = CostModel.load("calibrated")
    router = Router(make_policy(policy, cm), cm, [f"p{i}" for i in range(n_p)], [f"d{i}" for i in range(n_d)])
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
        t0 = time.perf_counter()
        decision = router.route(req, now)
        dt = time.perf_counter() - t0
        if k >= decisions:
            out[k - decisions] = dt
        if isinstance(decision, Placement):
            live.append((now + 4.0, req.request_id))  # FIFO: every request lives 4 s of router clock
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,32,128,512", help="instances per cluster, comma-separated")
    ap.add_argument("--decisions", type=int, default=1000, help="timed decisions per (policy, size)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    policies = [p for p in args.policies.split(",") if p]
    print(f"Router.route wall time per decision, p50 / p99 in us ({args.decisions} timed decisions at 1,000/s of "
          "router clock, ~4,000 in flight; pools 1:3)")
    head = f"{'policy':<24}" + "".join(f"{f'{s} ({max(1, s // 4)}p{s - max(1, s // 4)}d)':>22}" for s in sizes)
    print(head)
    for p in policies:
        cells = []
        for s in sizes:
            t = bench(p, s, args.decisions) * 1e6
            cells.append(f"{np.percentile(t, 50):>9.0f} / {np.percentile(t, 99):<9.0f}")
        print(f"{p:<24}" + "".join(f"{c:>22}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
