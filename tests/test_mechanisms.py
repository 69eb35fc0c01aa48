"""The engine mechanisms (`repro.engine.mechanisms`): off, nothing changes; on, each does what its source says,
exactly, on a lone request or two."""

import numpy as np
import pandas as pd
import pytest

from repro.engine.mechanisms import BY_NAME, CATALOGUE, STEP_SHARE_FLOOR, fixed_overrides, path_factors, resolve
from repro.engine.physics import OVERRIDABLE, Physics
from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.experiment.inputs import router_cost_model
from repro.experiment.runner import simulate_spec
from repro.experiment.spec import RunSpec
from tests.conftest import synthetic_trace
from tests.test_sim import PHYS, simulate


def test_every_mechanism_names_a_source_and_only_known_switches():
    for m in CATALOGUE:
        assert m.source and m.models and m.title
        for name in m.fixed_physics:
            assert name in OVERRIDABLE
        for f in m.free:
            assert f.kind in ("physics", "workloads") and f.lo < f.hi
    assert STEP_SHARE_FLOOR == pytest.approx(0.133, abs=0.001)  # one weights read of 6.17 GB at 696 GB/s


def test_resolve_checks_names_and_requirements():
    with pytest.raises(ConfigError, match="unknown"):
        resolve(["no_such"])
    with pytest.raises(ConfigError, match="needs"):
        resolve(["path_tail"])
    assert [m.name for m in resolve(["path_tail", "request_path"])] == ["request_path", "path_tail"]


def test_a_mechanism_off_is_the_profile_as_shipped():
    """A profile that does not name a mechanism's switch has it off, and writes it back without it: what loads is
    what was shipped (the estimated profile names none; the identified one states its model's)."""
    est = load_profile("a40-qwen2.5-3b").physics
    raw = est.to_dict()
    for name in ("prefill_step_share", "serving_path_sigma", "transfer_link_shared"):
        assert name not in raw["params"]
    assert est.prefill_step_base_s == est.prefill_base_s and est.serving_path_s == 0.0
    assert Physics.from_dict(raw) == est
    assert Physics.from_dict(PHYS.to_dict()) == PHYS and PHYS.to_dict()["params"].keys() >= {"transfer_link_shared"}


def test_request_path_keeps_a_lone_request_and_moves_the_rest_off_the_engine():
    """The stated base stays a lone request's (a calibration cannot tell); the step is shorter by the path."""
    share = 0.2
    phys = PHYS.with_estimates({"prefill_step_share": share})
    L, o = 400, 50
    df = synthetic_trace(1, 1.0, L, o)
    _, base = simulate(df, p=1, d=1)
    _, j = simulate(df, p=1, d=1, phys=phys)
    assert phys.prefill_time_s(L) == pytest.approx(PHYS.prefill_time_s(L) - PHYS.prefill_base_s * (1 - share))
    assert j.ttft_s.iloc[0] == pytest.approx(base.ttft_s.iloc[0], rel=1e-12)
    assert phys.prefill_request_time_s(L) == pytest.approx(PHYS.prefill_request_time_s(L))
    # a prompt arriving while another's step runs waits for that step only, not for its serving path
    df2 = synthetic_trace(2, 1.0, L, o)
    df2["arrival_s"] = [0.0, 0.001]
    _, j2 = simulate(df2, p=1, d=1, phys=phys)
    step = phys.prefill_time_s(L)
    assert (j2.prefill_end_s - j2.arrival_s).to_numpy() == pytest.approx(
        [step + phys.serving_path_s, 2 * step - 0.001 + phys.serving_path_s])
    # the router's calibration does not see the split: it prices the whole base, as measured
    spec = RunSpec(workload="chat", topology="1p1d", physics={"prefill_step_share": share})
    assert router_cost_model(spec).tau_pre_base_s == PHYS.prefill_base_s


def test_request_path_raises_prefill_capacity_under_load():
    """A step that is a fifth of the base serves a queue of short prompts faster: the same trace's TTFTs fall."""
    rng = np.random.default_rng(3)
    df = synthetic_trace(400, 60.0, rng.integers(20, 60, 400), 20, seed=3)
    _, on = simulate(df, p=1, d=2, phys=PHYS.with_estimates({"prefill_step_share": 0.2}))
    _, off = simulate(df, p=1, d=2)
    assert on.ttft_s.quantile(0.99) < off.ttft_s.quantile(0.99)


def test_path_tail_is_a_fixed_draw_per_request_with_mean_one():
    ids = [f"r{i}" for i in range(20000)]
    arr = [i * 0.01 for i in range(20000)]
    f = np.asarray(path_factors(ids, arr, 0.8))
    assert f.mean() == pytest.approx(1.0, abs=0.03)
    assert np.log(f).std() == pytest.approx(0.8, abs=0.02)
    assert path_factors(ids[:5], arr[:5], 0.8) == list(f[:5])  # a request's draw does not depend on the others
    assert path_factors(ids[:5], [a + 1 for a in arr[:5]], 0.8) != list(f[:5])  # another trace, another draw


def test_shared_link_queues_the_second_pull_behind_the_first():
    """Two prompts prefilled at once, pulled into one decode engine: with a shared link the second pull
    starts when the first one's bytes are through; without, both arrive at once."""
    L = 2000
    slow = {"transfer_bandwidth_bytes_per_s": 2e9, "transfer_link_shared": 0}
    df = synthetic_trace(2, 1.0, L, 5)
    df["arrival_s"] = [0.0, 0.0]  # one on each prefill engine (round-robin), both pulled into the one decode engine
    _, par = simulate(df, p=2, d=1, phys=PHYS.with_estimates(slow))
    shared = PHYS.with_estimates({**slow, "transfer_link_shared": 1})
    _, ser = simulate(df, p=2, d=1, phys=shared)
    wire = L * PHYS.kv_bytes_per_token / 2e9
    assert par.decode_started_s.iloc[0] == pytest.approx(par.decode_started_s.iloc[1])
    # the second joins the batch one wire time later (at the next decode step boundary after it)
    assert ser.decode_started_s.max() - ser.decode_started_s.min() >= wire - 1e-9
    assert ser.ttft_s.max() > par.ttft_s.max()


def test_vllm_budget_reaches_the_engine_and_the_router():
    phys, _ = fixed_overrides([BY_NAME["vllm_budget"]])
    spec = RunSpec(workload="documents", topology="1p1d", rate=1.0, n_requests=3, physics=phys)
    assert router_cost_model(spec).max_num_batched_tokens == 2048
    j = simulate_spec(spec)
    assert isinstance(j, pd.DataFrame) and (j.status == "ok").all()
    # a 5,000-token prompt takes three steps of 2,048 (each paying the step base)
    p = PHYS.with_estimates({"max_num_batched_tokens": 2048})
    assert p.prefill_request_time_s(5000) == pytest.approx(3 * PHYS.prefill_base_s + PHYS.prefill_per_token_s * 5000)


def test_override_of_an_integer_switch_stays_an_integer():
    p = PHYS.with_estimates({"max_num_batched_tokens": 2048.0, "transfer_link_shared": 1.0})
    assert isinstance(p.max_num_batched_tokens, int) and isinstance(p.transfer_link_shared, int)
