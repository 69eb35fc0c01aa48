"""The ``ray`` executor against a Ray head this test starts on 127.0.0.1: a sweep on Ray
writes the same journal and manifest bytes as one process, the code travels as the job's working
directory, and a failed run names its spec."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from repro.errors import RunFailed
from repro.experiment.executor import RayExecutor, SerialExecutor, local_ray_head
from repro.experiment.runner import sweep
from repro.experiment.saturation import saturation_search
from repro.experiment.spec import RunSpec
from tests.test_parallel_sweep import tree_digest

# not importorskip: importing ray here would fix its network settings before the executor sets them
# the slow tier: each test talks to a Ray head started once for the module (~20 s)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the optional extra 'ray'")]


@pytest.fixture(scope="module")
def ray_executor():
    with local_ray_head(cpus=2) as address, RayExecutor(address) as ex:
        yield ex


def specs() -> list[RunSpec]:
    base = RunSpec(workload="chat", topology="2p4d", n_requests=400, rate=20.0)
    return [base.replace(seed=s, policy=p) for s in (1, 2, 3) for p in ("round_robin", "marginal_cost")]


def test_a_sweep_on_ray_writes_the_serial_bytes(tmp_path, ray_executor):
    assert ray_executor.jobs == 2  # the head's CPUs
    on_ray = sweep(specs(), tmp_path / "ray", progress=False, executor=ray_executor)
    serial = sweep(specs(), tmp_path / "serial", progress=False, executor=SerialExecutor())
    pd.testing.assert_frame_equal(on_ray, serial)
    files = tree_digest(tmp_path / "serial")
    assert len(files) == 2 * len(specs())
    assert tree_digest(tmp_path / "ray") == files


def test_a_saturation_search_on_ray_takes_the_serial_steps(ray_executor):
    base = RunSpec(workload="chat", topology="1p2d", n_requests=400, seed=4)
    assert saturation_search(base, executor=ray_executor) == saturation_search(base, executor=SerialExecutor())


def test_a_failed_run_on_ray_names_its_spec(tmp_path, ray_executor):
    bad = specs()[0].replace(policy="tests.sweep_fixtures:Explodes", seed=11)
    with pytest.raises(RunFailed) as err:
        sweep([*specs()[:2], bad], tmp_path, progress=False, executor=ray_executor)
    assert bad.run_id in str(err.value) and "explodes on its 50th decision" in str(err.value)
    assert "ray at 127.0.0.1:" in str(err.value)
