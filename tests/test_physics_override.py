"""A spec's ``physics`` overrides (sensitivity sweeps of our estimated constants): typed, validated, in the
run id, and they move the simulated prefill and transfer times, and the calibrated router's belief, exactly."""

import numpy as np
import pytest

from repro.engine.mechanisms import UNSEEN_BY_CALIBRATION
from repro.engine.physics import OVERRIDABLE, check_overrides
from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.experiment.inputs import engine_pools, router_cost_model, truth_cost_model
from repro.experiment.runner import simulate_spec
from repro.experiment.spec import RunSpec
from repro.routing.cost_model import PHYSICS_TO_COST_MODEL, CostModel

BASE = dict(workload="documents", topology="1p1d", rate=0.05, n_requests=12, policy="round_robin", seed=101)
FAST = {"prefill_per_token_s": 3.0e-5, "transfer_bandwidth_bytes_per_s": 5.0e10}


def test_every_overridable_parameter_calibrates_a_cost_model_constant():
    assert set(PHYSICS_TO_COST_MODEL) | {"decode_per_seq_s"} | set(UNSEEN_BY_CALIBRATION) == set(OVERRIDABLE)
    shipped = CostModel.from_physics(load_profile().physics)
    for p, c in PHYSICS_TO_COST_MODEL.items():
        assert getattr(shipped, c) == getattr(load_profile().physics, p)  # the same value, the same unit


def test_a_per_sequence_decode_override_keeps_the_stated_lone_decode_time_and_moves_the_slope():
    """The paper states decode 0.013237 s/token at batch 1: a new per-sequence cost moves the base the other
    way; a calibrated router's slope follows, as a perfect calibration of the new hardware would."""
    phys = load_profile().physics
    new = phys.with_estimates({"decode_per_seq_s": 4.0e-5})
    assert new.decode_step_s(1, 800) == pytest.approx(phys.decode_step_s(1, 800), rel=1e-12)
    assert new.decode_step_s(8, 6400) > phys.decode_step_s(8, 6400)
    moved = CostModel.from_physics(phys).with_physics({"decode_per_seq_s": 4.0e-5}, base=phys)
    assert moved.dec_concurrency_slope == pytest.approx(CostModel.from_physics(new).dec_concurrency_slope)
    with pytest.raises(ConfigError, match="decode_per_seq_s"):
        phys.with_estimates({"decode_per_seq_s": 0.02})
    with pytest.raises(ConfigError, match="needs the profile"):
        CostModel.from_physics(phys).with_physics({"decode_per_seq_s": 4.0e-5})


def test_override_in_the_run_id_and_unset_leaves_old_ids():
    base = RunSpec.from_flat(**BASE)
    assert "physics" not in base.to_dict()  # run ids made before the field are unchanged
    assert RunSpec.from_flat(**BASE, physics={}).run_id == base.run_id  # empty = the profile as shipped
    fast = base.replace(physics=FAST)
    assert fast.run_id != base.run_id and fast.to_dict()["physics"] == FAST
    other = base.replace(physics={"prefill_per_token_s": 3.0e-5})
    assert other.run_id not in (base.run_id, fast.run_id)
    # normalised: key order and int/float spelling do not change the id
    same = base.replace(physics={"transfer_bandwidth_bytes_per_s": int(5e10), "prefill_per_token_s": 3.0e-5})
    assert same.run_id == fast.run_id


@pytest.mark.parametrize("bad, match", [
    ({"prefill_base_s": 0.05}, "unknown parameter 'prefill_base_s'"),  # stated by the paper: never overridden
    ({"prefill_per_token_s": 0.0}, r"'prefill_per_token_s' = 0.0 must be a number in \[1e-07, 0.01\]"),
    ({"transfer_bandwidth_bytes_per_s": 1e15}, "transfer_bandwidth_bytes_per_s"),
    ({"transfer_latency_s": True}, "transfer_latency_s"),
    ([("prefill_per_token_s", 1e-5)], "must be a mapping"),
])
def test_bad_overrides_name_the_field_and_the_range(bad, match):
    with pytest.raises(ConfigError, match=match):
        RunSpec.from_flat(**BASE, physics=bad)
    with pytest.raises(ConfigError, match="field 'physics'"):
        RunSpec.from_flat(**BASE, physics=bad)


