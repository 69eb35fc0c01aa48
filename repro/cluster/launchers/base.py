"""The launchers' common interface and what every launcher shares.

- `Launcher`: ``start() -> list[Instance]``, ``stop()``; as a context manager it always tears down
  what it started (normal exit, exception, Ctrl-C, or SIGTERM: turned into ``KeyboardInterrupt``
  in the main thread while the block runs).
- `ProcessLauncher`: a launcher that starts local engine processes (each in its own session, at
  the live runs' priority, logged to a file); any it left running are stopped at interpreter exit.
- `wait_healthy`: poll every instance's ``GET /health`` until all answer 200 (timeouts in seconds).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import IO

import httpx

from repro.cluster.processes import child_setup, live_nice, terminate_pids
from repro.cluster.topology import Instance, Topology


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
_LIVE: set[ProcessLauncher] = set()


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


class ProcessLauncher(Launcher):
    """A launcher that starts engine processes on this machine (`EmulatedLauncher`, `VllmLauncher`):
    each in its own session, logging to ``<log_dir>/<name>.log``; `stop` ends them all (their
    process groups), unless the launcher is ``detach``ed and its engines still run."""

    def __init__(self, topology: Topology, *, log_dir: Path | None = None, detach: bool = False,
                 startup_timeout: float = 60.0) -> None:
        super().__init__(topology)
        self.detach = detach
        self.startup_timeout = startup_timeout
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"repro-{self.name}-"))
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: list[IO[bytes]] = []
        self.cluster_state: str | None = None
        """`repro cluster up`'s state file (absolute): set, every engine carries it in its environment
        (`repro.cluster.launchers.state.CLUSTER_STATE_ENV`), so that other runs find the cluster."""

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
        if self.cluster_state:
            from repro.cluster.launchers.state import CLUSTER_STATE_ENV

            env = {**env, CLUSTER_STATE_ENV: self.cluster_state}
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
