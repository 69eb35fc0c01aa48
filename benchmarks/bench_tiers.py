"""Wall-clock time of the commands people wait for: the README's two commands and the slow test tier, each timed
end to end and kept as data (``data/benchmarks/tiers.json``), from which the documents' timings are written
(`repro.paper.timings`, ``repro conclusion --docs``).

Usage: python benchmarks/bench_tiers.py TIER [TIER ...] [--rounds 3] [--clean-clone] [--allow-busy]
                                        [--out data/benchmarks/tiers.json]

Tiers (`TIERS`):

- ``tests``: the README's test command, ``python3 -m pip install -e '.[test]' && python3 -m pytest``;
- ``main``: the README's main job, ``python3 -m pip install -e '.[notebooks]' && repro paper`` (its simulations
  not cached: the run's ``runs/`` and ``results/`` start empty);
- ``slow``: the slow tier, ``python3 -m pytest -m slow`` (no install).

With ``--clean-clone`` each round runs in a fresh ``git clone`` of this checkout's HEAD with a fresh virtual
environment (``python3 -m venv``; packages from pip's cache or the registry), as on a fresh machine; without it,
in this checkout with the Python that runs the script (the install step then only rebuilds). Each round's wall
seconds, the median, what pytest printed last (passed / skipped counts) or the main job's exit status, the
commit, the CPU model and its core count, and the load average before the round are recorded; a tier's entry
replaces the previous one for the same tier and clean-clone choice.

A timing taken while other work loads the machine is not a result: a round does not start while the 1-minute
load average is above 0.5 per core (it waits up to 10 minutes, then stops), unless ``--allow-busy`` (then the
record says so).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "benchmarks" / "tiers.json"
TIERS = {
    "tests": "python3 -m pip install -e '.[test]' && python3 -m pytest",
    "main": "python3 -m pip install -e '.[notebooks]' && repro paper",
    "slow": "python3 -m pytest -m slow",
}
BUSY_PER_CORE = 0.5
BUSY_WAIT_S = 600.0


def machine() -> dict[str, object]:
    """The CPU model (``/proc/cpuinfo``'s first ``model name``, else the platform's) and the cores this process may
    use."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if not model:
        import platform
        model = platform.processor() or platform.machine()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model, "cores": cores}


def commit() -> str:
    """This checkout's HEAD (short), with ``-dirty`` when tracked files differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    return head + ("-dirty" if dirty else "")


def wait_quiet(allow_busy: bool) -> float:
    """The 1-minute load average once it is at most `BUSY_PER_CORE` per core (waiting up to `BUSY_WAIT_S`);
    with ``allow_busy`` at once. Exits 3 when the machine stays busy."""
    cores = int(machine()["cores"] or 1)
    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        load = os.getloadavg()[0]
        if allow_busy or load <= BUSY_PER_CORE * cores:
            return load
        if time.monotonic() > deadline:
            sys.exit(f"bench_tiers: the machine stays busy (load {load:.2f} on {cores} cores): no timing taken; "
                     "stop the other work or pass --allow-busy")
        time.sleep(15)


def outcome(tier: str, text: str, rc: int) -> str:
    """What the command ended with: pytest's last summary line (``1134 passed, 19 skipped in ...`` without the
    time), else the exit status."""
    if tier in ("tests", "slow"):
        found = re.findall(r"^=*\s*(\d+ (?:passed|failed|error).*?) in [0-9.]+s", text, re.MULTILINE)
        if found:
            return found[-1]
    return f"exit {rc}"


def one_round(tier: str, clean: bool) -> tuple[float, str, int]:
    """One timed run of ``tier``: (wall seconds, outcome, exit status)."""
    cmd = TIERS[tier]
    with tempfile.TemporaryDirectory(prefix="bench-tiers-") as tmp:
        cwd = ROOT
        env = dict(os.environ)
        if clean:
            cwd = Path(tmp) / "clone"
            subprocess.run(["git", "clone", "-q", str(ROOT), str(cwd)], check=True)
            venv = Path(tmp) / "venv"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
            env["VIRTUAL_ENV"] = str(venv)
        else:
            t0 = time.perf_counter()
        proc = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    return wall, outcome(tier, proc.stdout + proc.stderr, proc.returncode), proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tiers", nargs="+", choices=sorted(TIERS))
    ap.add_argument("--rounds", type=int, default=3, help="timed runs per tier (the median is quoted)")
    ap.add_argument("--clean-clone", action="store_true", help="each round in a fresh clone and virtual environment")
    ap.add_argument("--allow-busy", action="store_true", help="time even while the machine is loaded (recorded)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    if "main" in args.tiers and not args.clean_clone:
        ap.error("the main job is timed from a clean clone only (--clean-clone): here it would use this checkout's "
                 "cached simulations")
    data = json.loads(args.out.read_text()) if args.out.exists() else {"tiers": []}
    for tier in args.tiers:
        runs = []
        for k in range(args.rounds):
            load = wait_quiet(args.allow_busy)
            wall, said, rc = one_round(tier, args.clean_clone)
            runs.append({"wall_s": round(wall, 1), "outcome": said, "exit": rc, "load_before": round(load, 2)})
            print(json.dumps({"tier": tier, "round": k + 1, **runs[-1]}), flush=True)
        entry = {
            "tier": tier,
            "command": TIERS[tier],
            "clean_clone": args.clean_clone,
            "rounds": runs,
            "median_s": round(statistics.median(r["wall_s"] for r in runs), 1),
            "outcome": runs[-1]["outcome"],
            "ok": all(r["exit"] == 0 for r in runs),
            "busy_allowed": args.allow_busy,
            "machine": machine(),
            "commit": commit(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "measured_by": "python3 benchmarks/bench_tiers.py " + " ".join(
                [tier, f"--rounds {args.rounds}", *(["--clean-clone"] if args.clean_clone else [])]),
        }
        data["tiers"] = [e for e in data["tiers"]
                         if not (e["tier"] == tier and e["clean_clone"] == args.clean_clone)] + [entry]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{tier}: median {entry['median_s']} s over {len(runs)} rounds ({shlex.quote(entry['outcome'])}); "
              f"written to {args.out}", flush=True)


if __name__ == "__main__":
    main()
