"""`repro.statistics.percentile` is numpy's percentile, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.statistics.percentile import percentile

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(st.lists(finite, min_size=1, max_size=60), st.floats(min_value=0.0, max_value=100.0))
def test_it_is_numpys_percentile_bit_for_bit(values: list[float], q: float) -> None:
    x = np.asarray(values, dtype=float)
    assert percentile(x, q) == float(np.percentile(x, q))


@pytest.mark.parametrize("q", [0, 1, 50, 95, 99, 99.9, 100])
def test_on_long_samples_with_ties_and_the_usual_tails(q: float) -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 99, 100, 101, 2000):
        x = np.round(rng.lognormal(size=n), 2)  # ties
        before = x.copy()
        assert percentile(x, q) == float(np.percentile(x, q)), (n, q)
        assert np.array_equal(x, before), "the caller's array was reordered"


def test_it_refuses_what_has_no_percentile() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        percentile(np.array([]), 50)
    with pytest.raises(ValueError, match=r"q must be within \[0, 100\]"):
        percentile(np.array([1.0]), 101)
