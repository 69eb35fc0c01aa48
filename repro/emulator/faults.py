"""Fault switches of an emulated engine (``--fault NAME[:ARG]``, repeatable).

Set on the command line, or at run time (only with ``VLLM_SERVER_DEV_MODE=1``; 404 otherwise)::

    GET  /_emulator/faults                          -> {"faults": ["slow:2", ...]}
    POST /_emulator/faults  {"faults": ["hang"]}    -> replaces the whole set ([] clears it)

``diverge``
    This instance's greedy outputs differ from every other instance's from the second token on
    (the first token, which the prefill engine also computes, stays the same). Makes the
    cross-instance greedy-equivalence gate fail.
``slow:F``
    Every step takes F times the profile's time (F > 0): a straggler / miscalibrated GPU.
``kv-drop``
    A prefill engine forgets the KV it promised to hold as soon as it answers, so the decode
    engine's pull fails and it recomputes the prompt locally (vLLM's recompute-on-load-failure).
``crash[:N]``
    The process dies (``os._exit(1)``: no graceful shutdown, open connections reset) when the
    request after the first N completion requests arrives (default N=0: on the first one). Set at
    run time with N=0 it dies right after answering the switch.
``hang[:N]``
    After N completion requests (default 0) the engine stops: the step loop stops, no completion,
    stream, ``/health`` or ``/metrics`` request is ever answered (connections are accepted and held).
    Only ``/_emulator/faults`` still answers, so that a test can lift the fault.
``errors:F``
    A fraction F (0 < F <= 1) of completion requests are answered ``500`` (vLLM's
    ``InternalServerError`` body) instead of being served. Deterministic: request n fails when
    ``floor(n F) > floor((n - 1) F)``, so ``errors:0.25`` fails exactly every fourth request.
``cut:K``
    Responses are cut after K generated tokens: the connection is closed without the end of the
    body (streams without ``[DONE]``, non-streamed JSON bodies half sent). A prefill call (one
    token) is cut only with ``cut:0``.
``dead-metrics[:500|hang]``
    ``GET /metrics`` alone answers 500 (default) or never answers; everything else works.
``kv-hold``
    A prefill engine never releases the blocks it holds for the decode engine (not after the
    decode engine's read, not at the abort timeout): its KV cache fills and new prefills queue
    forever once it is full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from repro.errors import ConfigError

FAULTS = ("diverge", "slow", "kv-drop", "crash", "hang", "errors", "cut", "dead-metrics", "kv-hold")
_USAGE = "diverge | slow:F | kv-drop | crash[:N] | hang[:N] | errors:F | cut:K | dead-metrics[:500|hang] | kv-hold"


@dataclass(frozen=True)
class Faults:
    diverge: bool = False
    slow_factor: float = 1.0
    kv_drop: bool = False
    crash_after: int | None = None  # exit at the request after this many completion requests
    hang_after: int | None = None  # stop answering after this many completion requests
    error_fraction: float = 0.0
    cut_after: int | None = None  # close the connection after this many tokens
    dead_metrics: str | None = None  # "500" | "hang"
    kv_hold: bool = False

    @classmethod
    def parse(cls, specs: list[str] | tuple[str, ...] | None) -> Faults:
        kw: dict = {}
        if isinstance(specs, str):
            specs = [specs]
        for spec in specs or []:
            if not isinstance(spec, str):
                raise ConfigError(f"--fault: each fault must be a string NAME[:ARG], got {spec!r}")
            name, _, arg = spec.partition(":")
            name = name.strip().lower().replace("_", "-")
            arg = arg.strip()
            if name == "diverge":
                kw["diverge"] = True
            elif name == "slow":
                kw["slow_factor"] = _number(spec, arg, "slow:F: F must be a number > 0", lo=0.0, lo_open=True)
            elif name == "kv-drop":
                kw["kv_drop"] = True
            elif name == "crash":
                kw["crash_after"] = _count(spec, arg, "crash:N: N must be an integer >= 0")
            elif name == "hang":
                kw["hang_after"] = _count(spec, arg, "hang:N: N must be an integer >= 0")
            elif name == "errors":
                kw["error_fraction"] = _number(spec, arg, "errors:F: F must be a number in (0, 1]", lo=0.0,
                                               lo_open=True, hi=1.0)
            elif name == "cut":
                if not arg:
                    raise ConfigError(f"--fault {spec!r}: cut:K needs K, the tokens sent before the cut")
                kw["cut_after"] = _count(spec, arg, "cut:K: K must be an integer >= 0")
            elif name == "dead-metrics":
                mode = arg.lower() or "500"
                if mode not in ("500", "hang"):
                    raise ConfigError(f"--fault {spec!r}: dead-metrics takes 500 or hang, got {arg!r}")
                kw["dead_metrics"] = mode
            elif name == "kv-hold":
                kw["kv_hold"] = True
            else:
                raise ConfigError(f"--fault: unknown fault {spec!r}; allowed: {_USAGE}")
        return cls(**kw)

    def names(self) -> list[str]:
        out = []
        if self.diverge:
            out.append("diverge")
        if self.slow_factor != 1.0:
            out.append(f"slow:{self.slow_factor:g}")
        if self.kv_drop:
            out.append("kv-drop")
        if self.crash_after is not None:
            out.append(f"crash:{self.crash_after}")
        if self.hang_after is not None:
            out.append(f"hang:{self.hang_after}")
        if self.error_fraction > 0:
            out.append(f"errors:{self.error_fraction:g}")
        if self.cut_after is not None:
            out.append(f"cut:{self.cut_after}")
        if self.dead_metrics is not None:
            out.append(f"dead-metrics:{self.dead_metrics}")
        if self.kv_hold:
            out.append("kv-hold")
        return out

    def any(self) -> bool:
        return any(getattr(self, f.name) != f.default for f in fields(self))


def _number(spec: str, arg: str, msg: str, lo: float, lo_open: bool = False, hi: float = math.inf) -> float:
    try:
        v = float(arg)
    except ValueError:
        raise ConfigError(f"--fault {spec!r}: {msg}, got {arg!r}") from None
    if not math.isfinite(v) or not ((v > lo) if lo_open else (v >= lo)) or v > hi:
        raise ConfigError(f"--fault {spec!r}: {msg}, got {arg!r}")
    return v


def _count(spec: str, arg: str, msg: str) -> int:
    if not arg:
        return 0
    try:
        v = int(arg)
    except ValueError:
        raise ConfigError(f"--fault {spec!r}: {msg}, got {arg!r}") from None
    if v < 0:
        raise ConfigError(f"--fault {spec!r}: {msg}, got {arg!r}")
    return v


def error_due(n: int, fraction: float) -> bool:
    """Whether the n-th request (1-based) gets an injected error under ``errors:fraction``."""
    return fraction > 0 and math.floor(n * fraction + 1e-9) > math.floor((n - 1) * fraction + 1e-9)
