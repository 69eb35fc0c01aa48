"""Notebook 01 (§III-B): repro.paper.sections.calibration."""

import pytest

from repro.engine.physics import Physics
from repro.paper.sections import calibration as nb
from repro.routing.cost_model import CostModel


def test_synthetic_calibration_recovers_profile():
    fitted, samples = nb.calibrate_sim(seed=1, noise=0.0)
    shipped = CostModel.load("calibrated")
    assert set(samples.phase) == {"prefill", "decode"}
    assert fitted.tau_pre_base_s == pytest.approx(shipped.tau_pre_base_s, rel=1e-6)
    assert fitted.tau_dec_s == pytest.approx(shipped.tau_dec_s, rel=1e-6)
    assert fitted.tau_dec_s / CostModel.load("sim_derived").tau_dec_s == pytest.approx(7.4, abs=0.1)


def test_synthetic_samples_are_seeded():
    ph = Physics.load()
    a = nb.synthetic_calibration_samples(ph, seed=3)
    b = nb.synthetic_calibration_samples(ph, seed=3)
    assert a.equals(b)


def test_constants_table_has_paper_column():
    fitted, samples = nb.calibrate_sim(seed=1)
    t = nb.constants_table(fitted, CostModel.load("calibrated"), CostModel.load("sim_derived"))
    assert t.set_index("constant").loc["tau_dec_s", "paper"] == pytest.approx(0.013237)
    pre, dec = nb.calibration_curves(samples, fitted, CostModel.load("calibrated"), CostModel.load("sim_derived"))
    assert {"measured", "fitted", "simulator-derived"} <= set(pre.source)
    assert dec.concurrency.max() == 16


def test_fit_in_sim_takes_the_first_seed_and_the_scale_rounds(section):
    fitted, samples = nb.fit(section(seeds=(1, 2), scale="quick"), budget_s=1.0)
    want, want_samples = nb.calibrate_sim(seed=1, rounds=nb.ROUNDS[0])
    assert samples.equals(want_samples) and fitted.tau_dec_s == want.tau_dec_s
    assert samples["round"].nunique() == nb.ROUNDS[0]
    sim_derived = CostModel.load("sim_derived")
    head = {r["key"]: r["ours"] for r in nb.calibration_headline(fitted, sim_derived)}
    assert head["sim_tau_dec_underestimate"] == pytest.approx(fitted.tau_dec_s / sim_derived.tau_dec_s)
