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

One pool for many processes (`PoolServer`, `PoolClient`): `repro paper` runs several notebook kernels at
once; rather than a ``local`` pool per kernel (each worker importing the simulator and building its
predictor again, more workers than cores, and two kernels simulating the same spec at the same time), it
serves one pool of ``jobs`` workers to every kernel over a local socket (``$REPRO_POOL``). A kernel's
``local`` executor is then a `PoolClient`: the same contract and the same results (a task is the same
function on the same item), tasks identical to one queued, running or just finished for another kernel
are computed once, and tasks run in the order of their client's priority (``$REPRO_POOL_PRIORITY``,
lowest first: the longest notebook's first), then of submission.
"""

from __future__ import annotations

import abc
import atexit
import collections
import contextlib
import hashlib
import heapq
import itertools
import os
import pickle
import queue
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from repro.errors import ConfigError, check_choice, check_int

EXECUTORS: tuple[str, ...] = ("serial", "local", "ray")
"""The executors `make_executor` knows, by name."""

EXECUTOR_ENV, JOBS_ENV, ADDRESS_ENV = "REPRO_EXECUTOR", "REPRO_JOBS", "REPRO_RAY_ADDRESS"
POOL_ENV, POOL_KEY_ENV, PRIORITY_ENV = "REPRO_POOL", "REPRO_POOL_KEY", "REPRO_POOL_PRIORITY"
"""A `PoolServer`'s socket, its key (hex) and a client's priority: set by `PoolServer.env` and `repro paper`."""

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
def local_ray_head(cpus: int = 2, port: int | None = None, timeout_s: float = 180.0,
                   attempts: int = 3) -> Iterator[str]:
    """A Ray head on this machine for the duration, listening on 127.0.0.1 only; yields its address
    (``127.0.0.1:PORT``) for `RayExecutor`. For tests, benchmarks and trying the ``ray`` executor
    without a cluster: ``ray start --head --block`` in a process group of its own (with
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, Ray's switch that keeps every server on the loopback
    address), stopped by killing that group. ``cpus``: the CPUs the head offers to tasks.

    Up means Ray said so (``Ray runtime started.`` in its log), not only that its GCS port answers: a head whose
    raylet does not register within Ray's fixed 30 s (``ray/_private/node.py``; seen on a loaded 2-core machine)
    exits after its GCS has listened, and a driver connected to it then waits forever. Such a start is stopped and
    tried again, up to ``attempts`` times within ``timeout_s`` seconds in all; then a `RuntimeError` with the log."""
    import signal
    import socket
    import subprocess
    import tempfile
    import time

    check_int("ray head", "cpus", cpus, 1, 4096)
    check_int("ray head", "attempts", attempts, 1, 10)
    deadline = time.monotonic() + timeout_s

    def stop(proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # `ray start --block` stops its servers on SIGTERM ...
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5.0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # ... and whatever of the group outlived it goes now
        proc.wait()

    failures: list[str] = []
    for _ in range(attempts):
        at = port
        if at is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                at = sock.getsockname()[1]
        tmp = tempfile.mkdtemp(prefix="rayh", dir="/tmp")  # Ray's socket paths must stay short
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={at}",
               f"--num-cpus={cpus}", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
               f"--temp-dir={tmp}"]
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
        log_path = os.path.join(tmp, "head.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        up = False
        try:
            while not up:
                with open(log_path, "rb") as f:
                    up = b"Ray runtime started" in f.read()
                if up:
                    break
                if proc.poll() is not None:
                    failures.append(f"exited with code {proc.returncode} before it was up (log: {log_path})")
                    break
                if time.monotonic() > deadline:
                    failures.append(f"not up after {timeout_s:g} s (log: {log_path})")
                    break
                time.sleep(0.2)
            if up:
                yield f"127.0.0.1:{at}"
                return
        finally:
            stop(proc)
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"ray head on 127.0.0.1: {len(failures)} start(s) failed: " + "; ".join(failures))


# ---- one pool served to many processes ----------------------------------------------------------
def _run_pickled(payload: bytes) -> tuple[bool, bytes | None, str]:
    """A pool worker's task: ``payload`` is the pickled ``(fn, item)``; returns ``(True, pickled fn(item),
    "")``, or ``(False, the pickled exception or None, "Type: message")`` when ``fn`` raised. Results travel
    as bytes, so the server forwards them without importing what they are made of."""
    fn, item = pickle.loads(payload)
    try:
        return True, pickle.dumps(fn(item), protocol=pickle.HIGHEST_PROTOCOL), ""
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        try:
            return False, pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL), text
        except Exception:  # an exception that does not pickle: its text only
            return False, None, text


class _Peer:
    """A connected client: what the server sends it goes through a queue and a thread of its own, so that a
    client busy elsewhere never holds up the pool."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._send, daemon=True, name="repro-pool-send").start()

    def _send(self) -> None:
        while True:
            msg = self.out.get()
            if msg is None:
                return
            try:
                self.conn.send(msg)
            except (OSError, ValueError):  # the client went away: its reader cleans up
                return


