"""Notebook 12 (§VI): repro.paper.sections.sim_vs_hardware."""

import numpy as np
import pandas as pd
import pytest

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import reference as paper_reference
from repro.paper.sections import sim_vs_hardware as nb


def test_batching_physics_matches_paper_at_batch_8():
    t = nb.batching_physics_table().set_index("batch")
    assert t.loc[8, "batching_per_token_increase_pct"] == pytest.approx(paper_reference.lookup("decode_batch8_penalty"),
                                                                       abs=0.5)
    assert t.loc[8, "serial_wait_factor"] == 8.0


def test_anchor_rate_bisects_a_monotone_curve():
    base = RunSpec(workload="mixed", rate=100.0, n_requests=100)

    def curve(spec):  # goodput 0.5 at 5 req/s
        return 1.0 / (1.0 + spec.rate / 5.0)

    rate, probes = nb.anchor_rate(base, 0.5, probe=curve, band=0.001)
    assert rate == pytest.approx(5.0, rel=0.02)
    assert probes[0][0] == 100.0 and probes[1][0] == pytest.approx(10.0)
    assert nb.anchor_rate(base, 0.001, probe=curve)[0] == 100.0  # already below target at the start
    with pytest.raises(ConfigError, match="does not reach"):
        nb.anchor_rate(base, 0.999, probe=lambda s: 0.1)


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
    tab = nb.calibration_in_sim_table(ctx.run(items))
    assert list(tab.backlog) == ["oracle", "ledger"]
    led = tab.set_index("backlog").loc["ledger"]
    assert led.paper_gain_points == pytest.approx(0.1) and led.paper_hardware_gain_points == pytest.approx(4.5)
    assert np.isnan(tab.set_index("backlog").loc["oracle", "paper_gain_points"])


def test_reference_and_models_per_backend(section):
    assert nb.reference_name(section()) == nb.SIM_REFERENCE and nb.sim_models(section()) == ["serial"]
    live = section(backend="emulated", time_scale=2.0)
    assert nb.reference_name(live) == "emulated" and nb.sim_models(live) == ["serial", "batching"]
    sim = live.simulator()
    assert (sim.backend, sim.cluster, sim.time_scale, sim.seeds) == ("sim", None, 1.0, live.seeds)
    grid = nb.grid_specs(sim, {"chat": 64.0, "mixed": 16.0}, policies=("round_robin",), service="serial")
    assert [(s.workload, s.rate, s.sim.service, s.backend) for _, s in grid] == [("chat", 64.0, "serial", "sim"),
                                                                                 ("mixed", 16.0, "serial", "sim")]
