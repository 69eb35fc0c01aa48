"""Process helpers shared by the servers the harness starts (engines, proxy)."""

from __future__ import annotations

import ctypes
import signal


def die_with_parent() -> None:
    """Linux: receive SIGTERM when the parent process dies (best effort), so that a harness killed
    with ``kill -9`` leaves no server behind."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux, or no libc: nothing to do
        pass