def test_overrides_are_for_the_simulator_only():
    with pytest.raises(ConfigError, match="field 'physics' is for backend 'sim' only"):
        RunSpec.from_flat(**{**BASE, "backend": "emulated"}, physics=FAST)


def test_the_simulated_prefill_and_transfer_times_are_the_overridden_ones():
    # the serving path's queue and tail off: each prefill leg is then its own request's time exactly
    quiet = {"api_queue_s": 0.0, "api_queue_per_token_s": 0.0, "serving_path_sigma": 0.0}
    base = RunSpec.from_flat(**BASE, physics=quiet)
    fast = base.replace(physics={**quiet, **FAST})
    jb, jf = simulate_spec(base), simulate_spec(fast)
    ph_b, ph_f = engine_pools(base)[1][0], engine_pools(fast)[1][0]
    assert ph_f.prefill_per_token_s == FAST["prefill_per_token_s"]
    assert ph_f.transfer_bandwidth_bytes_per_s == FAST["transfer_bandwidth_bytes_per_s"]
    assert engine_pools(fast)[3][0].transfer_bandwidth_bytes_per_s == FAST["transfer_bandwidth_bytes_per_s"]
    L = jf.prompt_tokens.to_numpy()
    # requests arrive 20 s apart on average: each meets an idle 1p1d cluster, so its prefill is its own
    for j, ph in ((jb, ph_b), (jf, ph_f)):
        want = [ph.prefill_request_time_s(int(n)) for n in L]
        np.testing.assert_allclose(j.prefill_end_s - j.prefill_start_s, want, rtol=0, atol=1e-9)
    # on an idle decode engine, first token = decode request + KV transfer + one decode step: the steps are
    # the same, the transfers differ by exactly the overridden bandwidth's
    def idle(j):  # the decode engine had finished every earlier request
        return j.decode_start_s.to_numpy() > np.maximum.accumulate(np.r_[-np.inf, j.finish_s.to_numpy()[:-1]])
    m = idle(jb) & idle(jf)
    assert m.sum() >= len(L) // 2
    d_first = ((jb.first_token_s - jb.decode_start_s) - (jf.first_token_s - jf.decode_start_s)).to_numpy()[m]
    d_xfer = np.array([ph_b.transfer_time_s(int(n)) - ph_f.transfer_time_s(int(n)) for n in L])[m]
    np.testing.assert_allclose(d_first, d_xfer, rtol=0, atol=1e-9)
    assert (d_xfer > 0).all()


def test_a_calibrated_router_knows_the_hardware_and_the_slo_targets_stay():
    base = RunSpec.from_flat(**BASE)
    fast = base.replace(physics=FAST)
    cal = router_cost_model(fast)
    assert cal.tau_pre_per_token_s == FAST["prefill_per_token_s"]
    assert cal.xfer_bandwidth_bytes_per_s == FAST["transfer_bandwidth_bytes_per_s"]
    assert cal.tau_pre_base_s == router_cost_model(base).tau_pre_base_s  # stated by the paper: unchanged
    assert cal.slo == router_cost_model(base).slo
    assert truth_cost_model(fast).slo == truth_cost_model(base).slo  # 175 ms / 39.7 ms: the paper's
    assert truth_cost_model(fast).tau_pre_per_token_s == FAST["prefill_per_token_s"]
    sim = router_cost_model(fast.replace(cost_model="sim_derived"))  # a simulator's belief: not the hardware's
    assert sim == router_cost_model(base.replace(cost_model="sim_derived"))


def test_check_overrides_normalises():
    assert check_overrides({"transfer_latency_s": 0, "prefill_per_token_s": 1e-4}) == {
        "prefill_per_token_s": 1e-4, "transfer_latency_s": 0.0}
    assert list(check_overrides({"transfer_latency_s": 0, "prefill_per_token_s": 1e-4})) == [
        "prefill_per_token_s", "transfer_latency_s"]


def test_a_yaml_spec_carries_the_overrides(tmp_path):
    from repro.experiment.spec import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text("workload: mixed\nphysics:\n  prefill_per_token_s: 9.0e-5\n")
    spec = load_spec(path)
    assert spec.physics == {"prefill_per_token_s": 9.0e-5}
    assert RunSpec.from_flat(**spec.to_dict()).run_id == spec.run_id  # the flat dict round-trips
