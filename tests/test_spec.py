"""The typed run spec: option groups, the flat namespace, and run ids stable across the layout change."""

import pytest

from repro.errors import ConfigError
from repro.experiment.spec import LiveConfig, RunSpec, flat_field_names, spec_from_dict
from repro.sim.config import SimConfig

# Ids computed with the flat RunSpec of commit 4f50904 (before the option groups): finished runs
# made then must still be found by their id. They ran on the estimated profile, the default then (the
# default is now the identified testbed, issue 30).
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
