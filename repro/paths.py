"""Where things live: the repository root and its data folders (computed once, here).

Relative output folders (``runs/``, ``results/``, ``figures/``) resolve against the repository
root with `resolve_dir`, so a notebook's working directory never changes where files go.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
HARDWARE_DIR = DATA_DIR / "hardware"
CALIBRATION_DIR = DATA_DIR / "calibration"
CLUSTERS_DIR = DATA_DIR / "clusters"
PREDICTOR_DIR = DATA_DIR / "predictor"
TUNING_DIR = DATA_DIR / "tuning"
NOTEBOOK_DIR = REPO_ROOT / "notebooks"


def resolve_dir(path: str | Path) -> Path:
    """A relative folder is relative to the repository root (so a notebook's cwd does not matter)."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p
