"""Simulator speed, old and new side by side: simulated requests per wall-second and speed-up over real time.

Usage: python benchmarks/bench_sim.py [--requests 100000] [--rate R] [--sweep-requests 10000]
                                      [--baseline REF] [--no-compile-baseline] [--rounds 3] [--ops 2000]
                                      [--quick] [--record PATH]

The speed target: ``--requests 30000 --rate 22.6`` (mixed at 2p4d, a fixed rate near the identified
testbed's saturation, so that runs compare across changes of the search), >= 4,000x real time for every
policy, compiled. ``--baseline HEAD`` (the commit before an uncommitted speed change) checks the journals
against it byte for byte, and times it compiled beside this tree compiled: before and after.

The same workload is timed in worker subprocesses, each with ``PYTHONPATH`` pointing at its
tree: OLD = ``--baseline`` (default ``17da849``, the pure-Python simulator and router before their speed-ups,
extracted with ``git archive`` into a temporary folder; pure Python), OLD compiled = that tree with its own
`repro.native` modules compiled by its own ``setup.py`` (where it has them and this tree is compiled; left
out with ``--no-compile-baseline``), NEW src = this checkout's Python sources (``$REPRO_PURE_PYTHON=1``) and
NEW compiled = this checkout with the modules the install compiled with mypyc (`repro.native`; left out,
with a note, where none were built). Each
worker builds the trace and the predictions once; then the parent asks them in turn for one timed
piece of work at a time (old, src, compiled, old, ...), so that a shared, noisy machine loads them
alike within seconds, and reports the best (smallest) of ``--rounds`` times of each piece:

1. ``mixed`` at 2p4d near saturation (the rate found by the saturation search unless ``--rate``),
   ``--requests`` requests, each of the paper's four policies: the simulation's wall seconds
   (``Simulator.run``, journal frame included; also its CPU seconds), the speed-up over real time
   (the simulated span, last finish, over that wall time), NEW compiled over NEW src, the journal
   write's seconds, and the sha256 of the journal file. Where the time goes, per policy and tree
   (the round with the best wall): the policy's decisions (the sum of the ``Policy.place`` times the
   router keeps, `repro.routing.router.DecisionTimes`), the journal frame ``run()`` ends with (built
   again and timed alone), and the rest, the simulator proper (event loop, engines, the router's view
   and ledger); and the journal write (a tree whose router keeps no decision total, as the default OLD's,
   is left out of the split).
2. The headline sweep (4 policies x 3 traces, ``--sweep-requests`` each) end to end, as
   `repro.experiment.run` does it (trace, predictor, simulation, journal, manifest).
3. Once for OLD and NEW src, the bytecode instructions one ``Simulator.run`` of the first ``--ops``
   requests executes per policy, split into the simulator's module, `repro.routing` and the rest: a
   count of Python work that does not move with the machine's load, unlike the seconds above
   (compiled code executes no bytecode, so NEW compiled has no such count).

Prints per policy each round's wall seconds, the speed-up over real time and the speed-up over OLD
(best wall and CPU times) of each tree, and the journals' sha256: byte-identical across the trees, or
each tree's. ``--record PATH`` also writes every round's figures, the medians, the machine (CPU model,
cores, load average before the run) and both commits as JSON (``data/benchmarks/sim.json`` is the record
the project keeps). Asserts nothing about speed (timings vary by machine); exits 1 if NEW src's and NEW
compiled's journals differ (the same code: a speed change may change no journal byte). OLD's differ when
the baseline predates a change of results (the default's does: its paper's router reads the ledger and
TPOT_hat as `marginal_cost_prior` does); ``--baseline`` at a commit with the same results (e.g. the one
before a speed change) checks byte-identity against it too.
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
    """Serve timing requests with whatever `repro` is on the path: one command per stdin line
    (``sim POLICY`` or ``sweep``), one JSON object per stdout line."""
    import repro
    from repro.cluster.topology import pools
    from repro.experiment.inputs import build_predictions, build_trace, make_router
    from repro.experiment.journal import write_frame
    from repro.experiment.runner import run
    from repro.experiment.spec import RunSpec
    from repro.routing.policies import PAPER_POLICIES
    from repro.sim.simulator import SimConfig, Simulator

    base = RunSpec(workload="mixed", topology="2p4d", n_requests=args.requests, seed=1, rate=args.rate)
    t0 = time.perf_counter()
    trace = build_trace(base)
    t_trace = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = build_predictions(base, trace)
    t_pred = time.perf_counter() - t0
    _, pre_phys, _, dec_phys = pools(base.topology_parsed())
    try:
        from repro import native
        mode = "compiled" if set(native.status().values()) == {"compiled"} else "source"
    except ImportError:  # a tree from before repro.native: all Python
        mode = "source"
    print(json.dumps({"repro": repro.__file__, "trace_s": t_trace, "predictor_s": t_pred, "mode": mode}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for line in sys.stdin:
            cmd = line.split()
            if cmd[0] == "sim":
                spec = base.replace(policy=cmd[1])
                router = make_router(spec)
                sim = Simulator(trace.df, pred, router, pre_phys, dec_phys, SimConfig())
                t0, c0 = time.perf_counter(), time.process_time()
                journal = sim.run()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                # the split of that wall time: the policy's decisions as the router timed them (their sum;
                # trees before it was kept: None), and the journal frame that run() ends with, built again
                total_ns = getattr(getattr(router, "times", None), "total_ns", None)
                frame_s = None
                if hasattr(sim, "_journal"):
                    t0 = time.perf_counter()
                    sim._journal()
                    frame_s = time.perf_counter() - t0
                path = Path(tmp) / f"{cmd[1]}.jsonl"
                t0 = time.perf_counter()
                write_frame(journal, path)
                res = {"wall_s": wall, "cpu_s": cpu, "write_s": time.perf_counter() - t0,
                       "place_s": None if total_ns is None else total_ns / 1e9, "frame_s": frame_s,
                       "span_s": float(journal["finish_s"].max()),
                       "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
            elif cmd[0] == "ops":
                res = _count_opcodes(trace.df.iloc[: int(cmd[2])], pred[: int(cmd[2])], make_router(
                    base.replace(policy=cmd[1])), pre_phys, dec_phys, Simulator, SimConfig())
            elif cmd[0] == "sweep":
                t0 = time.perf_counter()
                for seed in (1, 2, 3):
                    for policy in PAPER_POLICIES:
                        run(base.replace(policy=policy, seed=seed, n_requests=args.sweep_requests),
                            f"{tmp}/sweep", resume=False)
                res = {"wall_s": time.perf_counter() - t0}
            else:
                raise ValueError(f"bench worker: unknown command {line!r}")
            print(json.dumps(res), flush=True)


def _count_opcodes(df, pred, router, pre_phys, dec_phys, simulator, config) -> dict:
    """Bytecode instructions executed by one `Simulator.run` (``sys.settrace`` with per-opcode events),
    split into the simulator's own module, `repro.routing` and the rest: a measure of work that the
    machine's load does not change (unlike seconds), for comparing two trees on a noisy machine."""
    import sys as _sys

    sim_file = _sys.modules[simulator.__module__].__file__
    counts = {"sim": 0, "routing": 0, "other": 0}

    def tracer(frame, event, arg):
        if event != "call":
            return None
        f = frame.f_code.co_filename
        key = "sim" if f == sim_file else ("routing" if "/repro/routing/" in f else "other")
        frame.f_trace_opcodes = True

        def local(frame, event, arg):
            if event == "opcode":
                counts[key] += 1
            return local
        return local

    sim = simulator(df, pred, router, pre_phys, dec_phys, config)
    _sys.settrace(tracer)
    try:
        sim.run()
    finally:
        _sys.settrace(None)
    return counts


