"""The calibration benchmark recovers an emulated cluster's profile constants."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from repro.cluster.launchers import launch
from repro.emulator.engine import _EARLY_WAKE_S
from repro.engine.mechanisms import mechanisms_off
from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.live.calibration_bench import (
    calibrate,
    compare,
    fit_samples,
    parse_metrics,
    profile_cost_model,
    samples_path,
    unique_prompt,
)
from repro.routing.cost_model import CostModel, slo_from_constants
from repro.workload.tokenizer import DEFAULT_TOKENIZER

K = 10.0  # fast enough for the test, slow enough that a 2-core machine keeps the emulator's clock


@pytest.mark.slow
def test_recovers_the_profile_within_10_percent(tmp_path):
    out = tmp_path / "cal.json"
    # the estimated profile: no serving path outside the engines, so the engines' prefill is the stated base
    topo = {"name": "cal", "instances": [{"role": "prefill", "count": 1, "profile": "a40-qwen2.5-3b"},
                                         {"role": "decode", "count": 1, "profile": "a40-qwen2.5-3b"}]}
    with launch(topo, "emulated", time_scale=K) as inst:
        fitted, samples = calibrate(inst, time_scale=K, budget_s=60, out=out, decode_tokens=256,
                                    concurrencies=(1, 2, 4, 8))
        ref = profile_cost_model(inst)
    phys = load_profile("a40-qwen2.5-3b").physics
    assert ref == CostModel.from_physics(phys, name="profile")
    table = compare(fitted, ref).set_index("constant")
    print(table.to_string())
    for const in ("tau_pre_base_s", "tau_pre_per_token_s", "tau_dec_s", "tpot_tight_s"):
        assert abs(table.loc[const, "rel_error"]) < 0.10, (const, table.loc[const].to_dict())
    # the TTFT target is the fitted unloaded P/D TTFT of the reference prompt (prefill + transfer + one
    # decode step); the emulated transfer latency includes the wall-clock HTTP hops x K, so it is not the profile's
    assert fitted.ttft_tight_s == pytest.approx(slo_from_constants(
        fitted.tau_pre_base_s, fitted.tau_pre_per_token_s, fitted.tau_dec_s, fitted.xfer_latency_s,
        fitted.kv_bytes_per_token / fitted.xfer_bandwidth_bytes_per_s)[0])
    assert fitted.ttft_tight_s >= ref.ttft_tight_s * 0.9
    # the concurrency slope is a ~3% effect at batch 8: only its sign and size are checked
    assert 0 < fitted.dec_concurrency_slope < 3 * ref.dec_concurrency_slope
    assert fitted.kv_capacity_tokens == phys.kv_budget_tokens  # read from vllm:cache_config_info
    assert fitted.kv_bytes_per_token == phys.kv_bytes_per_token
    # the KV transfer is timed and grows with the prompt
    assert fitted.xfer_bandwidth_bytes_per_s > 0 and math.isfinite(fitted.xfer_latency_s)
    # budget: about 60 s of physics time
    assert 20 < samples.attrs["physics_s"] < 90
    # outputs: the JSON loads back as the same cost model, the samples beside it
    assert CostModel.load(out) == fitted
    raw = pd.read_csv(samples_path(out))
    assert set(raw["phase"]) == {"prefill", "decode", "transfer"}
    assert (raw["source"] == "engine").all()
    pre = raw[raw.phase == "prefill"]
    # prompt lengths up to 8,000, never above the engine's token budget (one step each: 2,048 on the A40 testbed)
    assert pre["prompt_tokens"].min() == 64 and pre["prompt_tokens"].max() == min(8000, phys.max_num_batched_tokens)
    per_length = pre.groupby("prompt_tokens").size()
    assert per_length.min() >= 1 and per_length.max() - per_length.min() <= 1  # whole rounds (how many: machine speed)
    # client-side latency includes the HTTP round trip: never below the engine's account, but for the
    # emulator's early wake (it delivers a step up to _EARLY_WAKE_S of wall time before its stamped end, so
    # that timer rounding leaves delivery unbiased: x K in physics seconds); the median includes the trip
    assert (pre["client_s"] >= pre["engine_s"] - _EARLY_WAKE_S * K).all()
    assert (pre["client_s"] - pre["engine_s"]).median() > 0
    dec = raw[raw.phase == "decode"]
    assert sorted(dec["concurrency"].unique()) == [1, 2, 4, 8]
    assert (dec["mean_context"] == 800).all()
    assert fit_samples(raw, base=fitted, name=fitted.name) == fitted
    json.loads(out.read_text())


def test_fit_from_synthetic_samples_and_client_fallback():
    phys = mechanisms_off(load_profile().physics)  # the linear prefill the fit's model is
    rows = []
    for L in (100, 1000, 4000):
        for rnd in range(3):
            noise = 0.5 if rnd == 2 else 0.0  # one hiccup per length: the median ignores it
            rows.append(dict(phase="prefill", prompt_tokens=L, concurrency=1, round=rnd,
                             engine_s=None, client_s=phys.prefill_time_s(L) + noise))
    for n in (1, 4, 8):
        rows.append(dict(phase="decode", prompt_tokens=500, concurrency=n, round=0,
                         engine_s=0.02 * (1 + 0.01 * (n - 1)), client_s=99.0))
    cm = fit_samples(pd.DataFrame(rows))
    assert cm.tau_pre_base_s == pytest.approx(phys.prefill_base_s)
    assert cm.tau_pre_per_token_s == pytest.approx(phys.prefill_per_token_s)
    assert cm.tau_dec_s == pytest.approx(0.02) and cm.dec_concurrency_slope == pytest.approx(0.01)


def test_parse_metrics_sums_label_sets():
    text = ('# HELP x\n# TYPE vllm:a histogram\nvllm:a_sum{engine="0",model_name="m"} 1.5\n'
            'vllm:a_sum{engine="1",model_name="m"} 2.0\nvllm:a_count{engine="0"} 3\nvllm:g 7e-1\n')
    m = parse_metrics(text)
    assert m == {"vllm:a_sum": 3.5, "vllm:a_count": 3.0, "vllm:g": 0.7}


def test_unique_prompts_have_exact_length_and_differ():
    a, b = unique_prompt(300, "x1"), unique_prompt(300, "x2")
    assert DEFAULT_TOKENIZER.count(a) == DEFAULT_TOKENIZER.count(b) == 300
    assert a[:40] != b[:40]


def test_bad_arguments_name_the_field():
    from repro.cluster.topology import Instance

    inst = [Instance("p", "prefill", "http://127.0.0.1:9"), Instance("d", "decode", "http://127.0.0.1:9")]
    with pytest.raises(ConfigError, match="concurrencies"):
        calibrate(inst, concurrencies=(4,))
    with pytest.raises(ConfigError, match="decode_instance"):
        calibrate(inst, decode_instance="nope")
    with pytest.raises(ConfigError, match="needs at least one prefill"):
        calibrate(inst[:1])


def test_cli_brings_up_the_cluster_prints_fitted_vs_profile_and_writes(tmp_path):
    import typer
    from typer.testing import CliRunner

    from repro.cli.calibrate import calibrate_cli

    app = typer.Typer()
    app.command("calibrate")(calibrate_cli)
    app.command("other")(lambda: None)
    out = tmp_path / "c.json"
    # the estimated profile: no serving path outside the engines, so the engines' prefill is the stated base
    res = CliRunner().invoke(app, ["calibrate", "--cluster", "1p1d", "--profile", "a40-qwen2.5-3b",
                                   "--time-scale", "20", "--budget", "15",
                                   "--out", str(out), "--concurrency", "1,2", "--decode-tokens", "160",
                                   "--no-transfer"])
    assert res.exit_code == 0, res.output
    assert "tau_pre_base_s" in res.output and "profile" in res.output and "0.0667" in res.output
    assert CostModel.load(out).tau_pre_base_s == pytest.approx(0.0667, rel=0.1)
    assert samples_path(out).exists()


def test_cache_config_gives_capacity_and_bytes_per_token_keeping_the_priced_transfer():
    from repro.live.calibration_bench import apply_cache_config

    base = CostModel.load("calibrated")
    info = {"num_gpu_blocks": "4096", "block_size": "128", "kv_cache_memory_bytes": "268435456"}
    got = apply_cache_config(base, info)
    assert got.kv_capacity_tokens == 4095 * 128  # one block is vLLM's null block
    assert got.kv_bytes_per_token == 512  # 256 MiB over 4096 x 128 tokens
    assert got.tau_xfer(3000) == pytest.approx(base.tau_xfer(3000), rel=1e-12)
    # GPU engines sized by memory fraction state no byte budget: only the capacity changes
    gpu = apply_cache_config(base, {"num_gpu_blocks": "100", "block_size": "16", "kv_cache_memory_bytes": "None"})
    assert (gpu.kv_capacity_tokens, gpu.kv_bytes_per_token) == (99 * 16, base.kv_bytes_per_token)
    assert apply_cache_config(base, {}) == base
