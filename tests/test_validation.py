"""`repro validate`: the calibration's physics, the per-request accuracy, the budget, the ordering, and one
validation end to end against emulated engines (the same physics: it must agree tightly)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from repro.cli.root import app
from repro.cluster.topology import parse_topology
from repro.engine.physics import Physics
from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.experiment.journal import frame
from repro.routing.cost_model import CostModel, SLOTargets
from repro.validation import accuracy, decomposition
from repro.validation.plan import ErrorBudget, ValidationConfig, engine_settings

CPU_CAL = "data/clusters/cpu-tiny-calibration.json"
TIMING = ("tau_pre_base_s", "tau_pre_per_token_s", "tau_dec_s", "dec_concurrency_slope", "xfer_latency_s",
          "xfer_bandwidth_bytes_per_s", "kv_capacity_tokens", "ttft_tight_s", "tpot_tight_s")


# ---- the calibration's physics ----------------------------------------------------------------
@pytest.mark.parametrize("share", [0.0, 0.4, 1.0])
def test_physics_from_a_calibration_gives_the_calibration_back(share: float) -> None:
    cm = CostModel.load(CPU_CAL)
    phys = cm.to_physics(name="x", model="tiny", block_size=128, max_num_seqs=128,
                                    max_model_len=4096, max_num_batched_tokens=2048, context_share=share)
    back = CostModel.from_physics(phys)
    for name in TIMING:
        assert getattr(back, name) == pytest.approx(getattr(cm, name), rel=1e-12), name
    # a lone 800-token sequence's step is the calibrated tau_dec; 8 of them cost each (1 + 7 slope) x it
    assert phys.decode_step_s(1, 800) == pytest.approx(cm.tau_dec_s)
    assert phys.decode_step_s(8, 8 * 800) == pytest.approx(cm.tau_dec(7))
    assert (phys.max_num_batched_tokens, phys.block_size) == (2048, 128)
    assert Physics.from_dict(phys.to_dict(slo=True)) == phys  # it is a profile file too
    assert Physics.from_dict(phys.to_dict(slo=True)).stated_slo == phys.stated_slo


def test_physics_from_a_calibration_refuses_what_no_engine_does() -> None:
    cm = CostModel.load(CPU_CAL)
    with pytest.raises(ConfigError, match="context_share"):
        cm.to_physics(name="x", model="m", block_size=16, max_num_seqs=8, max_model_len=64,
                                 context_share=1.5)
    with pytest.raises(ConfigError, match="slope"):
        cm.with_overrides(dec_concurrency_slope=1.5).to_physics(name="x", model="m", block_size=16,
                                 max_num_seqs=8, max_model_len=64)


def test_cpu_engines_schedule_with_vllm_cpu_defaults_unless_the_cluster_says_otherwise() -> None:
    cpu = engine_settings(parse_topology("data/clusters/1p1d-cpu.yaml"))
    assert (cpu["max_num_batched_tokens"], cpu["max_num_seqs"], cpu["block_size"], cpu["max_model_len"]) == \
        (2048, 128, 128, 4096)
    assert "arg_utils" in cpu["source"]
    doc = {"name": "c", "launcher": "vllm", "vllm": {"device": "cpu", "max_model_len": 2048,
                                                    "extra_args": ["--max-num-batched-tokens", "4096"]},
           "instances": [{"role": "prefill", "count": 1}, {"role": "decode", "count": 1}]}
    own = engine_settings(parse_topology(doc))
    assert (own["max_num_batched_tokens"], own["max_model_len"]) == (4096, 2048)
    gpu = engine_settings(parse_topology("data/clusters/2p4d-a40.yaml"))  # unmodified vLLM on a 48 GB A40
    assert gpu["max_num_batched_tokens"] == 2048 and "get_batch_defaults" in gpu["source"]
    pinned = engine_settings(parse_topology("2p4d"))  # the launcher passes the profile's settings
    assert pinned["max_num_batched_tokens"] == 2048 and "profile" in pinned["source"]


@pytest.mark.parametrize(("field", "value", "match"), [
    ("fractions", (0.5, -1.0), "fractions"), ("repeats", 0, "repeats"), ("physics", "guess", "physics"),
    ("backend", "sim", "backend"), ("time_scale", 4.0, "time_scale"), ("policies", (), "policies"),
])
def test_a_bad_validation_config_names_the_field(field: str, value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ValidationConfig(cluster="data/clusters/1p1d-cpu.yaml", **{field: value})


# ---- accuracy -----------------------------------------------------------------------------------
def _journal(n: int, scale: float = 1.0, seed: int = 0, decode: str = "decode-0") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ttft = rng.uniform(0.05, 0.2, n) * scale
    tpot = rng.uniform(0.005, 0.01, n) * scale
    out = rng.integers(2, 200, n)
    e2e = ttft + tpot * (out - 1)
    rows = [{"request_id": f"r{i:04d}", "family": "chat", "slo_class": "tight", "prompt_tokens": int(10 + i),
             "output_tokens": int(out[i]), "predicted_output_tokens": 100.0, "prefill_instance": "prefill-0",
             "decode_instance": decode, "status": "ok", "reason": None, "arrival_s": float(i),
             "prefill_start_s": float(i + 0.02 * ttft[i]), "prefill_end_s": float(i + 0.5 * ttft[i]),
             "decode_start_s": float(i + 0.52 * ttft[i]), "decode_started_s": float(i + 0.7 * ttft[i]),
             "first_token_s": float(i + ttft[i]),
             "finish_s": float(i + e2e[i]), "ttft_s": float(ttft[i]), "tpot_s": float(tpot[i]), "e2e_s": float(e2e[i]),
             "generated_tokens": int(out[i]), "preemptions": -1} for i in range(n)]
    return frame(rows)


SLO = SLOTargets(ttft_tight_s=0.15, tpot_tight_s=0.02)


def test_the_stages_of_a_requests_time_add_up_to_its_ttft_and_their_gaps_to_the_ttft_gap() -> None:
    live, sim = _journal(30), _journal(30, scale=1.2)
    p = accuracy.pair(live, sim, SLO).assign(variant="x", fraction=0.5, policy="round_robin",
                                             seed=np.repeat([1, 2, 3], 10))
    for side in ("live", "sim"):
        assert np.allclose(sum(p[f"{side}_{s}_s"] for s in decomposition.TTFT_STAGES), p[f"{side}_ttft_s"])
    t = decomposition.stage_table(p)
    ttft = t[t["stage"].isin(decomposition.TTFT_STAGES)]
    assert ttft["share_of_ttft_diff"].sum() == pytest.approx(1.0)
    assert ttft["diff_ms"].sum() == pytest.approx(1e3 * (p["sim_ttft_s"] - p["live_ttft_s"]).mean())
    assert (ttft["traces"] == 3).all() and (ttft["diff_lo_ms"] <= ttft["diff_ms"]).all()


def test_pairing_by_request_id_gives_each_requests_relative_error() -> None:
    live = _journal(50)
    sim = _journal(50, scale=1.1)
    p = accuracy.pair(live, sim.sample(frac=1.0, random_state=3), SLO)  # row order does not matter
    assert len(p) == 50
    for m in accuracy.METRICS:
        assert np.allclose(p[f"err_{m}"], 0.1), m
    assert p["same_decode"].all()
    # a request that failed on one side is not paired, and is counted
    live.loc[3, "status"] = "failed"
    assert len(accuracy.pair(live, sim, SLO)) == 49
    assert accuracy.unpaired(live, sim) == {"live_only": 0, "sim_only": 1}


def _runs_and_pairs(errors: dict[float, float], goodput_gap: dict[float, float], seeds: int = 3,
                    policies: tuple[str, ...] = ("round_robin",)) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs, pairs = [], []
    for fraction, err in errors.items():
        for policy in policies:
            for seed in range(1, seeds + 1):
                live = _journal(40, seed=seed)
                sim = _journal(40, scale=1 + err, seed=seed)
                keys = {"fraction": fraction, "rate": fraction * 4, "policy": policy, "seed": seed, "replay": 1}
                pairs.append(accuracy.pair(live, sim, SLO).assign(**keys))
                base = 0.8 + 0.01 * seed
                runs.append({**keys, "live_goodput": base, "sim_goodput": base + goodput_gap[fraction] +
                             0.001 * (seed - 2), "valid": True})
    return pd.DataFrame(runs), pd.concat(pairs, ignore_index=True)


def test_the_level_table_judges_each_level_by_the_budget() -> None:
    runs, pairs = _runs_and_pairs({0.25: 0.02, 0.5: 0.05, 0.8: 0.2, 1.0: 0.03},
                                  {0.25: 0.0, 0.5: 0.01, 0.8: 0.0, 1.0: 0.0})
    table = accuracy.level_table(pairs, runs, ErrorBudget())
    assert list(table["fraction"]) == [0.25, 0.5, 0.8, 1.0]
    assert table["ttft_err"].to_numpy() == pytest.approx([0.02, 0.05, 0.2, 0.03])
    assert table["tpot_bias"].to_numpy() == pytest.approx([0.02, 0.05, 0.2, 0.03])
    assert list(table["within_budget"]) == [True, True, False, True]
    # the first level out of budget ends the trust, even if a higher one is back inside
    assert accuracy.trusted_up_to(table) == 0.5
    assert table.loc[1, "goodput_diff"] == pytest.approx(0.01)
    assert table.loc[1, "goodput_diff_lo"] < 0.01 < table.loc[1, "goodput_diff_hi"]
    assert (table["traces"] == 3).all() and (table["requests"] == 120).all()


def test_an_error_within_the_machines_own_noise_is_said_so_but_never_trusted() -> None:
    row = {"ttft_err": 0.25, "tpot_err": 0.12, "ttft_noise": 0.30, "tpot_noise": 0.08, "goodput_diff": 0.2,
           "goodput_diff_lo": 0.1, "goodput_diff_hi": 0.3}
    budget = ErrorBudget(ttft=0.10, tpot=0.15)
    assert accuracy.within_noise(row, budget)  # TTFT under its noise, TPOT under its budget (noise is smaller)
    assert not accuracy.within_budget(row, budget)
    assert not accuracy.within_noise({**row, "ttft_err": 0.31}, budget)
    assert not accuracy.within_noise({**row, "tpot_noise": math.nan, "tpot_err": 0.16}, budget)  # no floor: budget
    assert accuracy.within_noise({**row, "ttft_noise": math.nan, "ttft_err": 0.09}, budget)


def test_a_goodput_gap_outside_the_budget_fails_the_level_and_none_passes() -> None:
    runs, pairs = _runs_and_pairs({0.25: 0.01}, {0.25: 0.05})
    table = accuracy.level_table(pairs, runs, ErrorBudget())
    assert not table.loc[0, "within_budget"]
    assert accuracy.trusted_up_to(table) == 0.0


def test_an_invalid_run_is_left_out_and_counted() -> None:
    runs, pairs = _runs_and_pairs({0.5: 0.01}, {0.5: 0.0})
    runs.loc[0, "valid"] = False
    table = accuracy.level_table(pairs[pairs["seed"] != 1], runs, ErrorBudget())
    assert table.loc[0, "traces"] == 2 and table.loc[0, "invalid_runs"] == 1


def test_the_ordering_agrees_disagrees_or_cannot_tell() -> None:
    rows = []
    for seed in (1, 2, 3, 4):
        jitter = 0.002 * (seed - 2.5)
        for fraction, live_gap, sim_gap in ((0.5, 0.05, 0.04), (0.8, 0.05, -0.04), (1.0, 0.0, 0.001)):
            rows.append({"fraction": fraction, "policy": "a", "seed": seed, "live_goodput": 0.7, "sim_goodput": 0.7,
                         "valid": True})
            rows.append({"fraction": fraction, "policy": "b", "seed": seed, "live_goodput": 0.7 + live_gap + jitter,
                         "sim_goodput": 0.7 + sim_gap, "valid": True})
    order = accuracy.ordering(pd.DataFrame(rows), ["a", "b"]).set_index("fraction")
    assert order.loc[0.5, "agreement"] == "agree"
    assert order.loc[0.8, "agreement"] == "disagree"
    assert order.loc[1.0, "agreement"] == "live within noise (sim inside)"


def test_the_noise_floor_is_the_spread_between_two_replays_of_one_trace() -> None:
    a, b = _journal(30, seed=1), _journal(30, seed=1, scale=1.04)
    sim = _journal(30, seed=1)
    pairs = pd.concat([accuracy.pair(a, sim, SLO).assign(seed=1, replay=1),
                       accuracy.pair(b, sim, SLO).assign(seed=1, replay=2)])
    assert accuracy.noise_floor(pairs, "ttft_s") == pytest.approx(0.04)
    assert math.isnan(accuracy.noise_floor(pairs[pairs["replay"] == 1], "ttft_s"))


def test_the_goodput_interval_over_traces_covers_as_claimed() -> None:
    """Monte Carlo: per-trace goodputs with a true difference sim - live of 0.02; the interval the level table
    reports (`accuracy.goodput_difference`) must cover it 95 % of the time over 3 and over 6 traces (4,000
    repetitions each: +-0.7 % at 95 %), and one level table must report that same interval."""
    rng = np.random.default_rng(11)
    for traces in (3, 6):
        reps = 4000
        hits = 0
        for _ in range(reps):
            live = rng.uniform(0.6, 0.9, traces)
            sim = live + 0.02 + rng.normal(0, 0.015, traces)
            est = accuracy.goodput_difference(live, sim)
            hits += est.lo <= 0.02 <= est.hi
        assert 0.94 <= hits / reps <= 0.96, (traces, hits / reps)
    runs = pd.DataFrame({"fraction": 0.5, "rate": 1.0, "policy": "p", "seed": np.arange(3), "replay": 1,
                         "live_goodput": live[:3], "sim_goodput": sim[:3], "valid": True})
    pairs = pd.DataFrame({"fraction": [0.5], "policy": ["p"], "seed": [0], "replay": [1], "request_id": ["r"],
                          **{f"err_{m}": [0.0] for m in accuracy.METRICS}, "same_decode": [True],
                          **{f"live_{m}": [1.0] for m in accuracy.METRICS}})
    row = accuracy.level_table(pairs, runs, ErrorBudget()).iloc[0]
    est = accuracy.goodput_difference(live[:3], sim[:3])
    assert (row["goodput_diff_lo"], row["goodput_diff_hi"]) == pytest.approx((est.lo, est.hi))


# ---- end to end, on emulated engines ------------------------------------------------------------
@pytest.mark.slow
def test_validate_against_emulated_engines_agrees_tightly(tmp_path) -> None:
    """The emulated engines run the simulator's own physics, so only the harness's own path (proxy and HTTP
    hops, a few ms of TTFT) separates the two: TPOT within 1 %, TTFT within 10 %, round-robin's placements
    identical, and goodput apart only by requests whose TTFT sits within that path of the SLO limit."""
    out = tmp_path / "v"
    res = CliRunner().invoke(app, ["validate", "--cluster", "1p1d", "--backend", "emulated", "--rates", "0.5",
                                   "--policies", "round_robin", "--repeats", "2", "--duration", "6",
                                   "--min-requests", "40", "--saturation-rate", "8", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "simulator vs 1p1d (emulated)" in res.output
    table = pd.read_csv(out / "validation.csv")
    assert len(table) == 1
    row = table.iloc[0]
    assert row["traces"] == 2 and row["requests"] >= 76
    assert row["tpot_err"] < 0.01
    assert row["ttft_err"] < 0.10
    assert row["same_decode"] == 1.0
    record = json.loads((out / "validation.json").read_text())
    # Goodput: most of this load's TTFTs sit within a few tens of ms of the 175-ms limit, so the harness's
    # path (a few ms; on a busy machine an isolated stall of tens of ms, which the validity gate's p99s let
    # through) flips a few requests, each 1/40 of a trace's goodput. What must hold: nine requests in ten
    # stay within that path (30 ms), no request flips on TPOT, a request flips only near its limit or in a
    # stall, and the goodput difference is no larger than the share of such requests.
    pairs = pd.read_parquet(out / "requests.parquet")
    slo, path = record["slo"], 0.030
    factor = np.where(pairs["slo_class"] == "tight", 1.0, slo["loose_factor"])
    ttft_limit, tpot_limit = slo["ttft_tight_s"] * factor, slo["tpot_tight_s"] * factor
    gap = (pairs["live_ttft_s"] - pairs["sim_ttft_s"]).abs()
    assert gap.quantile(0.9) < path, gap.describe()
    assert ((pairs["live_tpot_s"] <= tpot_limit) == (pairs["sim_tpot_s"] <= tpot_limit)).all()
    flipped = pairs["live_good"] != pairs["sim_good"]
    near, stall = (pairs["sim_ttft_s"] - ttft_limit).abs() <= path, gap > path
    assert (flipped & ~near).sum() <= stall.sum()
    assert abs(row["goodput_diff"]) <= (near | stall).groupby(pairs["seed"]).mean().mean() + 1e-9
    assert record["physics"]["source"] == "profile" and record["saturation_rate"] == 8.0
    assert record["invalid_runs"] == 0
    for name in ("requests.parquet", "runs.csv", "ordering.csv", "residuals.csv", "validation.md",
                 "predicted_vs_measured.png", "error_vs_load.png", "physics.json"):
        assert (out / name).exists(), name
    assert "Simulator validation on 1p1d" in (out / "validation.md").read_text()
    # where the time goes: the TTFT stages add up to the TTFT, live and simulated, and so do their differences;
    # the emulated engines run the twin's physics, so no stage is off by more than the harness's path
    for side in ("live", "sim"):
        total = sum(pairs[f"{side}_{s}_s"] for s in decomposition.TTFT_STAGES)
        assert np.allclose(total, pairs[f"{side}_ttft_s"], atol=1e-6)
    stages = pd.read_csv(out / "stages.csv")
    ttft_stages = stages[stages["stage"].isin(decomposition.TTFT_STAGES)]
    assert (ttft_stages["diff_ms"].abs() < 1e3 * path).all(), ttft_stages
    # and where the CPU went: every part of the run is booked, the engines' own account of their requests read
    account = pd.read_csv(out / "account.csv")
    cpu = account[account["kind"] == "cpu_share"].set_index("part")["value"]
    assert {"prefill-0:frontend", "decode-0:frontend", "proxy", "loadgen", "idle"} <= set(cpu.index)
    assert cpu.sum() == pytest.approx(1.0, abs=0.02) and cpu["loadgen"] > 0 and cpu["proxy"] > 0
    engine = account[account["kind"] == "engine_ms"].set_index("part")["value"]
    assert engine["prefill-0:prefill"] > 0 and engine["decode-0:decode"] > engine["decode-0:queue"] >= 0
    assert "Where the TTFT error is" in (out / "validation.md").read_text()


@pytest.mark.slow
def test_validate_measures_the_shared_host_and_judges_by_it(tmp_path) -> None:
    """--shared-host: an idle window, the two differential probes and the training run are booked, the serving
    path's costs fitted (every probe's CPU predicted within a third), and the simulator's saturation is searched
    for its variant too; --track-drift: the machine's speed read off the training trace's runs, each judged run
    simulated at its own moment, the variant drift-tracked the verdict."""
    out = tmp_path / "v"
    res = CliRunner().invoke(app, ["validate", "--cluster", "1p1d", "--backend", "emulated", "--rates", "0.5",
                                   "--policies", "round_robin", "--repeats", "1", "--duration", "6",
                                   "--min-requests", "30", "--saturation-rate", "8", "--shared-host",
                                   "--track-drift", "-o", str(out)])
    assert res.exit_code == 0, res.output
    record = json.loads((out / "validation.json").read_text())
    assert record["variant"] == "drift-tracked"
    assert set(record["variants"]) == {"profile", "shared-host", "drift-tracked", "drift-engines"}
    speed = record["physics"]["drift"]
    assert speed["variant"] == "shared-host" and [p["label"] for p in speed["points"]] == ["before pass 1",
                                                                                       "after the last pass"]
    # emulated engines run fixed physics: the machine's speed is the shared-host physics' own, within a fifth
    assert all(0.8 < p["factor"] < 1.25 for p in speed["points"]), speed
    assert len(list((out / "sim" / "drift-tracked").glob("*-r1.jsonl"))) == 1
    assert len(list((out / "sim" / "drift-engines").glob("*-r1.jsonl"))) == 1
    fit = record["physics"]["shared_host"]
    assert fit["cores"] >= 1 and fit["bins"] >= 6
    assert {p["workload"] for p in fit["probes"]} == {"mixed", "chat", "reasoning", ""}
    for p in fit["probes"]:
        if p["run"] != "idle":
            assert p["tokens"] > 0 and p["steps"] > 0 and p["serving_cpu_s"] > 0
            assert p["predicted_cpu_s"] == pytest.approx(p["serving_cpu_s"], rel=0.34), p
    assert fit["per_token_s"] + fit["per_request_s"] + fit["per_step_s"] > 0
    assert fit["serving_path"]["seed"] not in (1,)  # the judged trace is seed 1
    phys = Physics.from_dict(json.loads((out / "physics-shared-host.json").read_text()))
    assert phys.host_cores == fit["cores"] and phys.host_cpu_per_token_s == pytest.approx(fit["per_token_s"])
    by = record["saturation"]["simulator_rate_by_variant"]
    assert set(by) == {"profile", "shared-host", "drift-tracked", "drift-engines"}
    assert record["saturation"]["simulator_rate"] == by["drift-tracked"]
    table = pd.read_csv(out / "validation.csv")
    assert set(table["variant"]) == {"profile", "shared-host", "drift-tracked", "drift-engines"}
    md = (out / "validation.md").read_text()
    assert "The shared host" in md and "(drift-tracked) puts it at" in md and "the machine's speed" in md
    # the training trace again after the judged runs: the machine's drift (emulated engines run fixed physics, so
    # it is small), and the serving path and the steal share fitted on both training runs
    moved = record["drift"]
    assert [r["label"] for r in moved["runs"]] == ["before pass 1", "after the last pass"], moved
    assert moved["runs"][1]["started_unix"] > moved["runs"][0]["started_unix"] and (out / "training-end").is_dir()
    assert abs(moved["ratio"]["tpot_s"] - 1) < 0.2 and moved["spread"]["tpot_s"] >= 1, moved
    # the steal share on 2 training runs and 4 probes; the light-load TTFT without the probe at saturation
    assert len(fit["steal"]["tpot_err"]) == 6 and fit["serving_path"]["runs"] == 5
    assert fit["probes_left_out"] == []
    # the admission delay on the same six runs of the training seed, one decode engine each: never a judged trace;
    # the last probe at the saturation's rate (the judged runs' heaviest load)
    seed = fit["serving_path"]["seed"]
    points = fit["admission"]["points"]
    assert len(points) == 6 and all(f"-s{seed}-" in p["run"] for p in points), points
    assert all(p["arrivals"] > 0 and p["streams"] > 0 for p in points), points
    # the prefill hop on the same six runs: the proxy's prefill leg less the prefill engine's own account
    hops = fit["hop"]["points"]
    assert len(hops) == 6 and all(f"-s{seed}-" in p["run"] for p in hops), hops
    assert all(p["leg_s"] > p["engine_s"] > 0 and p["requests"] > 0 for p in hops), hops
    assert "Prefill hop" in md
    assert "The machine's drift: the training trace" in md


def test_validate_refuses_a_bad_policy_before_starting_anything(tmp_path) -> None:
    res = CliRunner().invoke(app, ["validate", "--cluster", "1p1d", "--backend", "emulated", "--policies",
                                   "round_robin,no_such_policy", "-o", str(tmp_path / "v")])
    assert res.exit_code == 2
    assert "no_such_policy" in res.output
    assert not (tmp_path / "v").exists()


def test_the_in_situ_fit_recovers_a_slower_deployment_from_a_training_run_only() -> None:
    """A deployment 30 % slower per decode step, with 40 ms more on the serving path than its calibration:
    the fit on one training run recovers both (the run here is the simulator of that deployment)."""
    from repro.experiment.spec import RunSpec
    from repro.validation.twin import fit_in_situ, twin_journal

    phys = CostModel.load(CPU_CAL).to_physics(name="cal", model="tiny", block_size=128,
                                    max_num_seqs=128, max_model_len=4096, max_num_batched_tokens=2048)
    true = phys.with_overrides(decode_base_s=phys.decode_base_s * 1.3, decode_per_seq_s=phys.decode_per_seq_s * 1.3,
                               transfer_latency_s=phys.transfer_latency_s + 0.040)
    spec = RunSpec(topology="1p1d", workload="chat", rate=0.3, n_requests=60, seed=1001, cost_model=CPU_CAL,
                   policy="round_robin")
    fitted, record = fit_in_situ(twin_journal(spec, true), spec, phys)
    assert record["decode_factor"] == pytest.approx(1.3, rel=0.03)
    assert record["ttft_offset_s"] == pytest.approx(0.040, abs=0.006)
    assert abs(record["median_err_after"]["tpot_s"]) < 0.02 and abs(record["median_err_after"]["ttft_s"]) < 0.05
    assert fitted.transfer_latency_s == pytest.approx(true.transfer_latency_s, abs=0.006)


def test_the_in_situ_training_trace_is_never_a_judged_one() -> None:
    cfg = ValidationConfig(cluster="data/clusters/1p1d-cpu.yaml", repeats=1000, seed=7)
    assert cfg.training_seed not in cfg.seeds
    with pytest.raises(ConfigError, match="repeats"):
        ValidationConfig(cluster="data/clusters/1p1d-cpu.yaml", repeats=1001)


def test_a_simulated_report_says_which_validation_its_verdicts_rest_on(tmp_path, monkeypatch) -> None:
    from repro.validation import report

    monkeypatch.setattr(report, "SHIPPED_DIR", tmp_path / "shipped")
    results = tmp_path / "results" / "sim-full"
    results.mkdir(parents=True)
    assert "has not been validated against a real cluster" in report.rests_on(results, "a40-identified")
    folder = tmp_path / "results" / "validation-1p1d-cpu-vllm"
    folder.mkdir()
    (folder / "validation.json").write_text(json.dumps({"cluster": "data/clusters/1p1d-cpu.yaml", "backend": "vllm",
                                                        "commit": "abc", "saturation_rate": 5.7,
                                                        "saturation": {"simulator_rate": 6.27},
                                                        "trusted_up_to": 0.5,
                                                        "drift": {"runs": [{"started_unix": t} for t in (0, 60, 1260)],
                                                                  "spread": {"ttft_s": 1.57, "tpot_s": 1.27}}}))
    pd.DataFrame({"fraction": [0.25, 0.5, 0.8], "ttft_err": [0.05, 0.08, 0.3], "tpot_err": [0.02, 0.04, 0.2],
                  "ttft_noise": [0.2, 0.25, 0.31], "tpot_noise": [0.1, float("nan"), 0.12]}
                 ).to_csv(folder / "validation.csv", index=False)
    (folder / "validation.md").write_text("### Simulator validation on data/clusters/1p1d-cpu.yaml (vllm)\n")
    text = report.rests_on(results, "a40-identified")
    assert "1p1d-cpu.yaml (real vLLM, commit abc, physics calibration)" in text and "up to 0.5 x saturation" in text
    # a shipped copy of the same validation is named once
    shipped = tmp_path / "shipped" / "1p1d-cpu"
    shipped.mkdir(parents=True)
    for name in ("validation.json", "validation.csv", "validation.md"):
        (shipped / name).write_bytes((folder / name).read_bytes())
    assert report.rests_on(results, "a40-identified").count("1p1d-cpu.yaml") == 1
    assert "0.8 x: TTFT 30 %, TPOT 20 % (the machine's own noise 31 % / 12 %)" in text
    assert "saturation 5.7 req/s live, 6.27 simulated (+10 %)" in text
    assert ("the machine itself moved up to x 1.57 in TTFT and x 1.27 in TPOT over its 21 minutes (one trace run 3 "
            "times)") in text
    assert "None of them is the testbed these verdicts simulate (a40-identified)" in text
    html = report.validation_section(results)
    assert "Simulator validation on data/clusters/1p1d-cpu.yaml" in html
    # an emulated validation is no evidence about real engines
    import shutil

    shutil.rmtree(shipped)
    (folder / "validation.json").write_text(json.dumps({"cluster": "1p1d", "backend": "emulated", "commit": "abc",
                                                        "saturation_rate": 8, "trusted_up_to": 1.0}))
    assert "has not been validated against a real cluster" in report.rests_on(results, "a40-identified")


def test_a_convex_prefill_step_is_fitted_and_timed_and_profiles_without_it_are_unchanged() -> None:
    from repro.live.calibration_bench import prefill_curve, serving_path_s

    rows = [{"phase": "prefill", "prompt_tokens": L, "client_s": 0.008 + 0.005 + 2e-6 * L + 8e-9 * L * L,
             "engine_s": 0.005 + 2e-6 * L + 8e-9 * L * L} for L in (64, 256, 512, 1024, 2048, 4096) for _ in range(3)]
    rows += [{"phase": "transfer", "prompt_tokens": L, "client_s": 0.025, "engine_s": 0.020} for L in (256, 1024)]
    samples = pd.DataFrame(rows)
    curve = prefill_curve(samples, max_tokens=2048)
    assert curve["per_token2_s"] == pytest.approx(8e-9, rel=1e-6)
    assert curve["base_s"] == pytest.approx(0.005, rel=1e-6) and 4096 not in curve["points"]  # two steps: left out
    assert serving_path_s(samples)["total"] == pytest.approx(0.013)
    # a concave set of points gets the line (no negative square term)
    concave = samples.assign(engine_s=0.005 + 3e-5 * samples["prompt_tokens"] ** 0.9)
    assert prefill_curve(concave, 2048)["per_token2_s"] == 0.0
    phys = load_profile("a40-qwen2.5-3b").physics
    assert "prefill_per_token2_s" not in phys.to_dict()["params"]
    convex = phys.with_overrides(prefill_per_token2_s=8e-9)
    assert convex.prefill_time_s(1000) == pytest.approx(phys.prefill_time_s(1000) + 8e-3)
    # a prompt over the step budget: one step per budget, each step's square term
    budget = convex.max_num_batched_tokens
    assert convex.prefill_request_time_s(budget + 100) == pytest.approx(
        convex.prefill_time_s(budget) + convex.prefill_time_s(100))
    assert Physics.from_dict(convex.to_dict()) == convex


def test_two_policies_that_placed_every_request_alike_measure_the_machines_noise() -> None:
    a, b = _journal(30, seed=1), _journal(30, seed=1, scale=1.06)
    sim = _journal(30, seed=1)
    same = pd.concat([accuracy.pair(a, sim, SLO).assign(seed=1, replay=1, policy="x"),
                      accuracy.pair(b, sim, SLO).assign(seed=1, replay=1, policy="y")])
    assert accuracy.noise_floor(same, "tpot_s") == pytest.approx(0.06)
    other = b.assign(decode_instance=["decode-1" if i % 2 else "decode-0" for i in range(30)])
    apart = pd.concat([accuracy.pair(a, sim, SLO).assign(seed=1, replay=1, policy="x"),
                       accuracy.pair(other, sim, SLO).assign(seed=1, replay=1, policy="y")])
    assert math.isnan(accuracy.noise_floor(apart, "tpot_s"))  # placed apart: not replays of each other


def test_a_late_metrics_poll_is_judged_by_the_deployments_period_on_real_engines_only() -> None:
    from repro.live.validity import DEFAULT_THRESHOLDS, judge, thresholds_for

    assert thresholds_for("emulated", 0.5) == DEFAULT_THRESHOLDS
    real = thresholds_for("vllm", 0.5)
    assert real.poll_gap_excess_p99_s == 0.5 and real.client_lag_p99_s == DEFAULT_THRESHOLDS.client_lag_p99_s
    assert thresholds_for("vllm", 0.01).poll_gap_excess_p99_s == DEFAULT_THRESHOLDS.poll_gap_excess_p99_s
    late = {"loop_lag_p99_s": 0.001, "poll_gap_excess_p99_s": 0.33}
    kw = dict(time_scale=1.0, client_lag_p99_s=0.001, proxy=late, engine_late_p99_s=None, engine_lost_fraction=None,
              cpu_steal_fraction=0.0)
    assert not judge(**kw).valid  # an emulated engine's poll 330 ms late: the harness fell behind
    assert judge(**kw, thresholds=real).valid  # a busy real engine's: the deployment's own


def test_judged_runs_go_in_passes_so_two_replays_of_a_trace_lie_a_pass_apart(tmp_path, monkeypatch) -> None:
    """Replay r of every level, policy and trace in pass r (the noise floor then holds the machine's drift over a
    pass, not only back-to-back spread); `replay_spacing` says how far apart they were."""
    from repro.validation import run as vrun

    calls: list[tuple[int, float, str, int]] = []

    def fake_live_run(spec, out_dir, redo, progress):
        calls.append((spec.seed, spec.rate, spec.policy, int(out_dir.name.removeprefix("replay-"))))
        return None, ["the machine did not keep up (a test)"]

    monkeypatch.setattr(vrun, "live_run", fake_live_run)
    cfg = ValidationConfig(cluster="1p1d", backend="emulated", fractions=(0.25, 0.5), policies=("round_robin",),
                           repeats=2, replays=2, saturation_rate=8.0, duration_s=6, min_requests=30)
    vrun.validate(cfg, tmp_path / "v", progress=False)
    assert [c[3] for c in calls] == [1] * 4 + [2] * 4  # pass 1, then pass 2
    assert calls[:4] == [c[:3] + (1,) for c in calls[4:]]  # the same runs in the same order
    assert len(set(calls[:4])) == 4
    rows = pd.DataFrame({"fraction": [0.25, 0.25, 0.5, 0.5], "policy": ["a"] * 4, "seed": [1] * 4,
                         "replay": [1, 2, 1, 2], "started_unix": [0.0, 600.0, 60.0, 720.0]})
    assert vrun.replay_spacing(rows) == pytest.approx(10.5)  # 10 and 11 min
    assert math.isnan(vrun.replay_spacing(rows[rows["replay"] == 1]))


def test_drift_is_the_training_trace_run_again_between_and_after_the_passes(tmp_path) -> None:
    """`drift`: each valid run of the training trace in order, the last against the first and the largest
    against the smallest median; `drift_text` says it."""
    from types import SimpleNamespace

    from repro.validation import drift as vdrift

    def result(name: str, started: float, ttft: float, tpot: float) -> SimpleNamespace:
        d = tmp_path / name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"started_unix": started}))
        j = pd.DataFrame({"status": ["ok", "ok", "error"], "ttft_s": [ttft, ttft, 9.0], "tpot_s": [tpot, tpot, 9.0]})
        return SimpleNamespace(run_dir=d, journal=lambda: j, summary={"goodput": 1.0})

    spec = SimpleNamespace(run_id="mixed-train")
    runs = [("before pass 1", result("a", 0.0, 0.060, 0.006)), ("before pass 2", result("b", 600.0, 0.090, 0.009)),
            ("after the last pass", result("c", 1200.0, 0.075, 0.0075))]
    rec = vdrift.drift(spec, runs)
    assert [r["label"] for r in rec["runs"]] == ["before pass 1", "before pass 2", "after the last pass"]
    assert rec["ratio"] == pytest.approx({"ttft_s": 1.25, "tpot_s": 1.25})
    assert rec["spread"] == pytest.approx({"ttft_s": 1.5, "tpot_s": 1.5})
    text = vdrift.drift_text(rec)
    assert "3 times over 20 min" in text and "60.0 / 90.0 / 75.0 ms" in text and "x 1.500" in text
    assert "not measured" in vdrift.drift_text(vdrift.drift(spec, runs[:1]))


def _run_on(d: Path, started_unix: float, spec: object, physics: object) -> object:
    """A stand-in for a live run in ``d`` started at ``started_unix``: its journal the twin of ``spec`` under
    ``physics`` (the machine the run met)."""
    from types import SimpleNamespace

    from repro.validation.twin import twin_journal

    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"started_unix": started_unix}))
    j = twin_journal(spec, physics)
    return SimpleNamespace(run_dir=d, journal=lambda: j, summary={"goodput": 1.0})


def test_the_machines_speed_is_read_off_the_training_trace_at_each_run_and_interpolated(tmp_path) -> None:
    """`fit_speed`: the training trace run on a machine 1.0, 1.3 and 1.2 x slower than the physics (each run here
    the simulator of that machine) gives those factors back, `speed_at` interpolates between the runs' moments
    and holds the nearest beyond them, and `at_speed` scales the engines' compute and the serving path's CPU costs
    (or the engines' alone), never the KV link."""
    from types import SimpleNamespace

    from repro.experiment.spec import RunSpec
    from repro.validation.drift import SERVING_PATH_CPU, at_speed, fit_speed, speed_at, speed_text
    from repro.validation.twin import twin_journal

    phys = CostModel.load(CPU_CAL).to_physics(name="cal", model="tiny", block_size=128,
                                    max_num_seqs=128, max_model_len=4096, max_num_batched_tokens=2048)
    spec = RunSpec(topology="1p1d", workload="chat", rate=0.3, n_requests=60, seed=1001, cost_model=CPU_CAL,
                   policy="round_robin")
    runs = []
    for i, (label, t, f) in enumerate((("before pass 1", 1000.0, 1.0), ("before pass 2", 1600.0, 1.3),
                                       ("after the last pass", 2200.0, 1.2))):
        d = tmp_path / f"r{i}"
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"started_unix": t}))
        j = twin_journal(spec, at_speed(phys, f))
        runs.append((label, SimpleNamespace(run_dir=d, journal=lambda j=j: j, summary={"goodput": 1.0})))
    fit = fit_speed("shared-host", spec, runs, phys)
    assert [p["factor"] for p in fit["points"]] == pytest.approx([1.0, 1.3, 1.2], rel=0.02)
    assert speed_at(fit, 1300.0) == pytest.approx((fit["points"][0]["factor"] + fit["points"][1]["factor"]) / 2)
    assert speed_at(fit, 0.0) == fit["points"][0]["factor"] and speed_at(fit, 9e9) == fit["points"][2]["factor"]
    assert speed_at(fit, math.nan) == fit["points"][0]["factor"]
    assert "x 1.000 / 1.3" in speed_text(fit) and "+0, +10, +20 min" in speed_text(fit)
    slow = at_speed(phys, 1.5)
    assert slow.decode_step_s(8, 4000) == pytest.approx(1.5 * phys.decode_step_s(8, 4000))
    assert slow.prefill_time_s(512) == pytest.approx(1.5 * phys.prefill_time_s(512))
    assert slow.transfer_latency_s == phys.transfer_latency_s
    host = phys.with_overrides(host_cores=2, host_base_cores=0.1, host_cpu_per_request_s=1e-3,
                               host_cpu_per_token_s=4e-4, host_cpu_per_step_s=2e-3, admission_loop_s=0.03,
                               admission_busy_per_stream=0.01, admission_per_stream_s=1e-4, hop_loop_s=0.02,
                               hop_per_stream_s=1e-5)
    for name in SERVING_PATH_CPU:
        assert getattr(at_speed(host, 1.5), name) == pytest.approx(1.5 * getattr(host, name)), name
        assert getattr(at_speed(host, 1.5, serving_path=False), name) == getattr(host, name), name
    assert at_speed(host, 1.5).admission_delay_s(20) == pytest.approx(
        1.5 * 1e-4 * 20 + 1.5 * 0.03 / (1 - 1.5 * 0.01 * 20))
    assert at_speed(host, 1.5).prefill_hop_s(10) == pytest.approx(1.5 * host.prefill_hop_s(10))
    assert at_speed(host, 1.5, serving_path=False).admission_delay_s(20) == host.admission_delay_s(20)
    assert at_speed(phys, 1.0) is phys
    with pytest.raises(ValueError, match="factor must be > 0"):
        at_speed(phys, 0.0)


