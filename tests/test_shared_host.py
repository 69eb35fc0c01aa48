"""Mechanism ``shared_host``: engines that share one machine's cores with the serving path (the physics' stretch,
the simulator's use of it, and its measurement on a cluster, `repro.validation.host`)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from repro.engine.physics import ADMISSION_MAX_UTILISATION, HOST_MAX_STRETCH, Physics
from repro.errors import ConfigError
from repro.experiment.journal import frame, write_frame
from repro.experiment.metrics import summarize
from repro.experiment.spec import RunSpec
from repro.routing.cost_model import CostModel
from repro.validation import host
from repro.validation.twin import twin_journal

CPU_CAL = "data/clusters/cpu-tiny-calibration.json"
HOST = {"host_cores": 2, "host_base_cores": 0.05, "host_cpu_per_request_s": 0.02, "host_cpu_per_token_s": 2e-4,
        "host_cpu_per_step_s": 1e-3}
FIT = {"cores": 2, "base_cores": 0.05, "per_request_s": 0.02, "per_token_s": 2e-4, "per_step_s": 1e-3, "bins": 0,
       "r2": 1.0, "probes": []}


def _physics() -> Physics:
    return CostModel.load(CPU_CAL).to_physics(name="cal", model="tiny", block_size=128, max_num_seqs=128,
                                              max_model_len=4096, max_num_batched_tokens=2048)


def _spec(rate: float, n: int = 120) -> RunSpec:
    return RunSpec(topology="1p1d", workload="mixed", rate=rate, n_requests=n, seed=3, cost_model=CPU_CAL,
                   policy="round_robin")


# ---- the stretch -------------------------------------------------------------------------------------------
def test_the_stretch_is_one_on_an_idle_host_and_grows_with_what_the_serving_path_takes() -> None:
    ph = _physics().with_overrides(host_cores=2)
    assert ph.host_stretch(1, 0.0, 0.0, 0.0) == 1.0
    assert ph.host_stretch(2, 0.0, 0.0, 0.0) == 1.0
    assert ph.host_stretch(3, 0.0, 0.0, 0.0) == pytest.approx(1.5)  # three engines on two cores
    on = _physics().with_overrides(**HOST)
    # s = (C - R) / (M + T): R = 0.05 + 0.02 * 10, T = 2e-4 * 1000 + 1e-3 * 100
    assert on.host_stretch(2, 10.0, 1000.0, 100.0) == pytest.approx((2 + 0.2 + 0.1) / (2 - 0.05 - 0.2))
    rates = [on.host_stretch(2, r, 100.0 * r, 10.0 * r) for r in (1, 2, 4, 8, 16)]
    assert rates == sorted(rates) and rates[0] > 1.0
    assert on.host_stretch(2, 200.0, 0.0, 0.0) == HOST_MAX_STRETCH  # the serving path alone fills the host
    assert not _physics().shares_host and on.shares_host


def test_a_profile_without_the_mechanism_reads_and_writes_as_before() -> None:
    ph = _physics()
    assert "host_cores" not in ph.to_dict()["params"]
    on = ph.with_overrides(**HOST)
    back = Physics.from_dict(json.loads(json.dumps(on.to_dict())))
    assert back.host_cores == 2 and back.host_cpu_per_step_s == pytest.approx(1e-3)


# ---- the simulator -------------------------------------------------------------------------------------------
def test_off_the_mechanism_leaves_the_journal_as_it_was() -> None:
    """Costs stated but no cores: off, to the bit."""
    spec = _spec(4.0)
    ph = _physics()
    costs = {k: v for k, v in HOST.items() if k != "host_cores"}
    assert twin_journal(spec, ph).equals(twin_journal(spec, ph.with_overrides(**costs)))


def test_a_shared_host_slows_every_stage_more_as_the_load_grows_and_collapses_goodput() -> None:
    ph = _physics()
    on = ph.with_overrides(**HOST)
    slo = CostModel.load(CPU_CAL).slo
    rows = {}
    for rate in (0.5, 2.0, 4.0):  # below the engines' own saturation (where queueing takes over)
        spec = _spec(rate)
        off_j, on_j = twin_journal(spec, ph), twin_journal(spec, on)
        rows[rate] = {"tpot": on_j["tpot_s"].median() / off_j["tpot_s"].median(),
                      "ttft": on_j["ttft_s"].median() / off_j["ttft_s"].median(),
                      "good_on": summarize(on_j, slo)["goodput"], "good_off": summarize(off_j, slo)["goodput"]}
    light, mid, heavy = rows[0.5], rows[2.0], rows[4.0]
    assert 1.0 < light["tpot"] < mid["tpot"] < heavy["tpot"]
    assert 1.0 < light["ttft"] < mid["ttft"] < heavy["ttft"]
    assert heavy["good_on"] < heavy["good_off"] and mid["good_on"] <= mid["good_off"]
    assert light["good_on"] == pytest.approx(light["good_off"], abs=0.05)
    spec = _spec(4.0)
    assert twin_journal(spec, on).equals(twin_journal(spec, on))  # deterministic


def test_engines_that_state_different_hosts_are_refused() -> None:
    from repro.experiment.inputs import build_predictions, build_trace, make_router
    from repro.sim.simulator import Simulator

    spec = _spec(1.0, 10)
    trace = build_trace(spec)
    ph = _physics()
    with pytest.raises(ConfigError, match="one cluster, one host"):
        Simulator(trace.df, build_predictions(spec, trace), make_router(spec), [ph.with_overrides(**HOST)], [ph])


# ---- the measurement -------------------------------------------------------------------------------------------
def _journal(rows: list[dict]) -> pd.DataFrame:
    full = []
    for i, r in enumerate(rows):
        n = r["tokens"]
        full.append({"request_id": f"r{i}", "status": "ok", "arrival_s": r["arrival"], "first_token_s": r["first"],
                     "finish_s": r["finish"], "generated_tokens": n, "output_tokens": n,
                     "tpot_s": (r["finish"] - r["first"]) / (n - 1) if n > 1 else np.nan,
                     "decode_instance": r.get("decode", "decode-0"), "prefill_instance": "prefill-0",
                     "ttft_s": r["first"] - r["arrival"], "e2e_s": r["finish"] - r["arrival"]})
    return frame(full)


def test_tokens_and_steps_are_counted_where_they_streamed() -> None:
    j = _journal([{"arrival": 0.5, "first": 1.0, "finish": 2.0, "tokens": 11},  # a step every 0.1 s
                  {"arrival": 1.2, "first": 1.5, "finish": 3.0, "tokens": 16}])  # a step every 0.1 s
    assert host.tokens_between(j, 0.0, 1.0) == pytest.approx(0.0)
    assert host.tokens_between(j, 1.0, 1.5) == pytest.approx(1 + 5)
    assert host.tokens_between(j, 0.0, 10.0) == pytest.approx(27)
    steps = host.steps_between(j, np.array([0.0, 1.0, 2.0, 3.0]))
    # one engine at 10 steps/s while anything streams, however many stream: [1, 3) -> 10 + 10
    assert steps == pytest.approx([0.0, 10.0, 10.0], abs=0.2)
    two = _journal([{"arrival": 0.5, "first": 1.0, "finish": 2.0, "tokens": 11},
                    {"arrival": 0.5, "first": 1.0, "finish": 2.0, "tokens": 11, "decode": "decode-1"}])
    assert host.steps_between(two, np.array([1.0, 2.0])) == pytest.approx([20.0], abs=0.3)  # two engines


def test_the_fit_recovers_the_serving_paths_costs_from_bins_alone() -> None:
    rng = np.random.default_rng(0)
    truth = {"base": 0.04, "request": 0.015, "token": 1.5e-4, "step": 8e-4}
    bins = []
    for _ in range(3):
        n = 30
        seconds = np.full(n, 2.0)
        requests = rng.poisson(rng.uniform(2, 12), n).astype(float)
        tokens = requests * rng.uniform(150, 900) + rng.normal(0, 50, n).clip(0)
        steps = seconds * rng.uniform(40, 140, n)
        cpu = (truth["base"] * seconds + truth["request"] * requests + truth["token"] * tokens
               + truth["step"] * steps) * rng.normal(1.0, 0.02, n)
        b = pd.DataFrame({"seconds": seconds, "requests": requests, "tokens": tokens, "steps": steps, "cpu_s": cpu})
        bins.append((b, {"run": "p", "workload": "w", "rate": 1.0, "seconds": 60.0, "requests": requests.sum(),
                         "tokens": tokens.sum(), "steps": steps.sum(), "serving_cpu_s": cpu.sum(),
                         "engines_cpu_s": 0.0, "parts_cpu_s": {}, "predicted_cpu_s": float("nan")}))
    idle = host.idle_usage({"proxy": 0.1, "prefill-0:frontend": 0.14, "decode-0:worker": 0.5}, 6.0)
    assert idle["serving_cpu_s"] == pytest.approx(0.24) and idle["engines_cpu_s"] == pytest.approx(0.5)
    fit = host.fit_host(2, idle, bins)
    assert fit["base_cores"] == pytest.approx(truth["base"], rel=0.15)
    assert fit["per_request_s"] == pytest.approx(truth["request"], rel=0.15)
    assert fit["per_token_s"] == pytest.approx(truth["token"], rel=0.15)
    assert fit["per_step_s"] == pytest.approx(truth["step"], rel=0.15)
    assert fit["r2"] > 0.95 and fit["bins"] == 91
    for p in fit["probes"][:-1]:
        assert p["predicted_cpu_s"] == pytest.approx(p["serving_cpu_s"], rel=0.03)
    ph = host.with_host(_physics(), fit)
    assert ph.host_cores == 2 and ph.host_cpu_per_step_s == pytest.approx(fit["per_step_s"])


def test_a_probe_is_booked_over_its_steady_part_only(tmp_path) -> None:
    """The load generator's start-up (before the first arrival) and the engines' own CPU stay out of the
    serving path's; what is left is split into bins that add up to the window."""
    run = tmp_path / "mixed-1p1d-round_robin-s1-x"
    run.mkdir()
    j = _journal([{"arrival": 0.1 + 0.5 * i, "first": 0.2 + 0.5 * i, "finish": 1.2 + 0.5 * i, "tokens": 21}
                  for i in range(20)])
    write_frame(j, run / "journal.jsonl")
    (run / "manifest.json").write_text(json.dumps({"spec": {"workload": "mixed", "rate": 2.0}}))
    t0 = 1_000_000.0
    times = np.arange(-3.0, 12.0, 1.0)
    loadgen = np.where(times < 0, 2.0 + times * 0.0, 2.0 + 0.1 * times)  # 2 s of imports before the replay
    loadgen[times < -2] = 0.0
    series = {"t_unix": (t0 + times).tolist(),
              "cpu_s": {"loadgen": loadgen.tolist(), "proxy": (0.05 * (times + 3)).tolist(),
                        "decode-0:worker": (0.6 * (times + 3)).tolist()}}
    (run / "account.json").write_text(json.dumps({"series": series, "replay_started_unix": t0}))
    bins, probe = host.probe_bins(run)
    a, b = 0.1 + host.WARMUP_S, 1.2 + 0.5 * 19
    assert probe["seconds"] == pytest.approx(b - a)
    assert bins["seconds"].sum() == pytest.approx(b - a)
    assert probe["serving_cpu_s"] == pytest.approx((0.1 + 0.05) * (b - a), rel=1e-6)  # no start-up in it
    assert probe["engines_cpu_s"] == pytest.approx(0.6 * (b - a), rel=1e-6)
    assert probe["tokens"] == pytest.approx(host.tokens_between(j, a, b))
    (run / "account.json").write_text(json.dumps({"cpu": {}}))
    with pytest.raises(ConfigError, match="no CPU series"):
        host.probe_bins(run)


