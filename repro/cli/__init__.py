"""The ``repro`` command line (typer): one module per command group, assembled in `repro.cli.root`.

``app`` and ``main`` are loaded on first use: ``python -m repro.cli.loadgen`` (the load generator every live run
starts) imports its own module and not every command's (the whole command line is ~2 s of imports on a slow core).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from repro.cli.root import app, main

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from repro.cli import root

        return getattr(root, name)
    raise AttributeError(f"module 'repro.cli' has no attribute {name!r}")
