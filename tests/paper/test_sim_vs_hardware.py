"""Notebook 12 (§VI): repro.paper.sections.sim_vs_hardware."""

import numpy as np
import pandas as pd
import pytest

from repro.engine.mechanisms import mechanisms_off
from repro.engine.profile import load_profile
from repro.experiment.anchor import Anchor, anchor_rate
from repro.experiment.spec import RunSpec
from repro.paper.headline import write_headline
from repro.paper.sections import sim_vs_hardware as nb
from repro.routing.cost_model import CostModel
from repro.routing.policies import make_policy
from repro.routing.router import Router
from repro.sim.config import SimConfig
from repro.sim.simulator import Simulator

PHYS = mechanisms_off(load_profile().physics)  # the engine model alone: pulls never share a link, no API queue
CM = CostModel.load("calibrated")


def _all_at_once(n, prompt, output, service):
    """Journal of ``n`` equal requests arriving together on ``n`` prefill engines (round robin: one
    each, so their prefills end together) and one decode engine with ``service``."""
    df = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "arrival_s": 0.0, "family": "chat",
                       "source_index": 0, "prompt_tokens": prompt, "output_tokens": output, "slo_class": "loose"})
    router = Router(make_policy("round_robin", CM), CM, [f"p{i}" for i in range(n)], ["d0"])
    sim = Simulator(df, df["output_tokens"].to_numpy(float), router, [PHYS] * n, [PHYS], SimConfig(service=service))
    j = sim.run()
    assert (j.status == "ok").all() and j.prefill_end_s.nunique() == 1
    return j


def test_batching_physics_table_is_what_the_two_simulators_do():
    """The table's two columns, measured on the simulators: with continuous batching, n sequences of
    800 context tokens share a step, so each token costs step(n) / step(1) of a lone one; with serial
    service the n-th of n equal requests waits for the n - 1 before it, each one whole decode service."""
    t = nb.batching_physics_table(batch_sizes=(1, 2, 8)).set_index("batch")
    # batching: 2 output tokens after a 799-token prompt; the second step runs over 800 context tokens each
    tpot = {n: _all_at_once(n, 799, 2, "batching").tpot_s for n in (1, 2, 8)}
    for n in (1, 2, 8):
        assert tpot[n].nunique() == 1  # one batch: every sequence gets the same step time
        measured_pct = (tpot[n].iloc[0] / tpot[1].iloc[0] - 1.0) * 100.0
        assert t.loc[n, "batching_per_token_increase_pct"] == pytest.approx(measured_pct, rel=1e-9, abs=1e-9)
    # by hand from the profile: step(8, 6400) / step(1, 800) - 1
    c = PHYS.kv_bytes_per_token / PHYS.hbm_bandwidth_bytes_per_s
    by_hand = (PHYS.decode_base_s + 8 * PHYS.decode_per_seq_s + 6400 * c) / (
        PHYS.decode_base_s + PHYS.decode_per_seq_s + 800 * c) - 1.0
    assert t.loc[8, "batching_per_token_increase_pct"] == pytest.approx(100 * by_hand, rel=1e-9)
    # serial: one decode service = the KV transfer, then 40 steps of one sequence, each over one more token
    L, o = 799, 40
    service = PHYS.transfer_time_s(L) + sum(PHYS.decode_step_s(1, L + k) for k in range(o))
    for n in (2, 8):
        first = _all_at_once(n, L, o, "serial").sort_values("first_token_s").first_token_s.to_numpy()
        # the n-th request's first token comes n - 1 whole services after the first request's
        assert first[-1] - first[0] == pytest.approx((n - 1) * service, rel=1e-9)
        assert np.diff(first) == pytest.approx(np.full(n - 1, service), rel=1e-9)
        # so, counting its own service, the n-th waits n services: the table's factor
        assert t.loc[n, "serial_wait_factor"] == pytest.approx((first[-1] - first[0]) / service + 1.0, rel=1e-9)
    # with batching the same 8 requests get their first tokens together
    assert _all_at_once(8, L, o, "batching").first_token_s.nunique() == 1


