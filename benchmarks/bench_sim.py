"""Simulator speed: simulated requests per wall-second and speed-up over real time.

Usage: python benchmarks/bench_sim.py [--requests 100000] [--rate R] [--sweep-requests 10000]

1. ``mixed`` at 2p4d near saturation (the rate found by the saturation search unless ``--rate``),
   ``--requests`` requests, each of the paper's four policies: phases timed separately (trace,
   predictor, simulation, journal write) and the speed-up = simulated span / wall time.
2. The headline sweep (4 policies x 3 traces, ``--sweep-requests`` each) end to end, as
   `repro.experiment.run` does it (trace, predictor, simulation, journal, manifest).

Prints figures; asserts nothing (timings vary by machine).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from repro.cluster.topology import pools
from repro.experiment.inputs import build_predictions, build_trace, make_router
from repro.experiment.journal import write_frame
from repro.experiment.runner import run
from repro.experiment.saturation import saturation_search
from repro.experiment.spec import RunSpec
from repro.routing.policies import PAPER_POLICIES
from repro.sim.simulator import SimConfig, Simulator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--sweep-requests", type=int, default=10_000)
    args = ap.parse_args()

    base = RunSpec(workload="mixed", topology="2p4d", n_requests=args.requests, seed=1)
    if args.rate is None:
        t0 = time.perf_counter()
        sat = saturation_search(base.replace(n_requests=3000))
        rate = sat.rate
        print(f"saturation search (round-robin mid-collapse): {rate:.2f} req/s in {time.perf_counter() - t0:.1f} s")
    else:
        rate = args.rate
    base = base.replace(rate=rate)

    print(f"\n1. mixed, 2p4d, {rate:.2f} req/s, {args.requests:,} requests")
    t0 = time.perf_counter()
    trace = build_trace(base)
    t_trace = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = build_predictions(base, trace)
    t_pred = time.perf_counter() - t0
    span = float(trace.df["arrival_s"].iloc[-1])
    print(f"   trace {t_trace:.2f} s, predictor {t_pred:.2f} s, simulated span {span:,.0f} s of arrivals")
    _, pre_phys, _, dec_phys = pools(base.topology_parsed())
    header = (f"   {'policy':18s} {'sim wall s':>10s} {'req/wall-s':>12s} {'speed-up':>9s} "
              f"{'journal s':>9s} {'goodput':>8s}")
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for policy in PAPER_POLICIES:
            spec = base.replace(policy=policy)
            router = make_router(spec)
            sim = Simulator(trace.df, pred, router, pre_phys, dec_phys, SimConfig())
            t0 = time.perf_counter()
            journal = sim.run()
            wall = time.perf_counter() - t0
            end = float(journal["finish_s"].max())
            t0 = time.perf_counter()
            write_frame(journal, f"{tmp}/{policy}.jsonl")
            t_write = time.perf_counter() - t0
            from repro.experiment.inputs import truth_cost_model
            from repro.experiment.metrics import summarize

            g = summarize(journal, truth_cost_model(spec).slo)["goodput"]
            print(f"   {policy:18s} {wall:10.2f} {args.requests / wall:12,.0f} {end / wall:8,.0f}x "
                  f"{t_write:9.2f} {g:8.3f}")

        print(f"\n2. headline sweep: 4 policies x 3 traces x {args.sweep_requests:,} requests "
              f"(trace + predictor + sim + journal + manifest)")
        t0 = time.perf_counter()
        n = 0
        for seed in (1, 2, 3):
            for policy in PAPER_POLICIES:
                run(base.replace(policy=policy, seed=seed, n_requests=args.sweep_requests), f"{tmp}/sweep",
                    resume=False)
                n += 1
        print(f"   {n} runs in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