def test_the_probes_stream_the_same_tokens_with_different_requests() -> None:
    (chat, r_chat), (reasoning, r_reasoning), (many, r_many), (mixed, r_mixed) = host.probe_rates(
        10.0, {"mixed": 400.0, "chat": 250.0, "reasoning": 850.0})
    assert (chat, reasoning, many, mixed) == ("chat", "reasoning", "reasoning", "mixed")
    assert r_mixed == pytest.approx(10.0)  # the last at the cluster's saturation: the judged runs' heaviest load
    assert r_chat * 250 == pytest.approx(0.5 * 10 * 400, rel=1e-4)
    assert r_reasoning * 850 == pytest.approx(0.5 * 10 * 400, rel=1e-4)
    assert r_chat > 3 * r_reasoning and r_many * 850 == pytest.approx(0.9 * 10 * 400, rel=1e-4)


# ---- stream admission ------------------------------------------------------------------------------------------
def test_a_decode_api_server_that_admits_between_its_streams_delays_first_tokens_more_under_load() -> None:
    ph = _physics()
    assert ph.admission_delay_s(40) == 0.0
    adm = ph.with_overrides(admission_per_stream_s=2e-4, admission_exponent=1.5)
    assert adm.admission_delay_s(0) == 0.0 and adm.admission_delay_s(16) == pytest.approx(2e-4 * 64)
    light, heavy = _spec(0.5), _spec(3.0)
    gap_light = (twin_journal(light, adm)["ttft_s"] - twin_journal(light, ph)["ttft_s"]).median()
    gap_heavy = (twin_journal(heavy, adm)["ttft_s"] - twin_journal(heavy, ph)["ttft_s"]).median()
    assert 0.0 <= gap_light < 0.002 < gap_heavy
    on = twin_journal(heavy, adm)
    assert (on["tpot_s"] > 0).all() and on["status"].eq("ok").all()