class _Tree:
    """A worker process timing the workload with the `repro` of one source tree."""

    def __init__(self, label: str, tree: Path, args: argparse.Namespace, pure: bool) -> None:
        self.label = label
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--requests", str(args.requests),
               "--rate", repr(args.rate), "--sweep-requests", str(args.sweep_requests)]
        env = {**os.environ, "PYTHONPATH": str(tree), "REPRO_PURE_PYTHON": "1" if pure else "0"}
        self.proc = subprocess.Popen(cmd, env=env, cwd=tree, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.setup = self._answer()
        if not self.setup["repro"].startswith(str(tree)):
            raise RuntimeError(f"the {label} worker imported repro from {self.setup['repro']}, not from {tree}")

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.label} worker exited (exit status {self.proc.wait()})")
        return json.loads(line)

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def _extract(ref: str, into: Path) -> str:
    """Extract ``ref``'s ``repro/`` and ``data/`` into ``into``; returns the commit's short hash."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True,
                            capture_output=True, text=True).stdout.strip()
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", commit], check=True,
                           capture_output=True, text=True).stdout.split()
    paths = ["repro", "data"] + [f for f in ("setup.py", "pyproject.toml") if f in names]
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, *paths], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return commit


def _compile(tree: Path) -> bool:
    """Compile ``tree``'s own `repro.native` modules in place with its own ``setup.py`` (mypyc, as its install
    would); whether it built any (a tree from before them, or without a compiler: no)."""
    if not (tree / "setup.py").exists() or not (tree / "repro" / "native.py").exists():
        return False
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                          capture_output=True, text=True)
    return done.returncode == 0 and (tree / "repro" / "native_build.json").exists()


def _times(xs: list[float]) -> str:
    return " ".join(f"{x:5.2f}" for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=None, help="req/s (default: the saturation search's)")
    ap.add_argument("--sweep-requests", type=int, default=10_000)
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref of the OLD tree")
    ap.add_argument("--rounds", type=int, default=3, help="timings of each piece per tree, interleaved")
    ap.add_argument("--ops", type=int, default=2000,
                    help="requests per policy for the bytecode count (deterministic work; 0: skip)")
    ap.add_argument("--quick", action="store_true", help="10,000 requests, a 1,000-request sweep, rate 16")
    ap.add_argument("--no-compile-baseline", action="store_true",
                    help="time OLD's sources only (not also OLD compiled)")
    ap.add_argument("--record", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.requests, args.sweep_requests, args.ops = 10_000, 1_000, min(args.ops, 500)
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
    policies = ("round_robin", "least_loaded", "length_threshold", "marginal_cost")  # the paper's four

    with tempfile.TemporaryDirectory() as tmp:
        commit = _extract(args.baseline, Path(tmp))
        print(f"OLD = {args.baseline} ({commit}), extracted to {tmp}; NEW = {ROOT} (working tree)")
        print(f"workload: mixed, 2p4d, {args.rate:.2f} req/s, {args.requests:,} requests per policy; "
              f"sweep 4 policies x 3 traces x {args.sweep_requests:,}; {args.rounds} rounds, OLD and NEW "
              "interleaved piece by piece", flush=True)
        load_before = os.getloadavg()[0]
        trees = [_Tree("old", Path(tmp), args, pure=True), _Tree("src", ROOT, args, pure=True),
                 _Tree("new", ROOT, args, pure=False)]
        if trees[2].setup["mode"] != "compiled":
            print("NEW has no compiled modules here (see `repro native`): timing OLD and NEW's sources only")
            trees.pop().close()
        elif not args.no_compile_baseline:
            t0 = time.perf_counter()
            if _compile(Path(tmp)):
                trees.insert(1, _Tree("oldc", Path(tmp), args, pure=False))
                print(f"OLD compiled with its own setup.py in {time.perf_counter() - t0:.0f} s")
                if trees[1].setup["mode"] != "compiled":
                    print("OLD's compiled modules were not taken up: timing OLD's sources only")
                    trees.pop(1).close()
            else:
                print("OLD has no compiled modules to build (or the build failed): timing OLD's sources only")
        res: dict[str, dict[str, list[dict]]] = {t.label: {} for t in trees}
        try:
            for k in range(args.rounds):
                for piece in [f"sim {p}" for p in policies] + ["sweep"]:
                    for t in trees:
                        res[t.label].setdefault(piece, []).append(t.ask(piece))
                print(f"  round {k + 1} done", flush=True)
            # bytecode counts need Python code: the OLD tree and NEW's sources
            ops = {t.label: {p: t.ask(f"ops {p} {min(args.ops, args.requests)}") for p in policies}
                   for t in trees if t.label in ("old", "src")} if args.ops > 0 else None
        finally:
            for t in trees:
                t.close()
    labels = [t.label for t in trees]
    names = {"old": "OLD", "oldc": "OLD compiled", "src": "NEW src", "new": "NEW compiled"}
    old = res["old"]

    print("\n1. per policy: Simulator.run wall seconds per round; x real time = simulated span / best wall; "
          "speed-up = best OLD wall / best wall (CPU seconds alike)")
    print("   OLD = the baseline's sources; NEW src = this tree's Python sources ($REPRO_PURE_PYTHON=1); "
          "NEW compiled = this tree with its mypyc-compiled modules (repro.native)")
    same_all = True  # every tree, every round
    same_new = True  # this tree's sources and its compiled build (the same code: must always agree)
    shas = {p: {lab: sorted({r["sha256"] for r in res[lab][f"sim {p}"]}) for lab in labels} for p in policies}
    for p in policies:
        span = old[f"sim {p}"][0]["span_s"]
        same = len({h for lab in labels for h in shas[p][lab]}) == 1
        same_all &= same
        same_new &= len({h for lab in labels if lab != "old" for h in shas[p][lab]}) == 1
        each = ", ".join(f"{names[lab]} {' '.join(h[:16] for h in shas[p][lab])}" for lab in labels)
        print(f"   {p} (journal sha256 {'identical: ' + shas[p]['old'][0][:16] if same else 'DIFFER: ' + each})")
        best_old = min(r["wall_s"] for r in old[f"sim {p}"])
        best_old_cpu = min(r["cpu_s"] for r in old[f"sim {p}"])
        for lab in labels:
            walls = [r["wall_s"] for r in res[lab][f"sim {p}"]]
            cpus = [r["cpu_s"] for r in res[lab][f"sim {p}"]]
            print(f"     {names[lab]:13s} wall s {_times(walls):>18s}  {span / min(walls):8,.0f}x real time  "
                  f"speed-up {best_old / min(walls):5.2f}x (CPU {best_old_cpu / min(cpus):5.2f}x)")
        if "src" in labels and "new" in labels:
            ratio = min(r["wall_s"] for r in res["src"][f"sim {p}"]) / min(r["wall_s"] for r in res["new"][f"sim {p}"])
            print(f"     {'':13s} compiled / src: {ratio:4.2f}x faster")
        if "oldc" in labels and "new" in labels:
            ratio = min(r["wall_s"] for r in res["oldc"][f"sim {p}"]) / min(r["wall_s"] for r in res["new"][f"sim {p}"])
            print(f"     {'':13s} NEW compiled / OLD compiled: {ratio:4.2f}x faster")
    ws = {lab: [r["write_s"] for r in res[lab]["sim marginal_cost"]] for lab in labels}
    print("   journal write s (marginal_cost): " + "   ".join(f"{names[lab]} {_times(ws[lab])}" for lab in labels))
    split = [lab for lab in labels if all(r.get("place_s") is not None and r.get("frame_s") is not None
                                          for p in policies for r in res[lab][f"sim {p}"])]
    if split:
        print("\n   where the time goes (the round with the best wall, seconds and % of it): simulator = the event "
              "loop, the engines, the router's view and ledger; decisions = the policy's place() calls (the "
              "router's timer); journal frame = the DataFrame run() ends with (built again, timed alone); "
              "journal write (after run)")
        for p in policies:
            for lab in split:
                r = min(res[lab][f"sim {p}"], key=lambda r: r["wall_s"])
                wall, place, frame = r["wall_s"], r["place_s"], r["frame_s"]
                rest = wall - place - frame
                print(f"   {p:18s} {names[lab]:13s} simulator {rest:6.3f} ({rest / wall:4.0%})  decisions "
                      f"{place:6.3f} ({place / wall:4.0%})  journal frame {frame:6.3f} ({frame / wall:4.0%})  "
                      f"journal write {r['write_s']:6.3f}")
    ws = {lab: [r["wall_s"] for r in res[lab]["sweep"]] for lab in labels}
    print("\n2. headline sweep s (12 runs): " + "   ".join(
        f"{names[lab]} {_times(ws[lab])} ({min(ws['old']) / min(ws[lab]):4.2f}x)" for lab in labels))
    print("   once per worker: " + "; ".join(
        f"{names[t.label]} trace {t.setup['trace_s']:.2f} s, predictor (incl. imports) {t.setup['predictor_s']:.2f} s"
        for t in trees))
    if ops:
        n_ops = min(args.ops, args.requests)
        print(f"\n3. bytecode instructions per request ({n_ops:,} requests, sys.settrace; the same on any load), "
              "Python sources only (compiled code executes none): simulator's own module, repro.routing, the rest")
        print(f"   {'policy':18s} {'OLD sim':>8s} {'NEW sim':>8s} {'old/new':>8s} {'routing':>8s} {'other':>6s} "
              f"{'all old/new':>12s}")
        for p in policies:
            o, n = ops["old"][p], ops["src"][p]
            print(f"   {p:18s} {o['sim'] / n_ops:8,.0f} {n['sim'] / n_ops:8,.0f} {o['sim'] / n['sim']:7.2f}x "
                  f"{n['routing'] / n_ops:8,.0f} {n['other'] / n_ops:6,.0f} "
                  f"{sum(o.values()) / sum(n.values()):11.2f}x")
    print(f"\njournals of {', '.join(names[lab] for lab in labels)}: "
          f"{'byte-identical (sha256) for every policy' if same_all else 'DIFFER'}")
    if not same_all and same_new:
        print(f"   (NEW src and NEW compiled agree; OLD = {args.baseline} differs: expected when it predates a change "
              "of results, e.g. the paper's router's reading; --baseline <a commit with the same results> "
              "checks byte-identity)")
    if args.record is not None:
        _write_record(args, commit, labels, names, res, policies, shas, load_before)
    if not same_new:
        sys.exit(1)


def _write_record(args: argparse.Namespace, baseline: str, labels: list[str], names: dict[str, str],
                  res: dict[str, dict[str, list[dict]]], policies: tuple[str, ...], shas: dict,
                  load_before: float) -> None:
    """``--record``: every round's wall seconds per tree and policy, the best (the figure quoted) and the median,
    x real time of each, the split of the best round and the journals' sha256, with the machine and commits."""
    import statistics

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_tiers import commit as this_commit
    from bench_tiers import machine

    rows = []
    for p in policies:
        for lab in labels:
            runs = res[lab][f"sim {p}"]
            walls = [r["wall_s"] for r in runs]
            best = min(runs, key=lambda r: r["wall_s"])
            span = best["span_s"]
            rows.append({
                "policy": p, "tree": names[lab], "wall_s": [round(w, 4) for w in walls],
                "best_wall_s": round(best["wall_s"], 4), "median_wall_s": round(statistics.median(walls), 4),
                "x_real_time_best": round(span / best["wall_s"]),
                "x_real_time_median": round(span / statistics.median(walls)),
                "decisions_s": None if best.get("place_s") is None else round(best["place_s"], 4),
                "journal_frame_s": None if best.get("frame_s") is None else round(best["frame_s"], 4),
                "sha256": shas[p][lab],
            })
    record = {
        "command": "python3 benchmarks/bench_sim.py " + " ".join(sys.argv[1:]),
        "workload": {"workload": "mixed", "topology": "2p4d", "requests": args.requests, "rate": args.rate},
        "rounds": args.rounds, "baseline": baseline, "commit": this_commit(), "machine": machine(),
        "load_before": round(load_before, 2), "rows": rows,
    }
    args.record.parent.mkdir(parents=True, exist_ok=True)
    args.record.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nrecord: {args.record}")


if __name__ == "__main__":
    main()
