"""The simulator's speed record (`data/benchmarks/sim.json`, written by ``benchmarks/bench_sim.py --record``) is
complete: every policy of the paper timed in every tree, three rounds each, the figures derivable from the rounds,
and the journals byte-identical across trees. It asserts no speed (timings belong to the benchmark)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "data" / "benchmarks" / "sim.json"
POLICIES = {"round_robin", "least_loaded", "length_threshold", "marginal_cost"}


def test_the_sim_record_is_complete_and_consistent():
    rec = json.loads(RECORD.read_text())
    assert rec["command"].startswith("python3 benchmarks/bench_sim.py")
    assert rec["machine"]["cores"] >= 1 and rec["commit"] and rec["baseline"]
    rows = rec["rows"]
    assert {r["policy"] for r in rows} == POLICIES
    trees = {r["tree"] for r in rows}
    assert {"OLD", "NEW src", "NEW compiled"} <= trees
    for r in rows:
        assert len(r["wall_s"]) == rec["rounds"] >= 3
        assert r["best_wall_s"] == min(r["wall_s"])
        assert r["median_wall_s"] == round(statistics.median(r["wall_s"]), 4)
        assert r["x_real_time_best"] >= r["x_real_time_median"] > 0
    for p in POLICIES:
        shas = {h for r in rows if r["policy"] == p for h in r["sha256"]}
        assert len(shas) == 1, f"{p}: the trees' journals differ"
