"""Where independent tasks (simulated runs, saturation probes) execute: in this process, in local worker
processes (one per core by default), or on a Ray cluster.

An `Executor` maps a top-level (picklable) function over items and yields ``(index, result)`` as
tasks finish, in any order; callers put results back in item order, so what they build does not depend
on which worker finished first (`repro.experiment.runner.sweep` is byte-identical for any ``jobs``).
Executors only compute: they never write into the caller's folders. Results travel back to the driver
(through pipes, or Ray's object store), and the driver writes journals and manifests, so a worker needs
no file system shared with the driver, and a ``kill -9`` of the driver loses only runs not yet written.

Choosing one (`make_executor`, `shared_executor`):

- ``serial``: in this process, one task at a time.
- ``local``: ``jobs`` worker processes of this machine (joblib's loky pool: workers import the
  simulator once, on their first task, and stay for the next sweep). `shared_executor` keeps one
  executor per process and setting, so repeated sweeps reuse its workers.
- ``ray``: tasks on a Ray cluster (``address``: ``HOST:PORT`` of a running head, or ``auto``). The
  repository (code and ``data/``; not ``runs/``, ``results/`` or virtual environments) is shipped as the
  job's working directory, so workers need only Python and the project's dependencies. Needs the
  optional extra ``ray`` (``pip install -e '.[ray]'``).

The environment sets the defaults, so notebooks and `repro paper` pick them up without code changes:
``$REPRO_EXECUTOR`` (``serial``/``local``/``ray``; default ``local``), ``$REPRO_JOBS`` (tasks at once;
default: one per core) and ``$REPRO_RAY_ADDRESS``.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from repro.errors import ConfigError, check_choice, check_int

EXECUTORS: tuple[str, ...] = ("serial", "local", "ray")
"""The executors `make_executor` knows, by name."""

EXECUTOR_ENV, JOBS_ENV, ADDRESS_ENV = "REPRO_EXECUTOR", "REPRO_JOBS", "REPRO_RAY_ADDRESS"

RAY_EXCLUDES: tuple[str, ...] = (
    ".git", "runs", "results", "figures", ".venv*", "**/__pycache__", "*.ipynb_checkpoints", "node_modules", "build",
)
"""What a Ray job's working directory (the repository) leaves out: outputs, environments and the
C sources mypyc generated (build/; the compiled modules themselves travel with the sources)."""

TaskItem = TypeVar("TaskItem")
"""What a task is given (`Executor.imap_unordered`'s items)."""
TaskResult = TypeVar("TaskResult")
"""What a task returns."""


class TaskFailed(RuntimeError):
    """A task raised on a worker: ``index`` is its position among the items, ``cause`` the error text
    (``Type: message``), ``error`` the task's own exception where it came back (a worker's, unpickled;
    None if not), so that its kind survives the trip (`repro.errors.PolicyError`)."""

    def __init__(self, index: int, cause: str, error: BaseException | None = None) -> None:
        super().__init__(cause)
        self.index, self.cause, self.error = index, cause, error

    @classmethod
    def of(cls, index: int, error: BaseException) -> TaskFailed:
        """The failure of task ``index`` that raised ``error``."""
        return cls(index, f"{type(error).__name__}: {error}", error)


class Executor(abc.ABC):
    """Runs a function over items, ``jobs`` at a time. Use as a context manager, or call `close`."""

    kind: str = ""
    jobs: int = 1

    @abc.abstractmethod
    def imap_unordered(self, fn: Callable[[TaskItem], TaskResult], items: Sequence[TaskItem]
                       ) -> Iterator[tuple[int, TaskResult]]:
        """Yield ``(index, fn(items[index]))`` for every item as each finishes (any order). A task that
        raises ends the iteration with `TaskFailed` naming its index (tasks not yet started are dropped)."""

    def close(self) -> None:  # noqa: B027 (a no-op unless the executor holds workers)
        """Release the workers (idempotent)."""

    def describe(self) -> str:
        """A short phrase for progress lines and logs, e.g. ``local x2``."""
        return f"{self.kind} x{self.jobs}"

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SerialExecutor(Executor):
    """Every task in this process, in item order."""

    kind, jobs = "serial", 1

    def imap_unordered(self, fn: Callable[[TaskItem], TaskResult], items: Sequence[TaskItem]
                       ) -> Iterator[tuple[int, TaskResult]]:
        for i, item in enumerate(items):
            try:
                result = fn(item)
            except Exception as exc:  # the same contract as the parallel executors
                raise TaskFailed.of(i, exc) from exc
            yield i, result


class LocalExecutor(Executor):
    """``jobs`` worker processes on this machine (a loky pool, started on first use)."""

    kind = "local"

    def __init__(self, jobs: int) -> None:
        check_int("executor", "jobs", jobs, 1, 1024)
        self.jobs = jobs
        self._pool: Any = None

    def _ensure(self) -> Any:
        if self._pool is None:
            # loky (joblib's process pool, a scikit-learn dependency): its workers start clean and
            # import what a task needs, without re-running the caller's __main__ (a script without
            # an ``if __name__ == "__main__"`` guard works); idle workers exit after 5 minutes
            from joblib.externals.loky import get_reusable_executor

            self._pool = get_reusable_executor(max_workers=self.jobs, timeout=300)
        return self._pool

    def imap_unordered(self, fn: Callable[[TaskItem], TaskResult], items: Sequence[TaskItem]
                       ) -> Iterator[tuple[int, TaskResult]]:
        from concurrent.futures import FIRST_COMPLETED, wait

        pool = self._ensure()
        todo = iter(enumerate(items))
        running: dict[Any, int] = {}

        def submit_next() -> None:
            for i, item in todo:
                running[pool.submit(fn, item)] = i
                return

        for _ in range(2 * self.jobs):  # keep every worker busy, with one task queued behind each
            submit_next()
        try:
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = running.pop(fut)
                    exc = fut.exception()
                    if exc is not None:
                        raise TaskFailed.of(i, exc) from exc
                    yield i, fut.result()
                    submit_next()
        finally:
            for fut in running:
                fut.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, kill_workers=False)
            self._pool = None


