"""The decode engine's closed-form segment timing (`repro.sim.simulator`): the per-segment cached
constants give the same bits as computing the step time afresh, and `steps_done_by` is exactly the
largest ``k`` with ``time_after(k) <= when`` (its shortcuts change no answer)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies import make_policy
from repro.routing.router import Router
from repro.sim.simulator import Simulator
from tests.conftest import synthetic_trace

PHYS = load_profile().physics
CM = CostModel.load("calibrated")


def _sim(df):
    router = Router(make_policy("round_robin", CM), CM, ["p0"], ["d0"])
    return Simulator(df, df["output_tokens"].to_numpy(float), router, [PHYS], [PHYS])


def _first_step_s(d) -> float:
    """The segment's first step (seconds), recomputed from the engine's fields."""
    n = d.n_running
    c = d.step_per_context_token_s
    return d.step_base_s + d.step_per_seq_s * n + c * (d.sum_base_context + n * d.origin_step)


def _afresh(d, k: int) -> float:
    """`time_after` as first written (before its constants were cached per segment)."""
    c = d.step_per_context_token_s
    n = d.n_running
    return d.origin_s + k * _first_step_s(d) + c * n * k * (k - 1) * 0.5


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 256),
    base=st.integers(0, 400_000),
    origin_step=st.integers(0, 2_000_000),
    origin_s=st.floats(0.0, 1e5),
    frac=st.floats(0.0, 1.0),
)
def test_cached_segment_matches_afresh_and_steps_done_by_is_exact(n, base, origin_step, origin_s, frac):
    d = _sim(synthetic_trace(1, 1.0, 10, 10)).dec[0]
    d.n_running, d.sum_base_context, d.origin_step, d.origin_s = n, base, origin_step, origin_s
    d.resegment()
    for k in (0, 1, 2, 7, 100, 4321):
        assert d.time_after(k) == _afresh(d, k)  # the same bits
    assert d.step_s_now() == _first_step_s(d)
    when = origin_s + frac * (_afresh(d, 300) - origin_s)
    want = 0
    while _afresh(d, want + 1) <= when:  # brute force: the largest k whose step has ended by `when`
        want += 1
    assert d.steps_done_by(when) == want
    assert d.steps_done_by(_afresh(d, want)) == want  # exactly on a boundary: that step counts


def test_non_finite_arrival_is_refused():
    df = synthetic_trace(3, 1.0, 10, 10)
    df.loc[1, "arrival_s"] = np.nan
    with pytest.raises(ConfigError, match="finite"):
        _sim(df)