def test_the_api_servers_loop_holds_a_request_longer_the_more_it_streams() -> None:
    """The event loop's form: loop / (1 - rho), rho from the streams, at most 0.95 busy."""
    loop = _physics().with_overrides(admission_loop_s=0.02, admission_busy_per_stream=0.01)
    assert loop.admission_delay_s(0) == pytest.approx(0.02)
    assert loop.admission_delay_s(30) == pytest.approx(0.02 / (1 - 0.3))
    assert loop.admission_delay_s(500) == pytest.approx(0.02 / (1 - ADMISSION_MAX_UTILISATION))
    # in the simulator: the streams the decode engine runs make its first tokens later
    busy = _physics().with_overrides(admission_loop_s=0.005, admission_busy_per_stream=0.05)
    idle = busy.with_overrides(admission_busy_per_stream=0.0)
    light, heavy = _spec(0.5), _spec(3.0)
    gap_light = (twin_journal(light, busy)["ttft_s"] - twin_journal(light, idle)["ttft_s"]).median()
    gap_heavy = (twin_journal(heavy, busy)["ttft_s"] - twin_journal(heavy, idle)["ttft_s"]).median()
    assert 0.0 <= gap_light < gap_heavy and gap_heavy > 0.002


def test_the_admission_delay_is_fitted_from_each_engines_own_account(tmp_path) -> None:
    truth = (0.012, 2e-4, 1.5)  # the loop's idle time (s), its growth with the streams (s), how fast

    def frontend(b: float) -> float:
        return truth[0] + truth[1] * b ** truth[2]

    points = [{"run": f"r{i}", "engine": "decode-0", "requests": 80, "streams": b, "arrivals": 3.0,
               "frontend_s": frontend(b)} for i, b in enumerate((8.0, 15.0, 30.0, 12.0, 40.0, 50.0))]
    fit = host.fit_admission(points)
    assert fit["loop_s"] == pytest.approx(truth[0], rel=0.05) and fit["r2"] > 0.99 and fit["edge"] == ""
    assert fit["per_stream_s"] == pytest.approx(truth[1], rel=0.05)
    assert fit["exponent"] == pytest.approx(truth[2], rel=0.02) and fit["busy_per_stream"] == 0.0
    ph = host.with_host(_physics(), FIT, fit)
    assert ph.admission_delay_s(20) == pytest.approx(frontend(20.0), rel=0.02)
    # the record's own delay is the physics' (either form: a shipped validation's event loop too)
    loop = {"loop_s": 0.02, "per_stream_s": 0.0, "busy_per_stream": 0.01, "exponent": 1.0}
    for record in (fit, loop):
        phys = host.with_host(_physics(), FIT, record)
        assert all(host.admission_delay(record, n) == pytest.approx(phys.admission_delay_s(n)) for n in (0, 9, 40))
    assert "/ (1 - 0.0100 x streams)" in host.admission_formula(loop) and "streams^1.50" in host.admission_formula(fit)
    assert host.fit_admission(points[:3])["loop_s"] == 0.0  # too few points: off
    assert host.with_host(_physics(), FIT, host.fit_admission(points[:3])).admission_loop_s == 0.0
    # a delay that explodes faster than any power in range: the exponent stops at its bound, and the record says so
    steep = [{**p, "frontend_s": 0.01 + 1e-9 * p["streams"] ** 5} for p in points]
    assert host.fit_admission(steep)["edge"] == "exponent"
    # the points: streams running at each request's arrival at its decode engine, their rate, its API server's time
    run = tmp_path / "run"
    run.mkdir()
    j = _journal([{"arrival": 0.0, "first": 0.1, "finish": 5.0, "tokens": 50},
                  {"arrival": 1.0, "first": 1.1, "finish": 5.0, "tokens": 40},
                  {"arrival": 2.0, "first": 2.1, "finish": 3.0, "tokens": 10, "decode": "decode-1"}])
    j["decode_start_s"] = j["arrival_s"] + 0.05
    write_frame(j, run / "journal.jsonl")
    (run / "account.json").write_text(json.dumps({"engines": {"decode-0": {"frontend_s": 0.02},
                                                              "decode-1": {"frontend_s": 0.03}}}))
    got = {p["engine"]: p for p in host.admission_points(run)}
    assert got["decode-0"]["streams"] == pytest.approx(0.5)  # none at the first's arrival, one at the second's
    assert got["decode-0"]["arrivals"] == pytest.approx(1.0)  # two, one second apart
    assert got["decode-1"]["streams"] == 0.0 and got["decode-1"]["frontend_s"] == 0.03