class RayExecutor(Executor):
    """Tasks on a Ray cluster at ``address`` (one CPU each; at most ``jobs`` in flight, default: the
    cluster's CPUs). Connects on first use; `close` disconnects (the cluster keeps running)."""

    kind = "ray"

    def __init__(self, address: str, jobs: int | None = None) -> None:
        if not address:
            raise ConfigError("executor: field 'address' is required for the ray executor "
                              f"(HOST:PORT of a running Ray head, or 'auto'; or set ${ADDRESS_ENV})")
        self.address = address
        if jobs is not None:
            check_int("executor", "jobs", jobs, 1, 100_000)
        self._jobs = jobs or 0
        self._ray: Any = None

    @property
    def jobs(self) -> int:  # type: ignore[override]
        """Tasks in flight at once: as given, else the cluster's CPUs (connects to find out)."""
        if not self._jobs:
            self._ensure()
        return self._jobs

    def _ensure(self) -> Any:
        if self._ray is None:
            if self.address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost") and "ray" not in sys.modules:
                # a head on the loopback address (`local_ray_head`): Ray would otherwise swap
                # 127.0.0.1 for this machine's network address, where such a head does not listen
                os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            try:
                import ray
            except ImportError as exc:
                raise ConfigError("executor: 'ray' needs the optional extra: pip install -e '.[ray]'") from exc
            from repro.paths import REPO_ROOT

            if not ray.is_initialized():
                ray.init(address=self.address, log_to_driver=False, logging_level="ERROR",
                         runtime_env={"working_dir": str(REPO_ROOT), "excludes": list(RAY_EXCLUDES)})
            if not self._jobs:
                self._jobs = max(1, int(ray.cluster_resources().get("CPU", 1)))
            self._ray = ray
        return self._ray

    def describe(self) -> str:
        return f"ray at {self.address} x{self._jobs or '?'}"

    def imap_unordered(self, fn: Callable[[TaskItem], TaskResult], items: Sequence[TaskItem]
                       ) -> Iterator[tuple[int, TaskResult]]:
        ray = self._ensure()
        remote = ray.remote(num_cpus=1, max_retries=2)(fn)  # a worker lost with its node is retried
        todo = iter(enumerate(items))
        running: dict[Any, int] = {}

        def submit_next() -> None:
            for i, item in todo:
                running[remote.remote(item)] = i
                return

        for _ in range(2 * self.jobs):
            submit_next()
        try:
            while running:
                done, _ = ray.wait(list(running), num_returns=1)
                for ref in done:
                    i = running.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # ray.exceptions.RayTaskError wraps the task's own error
                        raise TaskFailed.of(i, getattr(exc, "cause", None) or exc) from exc
                    yield i, result
                    submit_next()
        finally:
            for ref in running:
                ray.cancel(ref)

    def close(self) -> None:
        if self._ray is not None:
            self._ray.shutdown()
            self._ray = None


