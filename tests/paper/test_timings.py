"""The documents' wall-clock timings are written from the benchmark's record (`repro.paper.timings`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from repro.identify.certificate import doc_block
from repro.paper import timings
from repro.paths import REPO_ROOT

ENTRY = {"tier": "tests", "command": "python3 -m pip install -e '.[test]' && python3 -m pytest", "clean_clone": True,
         "rounds": [{"wall_s": 250.0, "outcome": "9 passed", "exit": 0, "load_before": 0.1},
                    {"wall_s": 243.4, "outcome": "9 passed", "exit": 0, "load_before": 0.1},
                    {"wall_s": 260.0, "outcome": "9 passed", "exit": 0, "load_before": 0.1}],
         "median_s": 250.0, "outcome": "9 passed, 1 skipped", "ok": True, "busy_allowed": False,
         "machine": {"cpu": "AMD EPYC", "cores": 2}, "commit": "abc1234", "date": "2026-01-01",
         "measured_by": "python3 benchmarks/bench_tiers.py tests --rounds 3 --clean-clone"}


def test_the_documents_agree_with_the_record():
    for doc, body in timings.blocks(REPO_ROOT).items():
        assert doc_block((REPO_ROOT / doc).read_text(encoding="utf-8"), timings.BLOCK) == body, \
            f"{doc}'s timings differ from {timings.TIMINGS}: run `repro conclusion --docs`"


def test_a_record_is_rendered_with_its_median_machine_and_commit(tmp_path: Path):
    (tmp_path / timings.TIMINGS).parent.mkdir(parents=True)
    assert timings.readme_block(tmp_path).startswith("Not measured yet")
    (tmp_path / timings.TIMINGS).write_text(json.dumps({"tiers": [ENTRY]}))
    line = timings.readme_block(tmp_path)
    assert "the tests with the install from a clean clone 4 min 10 s (median of 3; 9 passed, 1 skipped)" in line
    assert "2 cores of an AMD EPYC, commit abc1234" in line
    table = timings.guide_block(tmp_path)
    assert "| 4 min 10 s | 250, 243, 260 |" in table and "`python3 benchmarks/bench_tiers.py tests" in table
    assert timings.duration(59.6) == "1 min 0 s" and timings.duration(42) == "42 s"


def test_the_benchmark_reads_what_pytest_printed():
    spec = importlib.util.spec_from_file_location("bench_tiers", REPO_ROOT / "benchmarks" / "bench_tiers.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    text = "....\n==== 1134 passed, 19 skipped, 3 warnings in 155.21s (0:02:35) ====\n"
    assert bench.outcome("tests", text, 0) == "1134 passed, 19 skipped, 3 warnings"
    quiet = "....\nSKIPPED [1] tests/x.py:3: no engine\n1156 passed, 20 skipped in 150.21s (0:02:30)\n"  # pytest -q
    assert bench.outcome("tests", quiet, 0) == "1156 passed, 20 skipped"
    assert bench.outcome("main", "done", 2) == "exit 2"
    assert set(bench.TIERS) == {"tests", "main", "slow"}