def _curve(half: float):
    """A monotone goodput curve: 0.5 at ``half`` req/s, falling with the rate."""
    def probe(spec):
        return 1.0 / (1.0 + spec.rate / half)
    return probe


BASE = RunSpec(workload="mixed", rate=100.0, n_requests=100)


def _anchors():
    ok = anchor_rate(BASE, 0.5, probe=_curve(5.0), band=0.001)
    bad = anchor_rate(BASE.replace(workload="chat"), 0.5, probe=lambda s: 0.95)
    return {"serial": {"mixed": ok, "chat": bad}, "batching": {"mixed": ok, "chat": ok}}, ok


def test_anchor_helpers_leave_failed_anchors_out():
    anchors, ok = _anchors()
    assert nb.anchored_rates(anchors) == {"serial": {"mixed": ok.rate},
                                          "batching": {"mixed": ok.rate, "chat": ok.rate}}
    lines = nb.failed_anchors(anchors)
    assert len(lines) == 1 and lines[0].startswith("serial simulator, chat")
    tab = nb.anchor_table(anchors)
    assert list(tab.found) == [True, False, True, True] and tab.reason.iloc[1] == lines[0].split(", ", 1)[1]
    assert (tab.rate_lo.iloc[0], tab.goodput.iloc[0], tab.rate_hi.iloc[0]) == (ok.rate_lo, ok.value, ok.rate_hi)
    assert tab.rate_lo.iloc[0] < tab.rate.iloc[0] < tab.rate_hi.iloc[0]
    assert tab.iloc[1][["rate_lo", "rate_hi"]].isna().all()  # a failed anchor has no interval
    assert nb.rate_headline(anchors, {"mixed": 16.0}) == [{"key": "sim_rate_batching", "ours": ok.rate},
                                                          {"key": "hw_rate_batching", "ours": 16.0}]
    failed = {"batching": {"mixed": anchors["serial"]["chat"]}}
    assert nb.rate_headline(failed, {"mixed": 16.0}) == []  # not the reference rate twice


def _runs(goodput):
    rows = []
    for (wl, pol), g in goodput.items():
        rows.append({"workload": wl, "policy": pol, "goodput": g, "ttft_p99_s": 1.0, "rate": 10.0, "seed": 1})
    return pd.DataFrame(rows)


def test_residual_grid_and_summary():
    ref = _runs({("mixed", "round_robin"): 0.7, ("mixed", "marginal_cost"): 0.8,
                 ("chat", "round_robin"): 0.9, ("chat", "marginal_cost"): 0.85})
    mod = _runs({("mixed", "round_robin"): 0.72, ("mixed", "marginal_cost"): 0.75,
                 ("chat", "round_robin"): 0.9, ("chat", "marginal_cost"): 0.95}).assign(rate=0.1, ttft_p99_s=4.0)
    grid = nb.residual_grid(ref, mod, "serial")
    assert len(grid) == 4 and grid.rate_ratio.eq(100.0).all() and grid.ttft_p99_ratio.eq(4.0).all()
    s = nb.residual_summary(grid).iloc[0]
    assert s.mean_abs_residual == pytest.approx((0.02 + 0.05 + 0.0 + 0.10) / 4)
    assert s.winners_reproduced == 1  # mixed: mc both; chat: rr vs mc
    assert s.bursty_spread_reference == pytest.approx(0.1)


