"""Run this example's tests from the repository root (``python3 -m pytest``) without installing it:
``src/`` goes first on ``sys.path`` for this process, and on ``$PYTHONPATH`` for the processes it
starts (a sweep's worker processes, started by loky, inherit the environment, not ``sys.path``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

if SRC not in sys.path:
    sys.path.insert(0, SRC)
_parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if SRC not in _parts:
    os.environ["PYTHONPATH"] = os.pathsep.join([SRC, *_parts])
