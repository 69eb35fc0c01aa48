"""The engine mechanisms (`repro.engine.mechanisms`): off, nothing changes; on, each does what its source says,
exactly, on a lone request or two."""

import numpy as np
import pandas as pd
import pytest

from repro.engine.mechanisms import (
    BY_NAME,
    CATALOGUE,
    STEP_SHARE_FLOOR,
    fixed_overrides,
    mechanisms_off,
    path_factors,
    resolve,
)
from repro.engine.physics import OVERRIDABLE, Physics
from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.experiment.inputs import router_cost_model
from repro.experiment.runner import simulate_spec
from repro.experiment.spec import RunSpec
from tests.conftest import synthetic_trace
from tests.test_sim import PHYS, simulate

OFF = mechanisms_off(PHYS)
"""The default profile with every mechanism of the catalogue off (its token budget kept)."""


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
    phys = OFF.with_estimates({"prefill_step_share": share})
    L, o = 400, 50
    df = synthetic_trace(1, 1.0, L, o)
    _, base = simulate(df, p=1, d=1, phys=OFF)
    _, j = simulate(df, p=1, d=1, phys=phys)
    assert phys.prefill_time_s(L) == pytest.approx(OFF.prefill_time_s(L) - OFF.prefill_base_s * (1 - share))
    assert j.ttft_s.iloc[0] == pytest.approx(base.ttft_s.iloc[0], rel=1e-12)
    assert phys.prefill_request_time_s(L) == pytest.approx(OFF.prefill_request_time_s(L))
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
    _, on = simulate(df, p=1, d=2, phys=OFF.with_estimates({"prefill_step_share": 0.2}))
    _, off = simulate(df, p=1, d=2, phys=OFF)
    assert on.ttft_s.quantile(0.99) < off.ttft_s.quantile(0.99)


def test_path_tail_is_a_fixed_draw_per_request_with_mean_one():
    ids = [f"r{i}" for i in range(20000)]
    arr = [i * 0.01 for i in range(20000)]
    f = np.asarray(path_factors(ids, arr, 0.8))
    assert f.mean() == pytest.approx(1.0, abs=0.03)
    assert np.log(f).std() == pytest.approx(0.8, abs=0.02)
    assert path_factors(ids[:5], arr[:5], 0.8) == list(f[:5])  # a request's draw does not depend on the others
    assert path_factors(ids[:5], [a + 1 for a in arr[:5]], 0.8) != list(f[:5])  # another trace, another draw


SLOW = {"transfer_bandwidth_bytes_per_s": 2e9}


def test_shared_link_splits_the_bandwidth_between_pulls_into_one_decode_engine():
    """Two prompts prefilled at once on two prefill engines, pulled into one decode engine: shared, both bytes move
    at half the bandwidth and both arrive two wire times after their setup; not shared, one wire time."""
    L = 2000
    df = synthetic_trace(2, 1.0, L, 5)
    df["arrival_s"] = [0.0, 0.0]  # one on each prefill engine (round-robin), both pulled into the one decode engine
    _, par = simulate(df, p=2, d=1, phys=OFF.with_estimates(SLOW))
    _, ser = simulate(df, p=2, d=1, phys=OFF.with_estimates({**SLOW, "transfer_link_shared": 1}))
    wire = L * OFF.kv_bytes_per_token / 2e9
    pre_end = ser.prefill_end_s.to_numpy()
    assert pre_end == pytest.approx(par.prefill_end_s.to_numpy(), abs=0)
    # an idle decode engine lets a pulled request join at once: decode_started_s is the pull's end
    assert par.decode_started_s.to_numpy() == pytest.approx(pre_end + OFF.transfer_latency_s + wire, rel=1e-12)
    assert ser.decode_started_s.to_numpy() == pytest.approx(pre_end + OFF.transfer_latency_s + 2 * wire, rel=1e-12)