def test_the_whole_machines_speed_is_solved_for_where_the_serving_path_shares_the_cores(tmp_path) -> None:
    """`fit_speed` on a physics with a serving path (mechanisms shared_host, stream_admission, prefill_hop): runs
    made on the whole machine 1.3 and 0.8 x slower give ``factor`` 1.3 and 0.8 back (`solve_speed`), while their
    TPOT moved by more (``engines_factor``: the serving path took more of the cores), and `speed_at` reads
    either."""

    from repro.experiment.spec import RunSpec
    from repro.validation.drift import at_speed, fit_speed, speed_at

    phys = CostModel.load(CPU_CAL).to_physics(name="cal", model="tiny", block_size=128, max_num_seqs=128,
                                              max_model_len=4096, max_num_batched_tokens=2048).with_overrides(
        host_cores=2, host_base_cores=0.1, host_cpu_per_request_s=1e-3, host_cpu_per_token_s=4e-4,
        host_cpu_per_step_s=2e-3, host_steal_share=0.9, admission_loop_s=0.03, admission_per_stream_s=1e-4)
    spec = RunSpec(topology="1p1d", workload="chat", rate=1.0, n_requests=40, seed=1001, cost_model=CPU_CAL,
                   policy="round_robin")
    runs = []
    for i, (label, f) in enumerate((("before pass 1", 1.3), ("after the last pass", 0.8))):
        runs.append((label, _run_on(tmp_path / f"r{i}", 1000.0 * i, spec, at_speed(phys, f))))
    fit = fit_speed("shared-host", spec, runs, phys)
    assert [p["factor"] for p in fit["points"]] == pytest.approx([1.3, 0.8], rel=0.01)
    slow, fast = fit["points"]
    assert slow["engines_factor"] > 1.33 and fast["engines_factor"] < 0.79, fit
    assert speed_at(fit, 500.0) == pytest.approx(1.05, rel=0.01)
    assert speed_at(fit, 0.0, "engines_factor") == slow["engines_factor"]