@contextlib.contextmanager
def local_ray_head(cpus: int = 2, port: int | None = None, timeout_s: float = 90.0) -> Iterator[str]:
    """A Ray head on this machine for the duration, listening on 127.0.0.1 only; yields its address
    (``127.0.0.1:PORT``) for `RayExecutor`. For tests, benchmarks and trying the ``ray`` executor
    without a cluster: ``ray start --head --block`` in a process group of its own (with
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, Ray's switch that keeps every server on the loopback
    address), stopped by killing that group. ``cpus``: the CPUs the head offers to tasks."""
    import signal
    import socket
    import subprocess
    import tempfile
    import time

    check_int("ray head", "cpus", cpus, 1, 4096)
    if port is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="rayh", dir="/tmp")  # Ray's socket paths must stay short
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
           f"--num-cpus={cpus}", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
           f"--temp-dir={tmp}"]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    log = open(os.path.join(tmp, "head.log"), "wb")  # noqa: SIM115 (open for the head's whole life)
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ray head exited with code {proc.returncode}; log: {log.name}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"ray head not listening on 127.0.0.1:{port} after {timeout_s:g} s; log: {log.name}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # `ray start --block` stops its servers on SIGTERM ...
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5.0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # ... and whatever of the group outlived it goes now
        proc.wait()
        log.close()


def make_executor(kind: str = "local", jobs: int | None = None, address: str | None = None) -> Executor:
    """An executor by name (`EXECUTORS`). ``jobs``: tasks at once (``local``: default one per core; 1
    gives the serial executor); ``address``: the Ray head (``ray`` only)."""
    check_choice("executor", "kind", kind, EXECUTORS)
    if jobs is not None:
        check_int("executor", "jobs", jobs, 1, 100_000)
    if kind == "ray":
        return RayExecutor(address or os.environ.get(ADDRESS_ENV, ""), jobs)
    if address:
        raise ConfigError(f"executor: field 'address' is for the ray executor, not {kind!r}")
    n = jobs if jobs is not None else (os.cpu_count() or 1)
    return SerialExecutor() if kind == "serial" or n == 1 else LocalExecutor(n)


def settings_from_env() -> tuple[str, int | None, str | None]:
    """(kind, jobs, address) from ``$REPRO_EXECUTOR``, ``$REPRO_JOBS``, ``$REPRO_RAY_ADDRESS`` (checked)."""
    kind = os.environ.get(EXECUTOR_ENV, "").strip() or "local"
    check_choice(f"${EXECUTOR_ENV}", "value", kind, EXECUTORS)
    raw = os.environ.get(JOBS_ENV, "").strip()
    try:
        jobs = int(raw) if raw else None
    except ValueError:
        raise ConfigError(f"${JOBS_ENV}: must be a whole number >= 1, got {raw!r}") from None
    if jobs is not None:
        check_int(f"${JOBS_ENV}", "value", jobs, 1, 100_000)
    return kind, jobs, (os.environ.get(ADDRESS_ENV, "").strip() or None) if kind == "ray" else None


_SHARED: dict[tuple[str, int | None, str | None], Executor] = {}


def shared_executor(kind: str | None = None, jobs: int | None = None, address: str | None = None) -> Executor:
    """This process's executor for a setting (the environment's where not given), made once and reused
    by every sweep (a local pool or a Ray connection is not rebuilt per sweep); closed at exit."""
    env_kind, env_jobs, env_address = settings_from_env()
    key = (kind or env_kind, jobs if jobs is not None else env_jobs,
           address if address is not None else env_address)
    if key not in _SHARED:
        if not _SHARED:
            atexit.register(close_shared)
        _SHARED[key] = make_executor(*key)
    return _SHARED[key]


def close_shared() -> None:
    """Close every executor `shared_executor` made (called at interpreter exit)."""
    while _SHARED:
        _SHARED.popitem()[1].close()