def test_shared_link_shares_the_prefill_side_too_and_speeds_up_when_a_pull_ends():
    """One prefill engine, two decode engines: the two pulls share the prefill engine's outgoing link. With prompts
    of L and 2L the shorter is through at 2 x its wire time; the longer then has L's bytes left at full speed."""
    L = 600
    df = synthetic_trace(3, 1.0, [10, L, 2 * L], 5)
    df["arrival_s"] = [0.0, 0.001, 0.001]  # the two queue behind a short one and share the next prefill step
    _, j = simulate(df, p=1, d=2, phys=OFF.with_estimates({**SLOW, "transfer_link_shared": 1}))
    wire = L * OFF.kv_bytes_per_token / 2e9
    assert list(j.decode_instance) == ["d0", "d1", "d0"]
    assert j.prefill_end_s.iloc[1] == j.prefill_end_s.iloc[2] > j.decode_started_s.iloc[0]
    start = j.prefill_end_s.iloc[1] + OFF.transfer_latency_s
    assert j.decode_started_s.to_numpy()[1:] == pytest.approx(start + np.array([2 * wire, 3 * wire]), rel=1e-12)


def test_handshake_is_paid_once_per_pair_and_shared_by_pulls_that_wait_for_it():
    h = 0.3
    L = 200
    df = synthetic_trace(3, 1.0, L, 5)
    df["arrival_s"] = [0.0, 0.0, 5.0]  # two at once (the second waits for the same handshake), one long after
    phys = OFF.with_estimates({"transfer_handshake_s": h})
    _, j = simulate(df, p=1, d=1, phys=phys)
    _, base = simulate(df, p=1, d=1, phys=OFF)
    delay = (j.decode_started_s - base.decode_started_s).to_numpy()
    assert delay[0] == pytest.approx(h, rel=1e-9)
    # the second, prefilled one step later, waits for the same handshake: both pulls end together
    assert j.decode_started_s.iloc[1] == pytest.approx(j.decode_started_s.iloc[0], rel=1e-12)
    assert delay[2] == pytest.approx(0.0, abs=1e-12)  # the pair is warm


def test_api_queue_serves_one_request_at_a_time_before_the_prefill():
    """Two requests 1 ms apart on one prefill engine: the first enters the engine after its own service, the
    second after both services; a lone request's TTFT grows by exactly one service."""
    L, o = 400, 20
    phys = OFF.with_estimates({"api_queue_s": 0.05, "api_queue_per_token_s": 1e-5})
    service = 0.05 + 1e-5 * L
    df = synthetic_trace(2, 1.0, L, o)
    df["arrival_s"] = [0.0, 0.001]
    _, j = simulate(df, p=1, d=1, phys=phys)
    step = OFF.prefill_time_s(L)
    # the second reaches the engine at 2 x service, while the first's step runs: it waits for that step
    assert 2 * service < service + step
    assert j.prefill_end_s.to_numpy() == pytest.approx([service + step, service + 2 * step], rel=1e-12)
    one = synthetic_trace(1, 1.0, L, o)
    _, a = simulate(one, p=1, d=1, phys=phys)
    _, b = simulate(one, p=1, d=1, phys=OFF)
    assert a.ttft_s.iloc[0] - b.ttft_s.iloc[0] == pytest.approx(service, rel=1e-9)
    # with a serving path (request_path), the server's own time per request comes out of it: a lone request
    # is slower by the per-token part only
    split = OFF.with_estimates({"prefill_step_share": 0.5})
    _, c = simulate(one, p=1, d=1, phys=split.with_estimates({"api_queue_s": 0.01, "api_queue_per_token_s": 1e-5}))
    _, d = simulate(one, p=1, d=1, phys=split)
    assert c.ttft_s.iloc[0] - d.ttft_s.iloc[0] == pytest.approx(1e-5 * L, rel=1e-9)


def test_first_token_path_takes_the_decode_side_out_of_the_stated_base():
    phys = OFF.with_estimates({"base_counts_first_token": 1})
    path = OFF.transfer_latency_s + OFF.decode_base_s + OFF.decode_per_seq_s
    assert phys.prefill_base_net_s == pytest.approx(OFF.prefill_base_s - path, rel=1e-12)
    assert phys.prefill_time_s(300) == pytest.approx(OFF.prefill_time_s(300) - path, rel=1e-12)
    one = synthetic_trace(1, 1.0, 300, 20)
    _, a = simulate(one, p=1, d=1, phys=phys)
    _, b = simulate(one, p=1, d=1, phys=OFF)
    assert b.ttft_s.iloc[0] - a.ttft_s.iloc[0] == pytest.approx(path, rel=1e-9)
    # the router's calibration prices the stated base, as measured
    spec = RunSpec(workload="chat", topology="1p1d", physics={"base_counts_first_token": 1})
    assert router_cost_model(spec).tau_pre_base_s == PHYS.prefill_base_s