def test_the_machines_speed_at_the_live_saturation_search_is_read_off_its_probes_below_the_collapse(tmp_path
                                                                                                    ) -> None:
    """`search_speed`: the search's probes below the collapse (`collapsing_from`: the lowest rate whose goodput
    fell to the target plus the band) give the machine's speed then; a collapsing probe, whose TPOT is the queue's,
    is never read; no probe below the collapse: a ValueError."""

    from repro.experiment.spec import RunSpec
    from repro.validation.drift import at_speed, search_factor, search_speed
    from repro.validation.saturation import collapsing_from

    phys = CostModel.load(CPU_CAL).to_physics(name="cal", model="tiny", block_size=128,
                                    max_num_seqs=128, max_model_len=4096, max_num_batched_tokens=2048)
    how = {"target_goodput": 0.8, "probes": [[0.05, 1.0], [0.1, 1.0], [0.2, 0.95], [0.4, 0.6], [0.28, 0.82]]}
    below = collapsing_from(how)
    assert below == 0.28  # 0.82 is within the band (0.03) of the target: collapsing
    probes = []  # light rates: each probe's factor read back as it was made (no more batching on a slower machine)
    for i, (rate, f) in enumerate(((0.05, 1.2), (0.1, 1.25), (0.2, 1.3), (0.28, 3.0), (0.4, 5.0))):
        spec = RunSpec(topology="1p1d", workload="chat", rate=rate, n_requests=30, seed=1, cost_model=CPU_CAL,
                       policy="round_robin")
        probes.append((spec, _run_on(tmp_path / f"p{i}", 100.0 * i, spec, at_speed(phys, f))))
    fit = search_speed("shared-host", probes, phys, below)
    assert [p["label"] for p in fit["points"]] == ["probe 0.05 req/s", "probe 0.1 req/s", "probe 0.2 req/s"]
    assert [p["factor"] for p in fit["points"]] == pytest.approx([1.2, 1.25, 1.3], rel=0.02)
    assert search_factor(fit) == pytest.approx(1.25, rel=0.02)
    with pytest.raises(ValueError, match="no saturation probe below 0.05"):
        search_speed("shared-host", probes, phys, 0.05)
    assert collapsing_from({"target_goodput": 0.8, "probes": [[1.0, 1.0]]}) == math.inf


def test_tracking_the_drift_needs_a_training_trace() -> None:
    with pytest.raises(ConfigError, match="track_drift.*in_situ.*shared_host"):
        ValidationConfig(cluster="1p1d", backend="emulated", track_drift=True)
    assert ValidationConfig(cluster="1p1d", backend="emulated", track_drift=True, in_situ=True).track_drift


def test_the_physics_text_names_every_fitted_part_whatever_the_source() -> None:
    from repro.validation.outputs import physics_text

    speed = {"variant": "shared-host", "run_id": "t", "points": [
        {"label": "before pass 1", "started_unix": 0.0, "live_tpot_s": 0.01, "sim_tpot_s": 0.01, "factor": 1.0},
        {"label": "after the last pass", "started_unix": 600.0, "live_tpot_s": 0.012, "sim_tpot_s": 0.01,
         "factor": 1.2}]}
    text = physics_text({"source": "profile", "profile": "a40", "drift": speed})
    assert text.startswith("the hardware profile a40") and "the machine's speed" in text and "x 1.000 / 1.200" in text
    assert "the machine's speed" in physics_text({"source": "calibration", "calibration": "c", "drift": speed})
