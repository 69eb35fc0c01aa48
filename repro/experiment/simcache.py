"""A cache of simulated runs: the same spec and the same code give the same journal, so simulate once.

`repro.experiment.runner.simulated_summary(spec)` returns a ``sim`` spec's summary and its
per-request outcomes (good flags, TTFTs) from here (`load`) when this exact spec (its ``run_id``, a hash of every
field) was simulated before by this exact code (`fingerprint`: a hash of the package's source and
shipped data), else simulates it and keeps the result (`store`).
The notebooks of one `repro paper` run share many runs (Table II's appear in eight sections) and
saturation-search probes; the cache makes each cost once, also across notebooks run in parallel
(entries are written atomically; two processes computing the same entry write the same bytes).

A policy given by import path (``pkg.mod:Cls``, a user's) is code outside the package's fingerprint:
its entries are keyed by its own fingerprint too (`repro.routing.policies.policy_fingerprint`: its
source and that of every module it imports outside the standard library), so an edited policy, or an
edited helper of it, is simulated again. ``$REPRO_SIM_CACHE`` names the folder (default
``runs/sim-cache`` under the repository root); ``off`` disables the cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from repro.experiment.metrics import RequestOutcomes
from repro.experiment.spec import RunSpec
from repro.paths import REPO_ROOT, resolve_dir

CACHE_ENV = "REPRO_SIM_CACHE"
DEFAULT_DIR = "runs/sim-cache"


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """A hash of everything a simulation's result depends on besides its spec: the package's Python
    source and the shipped data (profiles, cost models, predictor, ShareGPT table)."""
    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parents[1]
    files = sorted(pkg.rglob("*.py"))
    data = REPO_ROOT / "data"
    if data.is_dir():
        files += sorted(p for p in data.rglob("*") if p.is_file())
    for p in files:
        h.update(str(p.relative_to(REPO_ROOT) if p.is_relative_to(REPO_ROOT) else p.relative_to(pkg.parent)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path | None:
    """The cache folder for this code (None: disabled by ``$REPRO_SIM_CACHE=off``)."""
    where = os.environ.get(CACHE_ENV, "").strip()
    if where.lower() in ("off", "0", "false", "no"):
        return None
    return resolve_dir(where or DEFAULT_DIR) / fingerprint()


def cacheable(spec: RunSpec) -> bool:
    """A ``sim`` spec (a registered policy's code is inside the fingerprint; a user's is keyed by its own)."""
    return spec.backend == "sim"


def entry_name(spec: RunSpec) -> str:
    """The file name of ``spec``'s entry: its run id, and for a policy by import path its code's fingerprint."""
    ref = spec.policy_ref
    return f"{spec.run_id}.npz" if ref.registered else f"{spec.run_id}-{ref.fingerprint}.npz"


def _path(spec: RunSpec) -> Path | None:
    d = cache_dir()
    return None if d is None or not cacheable(spec) else d / entry_name(spec)


def load(spec: RunSpec) -> tuple[dict[str, Any], RequestOutcomes] | None:
    """The cached summary and per-request outcomes of ``spec``, or None."""
    path = _path(spec)
    if path is None or not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(str(z["summary"])), RequestOutcomes(z["good"].astype(float), z["ttft"].astype(float))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # a torn or foreign file: simulate again
        return None


def store(spec: RunSpec, summary: dict[str, Any], outcomes: RequestOutcomes) -> None:
    """Keep ``spec``'s result (atomically: a reader sees the whole entry or none)."""
    path = _path(spec)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, summary=np.array(json.dumps(summary)), good=outcomes.good.astype(np.uint8),
                 ttft=outcomes.ttft.astype(np.float64))
    os.replace(tmp, path)
