"""Coverage of the verdicts' intervals, old and new side by side (docs/VERDICTS.md quotes this).

Usage: python benchmarks/bench_coverage.py [--reps 1000] [--seed 0]

Synthetic traces with a known truth (`repro.paper.coverage.TraceModel`: between-trace spread,
within-trace autocorrelation like the simulator's) are drawn ``--reps`` times per row; each
procedure's 95 % interval is checked against the truth. Rows: the goodput over 3 and over 10
traces (t over traces, and the two-level bootstrap the verdicts used before issue 28), with the
between-trace sd of the default model and a larger one; one trace's own goodput (the block
bootstrap, and an iid bootstrap over requests); "A minus the best of k" picked after the fact
(simultaneous intervals, and the naive best-by-point with its own interval). Prints coverage with
its Wilson interval and the mean width.
"""

from __future__ import annotations

import argparse
import time

from repro.paper.coverage import TraceModel, best_of_coverage, coverage, legacy_two_level
from repro.paper.verdicts import block_bootstrap_mean, goodput_estimate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rows = [
        ("3 traces, between sd 0.01", TraceModel(traces=3), False),
        ("3 traces, between sd 0.03", TraceModel(traces=3, mean=0.6, width=0.25, between_sd=0.03), False),
        ("10 traces, between sd 0.01", TraceModel(traces=10), False),
        ("1 trace, its own goodput", TraceModel(traces=1), True),
    ]
    for label, model, per_trace in rows:
        procs = ({"block bootstrap (new)": lambda t: block_bootstrap_mean(t[0]),
                  "iid bootstrap over requests (old)": legacy_two_level} if per_trace else
                 {"t over traces (new)": goodput_estimate, "two-level bootstrap (old)": legacy_two_level})
        for name, proc in procs.items():
            t0 = time.perf_counter()
            c = coverage(proc, model, reps=a.reps, seed=a.seed, name=f"{label}: {name}", per_trace=per_trace)
            print(f"{c.text()}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    for k in (3, 6):  # "A minus the best of k", the best picked after the fact; every true gap is zero
        for aware in (True, False):
            c = best_of_coverage(TraceModel(traces=3), rivals=k, reps=a.reps, seed=a.seed, selection_aware=aware)
            print(f"3 traces: {c.text()}", flush=True)


if __name__ == "__main__":
    main()
