"""Sweeps and saturation searches on worker processes give exactly what one process gives:
the same journal and manifest bytes, the same table, the same searched rates; a run that fails names
its spec; a sweep killed with SIGKILL resumes to the same files."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repro.errors import ConfigError, RunFailed
from repro.experiment.executor import LocalExecutor, SerialExecutor, make_executor, settings_from_env
from repro.experiment.runner import sweep, sweep_results
from repro.experiment.saturation import bisection_ahead, saturation_search
from repro.experiment.spec import RunSpec

ROOT = Path(__file__).resolve().parents[1]


def grid(n: int = 400) -> list[RunSpec]:
    base = RunSpec(workload="mixed", topology="2p4d", n_requests=n)
    return [base.replace(seed=s, rate=r, policy=p) for s in (1, 2) for r in (12.0, 20.0)
            for p in ("round_robin", "marginal_cost", "marginal_cost_plus")]


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> sha256)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def pool():
    with LocalExecutor(2) as ex:
        yield ex


@pytest.mark.slow
def test_parallel_sweep_writes_the_same_bytes_and_table(tmp_path, pool):
    specs = grid()
    specs = specs + [specs[3]]  # a spec given twice runs once; the second is a skip, as one by one
    serial = sweep(specs, tmp_path / "serial", progress=False, executor=SerialExecutor())
    parallel = sweep(specs, tmp_path / "parallel", progress=False, executor=pool)
    files = tree_digest(tmp_path / "serial")
    assert len(files) == 2 * (len(specs) - 1)  # journal + manifest per run
    assert tree_digest(tmp_path / "parallel") == files
    pd.testing.assert_frame_equal(serial, parallel)
    assert parallel["skipped"].tolist() == [False] * (len(specs) - 1) + [True]


def test_parallel_in_memory_sweep_equals_serial(tmp_path, pool):
    specs = grid(300)
    a = sweep_results(specs, "", progress=False, sim_in_memory=True, executor=SerialExecutor())
    b = sweep_results(specs, "", progress=False, sim_in_memory=True, executor=pool)
    assert [r.summary for r in a] == [r.summary for r in b]
    for x, y in zip(a, b, strict=True):
        assert x.run_dir is None and y.run_dir is None
        assert (x.request_outcomes().good == y.request_outcomes().good).all()
        assert np.array_equal(x.request_outcomes().ttft, y.request_outcomes().ttft, equal_nan=True)


def test_parallel_sweep_resumes_finished_runs(tmp_path, pool):
    specs = grid(300)
    sweep(specs[:4], tmp_path, progress=False, executor=pool)
    before = tree_digest(tmp_path)
    rows = sweep(specs, tmp_path, progress=False, executor=pool)
    assert rows["skipped"].tolist() == [True] * 4 + [False] * (len(specs) - 4)
    after = tree_digest(tmp_path)
    assert {k: after[k] for k in before} == before


def test_a_failed_run_names_its_spec_and_keeps_the_others(tmp_path, pool):
    good = grid(300)[:3]
    bad = good[0].replace(policy="tests.sweep_fixtures:Explodes", seed=9)
    with pytest.raises(RunFailed) as err:
        sweep([*good, bad], tmp_path, progress=False, executor=pool)
    msg = str(err.value)
    assert bad.run_id in msg and "tests.sweep_fixtures:Explodes" in msg and "seed 9" in msg
    assert "explodes on its 50th decision" in msg
    assert "local x2" in msg  # it failed on the pool's worker: the sweep did not fall back to this process
    assert not (tmp_path / bad.run_id / "manifest.json").exists()


@pytest.mark.slow
def test_saturation_search_with_workers_takes_the_same_steps(pool):
    base = RunSpec(workload="chat", topology="2p4d", n_requests=600, seed=3)
    one = saturation_search(base, executor=SerialExecutor())
    for ex in (pool, make_executor("local", 3)):
        with ex:
            assert saturation_search(base, executor=ex) == one
    assert len(one.probes) >= 4  # doubling and bisection both happened


def test_bisection_ahead_are_the_search_midpoints():
    import math

    lo, hi = 4.0, 8.0
    ahead = bisection_ahead(lo, hi, workers=7, left=10)
    mid = math.sqrt(lo * hi)
    assert ahead[:3] == [mid, math.sqrt(lo * mid), math.sqrt(mid * hi)]
    assert len(ahead) == 7
    assert bisection_ahead(lo, hi, 2, 10, high_first=True) == [mid, math.sqrt(mid * hi)]
    assert bisection_ahead(lo, hi, 7, 2) == ahead[:2]


def test_executor_settings_are_checked(monkeypatch):
    with pytest.raises(ConfigError, match="kind"):
        make_executor("threads")
    with pytest.raises(ConfigError, match="jobs"):
        make_executor("local", 0)
    with pytest.raises(ConfigError, match="address"):
        make_executor("ray", 2, address="")
    with pytest.raises(ConfigError, match="address"):
        make_executor("local", 2, address="127.0.0.1:6379")
    monkeypatch.setenv("REPRO_JOBS", "two")
    with pytest.raises(ConfigError, match="REPRO_JOBS"):
        settings_from_env()
    monkeypatch.setenv("REPRO_JOBS", "3")
    monkeypatch.setenv("REPRO_EXECUTOR", "local")
    assert settings_from_env() == ("local", 3, None)
    assert isinstance(make_executor("local", 1), SerialExecutor)


KILLED = """
import sys
from repro.experiment.executor import LocalExecutor
from repro.experiment.runner import sweep
from tests.test_parallel_sweep import grid
sweep(grid(1500), sys.argv[1], progress=False, executor=LocalExecutor(2))
"""


@pytest.mark.slow
def test_kill_9_mid_sweep_then_resume_gives_the_serial_bytes(tmp_path, pool):
    """SIGKILL the driver (and so its workers' parent) part-way through; what it wrote is either a
    finished run or ignored, and a rerun completes to the same files as a serial sweep."""
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(out)], cwd=ROOT, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(out.glob("*/manifest.json"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = len(list(out.glob("*/manifest.json")))
    assert 2 <= finished < len(grid())  # killed part-way
    rows = sweep(grid(1500), out, progress=False, executor=pool)
    assert rows["skipped"].sum() >= finished
    sweep(grid(1500), tmp_path / "serial", progress=False, executor=SerialExecutor())
    assert tree_digest(out) == tree_digest(tmp_path / "serial")
