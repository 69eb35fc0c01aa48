"""No stale numbers: a finished or cached simulated run is reused only when everything it ran is this code.

The code is copied to a temporary folder (its Python sources and data, no compiled extension), one
module the paper's router imports, ``repro/routing/policies/pricing.py``, is edited there (the SLO
hinge's weight times 10, which the policy's class source does not show), and the copy's own
``repro run`` and fingerprints are asked whether they still reuse what the unedited copy made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro.paths import REPO_ROOT

ARGS = ["run", "--workload", "mixed", "--topology", "2p4d", "--rate", "16", "-n", "300", "--policy", "marginal_cost",
        "--jobs", "1"]


def _copy(tmp: Path) -> Path:
    root = tmp / "tree"
    shutil.copytree(REPO_ROOT / "repro", root / "repro", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__",
                                                                                     "*.c", "build"))
    shutil.copytree(REPO_ROOT / "data", root / "data")
    return root


def _py(root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "REPRO_PURE_PYTHON": "1", "REPRO_SIM_CACHE": str(cwd / "cache"),
           "COLUMNS": "200"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _edit_pricing(root: Path) -> None:
    """The SLO hinge of the paper's scorer (`repro.routing.policies.pricing.price_pairs`) weighs 10 times more."""
    path = root / "repro" / "routing" / "policies" / "pricing.py"
    text = path.read_text()
    old = "score += slo_weight * ("
    assert text.count(old) == 1, "pricing.py changed shape: update this test's edit"
    path.write_text(text.replace(old, "score += 10.0 * slo_weight * ("))


@pytest.mark.slow
def test_an_edit_to_pricing_refuses_the_finished_run_and_the_cache(tmp_path):
    root = _copy(tmp_path)
    fp = [sys.executable, "-c", "import repro, repro.native as n; from repro.experiment import simcache, runner; "
          "from repro.experiment.spec import RunSpec; from repro.routing.policies import policy_fingerprint as p; "
          "s = RunSpec.from_flat(workload='mixed', policy='marginal_cost'); "
          "print(repro.__file__, p('marginal_cost'), simcache.fingerprint(), runner.code_fingerprint(s))"]
    before = _py(root, *fp[1:], cwd=tmp_path).stdout.split()
    assert before and before[0].startswith(str(root)), before  # the copy is what runs
    first = _py(root, "-m", "repro.cli", *ARGS, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = _py(root, "-m", "repro.cli", *ARGS, cwd=tmp_path)
    assert "(cached)" in again.stdout  # unchanged code: the finished run is reused
    _edit_pricing(root)
    after = _py(root, *fp[1:], cwd=tmp_path).stdout.split()
    # the policy's fingerprint (what it imports), the sim cache's and the run's all move
    assert all(a != b for a, b in zip(before[1:], after[1:], strict=True)), (before, after)
    third = _py(root, "-m", "repro.cli", *ARGS, cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    assert "(cached)" not in third.stdout and "finished by other code" in third.stderr
    kept = [p.name for p in (tmp_path / "runs").iterdir() if ".code-" in p.name]
    assert len(kept) == 1 and kept[0].endswith(before[3])  # the old run kept aside under its code's fingerprint
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if ".code-" not in p.name and p.is_dir())
    assert json.loads((run_dir / "manifest.json").read_text())["policy_code"] == after[3]
