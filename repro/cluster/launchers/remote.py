"""The ``remote`` launcher: engines that already run elsewhere, given by URL; health-checked, never
started or stopped. `remote_twin` writes such a cluster file for engines started here, so that
other runs reach them without starting their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from repro.cluster.launchers.base import Launcher, wait_healthy
from repro.cluster.topology import Instance, Topology, parse_topology, topology_error


class RemoteLauncher(Launcher):
    """Engines that already run elsewhere, given by URL; health-checked, never started or stopped."""

    name = "remote"

    def __init__(self, topology: Topology, *, timeout: float = 10.0) -> None:
        super().__init__(topology)
        missing = [s.name for s in topology.instances if not s.url]
        if missing:
            raise topology_error("instances[].url", f"is required by the remote launcher; missing for {missing}")
        self.timeout = timeout

    def start(self) -> list[Instance]:
        self.instances = [Instance(name=s.name, role=s.role, url=s.url, engine_id=s.engine_id, profile=s.profile,
                                   pid=s.pid)
                          for s in self.topology.instances]
        wait_healthy(self.instances, self.timeout, interval=0.5)
        return list(self.instances)


def remote_twin(topology: str | Path | dict[str, Any] | Topology, instances: Sequence[Instance],
                path: str | Path) -> Path:
    """Write a ``launcher: remote`` cluster file naming the running ``instances`` (and keeping the
    topology's ``vllm:`` options, poll period and calibration, resolved to an absolute path); returns ``path``.
    Runs given it reach the same engines without starting their own."""
    import yaml

    topo = parse_topology(topology, calibration_must_exist=False)
    doc: dict[str, Any] = {"name": f"{topo.name}-running", "launcher": "remote"}
    for key in ("vllm", "calibration", "kv_poll_interval_s"):
        if topo.options.get(key) is not None:
            doc[key] = topo.options[key]
    doc["instances"] = [{"role": i.role, "url": i.url, "name": i.name} for i in instances]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
