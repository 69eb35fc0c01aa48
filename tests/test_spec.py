"""The typed run spec: option groups, the flat namespace, and run ids stable across the layout change."""

import pytest

from repro.errors import ConfigError
from repro.experiment.spec import LiveConfig, RunSpec, flat_field_names, spec_from_dict
from repro.sim.config import SimConfig

# Ids computed with the flat RunSpec of commit 4f50904 (before the option groups): finished runs
# made with it must still be found by their id. They ran on the estimated profile, that commit's
# default (the default is the identified testbed).
OLD = "a40-qwen2.5-3b"
STORED_IDS = [
    (dict(profile=OLD), "mixed-2p4d-marginal_cost-s1-c7d5cdf6f4bd"),
    (dict(profile=OLD, backend="emulated", workload="chat", rate=64.0, time_scale=2.0, n_requests=200,
          service="batching", backlog="oracle", policy_options={"use_length": False},
          arrival={"process": "burst", "burst_factor": 3.0, "period_s": 30.0, "duty": 0.2}),
     "chat-2p4d-marginal_cost-s1-1e69ed400711"),
    (dict(profile=OLD, service="serial", kv_poll_interval_s=0.1, predictor_noise=0.5, cost_model="sim_derived"),
     "mixed-2p4d-marginal_cost-s1-2d036aba909a"),
]


@pytest.mark.parametrize("flat, run_id", STORED_IDS)
def test_run_ids_made_before_the_option_groups_still_resolve(flat, run_id):
    assert RunSpec.from_flat(**flat).run_id == run_id


def test_flat_names_route_into_their_groups_and_back():
    spec = RunSpec.from_flat(service="serial", backlog="oracle", time_scale=2.0, backend="emulated")
    assert spec.sim == SimConfig(service="serial", backlog="oracle")
    assert spec.live == LiveConfig(time_scale=2.0)
    flat = spec.to_dict()
    assert "sim" not in flat and "live" not in flat
    assert (flat["service"], flat["backlog"], flat["time_scale"]) == ("serial", "oracle", 2.0)
    assert spec_from_dict(flat) == spec
    assert set(flat) | {"arrival", "physics", "workloads", "decision_budget_us"} == set(flat_field_names())


def test_replace_accepts_flat_group_fields():
    spec = RunSpec().replace(time_scale=3.0, service="serial", rate=8.0)
    assert (spec.live.time_scale, spec.sim.service, spec.rate) == (3.0, "serial", 8.0)
    assert spec.sim.backlog == "ledger"  # the rest of the group is kept


@pytest.mark.parametrize("flat, message", [
    (dict(service="fifo"), "field 'service'"),
    (dict(backlog="psychic"), "field 'backlog'"),
    (dict(time_scale=0.0), "field 'time_scale'"),
    (dict(backend="vllm", time_scale=2.0), "field 'time_scale' must be 1"),
    (dict(kv_poll_interval_s=-1.0), "field 'kv_poll_interval_s'"),
    (dict(sevice="serial"), "unknown field"),
])
def test_group_fields_are_validated_once_with_their_name(flat, message):
    with pytest.raises(ConfigError, match=message):
        RunSpec.from_flat(**flat)


def test_a_spec_parses_its_topology_and_profile_once_and_run_id_reads_no_file(monkeypatch, tmp_path):
    """`RunSpec.topology_parsed` is parsed when the spec is made and kept; `run_id` reads no file; a
    profile file is read once per process and version of the file (`repro.engine.profile.load_profile`)."""
    import pickle
    from pathlib import Path

    import repro.experiment.spec as spec_module

    cluster = tmp_path / "c.yaml"
    cluster.write_text("instances:\n  - {role: prefill, count: 1}\n  - {role: decode, count: 2}\n"
                       "kv_poll_interval_s: 0.2\n")
    spec = RunSpec(cluster=str(cluster), n_requests=10)
    topo = spec.topology_parsed()

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed again")

    reads: list[str] = []
    real_read = Path.read_text
    monkeypatch.setattr(spec_module, "parse_topology", no_parse)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: reads.append(str(self)) or real_read(self, *a, **k))
    assert spec.topology_parsed() is topo and spec.poll_interval_s() == 0.2
    assert spec.run_id.startswith("mixed-1p2d-marginal_cost-s1-") and spec.run_id == spec.run_id
    assert reads == []
    # a worker gets the fields only and parses once itself; the same id
    monkeypatch.undo()
    clone = pickle.loads(pickle.dumps(spec))
    assert "_topology" not in clone.__dict__ and clone.run_id == spec.run_id and clone == spec
    # the profile: read once for every spec and instance of this process
    from repro.engine.profile import load_profile

    reads.clear()
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: reads.append(str(self)) or real_read(self, *a, **k))
    for seed in (1, 2, 3):
        RunSpec(seed=seed, n_requests=10).topology_parsed()
    load_profile(spec.profile)
    assert not [r for r in reads if r.endswith(".json")]


def test_an_edited_profile_is_read_again(tmp_path):
    import json

    from repro.engine.profile import load_profile, resolve_profile_path

    path = tmp_path / "p.json"
    raw = json.loads(resolve_profile_path("a40-qwen2.5-3b").read_text())
    path.write_text(json.dumps(raw))
    first = load_profile(path).physics
    assert load_profile(path).physics is first
    raw["params"]["prefill_per_token_s"]["value"] *= 2
    path.write_text(json.dumps(raw) + " ")  # another size: seen as another version even within one mtime tick
    assert load_profile(path).physics.prefill_per_token_s == 2 * first.prefill_per_token_s
