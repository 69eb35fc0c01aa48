"""What a policy is handed and returns (`repro.routing.policies.view`, `repro.routing.policies.base`): value
semantics of `RequestInfo`, read-only where compiled, the shared placements of the baselines, and the
simulator's loop leaving the cycle collector as it found it."""

from __future__ import annotations

import gc
import pickle

import pytest

from repro import native
from repro.routing.policies import make_policy
from repro.routing.policies.base import ClusterView, InstanceSignals, Placement, RequestInfo
from repro.routing.policies.pricing import placement


def test_request_info_is_a_value():
    a = RequestInfo("r1", 100, 50.0, "tight", 1.5)
    b = RequestInfo("r1", 100, 50, "tight", 1.5)  # an int estimate is stored as the float it means
    assert a == b and hash(a) == hash(b)
    assert b.predicted_output_tokens == 50.0 and isinstance(b.predicted_output_tokens, float)
    assert a != RequestInfo("r1", 101, 50.0, "tight", 1.5)
    assert a != ("r1", 100, 50.0, "tight", 1.5)
    assert repr(a) == ("RequestInfo(request_id='r1', prompt_tokens=100, predicted_output_tokens=50.0, "
                       "slo_class='tight', arrival_s=1.5)")
    assert pickle.loads(pickle.dumps(a)) == a
    match a:
        case RequestInfo(rid, prompt, _, slo, _):
            assert (rid, prompt, slo) == ("r1", 100, "tight")


@pytest.mark.skipif(native.status().get("repro.routing.policies.view") != "compiled",
                    reason="the sources do not enforce Final fields")
def test_request_info_is_read_only_compiled():
    a = RequestInfo("r1", 100, 50.0, "tight", 1.5)
    with pytest.raises(AttributeError):
        a.prompt_tokens = 5  # type: ignore[misc]
    assert a.prompt_tokens == 100


def test_the_baselines_hand_out_shared_placements():
    pool = [InstanceSignals(i, f"p{i}", 0.0, 0, 0.0, 0.0, 0.0) for i in range(2)]
    dec = [InstanceSignals(i, f"d{i}", 0.0, 0, 0.0, 0.0, 0.0) for i in range(4)]
    view = ClusterView(0.0, pool, dec)
    for name in ("round_robin", "least_loaded", "length_threshold", "marginal_cost"):
        pol = make_policy(name)
        got = [pol.place(RequestInfo(f"r{k}", 10, 5.0, "loose", 0.0), view) for k in range(8)]
        for g in got:
            assert type(g) is Placement and g is placement(g.prefill, g.decode)
    assert placement(1, 3) == Placement(1, 3)
    assert placement(70, 3) == Placement(70, 3)  # beyond the shared table: a new one


def test_the_simulator_leaves_the_collector_as_it_found_it():
    from repro.cluster.topology import pools
    from repro.experiment.inputs import build_predictions, build_trace, make_router
    from repro.experiment.spec import RunSpec
    from repro.sim.simulator import SimConfig, Simulator

    spec = RunSpec(workload="mixed", topology="1p1d", n_requests=50, seed=1, rate=4.0, policy="round_robin")
    trace = build_trace(spec)
    pred = build_predictions(spec, trace)
    _, pre, _, dec = pools(spec.topology_parsed())
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            Simulator(trace.df, pred, make_router(spec), pre, dec, SimConfig()).run()
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
    router = make_router(spec)

    def boom(request, view):
        assert not gc.isenabled()  # off while the loop runs
        raise RuntimeError("boom")

    router.policy.place = boom
    with pytest.raises(Exception, match="boom"):
        Simulator(trace.df, pred, router, pre, dec, SimConfig()).run()
    assert gc.isenabled()


@pytest.mark.parametrize("arrivals,field", [([0.0, 2.0, 1.0], "sorted ascending"), ([0.0, float("nan"), 1.0], "finite"),
                                            ([0.0, 1.0, float("inf")], "finite")])
def test_the_simulator_names_a_bad_arrival_column(arrivals, field):
    import numpy as np
    import pandas as pd

    from repro.errors import ConfigError
    from repro.sim.journal import trace_columns

    df = pd.DataFrame({"request_id": ["a", "b", "c"], "family": ["chat"] * 3, "slo_class": ["tight"] * 3,
                       "arrival_s": arrivals, "prompt_tokens": [1, 2, 3], "output_tokens": [4, 5, 6]})
    with pytest.raises(ConfigError, match=f"arrival_s' must be .*{field}"):
        trace_columns(df, np.ones(3))
    df["arrival_s"] = [0.0, 1.0, 1.0]  # ties are in order
    assert trace_columns(df, np.ones(3))[3] == [0.0, 1.0, 1.0]