def test_attention_context_adds_the_causal_pairs_of_every_chunk():
    """A 5,000-token prompt in chunks of 2,048: its chunks attend over 5,000 x 5,001 / 2 token pairs in all,
    whatever the chunking; a prompt batched beside it adds only its own pairs."""
    c = 3e-9
    phys = OFF.with_estimates({"prefill_ctx_s": c, "max_num_batched_tokens": 2048})
    flat = OFF.with_estimates({"max_num_batched_tokens": 2048})
    one = synthetic_trace(1, 1.0, 5000, 5)
    _, a = simulate(one, p=1, d=1, phys=phys)
    _, b = simulate(one, p=1, d=1, phys=flat)
    assert a.prefill_end_s.iloc[0] - b.prefill_end_s.iloc[0] == pytest.approx(c * 5000 * 5001 / 2, rel=1e-9)
    assert phys.prefill_request_time_s(5000) - flat.prefill_request_time_s(5000) == pytest.approx(c * 5000 * 5001 / 2)
    three = synthetic_trace(3, 1.0, [10, 300, 500], 5)
    three["arrival_s"] = [0.0, 0.001, 0.001]  # the two queue behind a short one and share the next step
    _, a3 = simulate(three, p=1, d=1, phys=phys)
    _, b3 = simulate(three, p=1, d=1, phys=flat)
    first = c * 10 * 11 / 2
    assert (a3.prefill_end_s - b3.prefill_end_s).to_numpy() == pytest.approx(
        [first] + [first + c * (300 * 301 + 500 * 501) / 2] * 2, rel=1e-9)


def _pressure_trace():
    """Two long-running requests fill a small decode KV while a third's pull is in flight on a slow link."""
    df = synthetic_trace(3, 1.0, [10, 10, 100], [300, 300, 10])
    df["arrival_s"] = [0.0, 0.0, 1.0]
    return df


PRESSURE = OFF.with_overrides(kv_budget_tokens=600, transfer_bandwidth_bytes_per_s=7.4e5)


def test_vllm_scheduler_never_preempts_a_request_whose_kv_is_being_pulled():
    phys = PRESSURE
    _, old = simulate(_pressure_trace(), p=1, d=1, phys=phys)
    _, new = simulate(_pressure_trace(), p=1, d=1, phys=phys.with_estimates({"decode_scheduler_vllm": 1}))
    assert old.preemptions.iloc[2] == 1  # the in-flight pull is cancelled (and paid again)
    assert list(new.preemptions) == [0, 1, 0]  # vLLM preempts the most recent running request instead
    assert (new.status == "ok").all() and (old.status == "ok").all()
    assert new.ttft_s.iloc[2] < old.ttft_s.iloc[2]


def test_resume_cache_recomputes_only_the_evicted_tail():
    from repro.sim.engines import DecodeEngine

    d = DecodeEngine("d0", PHYS, False)
    d.freed_at[7] = 1000
    d.free_ahead[7] = 50
    # allocated 120 since, 50 of them from the free tokens ahead: 70 of its 300 evicted, 224 cached (14 blocks)
    d.freed_tokens = 0
    assert d.recompute_tokens(7, 300, 1120) == 300 - 224
    assert d.recompute_tokens(7, 300, 1040) == 300 - 288  # nothing evicted: the last partial block only
    assert d.recompute_tokens(7, 288, 1040) == 1  # every block cached: the last token is recomputed
    assert d.recompute_tokens(7, 300, 2000) == 300  # all evicted


def test_resume_cache_shortens_the_resumed_step():
    phys = PRESSURE.with_estimates({"decode_scheduler_vllm": 1})
    _, full = simulate(_pressure_trace(), p=1, d=1, phys=phys)
    _, part = simulate(_pressure_trace(), p=1, d=1, phys=phys.with_estimates({"resume_prefix_cache": 1}))
    assert list(part.preemptions) == list(full.preemptions) == [0, 1, 0]
    assert part.finish_s.iloc[1] < full.finish_s.iloc[1]


