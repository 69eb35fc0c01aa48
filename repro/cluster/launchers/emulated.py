"""The ``emulated`` launcher: local emulated vLLM engines (``python -m repro.emulator``) on free ports.

One process per instance on free 127.0.0.1 ports (or every engine in one process with
``shared_process``), started in parallel, each in its own process group and told to die with its
parent (``--parent-pid``) unless detached; waits for ``/health``. ``time_scale`` is the emulator's
K (wall seconds x K = physics seconds).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from repro.cluster.launchers.base import ProcessLauncher, wait_healthy
from repro.cluster.processes import free_ports
from repro.cluster.topology import Instance, InstanceSpec, Topology
from repro.errors import ConfigError
from repro.paths import REPO_ROOT


class EmulatedLauncher(ProcessLauncher):
    """Local emulated engines (``python -m repro.emulator``) on free ports.

    Streams carry 16 tokens per chunk (vLLM's ``--stream-interval 16``: the first and the last
    chunk go at once, so TTFT, TPOT and e2e are those of ``--stream-interval 1``) and no timed
    flush (``stream_interval_ms`` 0): every chunk is a send, a proxy relay and a client parse on a
    shared CPU, and no measurement here looks at the chunks in between.

    ``shared_process`` (topology option ``emulated: {shared_process: true}``): every engine of the
    cluster in one process and one event loop (``--engines``; `repro.emulator.server`); each
    `Instance` then carries that process's pid, and killing it (or a ``crash`` fault) ends every
    engine. Default ``False``, one process per engine: on 2 cores with a busy-loop hog the scheduler
    gives six engine processes a larger share against the hog than one (2p4d mixed at 24 req/s, K = 2:
    mean TTFT +12% vs +22.5% against the physics), while with no hog the shared process keeps up
    further (K = 4: +11.7% vs +40%; `benchmarks/bench_emulator.py`)."""

    name = "emulated"

    def __init__(self, topology: Topology, *, time_scale: float = 1.0, host: str = "127.0.0.1",
                 stream_interval_tokens: int = 16, stream_interval_ms: float = 0.0,
                 dev_mode: bool = True, extra_args: Sequence[str] = (), log_dir: Path | None = None,
                 detach: bool = False, startup_timeout: float = 60.0, eos_mean_tokens: int | None = None,
                 shared_process: bool | None = None) -> None:
        super().__init__(topology, log_dir=log_dir, detach=detach, startup_timeout=startup_timeout)
        if not time_scale > 0:
            raise ConfigError(f"time_scale must be > 0, got {time_scale}")
        opts = topology.options.get("emulated", {}) or {}
        self.time_scale = float(opts.get("time_scale", time_scale)) if time_scale == 1.0 else float(time_scale)
        self.host = host
        self.stream_interval_tokens = int(opts.get("stream_interval_tokens", stream_interval_tokens))
        self.stream_interval_ms = float(opts.get("stream_interval_ms", stream_interval_ms))
        self.dev_mode = dev_mode
        self.extra_args = list(extra_args)
        self.eos_mean_tokens = eos_mean_tokens
        shared = opts.get("shared_process", False) if shared_process is None else shared_process
        if not isinstance(shared, bool):
            raise ConfigError(f"emulated: field 'shared_process' must be true or false, got {shared!r}")
        self.shared_process = shared

    def commands(self, ports: Sequence[int]) -> list[tuple[InstanceSpec, list[str], str]]:
        out = []
        for spec, port in zip(self.topology.instances, ports, strict=False):
            engine_id = spec.engine_id or f"{spec.name}-{uuid.uuid4().hex[:8]}"
            argv = [sys.executable, "-m", "repro.emulator", "--host", self.host, "--port", str(port),
                    "--profile", spec.profile, "--time-scale", repr(self.time_scale), "--engine-id", engine_id,
                    "--stream-interval-tokens", str(self.stream_interval_tokens),
                    "--stream-interval-ms", repr(self.stream_interval_ms)]
            if spec.kv_budget_tokens is not None:
                argv += ["--kv-budget-tokens", str(spec.kv_budget_tokens)]
            if self.eos_mean_tokens is not None:
                argv += ["--eos-mean-tokens", str(self.eos_mean_tokens)]
            for f in spec.faults:
                argv += ["--fault", f]
            if not self.detach:
                argv += ["--parent-pid", str(os.getpid())]
            argv += self.extra_args
            out.append((spec, argv, engine_id))
        return out

    def start(self) -> list[Instance]:
        ports = free_ports(len(self.topology.instances), self.host)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONUNBUFFERED"] = "1"
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        env.pop("VLLM_NIXL_SIDE_CHANNEL_PORT", None)  # each engine's side channel is its HTTP port
        self.instances = []
        commands = self.commands(ports)
        if self.shared_process:
            engines = [argv[3:] for _, argv, _ in commands]  # each engine's options (after python -m repro.emulator)
            engines = [[a for a, prev in zip(args, [None] + args, strict=False)
                        if a != "--parent-pid" and prev != "--parent-pid"] for args in engines]
            self.log_dir.mkdir(parents=True, exist_ok=True)
            path = self.log_dir / "engines.json"
            path.write_text(json.dumps(engines, indent=1))
            argv = [sys.executable, "-m", "repro.emulator", "--engines", str(path)]
            if not self.detach:
                argv += ["--parent-pid", str(os.getpid())]
            proc, log = self._spawn("engines", argv, env)
            procs = {spec.name: proc for spec, _, _ in commands}
        for (spec, argv, engine_id), port in zip(commands, ports, strict=True):
            if not self.shared_process:
                proc, log = self._spawn(spec.name, argv, env)
                procs = self.procs
            self.instances.append(Instance(name=spec.name, role=spec.role, url=f"http://{self.host}:{port}",
                                           engine_id=engine_id, pid=proc.pid, profile=spec.profile, log=log))
        wait_healthy(self.instances, self.startup_timeout, procs)
        return list(self.instances)
