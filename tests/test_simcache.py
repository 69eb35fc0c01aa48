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

    monkeypatch.setattr(runner, "simulate_timed", refuse)


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
    real = runner.simulate_timed
    monkeypatch.setattr(runner, "simulate_timed", lambda spec: calls.append(spec) or real(spec))
    runner.simulated_summary(SPEC)
    assert len(calls) == 1 and (cache / "other-code" / f"{SPEC.run_id}.npz").exists()
    monkeypatch.setenv(simcache.CACHE_ENV, "off")
    runner.simulated_summary(SPEC.replace(seed=3))
    assert len(calls) == 2 and not list(cache.glob(f"*/{SPEC.replace(seed=3).run_id}.npz"))


def test_a_policy_from_outside_the_package_is_cached_by_its_own_code(cache, tmp_path, monkeypatch):
    pkg = tmp_path / "userpol"
    pkg.mkdir()
    mod = pkg / "mine.py"
    mod.write_text("from repro.routing.policies.baselines import RoundRobin\n\n\nclass Mine(RoundRobin):\n"
                   "    name = 'mine'\n")
    monkeypatch.syspath_prepend(str(pkg))
    outside = SPEC.replace(policy="mine:Mine")
    assert simcache.cacheable(SPEC) and simcache.cacheable(outside)
    first = simcache.entry_name(outside)
    assert first.startswith(outside.run_id + "-") and simcache.entry_name(SPEC) == f"{SPEC.run_id}.npz"
    runner.simulated_summary(outside)
    assert (cache / simcache.fingerprint() / first).exists()
    # an edit of the policy (or of a module it imports) is another entry: simulated again (once this process
    # looks at its files again: at most every RECHECK_S seconds, here at once)
    from repro import sources

    monkeypatch.setattr(sources, "RECHECK_S", 0.0)
    mod.write_text(mod.read_text() + "\n\n# edited\n")
    assert simcache.entry_name(outside) != first and simcache.load(outside) is None


def test_an_edited_policy_runs_its_new_code_in_a_long_lived_process(tmp_path, monkeypatch):
    import sys
    import time

    from repro import sources
    from repro.routing.policies import make_policy

    pkg = tmp_path / "userpol2"
    pkg.mkdir()
    (pkg / "helper.py").write_text("SKIP = 0\n")
    mod = pkg / "edited.py"
    mod.write_text("from helper import SKIP\nfrom repro.routing.policies.baselines import RoundRobin\n\n\n"
                   "class Edited(RoundRobin):\n    name = 'edited'\n    version = SKIP\n")
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.setattr(sources, "RECHECK_S", 0.0)
    # bytecode written as by default (in tmp_path): an edit within the same second to the same size must not be
    # reloaded from the stale .pyc
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert make_policy("edited:Edited").version == 0
    time.sleep(0.01)
    (pkg / "helper.py").write_text("SKIP = 1\n")  # the helper changes: both are reloaded, helper first
    assert sources.fresh_module("edited") and sys.modules["edited"].Edited.version == 1
    assert not sources.fresh_module("edited")  # nothing changed since


def test_a_torn_entry_is_simulated_again(cache):
    runner.simulated_summary(SPEC)
    entry = cache / simcache.fingerprint() / f"{SPEC.run_id}.npz"
    entry.write_bytes(entry.read_bytes()[:40])
    assert simcache.load(SPEC) is None
    assert runner.simulated_summary(SPEC)[0]["requests"] == 150 and simcache.load(SPEC) is not None