def test_calibration_in_sim_oracle_vs_ledger(section):
    ctx = section(seeds=(1,), n_requests=300)
    items = nb.calibration_in_sim_specs(ctx, {"batching": 16.0})
    assert {(s.sim.backlog, s.cost_model) for _, s in items} == {(b, c) for b in ("oracle", "ledger")
                                                                  for c in ("calibrated", "sim_derived")}
    runs = ctx.run(items)
    tab = nb.calibration_in_sim_table(runs)
    assert list(tab.backlog) == ["oracle", "ledger"]
    # the gain is the calibrated run's goodput minus the simulator-derived run's, in points, per backlog
    for backlog, row in tab.set_index("backlog").iterrows():
        g = runs[runs.backlog == backlog].set_index("cost_model").goodput
        assert row.calibration_gain_points == pytest.approx(100 * (g["calibrated"] - g["sim_derived"]), abs=1e-9)
    assert np.isnan(tab.set_index("backlog").loc["oracle", "paper_gain_points"])
    # with the runs, the gains in the headline are paired over the same 300 requests (claimed ties)
    head = {r["key"]: r for r in nb.sim_vs_hardware_headline(pd.DataFrame(columns=["model"]), tab,
                                                              nb.batching_physics_table(), "",
                                                              reference=nb.SIM_REFERENCE, calib_runs=runs, ctx=ctx)}
    gain = head["sim_calib_goodput_gain"]
    assert gain["ours"].value == pytest.approx(tab.set_index("backlog").loc["ledger", "calibration_gain_points"])
    assert gain["ours"].requests == 300 and gain["ours"].has_interval
    assert (gain["kind"], gain["claim"]) == ("ordering", 0)
    assert len(gain["runs"]) == 2 and head["sim_calib_goodput_gain_oracle"]["ours"].has_interval


def test_calibration_in_sim_table_pairs_seeds_by_hand():
    """Hand-made runs: the gain is averaged over the seeds both cost models ran (seed 3 has no pair),
    the goodputs over each model's own runs."""
    rows = []
    for backlog, cal, der in (("ledger", {1: 0.80, 2: 0.90, 3: 0.50}, {1: 0.70, 2: 0.86}),
                              ("oracle", {1: 0.80, 2: 0.80}, {1: 0.80, 2: 0.80})):
        for cm, goodput in (("calibrated", cal), ("sim_derived", der)):
            rows += [{"service": "batching", "backlog": backlog, "rate": 16.0, "cost_model": cm, "seed": seed,
                      "goodput": g, "ttft_p99_s": 0.3 if cm == "calibrated" else 0.6} for seed, g in goodput.items()]
    tab = nb.calibration_in_sim_table(pd.DataFrame(rows)).set_index("backlog")
    led = tab.loc["ledger"]
    assert led.calibration_gain_points == pytest.approx((10.0 + 4.0) / 2)
    assert led.gain_sd == pytest.approx(np.std([10.0, 4.0], ddof=1))
    assert led.goodput_calibrated == pytest.approx((0.80 + 0.90 + 0.50) / 3)
    assert led.goodput_sim_derived == pytest.approx((0.70 + 0.86) / 2)
    assert (led.ttft_p99_calibrated_s, led.ttft_p99_sim_derived_s) == (pytest.approx(0.3), pytest.approx(0.6))
    assert tab.loc["oracle", "calibration_gain_points"] == 0.0 and tab.loc["oracle", "gain_sd"] == 0.0


def test_reference_and_models_per_backend(section):
    assert nb.reference_name(section()) == nb.SIM_REFERENCE and nb.sim_models(section()) == ["serial"]
    live = section(backend="emulated", time_scale=2.0)
    assert nb.reference_name(live) == "emulated" and nb.sim_models(live) == ["serial", "batching"]
    sim = live.simulator()
    assert (sim.backend, sim.cluster, sim.time_scale, sim.seeds) == ("sim", None, 1.0, live.seeds)
    grid = nb.grid_specs(sim, {"chat": 64.0, "mixed": 16.0}, policies=("round_robin",), service="serial")
    assert [(s.workload, s.rate, s.sim.service, s.backend) for _, s in grid] == [("chat", 64.0, "serial", "sim"),
                                                                                 ("mixed", 16.0, "serial", "sim")]


def _summary(*models):
    return pd.DataFrame([{"model": m, "cells": 16, "mean_abs_residual": 0.04, "winners_reproduced": 1, "workloads": 4,
                          "ttft_p99_ratio_lo": 5.0, "ttft_p99_ratio_hi": 59.0, "rate_ratio_lo": 14.0,
                          "rate_ratio_hi": 111.0, "bursty_spread_model": 0.02, "bursty_spread_reference": 0.03}
                         for m in models])


