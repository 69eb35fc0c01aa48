"""Unit tests of the emulated engine's core (no HTTP, virtual clock)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.emulator.core import EngineCore
from repro.emulator.faults import Faults
from repro.emulator.kv_blocks import BlockPool
from repro.emulator.model import (
    EOS_TOKEN_ID,
    TOKENIZER,
    VOCAB_IDS,
    OutputFunction,
    prompt_seed,
    render_chat,
)
from repro.emulator.seq import FINISHED, Seq
from repro.engine.profile import load_profile
from repro.errors import ConfigError

PHYS = load_profile("a40-qwen2.5-3b").physics


def run(core: EngineCore, arrivals: list[tuple[float, Seq]], pull_s: float | None = None, until: float = 1e9):
    """Drive a core on a virtual clock (arrivals sorted by time)."""
    arrivals = sorted(arrivals, key=lambda a: a[0])
    pulls: list = []
    now = 0.0
    i = 0
    steps = []
    while now < until:
        while i < len(arrivals) and arrivals[i][0] <= now:
            arrivals[i][1].arrival = arrivals[i][0]
            core.add(arrivals[i][1])
            i += 1
        for t, s in list(pulls):
            if t <= now:
                pulls.remove((t, s))
                core.kv_arrived(s, True, now)
        plan = core.schedule(now)
        if plan is not None:
            for s in plan.pulls:
                pulls.append((now + (pull_s if pull_s is not None else PHYS.transfer_time_s(s.transfer_tokens)), s))
        if plan is not None and (plan.items or plan.n_dec):
            steps.append(plan)
            core.complete(plan, now + plan.time_s)
            now += plan.time_s
            continue
        nxt = [a[0] for a in arrivals[i:i + 1]] + [t for t, _ in pulls]
        if not nxt:
            break
        now = max(now, min(nxt))
    return steps


def ids(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 100000) for _ in range(n)]


# ---- block pool ------------------------------------------------------------------------------
def test_block_pool_ids_and_release():
    pool = BlockPool(10)
    a = pool.allocate(3)
    assert a == [1, 2, 3] and pool.num_free == 7 and pool.usage() == pytest.approx(0.3)
    pool.release(a)
    assert pool.num_free == 10 and pool.usage() == 0.0
    with pytest.raises(RuntimeError):
        pool.allocate(11)


def test_prefix_cache_hits_and_eviction():
    pool = BlockPool(4)
    b = pool.allocate(2)
    pool.register(b[0], 111)
    pool.register(b[1], 222)
    pool.release(b)
    hit = pool.touch_prefix([111, 222, 333], 3)
    assert hit == b and pool.num_free == 2
    pool.release(hit)
    pool.allocate(4)  # evicts everything
    assert pool.cached == {}
    assert pool.touch_prefix([111], 1) == []


# ---- timing ------------------------------------------------------------------------------------
def test_single_request_timing_matches_physics():
    core = EngineCore(PHYS)
    s = Seq("a", ids(1000), target=10)
    run(core, [(0.0, s)])
    assert s.state == FINISHED and s.finish_reason == "length" and s.g == 10
    assert s.first_token_t == pytest.approx(PHYS.prefill_time_s(1000))
    expected = PHYS.prefill_time_s(1000) + sum(PHYS.decode_step_s(1, 1000 + g) for g in range(1, 10))
    assert s.finish_t == pytest.approx(expected)
    assert core.pool.num_used == 0


def test_chunked_prefill_of_long_prompt():
    core = EngineCore(PHYS)
    L = PHYS.max_num_batched_tokens * 2 + 100
    s = Seq("a", ids(L), target=1)
    steps = run(core, [(0.0, s)])
    assert [p.prefill_tokens for p in steps] == [8192, 8192, 100]
    assert s.first_token_t == pytest.approx(PHYS.prefill_request_time_s(L))


def test_tpot_grows_with_batch_size_as_profile_says():
    def tpot(n: int) -> float:
        core = EngineCore(PHYS)
        seqs = [Seq(f"r{k}", ids(500, k), target=50) for k in range(n)]
        run(core, [(0.0, s) for s in seqs])
        return sum((s.finish_t - s.first_token_t) / 49 for s in seqs) / n

    t1, t8, t32 = tpot(1), tpot(8), tpot(32)
    assert t1 < t8 < t32
    assert t8 == pytest.approx(sum(PHYS.decode_step_s(8, 8 * (500 + g)) for g in range(1, 50)) / 49, rel=1e-9)
    # the paper's measured figure: a batch of eight costs each request ~2.9% more per token
    assert 1.01 < t8 / t1 < 1.06


def test_mixed_step_time_counts_weights_once():
    core = EngineCore(PHYS)
    a = Seq("a", ids(100), target=20)
    b = Seq("b", ids(3000, 1), target=5)
    steps = run(core, [(0.0, a), (0.01, b)])
    mixed = [p for p in steps if p.prefill_tokens and p.n_dec]
    assert mixed, "b's prefill should share a step with a's decode"
    p = mixed[0]
    assert p.time_s == pytest.approx(PHYS.prefill_time_s(p.prefill_tokens)
                                     + PHYS.decode_step_s(p.n_dec, p.context_tokens)
                                     - PHYS.decode_base_s)


# ---- KV budget, preemption ------------------------------------------------------------------------
def test_kv_budget_queues_and_preempts_then_returns_to_zero():
    small = PHYS.with_overrides(kv_budget_tokens=1600)  # 100 blocks
    core = EngineCore(small)
    seqs = [Seq(f"r{k}", ids(400, k), target=200) for k in range(6)]  # 6 x 600 tokens > 1600
    peak = []
    arrivals = [(0.001 * k, s) for k, s in enumerate(seqs)]
    arrivals.sort(key=lambda a: a[0])
    # drive manually to watch usage
    now, i = 0.0, 0
    while True:
        while i < len(arrivals) and arrivals[i][0] <= now:
            core.add(arrivals[i][1])
            i += 1
        plan = core.schedule(now)
        if plan is None or not (plan.items or plan.n_dec):
            if i < len(arrivals):
                now = arrivals[i][0]
                continue
            break
        core.complete(plan, now + plan.time_s)
        now += plan.time_s
        peak.append(core.pool.num_used)
        assert core.pool.num_used <= 100
    assert all(s.state == FINISHED and s.g == 200 for s in seqs)
    assert max(peak) > 60
    assert core.num_preemptions > 0
    assert core.pool.num_used == 0 and core.num_running == 0 and core.num_waiting == 0


def test_prefix_cache_skips_cached_blocks():
    core = EngineCore(PHYS)
    prompt = ids(640)
    a = Seq("a", prompt, target=1)
    run(core, [(0.0, a)])
    b = Seq("b", list(prompt), target=1)
    steps = run(core, [(0.0, b)])
    assert b.cached_tokens == 624  # 39 full blocks; the last token is always computed
    assert steps[0].prefill_tokens == 16
    core.reset_prefix_cache()
    c = Seq("c", list(prompt), target=1)
    run(core, [(0.0, c)])
    assert c.cached_tokens == 0


# ---- P/D inside the core -------------------------------------------------------------------------
def test_prefill_only_holds_blocks_until_released():
    core = EngineCore(PHYS, handoff_timeout_s=480)
    s = Seq("p", ids(100), target=1, prefill_only=True)
    run(core, [(0.0, s)])
    assert s.kv_params["remote_block_ids"] == s.blocks and len(s.blocks) == 7
    assert core.pool.num_used == 7 and "p" in core.handoffs
    assert not core.release_handoff("p", [1, 2])  # wrong blocks are refused
    assert core.release_handoff("p", s.kv_params["remote_block_ids"])
    assert core.pool.num_used == 0


def test_prefill_only_blocks_expire():
    core = EngineCore(PHYS, handoff_timeout_s=480)
    s = Seq("p", ids(100), target=1, prefill_only=True)
    run(core, [(0.0, s)])
    assert core.expire_handoffs(100.0) == 0
    assert core.expire_handoffs(s.finish_t + 480.0) == 1
    assert core.pool.num_used == 0


def test_remote_prefill_pulls_then_first_token_after_one_step():
    core = EngineCore(PHYS)
    s = Seq("d", ids(1000), target=5, remote={"remote_block_ids": [1]})
    run(core, [(0.0, s)], pull_s=0.01)
    # blocks allocated at t=0, pull done at 0.01, then one decode-like step
    assert s.first_token_t == pytest.approx(0.01 + PHYS.decode_step_s(1, 1000))
    assert s.pull_ok and s.g == 5 and core.pool.num_used == 0


def test_remote_prefill_waits_for_kv_budget():
    small = PHYS.with_overrides(kv_budget_tokens=1600)
    core = EngineCore(small)
    a = Seq("a", ids(1200), target=100)
    b = Seq("b", ids(1200, 1), target=5, remote={"x": 1})
    run(core, [(0.0, a), (0.001, b)], pull_s=0.001)
    assert b.first_token_t > a.finish_t - 1e-9 or core.num_preemptions > 0
    assert a.state == b.state == FINISHED and core.pool.num_used == 0


def test_failed_pull_recomputes_locally():
    core = EngineCore(PHYS)
    s = Seq("d", ids(300), target=3, remote={"x": 1})
    core.add(s)
    plan = core.schedule(0.0)
    assert plan.pulls == [s]
    core.kv_arrived(s, False, 0.005)
    steps = run(core, [])
    assert steps[0].prefill_tokens == 300 and s.g == 3


def test_abort_frees_everything():
    core = EngineCore(PHYS)
    s = Seq("a", ids(500), target=100)
    core.add(s)
    plan = core.schedule(0.0)
    core.complete(plan, plan.time_s)
    assert core.pool.num_used > 0
    core.abort(s, 1.0)
    assert core.pool.num_used == 0 and core.num_running == 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 900), st.integers(1, 60), st.floats(0, 0.5)), min_size=1, max_size=12),
       st.integers(40, 200))
def test_property_every_request_finishes_and_blocks_return(reqs, budget_blocks):
    phys = PHYS.with_overrides(kv_budget_tokens=budget_blocks * 16, max_num_batched_tokens=512)
    core = EngineCore(phys)
    seqs = []
    for k, (L, out, t) in enumerate(reqs):
        L = min(L, budget_blocks * 16 - out - 16)
        if L < 1:
            continue
        seqs.append((t, Seq(f"r{k}", ids(L, k), target=out)))
    run(core, seqs)
    for _, s in seqs:
        assert s.state == FINISHED and s.g == s.target
        assert s.first_token_t >= s.arrival
    assert core.pool.num_used == 0 and core.idle()


# ---- the model ----------------------------------------------------------------------------------
def test_greedy_outputs_are_pure_functions_and_diverge_differs():
    p = TOKENIZER.encode("The quick brown fox jumps over the lazy dog")
    a = OutputFunction(prompt_seed(p))
    b = OutputFunction(prompt_seed(list(p)))
    assert a.token_ids(0, 50) == b.token_ids(0, 50)
    c = OutputFunction(prompt_seed(p), diverge=True)
    assert c.token_ids(0, 1) == a.token_ids(0, 1)  # the prefill engine's token is unchanged
    assert c.token_ids(1, 50) != a.token_ids(1, 50)
    d = OutputFunction(prompt_seed(p + [1]))
    assert d.token_ids(0, 20) != a.token_ids(0, 20)


def test_short_spans_computed_one_by_one_equal_the_block_computation():
    for k in range(40):
        fresh = OutputFunction(prompt_seed([k, 3]), salt=k % 3, diverge=k % 2 == 1)
        blocked = OutputFunction(prompt_seed([k, 3]), salt=k % 3, diverge=k % 2 == 1)
        blocked.indices(0, 300)  # computed in blocks and kept
        for a, b in ((0, 1), (0, 8), (3, 8), (1, 2)):
            assert fresh.indices(a, b) == blocked.indices(a, b)
        assert not fresh._idx  # short spans are not kept


def test_output_text_retokenizes_to_the_same_ids():
    out = OutputFunction(prompt_seed([5, 6, 7]))
    text = out.text(0, 200)
    assert TOKENIZER.encode(text) == out.token_ids(0, 200)
    assert EOS_TOKEN_ID not in VOCAB_IDS


def test_natural_length_range():
    lens = [OutputFunction(prompt_seed([k])).natural_length(100) for k in range(300)]
    assert min(lens) >= 1 and max(lens) <= 200 and 70 < sum(lens) / len(lens) < 130


def test_chat_template_has_qwen_default_system():
    text = render_chat([{"role": "user", "content": "hi"}], "Qwen/Qwen2.5-3B-Instruct")
    assert text.startswith("<|im_start|>system\nYou are Qwen") and text.endswith("<|im_start|>assistant\n")


def test_faults_parse():
    f = Faults.parse(["diverge", "slow:2", "kv-drop"])
    assert f.diverge and f.slow_factor == 2.0 and f.kv_drop
    with pytest.raises(ConfigError, match="allowed"):
        Faults.parse(["nope"])
    with pytest.raises(ConfigError):
        Faults.parse(["slow:0"])


def test_coalesced_streaming_notifies_every_n_tokens_plus_first_and_last():
    count = {"n": 0}

    def bump():
        count["n"] += 1

    core = EngineCore(PHYS, stream_interval_tokens=8)
    s = Seq("s", ids(100), target=33, stream=True, notify=bump)
    run(core, [(0.0, s)])
    # first token at once, then every 8 tokens (9, 17, 25, 33 -> the last one is also the finish)
    assert 4 <= count["n"] <= 6
    per_token = {"n": 0}
    core1 = EngineCore(PHYS, stream_interval_tokens=1)
    s1 = Seq("s", ids(100), target=33, stream=True, notify=lambda: per_token.__setitem__("n", per_token["n"] + 1))
    run(core1, [(0.0, s1)])
    assert per_token["n"] >= 33
    # coalescing does not move the first or the last token
    assert s.first_token_t == s1.first_token_t and s.finish_t == s1.finish_t


def test_emulator_cli_help_and_config_error(capsys):
    from repro.emulator.server import main

    assert main(["--time-scale", "0"]) == 2
    assert "time-scale" in capsys.readouterr().err
    assert main(["--profile", "nope"]) == 2


def test_fast_metrics_text_is_byte_identical_to_prometheus_client():
    """`EngineMetrics.text` (what /metrics serves) must render exactly what prometheus-client renders,
    whole and filtered by sample names (``?name[]=``, as prometheus-client's exposition app)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from repro.emulator.vllm_metrics import EngineMetrics

    m = EngineMetrics('Qwen/"odd"\\model\nname', 32768, engine_index="3")
    m.gauges = {"vllm:num_requests_running": (lambda: 3, "Number of requests in model execution batches."),
                "vllm:kv_cache_usage_perc": (lambda: 0.1 + 0.2, "KV-cache usage.\n1 means 100 percent usage.")}
    m.info = {"block_size": "16", "num_gpu_blocks": "1000", "enable_prefix_caching": "True"}
    assert m.text() == generate_latest(m.registry())  # empty histograms
    for k in range(50):
        m.on_decode_tokens(3, 0.013 * k)
        m.on_step(100 * k, 3, 0.02)
        m.on_lag(0.0003 * k)
        m.on_prefix(10, k)
    m.c["vllm:prompt_tokens"][0] += 1e7 + 0.5
    m.success["length"] += 4
    assert m.text() == generate_latest(m.registry())
    reg = CollectorRegistry(auto_describe=False, support_collectors_without_names=True)
    reg.register(m)
    for names in (["vllm:kv_cache_usage_perc"], ["vllm:kv_cache_usage_perc", "vllm:num_requests_running", "nope"],
                  ["vllm:inter_token_latency_seconds_count", "vllm:iteration_tokens_total_sum"],
                  ["vllm:prompt_tokens_total", "vllm:request_success_total", "vllm:cache_config_info",
                   "emulator:scheduler_lag_seconds_bucket"], ["nope"]):
        assert m.text(names) == generate_latest(reg.restricted_registry(names)), names  # ?name[]= filter
