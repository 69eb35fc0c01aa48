"""Where a busy machine starts to distort a live run: the evidence for `repro.live.validity`'s limits.

The same live spec (the README main job's Table II run: the learned router, ``marginal_cost``, on
the emulated 2p4d cluster, ``mixed`` at its operating point of 16 req/s, 200 requests, time scale 2,
trace seed 1) is run ``--repeats`` times with 0 busy-loop hog processes (its noise floor), then with
1 and 2 hogs (``while True: pass``, niceness 0, as another user's job would be). Every run is kept
(``on_invalid="keep"``) with its validity measurements (physics seconds: wall x K).

Printed: one row per run (goodput, P99 TTFT, each validity measure); per hog level the mean and
standard deviation of goodput and P99 TTFT and their shift from the quiet runs in units of the
quiet runs' spread; per measure, the largest quiet value and the smallest value among runs whose
goodput or P99 TTFT moved by more than the noise (|shift| > 2 sd of the quiet runs). A limit that
separates the two is the evidence for `DEFAULT_THRESHOLDS`; docs/VALIDITY.md keeps the table.

    python benchmarks/validity_thresholds.py                     # 5 quiet, 3 x 1 hog, 3 x 2 hogs (~10 min)
    python benchmarks/validity_thresholds.py --hogs 0,1 --repeats 3 --quiet-repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from repro.experiment.inputs import truth_cost_model
from repro.experiment.manifest import read_manifest
from repro.experiment.metrics import summarize
from repro.experiment.runner import run, simulate_spec
from repro.experiment.spec import RunSpec
from repro.live.validity import DEFAULT_THRESHOLDS

MEASURES = ("client_lag_p99_s", "proxy_loop_lag_p99_s", "engine_late_p99_s", "engine_lost_fraction",
            "poll_gap_excess_p99_s", "cpu_steal_fraction")


@contextmanager
def hogs(n: int):
    """``n`` busy-loop processes for the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def spec_of(args) -> RunSpec:
    return RunSpec.from_flat(backend="emulated", topology="2p4d", workload="mixed", policy="marginal_cost",
                             rate=args.rate, n_requests=args.requests, seed=1, time_scale=args.time_scale)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hogs", default="0,1,2", help="hog levels (busy-loop processes), comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="runs per hog level > 0")
    ap.add_argument("--quiet-repeats", type=int, default=5, help="runs with no hog (the noise floor)")
    ap.add_argument("--rate", type=float, default=16.0)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--time-scale", type=float, default=2.0)
    ap.add_argument("--out", default=None, help="run folders (default: a temporary folder)")
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="validity-"))
    spec = spec_of(args)
    sim = summarize(simulate_spec(spec.replace(backend="sim")), truth_cost_model(spec).slo, sent=spec.n_requests)
    print(f"spec {spec.run_id}: {spec.workload} {spec.topology} {spec.policy} @ {spec.rate:g} req/s, "
          f"{spec.n_requests} requests, K={spec.live.time_scale:g}; simulator: goodput {sim['goodput']:.3f}, "
          f"P99 TTFT {sim['ttft_p99_s']:.3f} s", flush=True)
    rows = []
    for hog in [int(x) for x in args.hogs.split(",")]:
        for r in range(args.quiet_repeats if hog == 0 else args.repeats):
            t = time.monotonic()
            with hogs(hog):
                res = run(spec, out / f"hog{hog}-r{r}", resume=False, on_invalid="keep")
            m = read_manifest(res.run_dir / "manifest.json")
            row = {"hog": hog, "repeat": r, "goodput": res.summary["goodput"], "ttft_p99_s": res.summary["ttft_p99_s"],
                   "failed": res.summary["failed"], "valid": m["valid"], **m["validity"]["measured"],
                   "wall_s": time.monotonic() - t}
            rows.append(row)
            print(json.dumps(row), flush=True)
    report(rows)
    return 0


def report(rows: list[dict]) -> None:
    quiet = [r for r in rows if r["hog"] == 0]
    g0 = [r["goodput"] for r in quiet]
    t0 = [r["ttft_p99_s"] for r in quiet]
    sd_g = statistics.stdev(g0) if len(g0) > 1 else float("nan")
    sd_t = statistics.stdev(t0) if len(t0) > 1 else float("nan")
    mg, mt = statistics.mean(g0), statistics.mean(t0)
    print("\n| hog | run | goodput | P99 TTFT (s) | " + " | ".join(MEASURES) + " | valid |")
    print("|---:|---:|---:|---:|" + "---:|" * len(MEASURES) + "---|")
    for r in rows:
        vals = " | ".join("n/a" if r[k] is None else f"{r[k]:.4g}" for k in MEASURES)
        print(f"| {r['hog']} | {r['repeat']} | {r['goodput']:.3f} | {r['ttft_p99_s']:.3f} | {vals} | "
              f"{'yes' if r['valid'] else 'no'} |")
    print("\n| hog | runs | goodput mean (sd) | shift / quiet sd | P99 TTFT mean (sd) | shift / quiet sd |")
    print("|---:|---:|---:|---:|---:|---:|")
    for hog in sorted({r["hog"] for r in rows}):
        rs = [r for r in rows if r["hog"] == hog]
        g = [r["goodput"] for r in rs]
        t = [r["ttft_p99_s"] for r in rs]
        sg = statistics.stdev(g) if len(g) > 1 else 0.0
        st = statistics.stdev(t) if len(t) > 1 else 0.0
        print(f"| {hog} | {len(rs)} | {statistics.mean(g):.3f} ({sg:.3f}) | {(statistics.mean(g) - mg) / sd_g:+.1f} | "
              f"{statistics.mean(t):.3f} ({st:.3f}) | {(statistics.mean(t) - mt) / sd_t:+.1f} |")
    moved = [r for r in rows
             if r["hog"] > 0 and (abs(r["goodput"] - mg) > 2 * sd_g or abs(r["ttft_p99_s"] - mt) > 2 * sd_t)]
    print(f"\nquiet: goodput {mg:.3f} +- {sd_g:.3f} (range {min(g0):.3f}-{max(g0):.3f}), "
          f"P99 TTFT {mt:.3f} +- {sd_t:.3f} s (range {min(t0):.3f}-{max(t0):.3f}); "
          f"{len(moved)} hogged run(s) moved by > 2 quiet sd")
    print("\n| measure | largest quiet | smallest among moved runs | limit now |")
    print("|---|---:|---:|---:|")
    limits = DEFAULT_THRESHOLDS.__dict__
    for k in MEASURES:
        q = [r[k] for r in quiet if r[k] is not None]
        mv = [r[k] for r in moved if r[k] is not None]
        print(f"| {k} | {max(q) if q else float('nan'):.4g} | {min(mv) if mv else float('nan'):.4g} | {limits[k]:g} |")


if __name__ == "__main__":
    sys.exit(main())