def test_headline_labels_serial_vs_batching_sim_rows(tmp_path):

    calib = pd.DataFrame(columns=["service", "backlog"])
    phys = nb.batching_physics_table()
    sim = nb.sim_vs_hardware_headline(_summary("serial"), calib, phys, primary="", reference=nb.SIM_REFERENCE)
    keys = [r["key"] for r in sim]
    assert set(nb.SERIAL_VS_BATCHING_SIM) <= set(keys)
    assert not {"sim_mar_serial", "sim_rate_gap_serial", "sim_ttft_p99_overstated_serial_lo",
                "sim_ttft_p99_overstated_serial_hi"} & set(keys)
    out = pd.read_csv(write_headline(sim, "12_sim_vs_hardware", tmp_path)).set_index("key")
    rows = out.loc[list(nb.SERIAL_VS_BATCHING_SIM)]
    assert rows.paper.isna().all() and rows.meaning.str.startswith("sim vs sim").all()
    assert rows.loc["serial_vs_batching_sim_mar", "ours"] == pytest.approx(0.04)
    assert rows.loc["serial_vs_batching_sim_rate_gap", "ours"] == pytest.approx(111.0)
    live = nb.sim_vs_hardware_headline(_summary("serial", "batching"), calib, phys, primary="batching",
                                       reference="emulated")
    head = {r["key"]: r for r in live}
    assert set(nb.SERIAL_VS_REFERENCE) <= set(head) and not set(nb.SERIAL_VS_BATCHING_SIM) & set(head)
    assert "paper" not in head["sim_mar_serial"]  # filled from the paper's serial-sim-vs-A40 value


def test_residual_estimates_pair_the_traces_and_read_the_anchor_band():
    ref = pd.concat([_runs({("mixed", "round_robin"): 0.7 + d, ("mixed", "marginal_cost"): 0.8,
                            ("chat", "round_robin"): 0.9, ("chat", "marginal_cost"): 0.85 - d}).assign(seed=s)
                     for s, d in ((1, 0.0), (2, 0.04), (3, -0.02))], ignore_index=True)
    mod = pd.concat([_runs({("mixed", "round_robin"): 0.72, ("mixed", "marginal_cost"): 0.75 + d,
                            ("chat", "round_robin"): 0.9, ("chat", "marginal_cost"): 0.95}).assign(seed=s)
                     for s, d in ((1, 0.02), (2, 0.0), (3, 0.01))], ignore_index=True).assign(rate=0.1)
    # the serial anchor on mixed: goodput 0.8 at 0.05 req/s, 0.6 at 0.2 (0.1 per doubling); target 0.7 +- 0.01
    anchor = Anchor(target=0.7, metric="goodput", band=0.01, found=True, rate=0.1, value=0.7,
                    probes=((0.05, 0.8), (0.2, 0.6), (0.1, 0.7)))
    est = nb.residual_estimates(ref, [mod], ["serial"], {"serial": {"mixed": anchor}}, {"mixed": 10.0})["serial"]
    s = nb.residual_summary(nb.residual_grid(ref, mod, "serial")).iloc[0]
    for col in ("mean_abs_residual", "winners_reproduced", "bursty_spread_model", "bursty_spread_reference"):
        assert est[col].value == pytest.approx(s[col])
        assert est[col].lo <= est[col].value <= est[col].hi and est[col].traces == 3
    assert est["mean_abs_residual"].lo < est["mean_abs_residual"].hi  # the traces differ: a real interval
    assert est["ttft_p99_ratio_lo"].value == 1.0 == est["ttft_p99_ratio_hi"].hi  # equal TTFTs on every trace
    gap = est["rate_ratio_hi"]  # 10 / 0.1, the band's rates 0.1 / 2**0.1 .. 0.1 * 2**0.1
    assert gap.value == pytest.approx(100.0)
    assert (gap.lo, gap.hi) == (pytest.approx(100.0 / 2 ** 0.1), pytest.approx(100.0 * 2 ** 0.1))
