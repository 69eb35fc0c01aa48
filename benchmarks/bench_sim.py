"""Simulator speed, old and new side by side: simulated requests per wall-second and speed-up over real time.

Usage: python benchmarks/bench_sim.py [--requests 100000] [--rate R] [--sweep-requests 10000]
                                      [--baseline REF] [--rounds 2] [--quick]

The same workload is timed in two source trees, each in a fresh subprocess with ``PYTHONPATH``
pointing at its tree: OLD = ``--baseline`` (default ``17da849``, the last commit before issue 15's
speed-ups, extracted with ``git archive`` into a temporary folder) and NEW = this checkout.
Rounds interleave them (old, new, old, new, ...) so that a shared, noisy machine loads both alike.
Each run of a tree:

1. ``mixed`` at 2p4d near saturation (the rate found by the saturation search unless ``--rate``),
   ``--requests`` requests, each of the paper's four policies: the simulation's wall seconds
   (``Simulator.run``, journal frame included), the speed-up over real time (the simulated span,
   last finish, over that wall time), the journal write's seconds, and the sha256 of the journal file.
2. The headline sweep (4 policies x 3 traces, ``--sweep-requests`` each) end to end, as
   `repro.experiment.run` does it (trace, predictor, simulation, journal, manifest).

Prints per policy each round's wall seconds and speed-up for OLD and NEW, the ratio old/new of
the best (smallest) wall times, and whether the journals of OLD and NEW are byte-identical (they
must be: issue 15 allows no change of a journal byte). Asserts nothing about speed (timings vary
by machine); exits 1 if a journal differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = "17da849"


def _worker(args: argparse.Namespace) -> None:
    """Time the workload with whatever `repro` is on the path; print one JSON object on stdout."""
    import repro
    from repro.cluster.topology import pools
    from repro.experiment.inputs import build_predictions, build_trace, make_router, truth_cost_model
    from repro.experiment.journal import write_frame
    from repro.experiment.metrics import summarize
    from repro.experiment.runner import run
    from repro.experiment.spec import RunSpec
    from repro.routing.policies import PAPER_POLICIES
    from repro.sim.simulator import SimConfig, Simulator

    base = RunSpec(workload="mixed", topology="2p4d", n_requests=args.requests, seed=1, rate=args.rate)
    res: dict = {"repro": repro.__file__, "policies": {}}
    t0 = time.perf_counter()
    trace = build_trace(base)
    res["trace_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = build_predictions(base, trace)
    res["predictor_s"] = time.perf_counter() - t0
    _, pre_phys, _, dec_phys = pools(base.topology_parsed())
    with tempfile.TemporaryDirectory() as tmp:
        for policy in PAPER_POLICIES:
            spec = base.replace(policy=policy)
            router = make_router(spec)
            sim = Simulator(trace.df, pred, router, pre_phys, dec_phys, SimConfig())
            t0, c0 = time.perf_counter(), time.process_time()
            journal = sim.run()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            path = Path(tmp) / f"{policy}.jsonl"
            t0 = time.perf_counter()
            write_frame(journal, path)
            t_write = time.perf_counter() - t0
            res["policies"][policy] = {
                "wall_s": wall,
                "cpu_s": cpu,
                "span_s": float(journal["finish_s"].max()),
                "write_s": t_write,
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "goodput": float(summarize(journal, truth_cost_model(spec).slo)["goodput"]),
            }
        t0 = time.perf_counter()
        for seed in (1, 2, 3):
            for policy in PAPER_POLICIES:
                run(base.replace(policy=policy, seed=seed, n_requests=args.sweep_requests), f"{tmp}/sweep",
                    resume=False)
        res["sweep_s"] = time.perf_counter() - t0
    print(json.dumps(res))


def _extract(ref: str, into: Path) -> str:
    """Extract ``ref``'s ``repro/`` and ``data/`` into ``into``; returns the commit's short hash."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True,
                            capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "repro", "data"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return commit


