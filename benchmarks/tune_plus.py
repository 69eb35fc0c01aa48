"""Held-out tuning of ``marginal_cost_plus`` (`repro.paper.tuning`): the grid on the tuning traces, the
setting the objective picks, and (``--evaluate``) the same grid re-measured on the evaluation traces.

Every run is simulated and cached per spec and code (``runs/sim-cache``), so a rerun, or the same
grid split over several invocations (``--bases``), costs only what is new. At the defaults (3 tuning
traces x 3,000 requests, 16 settings + 8 baselines x 10 cells = 720 runs) about 4 minutes of one
core; ``--evaluate`` as much again.

    python benchmarks/tune_plus.py                              # tune; print the table and the choice
    python benchmarks/tune_plus.py --bases marginal_cost        # half the grid (e.g. to split the work)
    python benchmarks/tune_plus.py --write                      # also write data/tuning/marginal_cost_plus.csv
    python benchmarks/tune_plus.py --evaluate                   # also the grid on the evaluation traces (1, 2, 3)
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from repro.paper import tuning


def _progress(done: int, total: int) -> None:
    if done == total or done % 50 == 0:
        print(f"  {done}/{total} runs", file=sys.stderr, flush=True)


def _table(seeds: tuple[int, ...], n: int, grid: list[tuning.Setting]) -> pd.DataFrame:
    t0 = time.process_time()
    runs = tuning.tuning_runs(seeds, n, grid=grid, progress=_progress)
    print(f"  ({len(runs)} runs, {time.process_time() - t0:.0f} s CPU)", file=sys.stderr)
    return tuning.tuning_table(runs, grid, n_requests=n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default=",".join(map(str, tuning.TUNING_SEEDS)), help="tuning traces (comma-separated)")
    ap.add_argument("--requests", type=int, default=tuning.TUNING_REQUESTS, help="requests per run")
    ap.add_argument("--bases", default=",".join(tuning.BASES), help="scorers of the grid to run (comma-separated)")
    ap.add_argument("--write", action="store_true", help=f"write the table to {tuning.TABLE_FILE}")
    ap.add_argument("--evaluate", action="store_true",
                    help=f"also run the grid on the evaluation traces {tuning.EVALUATION_SEEDS}")
    args = ap.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    overlap = set(seeds) & set(tuning.EVALUATION_SEEDS)
    if overlap:
        ap.error(f"--seeds {sorted(overlap)} are evaluation traces; tune on others (default {tuning.TUNING_SEEDS})")
    bases = [b.strip() for b in args.bases.split(",")]
    grid = [s for s in tuning.GRID if s.base in bases]
    if not grid:
        ap.error(f"--bases: none of {bases} in {list(tuning.BASES)}")
    pd.set_option("display.width", 200)
    print(f"tuning traces {list(seeds)}, {args.requests} requests per run, {len(tuning.CELLS)} cells, "
          f"{len(grid)} settings")
    table = tuning.ranked(_table(seeds, args.requests, grid))
    cols = ["setting", "worst_gap", "worst_cell", "mean_gap", "scarcity_gap", "mixed_lead"]
    print(table[cols].round(4).to_string(index=False))
    chosen = tuning.select(table)
    print(f"\nchosen: {chosen.label}  (shipped: {tuning.shipped_setting().label})")
    if args.write:
        tuning.TABLE_FILE.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(tuning.TABLE_FILE, index=False, float_format="%.6g")
        print(f"wrote {tuning.TABLE_FILE}")
    if args.evaluate:
        ev = _table(tuning.EVALUATION_SEEDS, args.requests, grid).set_index("setting")
        both = table.set_index("setting")[["worst_gap", "mean_gap"]].join(
            ev[["worst_gap", "worst_cell", "mean_gap", "scarcity_gap", "mixed_lead"]], rsuffix="_eval")
        print(f"\nthe same grid on the evaluation traces {list(tuning.EVALUATION_SEEDS)} (tuning order):")
        print(both.round(4).to_string())
        print(f"\nbest on the evaluation traces: {tuning.select(ev.reset_index()).label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