# ---- the prefill hop ------------------------------------------------------------------------------------------
def test_the_prefill_leg_spends_the_hop_outside_the_engine_and_more_the_more_the_cluster_streams() -> None:
    ph = _physics()
    assert ph.prefill_hop_s(40) == 0.0 and not ph.hops_behind_load
    hop = ph.with_overrides(hop_loop_s=0.004, hop_per_stream_s=3e-4, hop_exponent=1.5)
    assert hop.hops_behind_load and hop.prefill_hop_s(0) == pytest.approx(0.004)
    assert hop.prefill_hop_s(16) == pytest.approx(0.004 + 3e-4 * 64)
    # in the simulator: the prefill leg (sent -> answered) is the engine's step plus the hop at the streams then
    light, heavy = _spec(0.5), _spec(3.0)
    legs = {}
    for name, phys in (("off", ph), ("on", hop)):
        for label, spec in (("light", light), ("heavy", heavy)):
            j = twin_journal(spec, phys)
            assert j["status"].eq("ok").all()
            legs[name, label] = (j["prefill_end_s"] - j["prefill_start_s"]).to_numpy()
    light_gap = legs["on", "light"].mean() - legs["off", "light"].mean()
    heavy_gap = legs["on", "heavy"].mean() - legs["off", "heavy"].mean()
    assert 0.004 <= light_gap < heavy_gap and heavy_gap > 0.004 + 3e-4 * 4 ** 1.5
    assert (legs["on", "light"] >= legs["off", "light"].min() + 0.004 - 1e-9).all()
    # a loop alone: every leg exactly that much longer at light load (no stream, no batching changed)
    flat = ph.with_overrides(hop_loop_s=0.01)
    solo = _spec(0.05, n=20)
    gap = (twin_journal(solo, flat)["prefill_end_s"] - twin_journal(solo, flat)["prefill_start_s"]
           - (twin_journal(solo, ph)["prefill_end_s"] - twin_journal(solo, ph)["prefill_start_s"]))
    assert gap.to_numpy() == pytest.approx(np.full(20, 0.01), abs=1e-9)


