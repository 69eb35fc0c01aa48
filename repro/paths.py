"""Where things live: the repository root and its data folders (computed once, here).

Relative output folders (``runs/``, ``results/``, ``figures/``) resolve against the repository
root with `resolve_dir`, so a notebook's working directory never changes where files go. A path a
user types on the command line resolves with `user_path`: against the current working directory.
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


def user_path(path: str | Path, default: str | Path | None = None) -> Path:
    """A path given on the command line. Absolute: kept. The option's shipped ``default`` (e.g.
    ``data/identify/paper_baselines.csv``): against the repository root, so a default works from any
    working directory. Any other relative path: against the current working directory; only when nothing
    exists there but something does under the repository root, the repository's (``data/...`` typed from
    another directory). A path that exists in neither (an output yet to be written) is the cwd's."""
    p = Path(path)
    if p.is_absolute():
        return p
    if default is not None and p == Path(default):
        return REPO_ROOT / p
    here = Path.cwd() / p
    if here.exists():
        return here
    there = REPO_ROOT / p
    return there if there.exists() else here
