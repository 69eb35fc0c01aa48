"""Predictors for the ablations: a noisy predictor (the paper's 0..150% study) and a constant one (no
length signal). Both meet `repro.routing.predictor.model.OutputLengthModel`; predictions in tokens.

`NoisyPredictor(base, rel_error, random_state)` multiplies the base prediction by exp(u),
u ~ Uniform(-a, a) with (cosh a - 1) / a = rel_error, which makes the mean absolute relative
error E|e^u - 1| equal ``rel_error`` (`noise_amplitude`). u is keyed per request, not by
position in a batch: U = (first 8 bytes of BLAKE2b(f"{random_state}:{key}"), big-endian) / 2**64,
u = a (2U - 1) (`keyed_uniform`); so the simulator and the proxy give a request the same noise.

`ConstantPredictor(value)` predicts one number for everyone (the "no length signal" ablation).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin

from repro.errors import ConfigError
from repro.routing.predictor.features import PredictorInput, elementwise
from repro.routing.predictor.model import MAX_TOKENS, OutputLengthModel, default_train_median, load_default

REL_ERROR_MAX = 10.0


class ConstantPredictor(RegressorMixin, BaseEstimator):
    """Predicts ``value`` for every request (no length signal).

    ``value=None``: the median of ``y`` after ``fit``, or, unfitted, the shipped model's
    training median.
    """

    def __init__(self, value: float | None = None):
        self.value = value

    def fit(self, X: PredictorInput | None = None, y: Any = None) -> ConstantPredictor:
        if self.value is not None:
            self.constant_ = float(self.value)
        elif y is not None:
            self.constant_ = float(np.median(np.asarray(y, dtype=np.float64)))
        else:
            self.constant_ = float(default_train_median())
        if not (math.isfinite(self.constant_) and self.constant_ >= 1):
            raise ConfigError(f"value must be a finite number >= 1, got {self.constant_!r}")
        return self

    def predict(self, X: PredictorInput, keys: Iterable[Any] | None = None) -> np.ndarray:
        if not hasattr(self, "constant_"):
            self.fit()
        return np.full(_n_rows(X), self.constant_, dtype=np.float64)

    def predict_one(self, prompt_head: str, prompt_tokens: int, key: Any = None) -> float:
        if not hasattr(self, "constant_"):
            self.fit()
        return float(self.constant_)


def _n_rows(X: PredictorInput) -> int:
    if hasattr(X, "df") and hasattr(X, "meta"):
        return len(X.df)
    return len(X)


def noise_amplitude(rel_error: float) -> float:
    """a >= 0 with (cosh a - 1) / a = rel_error (0 for 0): U(-a, a) log-noise of that MARE."""
    r = float(rel_error)
    if r == 0:
        return 0.0
    def f(a: float) -> float:  # increasing in a > 0
        return (math.cosh(a) - 1.0) / a - r

    lo, hi = 0.0, 1.0
    while f(hi) < 0:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid == lo or mid == hi:
            break
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def keyed_uniform(keys: Iterable[Any], random_state: int | None) -> np.ndarray:
    """U in [0, 1) per key: BLAKE2b(f"{random_state}:{key}")[:8] / 2**64 (see module doc)."""
    seed = "" if random_state is None else str(int(random_state))
    out = [int.from_bytes(hashlib.blake2b(f"{seed}:{k}".encode(), digest_size=8).digest(),
                          "big") for k in keys]
    return np.asarray(out, dtype=np.float64) / 2.0 ** 64


class NoisyPredictor(RegressorMixin, BaseEstimator):
    """``base``'s prediction times exp(u), u ~ U(-a, a) keyed per request (module docstring)."""

    def __init__(self, base: OutputLengthModel | None = None, rel_error: float = 0.0, random_state: int | None = 0):
        self.base = base
        self.rel_error = rel_error
        self.random_state = random_state

    def _validate(self) -> None:
        r = self.rel_error
        if (isinstance(r, bool) or not isinstance(r, (int, float, np.integer, np.floating))
                or not math.isfinite(r) or not 0 <= r <= REL_ERROR_MAX):
            raise ConfigError(f"rel_error must be a number in [0, {REL_ERROR_MAX:g}] "
                              f"(mean absolute relative error, 1.5 = 150%), got {r!r}")

    @property
    def amplitude(self) -> float:
        self._validate()
        return noise_amplitude(self.rel_error)

    def _base(self) -> OutputLengthModel:
        return self.base if self.base is not None else load_default()

    def fit(self, X: PredictorInput, y: Any) -> NoisyPredictor:
        self._validate()
        self._base().fit(X, y)
        return self

    def predict(self, X: PredictorInput, keys: Iterable[Any] | None = None) -> np.ndarray:
        """Noisy predictions keyed by ``keys`` (request ids). Without keys: the ``request_id``
        column of a Trace or DataFrame if it has one, else the row positions 0..n-1."""
        self._validate()
        base = np.asarray(self._base().predict(X), dtype=np.float64)
        if keys is None:
            frame = X.df if hasattr(X, "df") and hasattr(X, "meta") else X
            if isinstance(frame, pd.DataFrame) and "request_id" in frame.columns:
                keys = frame["request_id"].tolist()
            else:
                keys = range(len(base))
        keys = list(keys)
        if len(keys) != len(base):
            raise ValueError(f"got {len(keys)} keys for {len(base)} rows")
        a = noise_amplitude(self.rel_error)
        if a == 0:
            return base
        u = a * (2.0 * keyed_uniform(keys, self.random_state) - 1.0)
        return np.clip(base * elementwise(math.exp, u), 1.0, MAX_TOKENS)

    def predict_one(self, prompt_head: str, prompt_tokens: int, key: Any = None) -> float:
        """One request, keyed by ``key`` (its request id), equal to `predict` on that row."""
        self._validate()
        base = self._base().predict_one(prompt_head, prompt_tokens)
        a = noise_amplitude(self.rel_error)
        if a == 0:
            return base
        u = a * (2.0 * keyed_uniform([key], self.random_state)[0] - 1.0)
        return float(np.clip(base * math.exp(float(u)), 1.0, MAX_TOKENS))
