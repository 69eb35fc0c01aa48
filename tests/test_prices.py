"""`repro.routing.policies.pricing.Prices` prices as `CostModel` does, to the bit: the compiled ledger and scorers
use it in place of the model's Python methods, so a drift between the two would change decisions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from repro.routing.cost_model import CostModel
from repro.routing.policies.pricing import Prices

BASE = CostModel.load("calibrated")
positive = st.floats(min_value=1e-9, max_value=1e3, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(base=st.floats(0.0, 1.0), per_token=st.floats(1e-8, 1e-2), dec=st.floats(1e-5, 1.0), slope=st.floats(0.0, 1.0),
       latency=st.floats(0.0, 1.0), bandwidth=st.floats(1e6, 1e13), budget=st.integers(1, 65536),
       tokens=st.floats(0.0, 200_000.0), running=st.integers(0, 512), ttft=positive, tpot=positive,
       loose=st.floats(1.0, 10.0))
def test_prices_are_the_cost_models_to_the_bit(base, per_token, dec, slope, latency, bandwidth, budget, tokens,
                                               running, ttft, tpot, loose):
    cm = BASE.with_overrides(tau_pre_base_s=base, tau_pre_per_token_s=per_token, tau_dec_s=dec,
                             dec_concurrency_slope=slope, xfer_latency_s=latency,
                             xfer_bandwidth_bytes_per_s=bandwidth, max_num_batched_tokens=budget,
                             ttft_tight_s=ttft, tpot_tight_s=tpot, loose_factor=loose)
    p = Prices(cm)
    assert p.tau_pre(tokens) == cm.tau_pre(tokens)
    assert p.tau_xfer(tokens) == cm.tau_xfer(tokens)
    assert p.tau_dec(running) == cm.tau_dec(running)
    for c in ("tight", "loose"):
        assert p.ttft_s(c) == cm.slo.ttft_s(c) and p.tpot_s(c) == cm.slo.tpot_s(c)
