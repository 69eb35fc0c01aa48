"""The state file of ``repro cluster up | down | status`` (default ``runs/cluster.json``).

``up`` records the launcher, the topology (its name and ``source``: the shorthand, name or YAML path it was
given) and its running instances (`save_state`, written atomically) so that ``down`` (`cluster_down`: stop the
recorded engines, never a recycled pid) and ``status`` (`cluster_status`: each instance's ``/health`` and
process) work from another shell. ``created`` is a Unix time in seconds.

One cluster, not two:

- every command that takes a cluster takes the state file too (`repro.cluster.topology.state_topology`, read
  by `repro.cluster.topology.parse_topology`): a ``remote`` topology naming the running engines, with the
  recorded topology's options (vLLM options, calibration, poll period), health-checked, never restarted or
  stopped;
- the engines ``up`` starts carry `CLUSTER_STATE_ENV` (their state file's absolute path) in their environment,
  so that `running_clusters` finds them from any directory; a live run that would start engines of its own
  while such engines run is refused (`refuse_beside_running`), naming them and the two ways on.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from repro.cluster.processes import cmdline, pid_alive, terminate_pids
from repro.cluster.topology import Instance, Topology
from repro.errors import ConfigError

DEFAULT_STATE_FILE = Path("runs/cluster.json")
CLUSTER_STATE_ENV = "REPRO_CLUSTER_STATE"
"""Set in the environment of every engine `repro cluster up` starts: its state file's absolute path."""
BESIDE_ENV = "REPRO_BESIDE_CLUSTER"
"""``1``: a live run starts its own engines even while engines of a `repro cluster up` run (tests do: theirs
listen on free ports of 127.0.0.1 and never touch the user's); the run's validity records the CPU the others
took."""


def save_state(path: Path, launcher: str, topology: Topology, instances: Sequence[Instance],
               source: str | None = None) -> None:
    """Record a cluster that is up (``source``: the topology as given, a shorthand, a name in data/clusters/
    or a YAML path, made absolute; default the topology's name)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if source is not None:
        from repro.cluster.topology import topology_file

        file = topology_file(source)
        source = str(file) if file is not None else source
    data = {"launcher": launcher, "topology": topology.name, "shorthand": topology.shorthand,
            "source": source or topology.name,
            "created": time.time(), "instances": [i.to_dict() for i in instances]}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def load_state(path: Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"state file {path} does not exist: no cluster is up (run `repro cluster up` first)")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"state file {path}: not valid JSON ({exc})") from None
    data["instances"] = [Instance(**i) for i in data.get("instances", [])]
    return data


def is_our_engine(pid: int | None) -> bool:
    """Is pid alive and one of our engines (not a recycled pid)?"""
    if not pid or not pid_alive(pid):
        return False
    cmd = cmdline(pid)
    return "repro.emulator" in cmd or "vllm" in cmd


def cluster_down(path: Path = DEFAULT_STATE_FILE) -> list[str]:
    """Stop the processes recorded in the state file and remove it; returns the names stopped."""
    data = load_state(path)
    insts = data["instances"]
    pids = [i.pid for i in insts if is_our_engine(i.pid)]
    terminate_pids(pids)
    Path(path).unlink(missing_ok=True)
    return [i.name for i in insts if i.pid in pids]


def cluster_status(path: Path = DEFAULT_STATE_FILE, timeout: float = 2.0) -> list[dict[str, Any]]:
    data = load_state(path)
    rows = []
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        for inst in data["instances"]:
            try:
                healthy = client.get(inst.url + "/health").status_code == 200
            except httpx.HTTPError:
                healthy = False
            rows.append({**inst.to_dict(), "healthy": healthy,
                         "alive": (pid_alive(inst.pid) if inst.pid else None), "launcher": data.get("launcher")})
    return rows


@dataclass(frozen=True)
class RunningCluster:
    """Engines of this project that `repro cluster up` started and that still run."""

    state_file: str
    topology: str
    source: str
    instances: tuple[Instance, ...]

    def describe(self) -> str:
        names = ", ".join(f"{i.name} (pid {i.pid}, {i.url})" for i in self.instances)
        return f"{self.topology}: {names} [state file {self.state_file}]"


def _marked_states() -> dict[str, set[int]]:
    """State file -> pids of this user's processes whose environment carries `CLUSTER_STATE_ENV`."""
    out: dict[str, set[int]] = {}
    key = (CLUSTER_STATE_ENV + "=").encode()
    uid = os.getuid()
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if d.stat().st_uid != uid:
                continue
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item.startswith(key):
                out.setdefault(item[len(key):].decode(errors="replace"), set()).add(int(d.name))
    return out


def running_clusters(extra: Sequence[str | Path] = (DEFAULT_STATE_FILE,)) -> list[RunningCluster]:
    """The clusters of this project that are up on this machine: those whose engines carry their state file in
    their environment, and those the state files ``extra`` record (default: ./runs/cluster.json) with an engine
    still running."""
    paths = dict.fromkeys([*_marked_states(), *(str(Path(p).resolve()) for p in extra if Path(p).exists())])
    out = []
    for p in paths:
        try:
            data = load_state(Path(p))
        except ConfigError:
            continue
        alive = tuple(i for i in data["instances"] if is_our_engine(i.pid))
        if alive:
            out.append(RunningCluster(p, str(data.get("topology")), str(data.get("source") or data.get("topology")),
                                      alive))
    return out


def refuse_beside_running(what: str) -> None:
    """ConfigError when engines of a `repro cluster up` run on this machine and ``what`` (a live run's own
    engines) is about to start more, unless `BESIDE_ENV` is ``1``: the message names them and the two ways on."""
    if os.environ.get(BESIDE_ENV, "").strip() == "1":
        return
    running = running_clusters()
    if not running:
        return
    first = running[0]
    raise ConfigError(
        f"{what}: engines of this project already run on this machine: "
        + "; ".join(r.describe() for r in running)
        + f". Use them: --cluster {first.state_file}; or stop them first: repro cluster down --state-file "
        f"{first.state_file}. (${BESIDE_ENV}=1 starts a second set beside them, sharing this machine.)")


def running_for(source: str | Path) -> RunningCluster | None:
    """The running cluster started from the same topology as ``source`` (a name in data/clusters/ or a YAML
    path), if any: a live run given that name reuses its engines."""
    from repro.cluster.topology import topology_file

    file = topology_file(source)
    if file is None:
        return None
    for r in running_clusters():
        if r.source == str(file):
            return r
    return None