class _Task:
    """One distinct task (its pickled ``(fn, item)``) and who waits for it: (peer, map id, index)."""

    __slots__ = ("dispatched", "payload", "priority", "waiters")

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.waiters: list[tuple[_Peer, int, int]] = []
        self.priority: tuple[int, int] | None = None
        self.dispatched = False


class PoolServer:
    """``jobs`` worker processes of this machine (a loky pool) serving `PoolClient`s of other processes over
    a local (Unix) socket with a random key; `env` is what a client process needs in its environment.

    A task identical to one queued or running (the same pickled function and item) waits for that one
    instead of running again, and the latest results (up to ``keep_bytes`` of them, pickled) are kept for
    identical tasks that come just after. Tasks start in this order: those of a map of at most ``jobs``
    tasks first (a step of a search, whose next step waits for it: a long sweep must not hold it up),
    then by their client's priority (lowest first; ``$REPRO_POOL_PRIORITY``), then in the order they
    came. Use as a context manager, or call `close`."""

    def __init__(self, jobs: int, keep_bytes: int = 64 << 20) -> None:
        from multiprocessing.connection import Listener

        check_int("pool", "jobs", jobs, 1, 1024)
        self.jobs, self.keep_bytes = jobs, keep_bytes
        self._key = os.urandom(32)
        self._dir = tempfile.mkdtemp(prefix="repro-pool-")
        self.address = os.path.join(self._dir, "pool.sock")
        self._listener = Listener(self.address, family="AF_UNIX", authkey=self._key)
        self._cond = threading.Condition()
        self._queue: list[tuple[tuple[int, int], int, bytes]] = []  # ((small map?, priority), order, key): a heap
        self._order = itertools.count()
        self._tasks: dict[bytes, _Task] = {}  # queued or running, by key
        self._done: collections.OrderedDict[bytes, tuple[bool, bytes | None, str]] = collections.OrderedDict()
        self._done_bytes = 0
        self._running = 0
        self._pool: Any = None
        self._closed = False
        self.computed = 0
        """Tasks the workers ran (identical tasks of several clients count once)."""
        self.requested = 0
        """Tasks clients asked for."""
        for target in (self._accept, self._dispatch):
            threading.Thread(target=target, daemon=True, name=f"repro-pool{target.__name__}").start()

    def env(self, priority: int = 0) -> dict[str, str]:
        """The environment of a client process: the socket, the key, the pool's size (``$REPRO_JOBS``), the
        ``local`` executor and the client's ``priority``."""
        return {POOL_ENV: self.address, POOL_KEY_ENV: self._key.hex(), JOBS_ENV: str(self.jobs),
                EXECUTOR_ENV: "local", PRIORITY_ENV: str(priority)}

    # -- clients
    def _accept(self) -> None:
        from multiprocessing import AuthenticationError

        while not self._closed:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError, AuthenticationError):
                continue  # closed (the loop ends), or a caller without the key
            if self._closed:  # `close` woke us
                conn.close()
                return
            threading.Thread(target=self._serve, args=(_Peer(conn),), daemon=True, name="repro-pool-recv").start()

    def _serve(self, peer: _Peer) -> None:
        try:
            while True:
                msg = peer.conn.recv()
                if msg[0] == "map":  # ("map", map id, priority, [pickled (fn, item), ...])
                    self._submit(peer, msg[1], int(msg[2]), msg[3])
                elif msg[0] == "cancel":  # ("cancel", map id): its results are no longer wanted
                    self._cancel(peer, msg[1])
        except (EOFError, OSError):  # the client closed its end (or died)
            self._cancel(peer, None)
        finally:
            peer.out.put(None)
            with contextlib.suppress(OSError):
                peer.conn.close()

    def _submit(self, peer: _Peer, batch: int, client_priority: int, payloads: list[bytes]) -> None:
        priority = (0 if len(payloads) <= self.jobs else 1, client_priority)
        with self._cond:
            self.requested += len(payloads)
            for i, payload in enumerate(payloads):
                key = hashlib.sha256(payload).digest()
                if key in self._done:
                    self._done.move_to_end(key)
                    peer.out.put(("result", batch, i, self._done[key]))
                    continue
                task = self._tasks.get(key)
                if task is None:
                    task = self._tasks[key] = _Task(payload)
                task.waiters.append((peer, batch, i))
                if not task.dispatched and (task.priority is None or priority < task.priority):
                    task.priority = priority
                    heapq.heappush(self._queue, (priority, next(self._order), key))
            self._cond.notify_all()

    def _cancel(self, peer: _Peer, batch: int | None) -> None:
        with self._cond:
            for task in self._tasks.values():
                task.waiters = [w for w in task.waiters if w[0] is not peer or (batch is not None and w[1] != batch)]

    # -- workers
    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not (self._queue and self._running < 2 * self.jobs):
                    self._cond.wait()
                if self._closed:
                    return
                priority, _, key = heapq.heappop(self._queue)
                task = self._tasks.get(key)
                if task is None or task.dispatched or task.priority != priority:
                    continue  # done, running, or queued again at a better priority
                if not task.waiters:  # nobody wants it any more
                    del self._tasks[key]
                    continue
                task.dispatched = True
                self._running += 1
                self.computed += 1
                try:
                    future = self._workers().submit(_run_pickled, task.payload)
                except Exception as exc:  # a broken pool: this task fails, the next one gets a new pool
                    self._pool = None
                    self._finish(key, (False, None, f"{type(exc).__name__}: {exc}"))
                    continue
            future.add_done_callback(lambda fut, key=key: self._finished(key, fut))

    def _workers(self) -> Any:
        if self._pool is None:
            from joblib.externals.loky import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=self.jobs)
        return self._pool

    def _finished(self, key: bytes, future: Any) -> None:
        try:
            result = future.result()
        except Exception as exc:  # the worker died (a BrokenProcessPool): the task fails, the pool is made again
            result = (False, None, f"{type(exc).__name__}: {exc}")
            with self._cond:
                self._pool = None
        with self._cond:
            self._finish(key, result)

    def _finish(self, key: bytes, result: tuple[bool, bytes | None, str]) -> None:  # (holding the lock)
        self._running -= 1
        task = self._tasks.pop(key, None)
        if result[0] and result[1] is not None and len(result[1]) <= self.keep_bytes:
            self._done[key] = result
            self._done_bytes += len(result[1])
            while self._done_bytes > self.keep_bytes:
                self._done_bytes -= len(self._done.popitem(last=False)[1][1] or b"")
        for peer, batch, i in task.waiters if task is not None else ():
            peer.out.put(("result", batch, i, result))
        self._cond.notify_all()

    def close(self) -> None:
        """Stop serving and stop the workers (idempotent)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
            self._cond.notify_all()
        from multiprocessing.connection import Client

        with contextlib.suppress(Exception):  # wake the accepting thread, which then ends
            Client(self.address, family="AF_UNIX", authkey=self._key).close()
        with contextlib.suppress(OSError):
            self._listener.close()
        if pool is not None:
            pool.shutdown(wait=True, kill_workers=True)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PoolServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PoolClient(Executor):
    """The ``local`` executor of a process whose environment names a `PoolServer` (``$REPRO_POOL``): its
    tasks run on that pool's ``jobs`` workers, shared with the pool's other clients."""

    kind = "local"

    def __init__(self, address: str, key: str, jobs: int, priority: int = 0) -> None:
        check_int("pool", "jobs", jobs, 1, 1024)
        self.address, self.jobs, self.priority = address, jobs, priority
        self._key = bytes.fromhex(key)
        self._conn: Any = None
        self._maps = itertools.count()

    def describe(self) -> str:
        return f"shared pool x{self.jobs}"

    def _ensure(self) -> Any:
        if self._conn is None:
            from multiprocessing.connection import Client

            self._conn = Client(self.address, family="AF_UNIX", authkey=self._key)
        return self._conn

    def imap_unordered(self, fn: Callable[[TaskItem], TaskResult], items: Sequence[TaskItem]
                       ) -> Iterator[tuple[int, TaskResult]]:
        try:  # as loky does: a function of __main__ travels by value
            from cloudpickle import dumps
        except ImportError:
            from pickle import dumps

        payloads = [dumps((fn, item), protocol=pickle.HIGHEST_PROTOCOL) for item in items]
        if not payloads:
            return
        conn = self._ensure()
        batch = next(self._maps)
        conn.send(("map", batch, self.priority, payloads))
        left = len(payloads)
        try:
            while left:
                try:
                    _, b, i, (ok, data, text) = conn.recv()
                except (EOFError, OSError) as exc:
                    self._conn = None
                    raise RuntimeError(f"executor: the shared pool at {self.address} went away ({exc!r})") from exc
                if b != batch:  # a result of a map given up before (its consumer stopped early)
                    continue
                left -= 1
                if ok:
                    yield i, pickle.loads(data)  # type: ignore[arg-type]
                    continue
                error = None
                with contextlib.suppress(Exception):
                    error = pickle.loads(data) if data is not None else None
                raise TaskFailed(i, text, error if isinstance(error, BaseException) else None)
        finally:
            if left and self._conn is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._conn.send(("cancel", batch))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None


def pool_client_from_env(jobs: int | None) -> PoolClient | None:
    """The `PoolClient` of the `PoolServer` this process's environment names (``$REPRO_POOL``), or None."""
    address, key = os.environ.get(POOL_ENV, "").strip(), os.environ.get(POOL_KEY_ENV, "").strip()
    if not address or not key or not os.path.exists(address):
        return None
    raw = os.environ.get(PRIORITY_ENV, "").strip()
    priority = int(raw) if raw.lstrip("-").isdigit() else 0
    return PoolClient(address, key, jobs or 1, priority)


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
    by every sweep (a local pool or a Ray connection is not rebuilt per sweep); closed at exit. A ``local``
    setting of more than one job in a process whose environment names a `PoolServer` (``$REPRO_POOL``:
    a notebook kernel of `repro paper`) is that pool's `PoolClient`."""
    env_kind, env_jobs, env_address = settings_from_env()
    key = (kind or env_kind, jobs if jobs is not None else env_jobs,
           address if address is not None else env_address)
    if key not in _SHARED:
        if not _SHARED:
            atexit.register(close_shared)
        client = pool_client_from_env(key[1]) if key[0] == "local" and (key[1] or 0) > 1 else None
        _SHARED[key] = client or make_executor(*key)
    return _SHARED[key]


def close_shared() -> None:
    """Close every executor `shared_executor` made (called at interpreter exit)."""
    while _SHARED:
        _SHARED.popitem()[1].close()
