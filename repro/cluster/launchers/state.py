"""The state file of ``repro cluster up | down | status`` (default ``runs/cluster.json``).

``up`` records the launcher, the topology and its running instances (`save_state`, written
atomically) so that ``down`` (`cluster_down`: stop the recorded engines, never a recycled pid)
and ``status`` (`cluster_status`: each instance's ``/health`` and process) work from another shell.
``created`` is a Unix time in seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from repro.cluster.processes import cmdline, pid_alive, terminate_pids
from repro.cluster.topology import Instance, Topology
from repro.errors import ConfigError

DEFAULT_STATE_FILE = Path("runs/cluster.json")


def save_state(path: Path, launcher: str, topology: Topology, instances: Sequence[Instance]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"launcher": launcher, "topology": topology.name, "shorthand": topology.shorthand,
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
