"""Process helpers shared by the servers the harness starts (engines, proxy)."""

from __future__ import annotations

import asyncio
import ctypes
import signal
import threading
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


def die_with_parent() -> None:
    """Linux: receive SIGTERM when the parent process dies (best effort), so that a harness killed
    with ``kill -9`` leaves no server behind."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux, or no libc: nothing to do
        pass


def run_sync(coro: "Coroutine[Any, Any, T]") -> "T":
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
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="repro-run-sync")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
