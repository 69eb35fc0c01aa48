"""Simulated journals are frozen byte for byte: a speed-up of the simulator or the router must not change
a single decision or timestamp.

`GOLDEN` (``tests/data/journal_sha256.json``) holds the sha256 of each spec's journal file
(`repro.experiment.journal.write_frame`), changed only by a commit that alters journals on purpose.
The specs cover every registered policy, the four workload families, several pool shapes (up to
8p24d), both service models, the oracle backlog, a noisy predictor, the simulator-derived cost
model, ``sample_d`` and the admission guard. If a change alters a journal on purpose (a new physics,
a fixed bug), regenerate with ``REPRO_GOLDEN=update python3 -m pytest tests/test_journal_golden.py``
and say why in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from repro.experiment.journal import write_frame
from repro.experiment.manifest import sha256
from repro.experiment.runner import simulate_spec
from repro.experiment.spec import RunSpec
from repro.routing.policies import POLICIES
from repro.sim.config import SimConfig

GOLDEN = Path(__file__).parent / "data" / "journal_sha256.json"


def _specs() -> dict[str, RunSpec]:
    base = RunSpec(workload="mixed", topology="2p4d", rate=18.0, n_requests=600, seed=7)
    specs = {f"{p}": base.replace(policy=p) for p in sorted(POLICIES)}
    specs.update({
        "chat_1p2d_mc": base.replace(workload="chat", topology="1p2d", rate=9.0),
        "reasoning_mc": base.replace(workload="reasoning", rate=10.0),
        "documents_mcb": base.replace(workload="documents", policy="marginal_cost_batching", rate=6.0),
        "big_8p24d_mc": base.replace(topology="8p24d", rate=70.0, n_requests=1500),
        "big_8p24d_mcb": base.replace(topology="8p24d", policy="marginal_cost_batching", rate=70.0,
                                      n_requests=1500),
        "big_8p24d_plus": base.replace(topology="8p24d", policy="marginal_cost_plus", rate=70.0,
                                       n_requests=1500),
        "serial_mc": base.replace(sim=SimConfig(service="serial"), rate=8.0),
        "oracle_mc": base.replace(sim=SimConfig(backlog="oracle")),
        "noisy_mc": base.replace(predictor_noise=1.0, predictor_seed=3),
        "sim_derived_mc": base.replace(cost_model="sim_derived"),
        "mc_sample_d": base.replace(topology="4p12d", rate=40.0, policy_options={"sample_d": 2}),
        "overload_plus": base.replace(policy="marginal_cost_plus", rate=40.0),
        "mc_guard": base.replace(rate=30.0, policy_options={"admission_guard": True, "guard_margin": 1.5}),
    })
    return specs


SPECS = _specs()


def _digest(spec: RunSpec, tmp_path: Path) -> str:
    path = tmp_path / f"{spec.run_id}.jsonl"
    write_frame(simulate_spec(spec), path)
    return sha256(path)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_journal_bytes_frozen(name: str, tmp_path: Path) -> None:
    got = _digest(SPECS[name], tmp_path)
    if os.environ.get("REPRO_GOLDEN") == "update":
        table = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        table[name] = got
        GOLDEN.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
        return
    want = json.loads(GOLDEN.read_text())[name]
    assert got == want, f"{name}: the simulated journal changed ({got[:12]} != {want[:12]})"
