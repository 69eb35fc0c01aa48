"""One cluster, not two: live runs use the engines `repro cluster up` started, leave them running, and
a run that would start a second set beside them is refused with a message naming them and the two ways on."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from repro.cli import app
from repro.cluster.launchers import launch
from repro.cluster.launchers.state import BESIDE_ENV, running_clusters
from repro.cluster.topology import parse_topology
from repro.errors import ConfigError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def cluster_up(tmp_path):
    """An emulated 1p1d cluster started by `repro cluster up` (state file in tmp_path), stopped after the test."""
    state = tmp_path / "cluster.json"
    runner = CliRunner()
    r = runner.invoke(app, ["cluster", "up", "1p1d", "--state-file", str(state)])
    assert r.exit_code == 0, r.output
    try:
        yield state
    finally:
        runner.invoke(app, ["cluster", "down", "--state-file", str(state)])


def test_a_live_run_uses_the_running_engines_and_leaves_them_running(cluster_up, tmp_path):
    pids = [i["pid"] for i in json.loads(cluster_up.read_text())["instances"]]
    topo = parse_topology(str(cluster_up))  # the state file is a cluster: remote, never restarted
    assert topo.launcher == "remote" and [s.pid for s in topo.instances] == pids
    r = CliRunner().invoke(app, ["run", "--backend", "emulated", "--cluster", str(cluster_up), "--workload", "chat",
                                 "--rate", "8", "-n", "30", "--policy", "round_robin", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert all(_alive(p) for p in pids)  # left running
    (run_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    validity = json.loads((run_dir / "validity.json").read_text())
    # the CPU of processes outside the run is recorded; the engines it used are the run's own
    assert validity["measured"]["outside_cpu_s"] is not None
    assert validity["measured"]["outside_cpu_fraction"] < 0.5


def test_a_second_set_of_engines_is_refused_naming_the_running_ones(cluster_up, monkeypatch):
    monkeypatch.delenv(BESIDE_ENV, raising=False)
    mine = [r for r in running_clusters() if r.state_file == str(cluster_up.resolve())]
    assert len(mine) == 1 and {i.name for i in mine[0].instances} == {"prefill-0", "decode-0"}
    with pytest.raises(ConfigError) as err:
        with launch("1p1d", "emulated"):
            pass
    text = str(err.value)
    assert "already run" in text and "prefill-0" in text and f"--cluster {cluster_up.resolve()}" in text
    assert f"repro cluster down --state-file {cluster_up.resolve()}" in text
    r = CliRunner().invoke(app, ["cluster", "up", "1p1d", "--state-file", str(cluster_up.parent / "second.json")])
    assert r.exit_code == 2 and "already run" in r.output
    monkeypatch.setenv(BESIDE_ENV, "1")  # the way tests start theirs beside a user's
    with launch("1p1d", "emulated", time_scale=50) as inst:
        assert len(inst) == 2
