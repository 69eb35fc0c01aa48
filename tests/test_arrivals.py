"""Arrival processes: rates, burstiness, burst trains, determinism, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.errors import ConfigError
from repro.workload.arrivals import ArrivalSpec, burst_rates, burst_train, gamma, poisson

N = 200_000


def rng(seed=0):
    return np.random.default_rng(seed)


def check_shape(t, n):
    assert t.dtype == np.float64 and t.shape == (n,)
    if n:
        assert t[0] > 0
        assert np.all(np.diff(t) >= 0)


@pytest.mark.parametrize("spec", [
    ArrivalSpec("poisson"),
    ArrivalSpec("gamma", burstiness=0.5),
    ArrivalSpec("gamma", burstiness=3.0),
    ArrivalSpec("burst", burst_factor=3.0, period_s=20.0, duty=0.2),
    ArrivalSpec("burst", burst_factor=4.0, period_s=10.0, duty=0.25),  # silent between bursts
])
@pytest.mark.parametrize("rate", [0.7, 25.0])
def test_mean_rate(spec, rate):
    t = spec.sample(rate, N, rng(1))
    check_shape(t, N)
    assert N / t[-1] == pytest.approx(rate, rel=0.02)


@pytest.mark.parametrize("b", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_gamma_cv(b):
    gaps = np.diff(np.concatenate(([0.0], gamma(10.0, N, rng(2), b))))
    assert gaps.mean() == pytest.approx(0.1, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(b), rel=0.03)


def test_poisson_gaps_are_exponential():
    gaps = np.diff(np.concatenate(([0.0], poisson(4.0, N, rng(3)))))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)
    # P(gap > mean) = 1/e for an exponential
    assert np.mean(gaps > 0.25) == pytest.approx(math.exp(-1), abs=0.005)


def test_gamma_with_burstiness_one_is_poisson_in_distribution():
    a = np.diff(gamma(5.0, N, rng(4), 1.0))
    b = np.diff(poisson(5.0, N, rng(5)))
    for q in (0.1, 0.5, 0.9, 0.99):
        assert np.quantile(a, q) == pytest.approx(np.quantile(b, q), rel=0.05)


@pytest.mark.parametrize("bf,duty", [(3.0, 0.2), (2.0, 0.4), (5.0, 0.2)])
def test_burst_train_rates_inside_and_outside(bf, duty):
    rate, period = 20.0, 10.0
    t = burst_train(rate, N, rng(6), bf, period, duty)
    check_shape(t, N)
    phase = np.mod(t, period) / period
    inside = phase < duty
    n_periods = t[-1] / period
    high, low = burst_rates(rate, bf, duty)
    assert high == rate * bf
    assert low == pytest.approx(rate * (1 - bf * duty) / (1 - duty))
    assert inside.sum() / (n_periods * duty * period) == pytest.approx(high, rel=0.03)
    if low > 0:
        assert (~inside).sum() / (n_periods * (1 - duty) * period) == pytest.approx(low, rel=0.05)
    else:
        assert inside.mean() > 0.999
    assert inside.mean() == pytest.approx(bf * duty, abs=0.01)


def test_burst_train_within_a_segment_is_poisson():
    t = burst_train(50.0, N, rng(7), 2.0, 100.0, 0.3)
    inside = np.mod(t, 100.0) < 30.0
    gaps = np.diff(t)[inside[1:] & inside[:-1]]
    gaps = gaps[gaps < 30.0]
    assert gaps.mean() == pytest.approx(1 / 100.0, rel=0.03)


@pytest.mark.parametrize("spec", [ArrivalSpec("poisson"), ArrivalSpec("gamma", burstiness=0.3),
                                  ArrivalSpec("burst")])
def test_determinism_and_prefix_stability(spec):
    a = spec.sample(3.0, 5000, rng(11))
    b = spec.sample(3.0, 5000, rng(11))
    c = spec.sample(3.0, 5000, rng(12))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.array_equal(spec.sample(3.0, 1000, rng(11)), a[:1000])


def test_rate_scales_time_exactly_for_poisson_and_gamma():
    for spec in (ArrivalSpec("poisson"), ArrivalSpec("gamma", burstiness=0.5)):
        a = spec.sample(2.0, 1000, rng(13))
        b = spec.sample(8.0, 1000, rng(13))
        np.testing.assert_allclose(a, 4.0 * b, rtol=1e-12)


def test_zero_requests():
    for spec in (ArrivalSpec("poisson"), ArrivalSpec("gamma", burstiness=2), ArrivalSpec("burst")):
        check_shape(spec.sample(1.0, 0, rng()), 0)


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.01, 500),
    n=st.integers(0, 400),
    bf=st.floats(1.0, 10.0),
    duty=st.floats(0.01, 0.99),
    period=st.floats(0.1, 1000),
    seed=st.integers(0, 2**32 - 1),
)
def test_burst_train_always_valid(rate, n, bf, duty, period, seed):
    bf = min(bf, 1.0 / duty)
    t = burst_train(rate, n, rng(seed), bf, period, duty)
    check_shape(t, n)
    assert np.all(np.isfinite(t))


@pytest.mark.parametrize("kwargs,field", [
    ({"process": "uniform"}, "process"),
    ({"process": "gamma", "burstiness": 0}, "burstiness"),
    ({"process": "gamma", "burstiness": -1}, "burstiness"),
    ({"process": "gamma", "burstiness": float("nan")}, "burstiness"),
    ({"process": "burst", "burst_factor": 0.5}, "burst_factor"),
    ({"process": "burst", "period_s": 0}, "period_s"),
    ({"process": "burst", "duty": 1.0}, "duty"),
    ({"process": "burst", "duty": 0.0}, "duty"),
    ({"process": "burst", "burst_factor": 4.0, "duty": 0.3}, "burst_factor * duty"),
])
def test_spec_validation_names_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field.replace("*", r"\*")):
        ArrivalSpec(**kwargs)


@pytest.mark.parametrize("rate", [0, -1.0, float("nan"), float("inf")])
def test_bad_rate(rate):
    with pytest.raises(ConfigError, match="rate"):
        poisson(rate, 10, rng())


def test_bad_n():
    with pytest.raises(ConfigError, match="n must"):
        gamma(1.0, -1, rng(), 1.0)


def test_spec_round_trip_and_defaults():
    spec = ArrivalSpec("burst", burst_factor=2, period_s=5, duty=0.5)
    assert ArrivalSpec.from_dict(spec.to_dict()) == spec
    assert isinstance(spec.burst_factor, float)
    assert ArrivalSpec() == ArrivalSpec("poisson")
    with pytest.raises(ConfigError, match="unknown arrival field"):
        ArrivalSpec.from_dict({"process": "poisson", "speed": 3})
    with pytest.raises(Exception):  # noqa: B017 - any error: the test only asserts the spec is frozen
        spec.duty = 0.1  # frozen
    assert "gamma" in ArrivalSpec("gamma", burstiness=0.5).describe()
