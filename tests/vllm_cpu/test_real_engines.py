"""The harness against real, unmodified vLLM engines on CPU (NixlConnector P/D over host memory)."""

from __future__ import annotations

import json

import pytest

from repro.cluster.topology import Instance
from repro.experiment.runner import run
from repro.experiment.spec import RunSpec
from repro.live.gates import run_gates
from repro.routing.policies import PAPER_POLICIES


def test_gates_pass_on_real_engines(real_instances: list[Instance]) -> None:
    report = run_gates(real_instances, n_tokens=32, n_prompts=2, greedy_tokens=16)
    failed = [(g.gate, c.instance, c.detail) for g in report.reports for c in g.failed]
    assert failed == []
    assert report.passed
    gates = {g.gate for g in report.reports}
    assert {"warm_up", "token_contract", "greedy_equivalence"} <= gates
    # every prefill -> decode pair was warmed up and both decode engines answered identically
    assert len(report["warm_up"].checks) >= 2


def test_real_engines_run_nicer_than_the_harness(real_instances: list[Instance]) -> None:
    """Each real engine leads a session whose niceness (process and Linux autogroup) is the cluster
    file's ``nice`` (5) above the harness's `live_nice`: its compute yields to the proxy and the
    load generator, which run at `live_nice` in sessions of their own."""
    import os

    from repro.cluster.processes import live_nice, priority_of

    harness = live_nice()
    want = min(19, (os.getpriority(os.PRIO_PROCESS, 0) if harness is None else harness) + 5)
    for inst in real_instances:
        prio = priority_of(inst.pid)
        assert prio["nice"] == want, (inst.name, prio)
        assert prio["autogroup_nice"] in (None, want), (inst.name, prio)


@pytest.mark.parametrize("policy", PAPER_POLICIES)
def test_every_paper_policy_serves_a_short_run(real_cluster_file, tmp_path, policy: str) -> None:
    spec = RunSpec.from_flat(backend="vllm", cluster=str(real_cluster_file), workload="chat", rate=4.0,
                             n_requests=12, seed=1, policy=policy)
    res = run(spec, tmp_path, on_invalid="keep")  # the mechanics are tested here, not the machine
    journal = res.journal()
    assert len(journal) == 12
    assert (journal.status == "ok").all(), journal.loc[journal.status != "ok", "reason"].tolist()
    # the token-count contract held on every request: the engines generated exactly what was asked
    assert (journal.generated_tokens == journal.output_tokens).all()
    assert set(journal.prefill_instance) == {"prefill-0"}
    if policy == "round_robin":
        assert set(journal.decode_instance) == {"decode-0", "decode-1"}


def test_long_requests_are_capped_to_the_model_context_and_said_so(real_cluster_file, tmp_path) -> None:
    spec = RunSpec.from_flat(backend="vllm", cluster=str(real_cluster_file), workload="documents", rate=2.0,
                             n_requests=6, seed=3, policy="round_robin")
    res = run(spec, tmp_path, on_invalid="keep")  # the mechanics are tested here, not the machine
    manifest = json.loads((res.run_dir / "manifest.json").read_text())
    cap = manifest["length_cap"]
    assert cap["max_model_len"] == 4096 and cap["requests"] == 6
    journal = res.journal()
    assert (journal.prompt_tokens + journal.output_tokens <= 4096).all()
    assert (journal.status == "ok").all(), journal.reason.tolist()
