"""The cache of simulated runs (repro.experiment.simcache): a hit is the simulation, a code change misses."""

from __future__ import annotations

import numpy as np
import pytest

from repro.experiment import runner, simcache
from repro.experiment.inputs import truth_cost_model
from repro.experiment.metrics import request_outcomes, summarize
from repro.experiment.spec import RunSpec

SPEC = RunSpec(n_requests=150, policy="marginal_cost", rate=16.0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(simcache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_simulation(monkeypatch):
    def refuse(spec):
        raise AssertionError(f"simulated {spec.run_id} again")

    monkeypatch.setattr(runner, "simulate_spec", refuse)


def test_a_hit_returns_exactly_what_simulating_gives(cache, monkeypatch):
    journal = runner.simulate_spec(SPEC)
    slo = truth_cost_model(SPEC).slo
    want = summarize(journal, slo, sent=SPEC.n_requests), request_outcomes(journal, slo)
    first = runner.run_or_simulate(SPEC, cache, sim_in_memory=True)
    assert list(cache.glob("*/*.npz")) == [cache / simcache.fingerprint() / f"{SPEC.run_id}.npz"]
    _no_simulation(monkeypatch)
    second = runner.run_or_simulate(SPEC, cache, sim_in_memory=True)
    for res in (first, second):
        assert res.summary == pytest.approx(want[0], nan_ok=True) and list(res.summary) == list(want[0])
        assert np.array_equal(res.outcomes.good, want[1].good)
        assert np.array_equal(res.outcomes.ttft, want[1].ttft, equal_nan=True)
    # another spec is not a hit
    with pytest.raises(AssertionError, match="simulated"):
        runner.simulated_summary(SPEC.replace(seed=2))


def test_other_code_misses_and_off_writes_nothing(cache, monkeypatch):
    runner.simulated_summary(SPEC)
    monkeypatch.setattr(simcache, "fingerprint", lambda: "other-code")
    calls = []
    real = runner.simulate_spec
    monkeypatch.setattr(runner, "simulate_spec", lambda spec: calls.append(spec) or real(spec))
    runner.simulated_summary(SPEC)
    assert len(calls) == 1 and (cache / "other-code" / f"{SPEC.run_id}.npz").exists()
    monkeypatch.setenv(simcache.CACHE_ENV, "off")
    runner.simulated_summary(SPEC.replace(seed=3))
    assert len(calls) == 2 and not list(cache.glob(f"*/{SPEC.replace(seed=3).run_id}.npz"))


def test_a_policy_from_outside_the_package_is_never_cached(cache):
    outside = SPEC.replace(policy="tests.test_policies:AlwaysLast")
    assert simcache.cacheable(SPEC) and not simcache.cacheable(outside)
    runner.simulated_summary(outside)
    assert not list(cache.glob("*/*.npz"))


def test_a_torn_entry_is_simulated_again(cache):
    runner.simulated_summary(SPEC)
    entry = cache / simcache.fingerprint() / f"{SPEC.run_id}.npz"
    entry.write_bytes(entry.read_bytes()[:40])
    assert simcache.load(SPEC) is None
    assert runner.simulated_summary(SPEC)[0]["requests"] == 150 and simcache.load(SPEC) is not None