def test_the_prefill_hop_is_fitted_from_the_proxys_leg_less_the_engines_own_account(tmp_path) -> None:
    truth = (0.006, 4e-4, 1.3)

    def outside(b: float) -> float:
        return truth[0] + truth[1] * b ** truth[2]

    points = [{"run": f"r{i}", "engine": "prefill-0", "requests": 60, "streams": b, "leg_s": 0.012 + outside(b),
               "engine_s": 0.012, "hop_s": outside(b)} for i, b in enumerate((6.0, 14.0, 25.0, 10.0, 38.0, 45.0))]
    fit = host.fit_hop(points)
    assert fit["loop_s"] == pytest.approx(truth[0], rel=0.05) and fit["r2"] > 0.99 and fit["edge"] == ""
    assert fit["per_stream_s"] == pytest.approx(truth[1], rel=0.05)
    assert fit["exponent"] == pytest.approx(truth[2], rel=0.02)
    ph = host.with_host(_physics(), FIT, None, fit)
    assert ph.prefill_hop_s(20) == pytest.approx(outside(20.0), rel=0.02)
    assert "streams^1.30" in host.hop_formula(fit)
    off = host.fit_hop(points[:3])  # too few points: off, and the physics stays without it
    assert off["loop_s"] == 0.0 and not host.with_host(_physics(), FIT, None, off).hops_behind_load
    # the points: the proxy's prefill leg less the engine's own queue + inference, at the cluster's streams (every
    # decode engine's) when each request was sent to the prefill engine
    run = tmp_path / "run"
    run.mkdir()
    j = _journal([{"arrival": 0.0, "first": 0.1, "finish": 5.0, "tokens": 50},
                  {"arrival": 1.0, "first": 1.1, "finish": 5.0, "tokens": 40, "decode": "decode-1"},
                  {"arrival": 2.0, "first": 2.1, "finish": 3.0, "tokens": 10}])
    j["prefill_start_s"] = j["arrival_s"] + 0.001
    j["prefill_end_s"] = j["prefill_start_s"] + pd.Series([0.030, 0.040, 0.050])
    write_frame(j, run / "journal.jsonl")
    (run / "account.json").write_text(json.dumps({"engines": {"prefill-0": {"queue_s": 0.002, "inference_s": 0.018},
                                                              "decode-0": {"frontend_s": 0.02}}}))
    (got,) = host.hop_points(run)
    assert got["engine"] == "prefill-0" and got["requests"] == 3
    assert got["streams"] == pytest.approx(1.0)  # none at the first, one (decode-0) at the second, two at the third
    assert got["leg_s"] == pytest.approx(0.040) and got["hop_s"] == pytest.approx(0.020)


def test_the_steal_share_is_recovered_from_the_tpot_of_runs_no_verdict_judges() -> None:
    """Runs made by a host whose serving path preempts the engines at share 0.4 (the simulator standing in for
    the cluster): the fit on their median TPOTs finds it, with the costs given."""
    true = _physics().with_overrides(**{**HOST, "host_cpu_per_token_s": 6e-4, "host_steal_share": 0.4})
    runs = []
    for rate, workload in ((1.0, "chat"), (2.5, "reasoning")):
        spec = RunSpec(topology="1p1d", workload=workload, rate=rate, n_requests=60, seed=1001, cost_model=CPU_CAL,
                       policy="round_robin")
        runs.append((spec, twin_journal(spec, true)))
    fit = host.fit_steal_share(true.with_overrides(host_steal_share=1.0), runs)
    assert fit["share"] == pytest.approx(0.4, abs=0.08)
    assert fit["score"] < 0.02 and set(fit["tpot_err"]) == {s.run_id for s, _ in runs}
    assert fit["tried"]["1"] > fit["score"] and fit["tried"]["0"] > fit["score"]