def _time_tree(tree: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--requests", str(args.requests),
           "--rate", repr(args.rate), "--sweep-requests", str(args.sweep_requests)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=tree).stdout
    res = json.loads(out.strip().splitlines()[-1])
    if not res["repro"].startswith(str(tree)):
        raise RuntimeError(f"the worker imported repro from {res['repro']}, not from {tree}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=None, help="req/s (default: the saturation search's)")
    ap.add_argument("--sweep-requests", type=int, default=10_000)
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref of the OLD tree")
    ap.add_argument("--rounds", type=int, default=2, help="OLD, NEW pairs, interleaved")
    ap.add_argument("--quick", action="store_true", help="10,000 requests, a 1,000-request sweep, rate 16")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.requests, args.sweep_requests = 10_000, 1_000
        args.rate = 16.0 if args.rate is None else args.rate
    if args.worker:
        _worker(args)
        return

    if args.rate is None:
        sys.path.insert(0, str(ROOT))
        from repro.experiment.saturation import saturation_search
        from repro.experiment.spec import RunSpec

        t0 = time.perf_counter()
        args.rate = saturation_search(RunSpec(workload="mixed", topology="2p4d", n_requests=3000, seed=1)).rate
        print(f"saturation search (round-robin mid-collapse): {args.rate:.2f} req/s in "
              f"{time.perf_counter() - t0:.1f} s")

    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp)
        commit = _extract(args.baseline, old_tree)
        print(f"OLD = {args.baseline} ({commit}), extracted to {old_tree}; NEW = {ROOT} (working tree)")
        print(f"workload: mixed, 2p4d, {args.rate:.2f} req/s, {args.requests:,} requests per policy; "
              f"sweep 4 policies x 3 traces x {args.sweep_requests:,}; {args.rounds} rounds (old, new interleaved)")
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for k in range(args.rounds):
            for label, tree in (("old", old_tree), ("new", ROOT)):
                t0 = time.perf_counter()
                runs[label].append(_time_tree(tree, args))
                print(f"  round {k + 1} {label}: {time.perf_counter() - t0:.1f} s", flush=True)

    old, new = runs["old"], runs["new"]
    print("\n1. per policy: Simulator.run wall seconds per round (x real time = simulated span / best wall;"
          " old/new = best OLD / best NEW, of wall and of CPU seconds)")
    print(f"   {'policy':18s} {'OLD wall s':>18s} {'NEW wall s':>18s} {'OLD x-real':>11s} {'NEW x-real':>11s} "
          f"{'wall old/new':>12s} {'cpu old/new':>11s} {'journals':>9s}")
    same_all = True
    for policy in old[0]["policies"]:
        ow, nw = ([r["policies"][policy]["wall_s"] for r in rs] for rs in (old, new))
        oc, nc = ([r["policies"][policy]["cpu_s"] for r in rs] for rs in (old, new))
        span = old[0]["policies"][policy]["span_s"]
        same = len({r["policies"][policy]["sha256"] for r in old + new}) == 1
        same_all &= same
        print(f"   {policy:18s} {' '.join(f'{w:5.2f}' for w in ow):>18s} {' '.join(f'{w:5.2f}' for w in nw):>18s} "
              f"{span / min(ow):10,.0f}x {span / min(nw):10,.0f}x {min(ow) / min(nw):11.2f}x "
              f"{min(oc) / min(nc):10.2f}x {'identical' if same else 'DIFFER':>9s}")
    for key, what in (("write_s", "journal write s (marginal_cost)"), ("trace_s", "trace s"),
                      ("predictor_s", "predictor s (incl. imports)"), ("sweep_s", "headline sweep s (12 runs)")):
        get = (lambda r, key=key: r["policies"]["marginal_cost"][key]) if key == "write_s" else \
            (lambda r, key=key: r[key])
        o = [get(r) for r in old]
        n = [get(r) for r in new]
        print(f"   {what:34s} OLD {' '.join(f'{x:6.2f}' for x in o)}   NEW {' '.join(f'{x:6.2f}' for x in n)}"
              f"   old/new {min(o) / min(n):5.2f}x")
    print(f"\njournals of OLD and NEW: {'byte-identical (sha256) for every policy' if same_all else 'DIFFER'}")
    if not same_all:
        sys.exit(1)


if __name__ == "__main__":
    main()
