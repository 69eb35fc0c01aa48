"""Fault switches of an emulated engine (``--fault NAME[:ARG]``, repeatable).

``diverge``
    This instance's greedy outputs differ from every other instance's from the second token on
    (the first token, which the prefill engine also computes, stays the same). Makes the
    cross-instance greedy-equivalence gate fail.
``slow:F``
    Every step takes F times the profile's time (F > 0): a straggler / miscalibrated GPU.
``kv-drop``
    A prefill engine forgets the KV it promised to hold as soon as it answers, so the decode
    engine's pull fails and it recomputes the prompt locally (vLLM's recompute-on-load-failure).
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.errors import ConfigError

FAULTS = ("diverge", "slow", "kv-drop")


@dataclass(frozen=True)
class Faults:
    diverge: bool = False
    slow_factor: float = 1.0
    kv_drop: bool = False

    @classmethod
    def parse(cls, specs: list[str] | tuple[str, ...] | None) -> "Faults":
        diverge = False
        slow = 1.0
        kv_drop = False
        for spec in specs or []:
            name, _, arg = str(spec).partition(":")
            name = name.strip().lower()
            if name == "diverge":
                diverge = True
            elif name == "slow":
                try:
                    slow = float(arg)
                except ValueError:
                    raise ConfigError(f"--fault slow:F: F must be a number > 0, got {arg!r}") from None
                if not slow > 0:
                    raise ConfigError(f"--fault slow:F: F must be > 0, got {arg!r}")
            elif name in ("kv-drop", "kv_drop"):
                kv_drop = True
            else:
                raise ConfigError(f"--fault: unknown fault {spec!r}; allowed: diverge, slow:F, kv-drop")
        return cls(diverge=diverge, slow_factor=slow, kv_drop=kv_drop)

    def names(self) -> list[str]:
        out = []
        if self.diverge:
            out.append("diverge")
        if self.slow_factor != 1.0:
            out.append(f"slow:{self.slow_factor:g}")
        if self.kv_drop:
            out.append("kv-drop")
        return out
