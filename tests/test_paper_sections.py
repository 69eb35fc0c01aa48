import numpy as np
import pytest

from repro.engine.physics import Physics
from repro.errors import ConfigError
from repro.paper import section as S
from repro.routing.cost_model import CostModel


def test_synthetic_calibration_recovers_profile():
    fitted, samples = S.calibrate_sim(seed=1, noise=0.0)
    shipped = CostModel.load("calibrated")
    assert set(samples.phase) == {"prefill", "decode"}
    assert fitted.tau_pre_base_s == pytest.approx(shipped.tau_pre_base_s, rel=1e-6)
    assert fitted.tau_dec_s == pytest.approx(shipped.tau_dec_s, rel=1e-6)
    assert fitted.tau_dec_s / CostModel.load("sim_derived").tau_dec_s == pytest.approx(7.4, abs=0.1)


def test_synthetic_samples_are_seeded():
    ph = Physics.load()
    a = S.synthetic_calibration_samples(ph, seed=3)
    b = S.synthetic_calibration_samples(ph, seed=3)
    assert a.equals(b)


def test_constants_table_has_paper_column():
    fitted, samples = S.calibrate_sim(seed=1)
    t = S.constants_table(fitted, CostModel.load("calibrated"), CostModel.load("sim_derived"))
    assert t.set_index("constant").loc["tau_dec_s", "paper"] == pytest.approx(0.013237)
    pre, dec = S.calibration_curves(samples, fitted, CostModel.load("calibrated"), CostModel.load("sim_derived"))
    assert {"measured", "fitted", "simulator-derived"} <= set(pre.source)
    assert dec.concurrency.max() == 16


def test_check_common_rejects_bad_values():
    with pytest.raises(ConfigError, match="backend"):
        S.check_common("gpu", "quick")
    with pytest.raises(ConfigError, match="scale"):
        S.check_common("sim", "huge")
    with pytest.raises(ConfigError, match="seeds"):
        S.check_common("sim", "quick", [])
    with pytest.raises(ConfigError, match="cluster"):
        S.check_cluster("vllm", "")


def test_table_two_small_grid():
    specs = S.table_two_specs(seeds=(1, 2), n_requests=200, rate=16.0)
    runs = S.run_grid(specs)
    assert len(runs) == 8
    tab = S.table_two(runs)
    assert list(tab.policy) == list(S.PAPER_POLICIES)
    mc = tab.set_index("policy").loc["marginal_cost"]
    assert mc.paper_mean_goodput == pytest.approx(0.864)
    assert mc.mean_goodput == pytest.approx(np.mean([mc.trace1_goodput, mc.trace2_goodput]))
    keys = [r["key"] for r in S.table_two_headline(tab)]
    assert "table2_mc_mean" in keys and "table2_ll_worst" in keys