def test_vllm_budget_reaches_the_engine_and_the_router():
    phys, _ = fixed_overrides([BY_NAME["vllm_budget"]])
    spec = RunSpec(workload="documents", topology="1p1d", rate=1.0, n_requests=3, physics=phys)
    assert router_cost_model(spec).max_num_batched_tokens == 2048
    j = simulate_spec(spec)
    assert isinstance(j, pd.DataFrame) and (j.status == "ok").all()
    # a 5,000-token prompt takes three steps of 2,048 (each paying the step base)
    p = OFF.with_estimates({"max_num_batched_tokens": 2048})
    assert p.prefill_request_time_s(5000) == pytest.approx(3 * OFF.prefill_base_s + OFF.prefill_per_token_s * 5000)


def test_override_of_an_integer_switch_stays_an_integer():
    p = PHYS.with_estimates({"max_num_batched_tokens": 2048.0, "transfer_link_shared": 1.0,
                             "decode_scheduler_vllm": 1.0})
    assert isinstance(p.max_num_batched_tokens, int) and isinstance(p.transfer_link_shared, int)
    assert isinstance(p.decode_scheduler_vllm, int)


def test_the_documents_print_the_catalogue_as_the_code_has_it():
    from pathlib import Path

    from repro.engine.mechanisms import catalogue_table

    text = (Path(__file__).resolve().parents[1] / "docs" / "IDENTIFY.md").read_text()
    block = text.split("<!-- catalogue:begin -->\n", 1)[1].split("\n<!-- catalogue:end -->", 1)[0]
    assert block == catalogue_table()


def test_the_emulated_decode_engine_shares_its_link_between_pulls():
    """Two pulls of equal size started together on an emulated decode engine (K = 1) are both through after their
    setup and two wire times, as the simulator's; a lone one after one wire time (a wall-clock test: 50 ms of
    slack for a loaded machine)."""
    import asyncio

    from repro.emulator.engine import AsyncEngine, EmulatorConfig

    phys = OFF.with_overrides(transfer_link_shared=1, transfer_bandwidth_bytes_per_s=5e8)
    L = 2000
    wire = L * phys.kv_bytes_per_token / 5e8

    async def main() -> tuple[list[float], float]:
        eng = AsyncEngine(EmulatorConfig(time_scale=1.0), physics=phys)

        async def one() -> float:
            await eng._shared_pull(L)
            return eng.now()

        t0 = eng.now()
        both = await asyncio.gather(one(), one())
        t1 = eng.now()
        alone = await one()
        return [b - t0 for b in both], alone - t1

    both, alone = asyncio.run(main())
    assert both == pytest.approx([phys.transfer_latency_s + 2 * wire] * 2, abs=0.05)
    assert alone == pytest.approx(phys.transfer_latency_s + wire, abs=0.05)


def _equal_fit_trace():
    """Two requests decode side by side on a decode engine whose KV holds 2 x 110 + 1 tokens: at the step where each
    holds 110 (100 tokens generated) the next needs 222, one more than fits: the newer is preempted, and the space it
    leaves is exactly its own context, so it could be admitted again at once."""
    df = synthetic_trace(2, 1.0, [10, 10], [200, 200])
    df["arrival_s"] = [0.0, 0.0]
    return df


def test_vllm_scheduler_admits_nobody_on_a_step_that_preempted():
    """vLLM's ``Scheduler.schedule`` schedules no waiting request on a step that preempted: the victim waits for a
    later step, where the survivor has grown and it no longer fits; it resumes once the survivor finishes. Admitting
    it on the same step would let it rejoin and be preempted again at the next boundary."""
    phys = OFF.with_overrides(kv_budget_tokens=221).with_estimates({"decode_scheduler_vllm": 1})
    _, j = simulate(_equal_fit_trace(), p=2, d=1, phys=phys)  # one prefill engine each: they end together
    assert list(j.preemptions) == [0, 1]
    assert (j.status == "ok").all()
    assert j.decode_started_s.iloc[1] == j.decode_started_s.iloc[0]  # they joined together
    assert j.finish_s.iloc[1] > j.finish_s.iloc[0]  # the victim resumed after the survivor finished
