"""Notebook 01 (§III-B): repro.paper.sections.calibration."""

import json
from dataclasses import replace

import pytest

from repro.engine.mechanisms import mechanisms_off
from repro.engine.profile import load_profile
from repro.paper.sections import calibration as nb
from repro.routing.cost_model import CostModel

FITTED = ("tau_pre_base_s", "tau_pre_per_token_s", "tau_dec_s", "dec_concurrency_slope", "ttft_tight_s",
          "tpot_tight_s")


def test_synthetic_calibration_recovers_the_profile_it_benchmarks(tmp_path):
    """Noise-free, the benchmark of a profile fits that profile's constants exactly; a different profile
    (written to a file here) fits its own constants, not the shipped ones the fit starts from."""
    # the default profile with its mechanisms off: a calibration cannot see how the base is split (the serving
    # path, the decode side's first token), so it recovers the stated constants of a profile without them
    default = mechanisms_off(load_profile().physics)
    base_path = tmp_path / "base.json"
    base_path.write_text(json.dumps(default.to_dict(slo=True)))
    fitted, samples = nb.calibrate_sim(str(base_path), seed=1, noise=0.0)
    assert set(samples.phase) == {"prefill", "decode"}
    # the benchmark derives its targets by the rule (slo_from_constants); the identified testbed states the
    # paper's (175 ms, 39.7 ms), which the rule, set on our earlier estimates, puts at 152 ms there
    truth = replace(CostModel.from_physics(replace(default, stated_slo=None)))
    for field in FITTED:
        assert getattr(fitted, field) == pytest.approx(getattr(truth, field), rel=1e-6), field
    raw = default.to_dict()
    for key, value in dict(prefill_base_s=0.03, prefill_per_token_s=1.5e-4, decode_base_s=0.025,
                           decode_per_seq_s=4e-5).items():
        raw["params"][key]["value"] = value
    path = tmp_path / "other.json"
    path.write_text(json.dumps(raw))
    other, _ = nb.calibrate_sim(str(path), seed=1, noise=0.0)
    other_truth = CostModel.from_physics(load_profile(path).physics)
    for field in FITTED:
        assert getattr(other, field) == pytest.approx(getattr(other_truth, field), rel=1e-6), field
        assert getattr(other, field) != pytest.approx(getattr(fitted, field), rel=0.1), field
    # by hand: one decode step of one sequence with the benchmark's 800 context tokens
    assert other.tau_dec_s == pytest.approx(0.025 + 4e-5 + 800 * 36864 / 6.96e11, rel=1e-6)


def test_synthetic_samples_are_seeded():
    ph = load_profile().physics
    a = nb.synthetic_calibration_samples(ph, seed=3)
    b = nb.synthetic_calibration_samples(ph, seed=3)
    assert a.equals(b)


def test_constants_table_and_curves_by_hand():
    """A fitted model 10 % off the shipped tau_dec: the table's relative error is +0.1 there and 0 elsewhere;
    each model's curve is its own line, at the benchmark's lengths and concurrencies."""
    fitted, samples = nb.calibrate_sim(seed=1)
    shipped, derived = CostModel.load("calibrated"), CostModel.load("sim_derived")
    off = shipped.with_overrides(tau_dec_s=shipped.tau_dec_s * 1.1)
    t = nb.constants_table(off, shipped, derived).set_index("constant")
    assert t.loc["tau_dec_s", "fitted_vs_shipped_rel_error"] == pytest.approx(0.1)
    assert t.loc["tau_pre_base_s", "fitted_vs_shipped_rel_error"] == 0.0
    assert t.loc["tau_dec_s", "shipped_sim_derived"] == derived.tau_dec_s
    assert t.loc["tau_dec_s", "paper"] == pytest.approx(0.013237)
    pre, dec = nb.calibration_curves(samples, off, shipped, derived)
    line = pre[pre.source == "simulator-derived"].set_index("prompt_tokens").latency_s
    assert sorted(line.index) == list(nb.PREFILL_LENGTHS)
    assert line[1024] == pytest.approx(derived.tau_pre_base_s + 1024 * derived.tau_pre_per_token_s)
    itl = dec[dec.source == "fitted"].set_index("concurrency").itl_s
    assert sorted(itl.index) == list(nb.CONCURRENCIES)
    assert itl[16] == pytest.approx(off.tau_dec_s * (1 + 15 * off.dec_concurrency_slope))
    measured = dec[dec.source == "measured"]
    assert len(measured) == len(nb.CONCURRENCIES) * 3  # one point per concurrency and round


def test_fit_in_sim_takes_the_first_seed_and_the_scale_rounds(section):
    fitted, samples = nb.fit(section(seeds=(1, 2), scale="quick"), budget_s=1.0)
    want, want_samples = nb.calibrate_sim(seed=1, rounds=nb.ROUNDS[0])
    assert samples.equals(want_samples) and fitted.tau_dec_s == want.tau_dec_s
    assert samples["round"].nunique() == nb.ROUNDS[0]
    # the headline's underestimate is what the benchmark measured over what the simulator assumed: with
    # a simulator-derived model assuming 2 ms per token, the profile's 13.237 ms step (noise 2 %) gives ~6.6x
    assumed = CostModel.load("sim_derived").with_overrides(tau_dec_s=0.002)
    rows = nb.calibration_headline(fitted, assumed, "sim")
    head = {r["key"]: r["ours"] for r in rows}
    step = load_profile().physics.decode_step_s(1, 800)
    assert head["sim_tau_dec_underestimate"] == pytest.approx(step / 0.002, rel=0.03)
    assert head["sim_tau_dec_measured"] == pytest.approx(0.013237, rel=0.03)
    # in sim the profile holds the paper's numbers: recovering them is an input, on real engines a measurement
    assert {r["kind"] for r in rows} == {"input"}
    assert {r["kind"] for r in nb.calibration_headline(fitted, assumed, "vllm")} == {"value"}
