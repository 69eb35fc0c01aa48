"""Run manifests: versions, journal hashes, atomic JSON writes.

A run's ``manifest.json`` (`Manifest`) is written last, atomically: a run folder without one is
unfinished and is redone (`repro.experiment.runner.finished_run`)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np
import pandas as pd

from repro import __version__

if TYPE_CHECKING:
    from repro.experiment.metrics import DecisionTimeSummary, Summary


class Attempt(TypedDict):
    """One attempt of a live run (`repro.live.run.run_live_valid`): its time scale K and verdict."""

    attempt: int
    time_scale: float
    valid: bool
    reasons: list[str]


class LiveOutcome(TypedDict):
    """What a live harness (`repro.live.run.run_live_valid`) adds to a live run's `Manifest`: whether the
    last attempt was ``valid``, its verdict (`repro.live.validity.Verdict.to_dict`), every attempt, the time
    scale K it ran at, and our proxy's decision times (an external router: none)."""

    valid: bool
    validity: dict[str, Any]
    attempts: list[Attempt]
    time_scale_used: float
    decision_time: NotRequired[DecisionTimeSummary]


class Manifest(TypedDict):
    """``manifest.json`` of one finished run: what ran (``spec``: the flat `repro.experiment.spec.RunSpec`
    dict; ``run_id``; ``policy_code``: `repro.experiment.runner.code_fingerprint`), by which versions, the
    journal's SHA-256, the summary, and for live runs the validity verdict (``valid``, ``validity``,
    every attempt, ``time_scale_used``), wall-clock start (Unix s) and duration (s; None for simulated runs,
    so their manifests are the same bytes on every machine). ``length_cap``: requests cut to the engines'
    context, when any; ``decision_time``: the policy's decision times (µs) when the spec sets a budget or
    the run was live."""

    run_id: str
    spec: dict[str, Any]
    complete: bool
    policy_code: str
    started_unix: float | None
    wall_s: float | None
    versions: dict[str, str]
    journal_sha256: str
    summary: Summary
    valid: NotRequired[bool]
    validity: NotRequired[dict[str, Any]]
    attempts: NotRequired[list[Attempt]]
    time_scale_used: NotRequired[float]
    decision_time: NotRequired[DecisionTimeSummary]
    length_cap: NotRequired[Any]


def versions() -> dict[str, str]:
    """The versions a run was made with. scikit-learn's is read from its installed metadata: importing it takes
    ~2.7 s on a slow core, and a live run's harness never loads it otherwise (the proxy's predictor does)."""
    from importlib.metadata import version

    return {
        "repro": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "scikit-learn": version("scikit-learn"),
    }


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(path: Path) -> Manifest | None:
    """The manifest at ``path``, or None if it is missing or not JSON (an unfinished run)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file, then a rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return None if not np.isfinite(o) else float(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")


