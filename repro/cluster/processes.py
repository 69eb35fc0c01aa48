"""Process helpers shared by the launchers and the servers they start (engines, proxy): free
ports, process-group termination, dying with the parent, a live run's scheduling priority, and
running a coroutine from sync code."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import resource
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

LIVE_NICE_ENV = "REPRO_LIVE_NICE"
DEFAULT_LIVE_NICE = -5
"""Niceness of a live run's own processes (engines, proxy, load generator), each in a session and
so (Linux, ``kernel.sched_autogroup_enabled``) a scheduling group of its own: at -5 each weighs
about 3x an ordinary process, so a busy background job (another user's build, a CPU hog) takes
what the run leaves idle instead of a fair share of each wake-up. Lowering niceness needs root or
CAP_SYS_NICE; without it the processes run at the caller's niceness, and the run's validity
measures say whether that was enough (docs/VALIDITY.md, "Priority", and the measures it lists)."""


LIVE_SCHED_ENV = "REPRO_LIVE_SCHED"
REALTIME_PRIORITY = 1
"""SCHED_RR priority of a live run's own processes (the lowest real-time one: above every normal
process, below the kernel's real-time threads)."""
RTTIME_GUARD_S = 1.0
"""CPU seconds a real-time live process may compute without sleeping before it drops back to
normal scheduling (``RLIMIT_RTTIME``, `enter_live_loop`)."""


def live_realtime() -> bool:
    """Whether a live run's own processes (emulated engines, proxy, load generator) ask for
    real-time round-robin scheduling: ``$REPRO_LIVE_SCHED`` is ``rr`` (the default) or ``normal``."""
    from repro.errors import ConfigError

    raw = os.environ.get(LIVE_SCHED_ENV, "").strip().lower()
    if raw in ("", "rr"):
        return True
    if raw == "normal":
        return False
    raise ConfigError(f"${LIVE_SCHED_ENV}: must be 'rr' or 'normal', got {raw!r}")


def enter_live_loop() -> str:
    """Call once a live process (an emulated engine, the proxy, the load generator) has started,
    right before it serves or measures: `settle_heap`, then, unless ``$REPRO_LIVE_SCHED=normal``,
    real-time round-robin scheduling (SCHED_RR, priority `REALTIME_PRIORITY`). Returns the policy
    it runs under (``"rr"`` or ``"other"``).

    Why: on a shared machine a waking harness process has to win the CPU from whatever runs;
    niceness only weighs it against the running process (a busy loop still holds the CPU for part
    of each wake-up), while SCHED_RR preempts every normal process at once (docs/VALIDITY.md,
    "Real-time scheduling"; ``python benchmarks/bench_emulator.py --part capacity --hog 1 --sched rr``,
    against ``--sched normal``, measures the difference).
    The guard: ``RLIMIT_RTTIME`` (`RTTIME_GUARD_S`) sends SIGXCPU to a process that computes that
    long without sleeping (overload, a bug), and its handler drops the process back to normal
    scheduling, so a live run can never take the machine away from everything else. Without the
    privilege (root, CAP_SYS_NICE or an ``rtprio`` limit) the process stays as it was and the run's
    validity measures say whether that was enough."""
    settle_heap()
    if not live_realtime():
        return policy_name(0)
    try:
        _soft, hard = resource.getrlimit(resource.RLIMIT_RTTIME)
        guard = int(RTTIME_GUARD_S * 1e6)
        if hard != resource.RLIM_INFINITY:
            guard = min(guard, hard)
        signal.signal(signal.SIGXCPU, _drop_realtime)
        resource.setrlimit(resource.RLIMIT_RTTIME, (guard, hard))
        # children (engines a benchmark driver starts) start under normal scheduling, not ours
        os.sched_setscheduler(0, os.SCHED_RR | os.SCHED_RESET_ON_FORK, os.sched_param(REALTIME_PRIORITY))
    except (OSError, ValueError, AttributeError):  # no privilege, or not Linux
        pass
    return policy_name(0)


def _drop_realtime(signum: int, frame: Any) -> None:
    """SIGXCPU: the process computed `RTTIME_GUARD_S` without sleeping; back to normal scheduling."""
    with contextlib.suppress(OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def policy_name(pid: int) -> str | None:
    """The scheduling policy of process ``pid`` (0: this one): ``"rr"``, ``"fifo"``, ``"other"``,
    ``"batch"``, ``"idle"``; None where unreadable."""
    try:
        pol = os.sched_getscheduler(pid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    except (OSError, AttributeError):
        return None
    names = {os.SCHED_RR: "rr", os.SCHED_FIFO: "fifo", os.SCHED_OTHER: "other",
             getattr(os, "SCHED_BATCH", -2): "batch", getattr(os, "SCHED_IDLE", -3): "idle"}
    return names.get(pol, str(pol))


def live_nice() -> int | None:
    """The niceness for a live run's processes: ``$REPRO_LIVE_NICE`` (an integer from -20 to 19, or
    ``off`` to leave priorities alone), default `DEFAULT_LIVE_NICE`."""
    from repro.errors import ConfigError

    raw = os.environ.get(LIVE_NICE_ENV, "").strip()
    if not raw:
        return DEFAULT_LIVE_NICE
    if raw.lower() == "off":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not -20 <= value <= 19:
        raise ConfigError(f"${LIVE_NICE_ENV}: must be an integer from -20 to 19 or 'off', got {raw!r}")
    return value


def set_priority(nice: int | None) -> None:
    """Set this process's niceness and, when it leads a session, its scheduling autogroup's (the
    weight Linux gives the whole session against other sessions); best effort: a value the process
    may not set (no CAP_SYS_NICE) is left as it was. ``None``: nothing."""
    if nice is None:
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    if os.getsid(0) == os.getpid():
        with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))


def priority_of(pid: int) -> dict[str, int | str | None]:
    """``{"policy": .., "nice": .., "autogroup_nice": ..}`` of a running process (None where
    unreadable; policy as `policy_name`)."""
    out: dict[str, int | str | None] = {"policy": policy_name(pid), "nice": None, "autogroup_nice": None}
    with contextlib.suppress(OSError):
        out["nice"] = os.getpriority(os.PRIO_PROCESS, pid)
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/autogroup") as f:
            out["autogroup_nice"] = int(f.read().split("nice")[1])
    return out


def child_setup(nice: int | None = None, die_with_us: bool = False) -> Callable[[], None] | None:
    """A ``preexec_fn`` for a child started with ``start_new_session=True`` (runs after its
    ``setsid``): its priority (`set_priority`) and, with ``die_with_us``, `die_with_parent`."""
    if nice is None and not die_with_us:
        return None

    def setup() -> None:
        set_priority(nice)
        if die_with_us:
            die_with_parent()

    return setup


def settle_heap() -> None:
    """Collect garbage now and move every surviving object (imports, apps, a loaded trace) to
    CPython's permanent generation, so that the full collections a live process makes while it
    serves scan only what the run itself allocated.

    Call it once a process has finished starting, before it measures or serves. Without it a full
    collection of the startup heap takes 50-110 ms of CPU (FastAPI, pydantic and uvicorn in an
    emulated engine; a trace and its prompts in a client) and lands mid-run: every engine of a
    cluster stalled that long once, and a request sent then was late by as much
    (docs/VALIDITY.md, "What keeps a live run valid on a shared machine")."""
    gc.collect()
    gc.freeze()


def orphaned(parent_pid: int) -> bool:
    """For a child told ``--parent-pid N``: ask to die with the parent (`die_with_parent`), then
    whether the parent is already gone (this process was re-parented): the caller should exit."""
    die_with_parent()
    return os.getppid() != parent_pid


def die_with_parent() -> None:
    """Linux: receive SIGTERM when the parent process dies (best effort), so that a harness killed
    with ``kill -9`` leaves no server behind."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux, or no libc: nothing to do
        pass


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, also inside a running event loop.

    ``asyncio.run`` refuses to start while a loop runs in this thread, which is always the case in
    a Jupyter kernel; there the coroutine runs on its own loop in a worker thread (the caller
    blocks until it is done, and exceptions propagate).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="repro-run-sync")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


_GIVEN_PORTS: dict[int, float] = {}
"""Ports `free_ports` handed out in this process, with when: a server binds its port only once it has started
(a real engine: ~20 s of imports later), so two launches in one process at once (a test session's clusters) must
not be handed the same port meanwhile."""
_GIVEN_LOCK = threading.Lock()
GIVEN_PORT_HOLD_S = 600.0  # wall s a handed-out port is not handed out again by this process


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports (held open together while choosing, so they differ), none of which this process
    handed out in the last `GIVEN_PORT_HOLD_S` seconds."""
    socks = []
    with _GIVEN_LOCK:
        now = time.monotonic()
        for port in [p for p, t in _GIVEN_PORTS.items() if now - t > GIVEN_PORT_HOLD_S]:
            del _GIVEN_PORTS[port]
        try:
            ports: list[int] = []
            while len(ports) < n:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind((host, 0))
                socks.append(s)  # held open: the OS gives no port twice meanwhile
                port = s.getsockname()[1]
                if port not in _GIVEN_PORTS:
                    ports.append(port)
            _GIVEN_PORTS.update((p, now) for p in ports)
            return ports
        finally:
            for s in socks:
                s.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def terminate_pids(pids: Sequence[int], timeout: float = 5.0, procs: dict[int, subprocess.Popen] | None = None) -> None:
    """SIGTERM each process group, wait, SIGKILL what is left; reap children we own.

    A group whose leader is already gone is signalled too: a real vLLM engine killed by a test or
    a crash leaves its EngineCore and worker processes behind in its group (they kept ~9% of a core
    each busy for hours before this). A pid of ``procs`` whose process has ended and whose number another
    process holds now (pids are recycled: this machine's pid_max is 32,768) is never signalled, nor its
    group: that is someone else's (a notebook kernel of `repro paper` was seen interrupted)."""
    procs = procs or {}

    def ours(pid: int) -> bool:
        """False when ``pid`` was our child, has ended and been reaped, and the number is alive again: another
        process holds it now (Linux frees a pid only once no group or session uses it, so any group of that
        id is the newcomer's too) and nothing of ours is left to stop."""
        proc = procs.get(pid)
        return not (proc is not None and proc.poll() is not None and pid_alive(pid))

    live = [p for p in pids if p and ours(p) and (pid_alive(p) or group_alive(p))]
    for pid in live:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        for pid in list(live):
            proc = procs.get(pid)
            leader_gone = proc.poll() is not None if proc is not None else not pid_alive(pid)
            if (leader_gone and not group_alive(pid)) or not ours(pid):
                live.remove(pid)
        if live:
            time.sleep(0.05)
    for pid in live:
        if ours(pid):
            _signal_group(pid, signal.SIGKILL)
    for pid in pids:
        proc = procs.get(pid)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Send ``sig`` to a child we started (in its own session), wait ``timeout`` wall seconds for it
    to end, then SIGKILL its process group; always reaped. Nothing to do if it already ended."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` (a session we started: its id is its first process's pid)
    still has a member that is not a zombie; never true for our own group. A group of zombies is
    dead: its members ended and wait for a parent to reap them (the engines `repro cluster up` started
    in this very process, e.g. a notebook's or a test's, whose `down` then waited its whole timeout)."""
    if pgid <= 0 or pgid == os.getpgrp():
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _group_has_a_live_member(pgid)


def _group_has_a_live_member(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is not a zombie (from /proc; True where /proc cannot tell)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, _ppid, pgrp = f.read().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):
            continue  # ended while we looked
        if int(pgrp) == pgid and state != "Z":
            return True
    return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        pgid = os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        pgid = pid if group_alive(pid) else None  # the leader is gone, its group is not
    try:
        if pgid is None or pgid != pid or pgid == os.getpgrp():
            raise ProcessLookupError  # not a group of its own: signal the process only
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

