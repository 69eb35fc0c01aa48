"""The interface every output-length predictor meets (`OutputLengthModel`) and the shipped model
(`LengthPredictor`, ``data/predictor/``), with scikit-learn's estimator API.

`LengthPredictor`: ridge regression on ``log1p(output_tokens)`` over the features of
`repro.routing.predictor.features` (hashed prompt-head n-grams, prompt-length columns); ``predict``
returns ``expm1(score)`` clipped to [1, 32768] (a conditional-median-like estimate, in tokens), and
``predict_one`` the same number for one request without a DataFrame (the proxy's path).

Persistence without pickles: ``model.npz`` (float32 coefficients) + ``model.json``
(hyperparameters, feature spec, training record). Predictions of a loaded model equal the
saved model's exactly. `load_default` loads the shipped model once per process.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin

from repro.errors import ConfigError
from repro.paths import PREDICTOR_DIR
from repro.routing.predictor.features import (
    PredictorInput,
    as_frame,
    elementwise,
    hash_text_features,
    heads_and_tokens,
    length_features,
    text_score_one,
    text_scores,
    unique_heads,
)

MODEL_FORMAT = 1
MAX_TOKENS = 32_768


# ---- the interface ----------------------------------------------------------------------------
class OutputLengthModel(Protocol):
    """What the harness asks of an output-length predictor (`LengthPredictor`, `ConstantPredictor`,
    `NoisyPredictor`, or a user's): predictions in tokens, per batch and per request."""

    def fit(self, X: PredictorInput, y: Any) -> OutputLengthModel:
        """Train on ``X`` and the true output lengths ``y`` (tokens)."""
        ...

    def predict(self, X: PredictorInput, keys: Iterable[Any] | None = None) -> np.ndarray:
        """Predicted output tokens per row of ``X`` (``keys``: request ids, for keyed noise)."""
        ...

    def predict_one(self, prompt_head: str, prompt_tokens: int, key: Any = None) -> float:
        """Predicted output tokens of one request; equal to `predict` on that row."""
        ...


# ---- the model ------------------------------------------------------------------------------
class LengthPredictor(RegressorMixin, BaseEstimator):
    """Ridge on hashed prompt-head n-grams + prompt-length features, target log1p(output)."""

    def __init__(self, alpha: float = 1.0, head_chars: int = 256, n_features_log2: int = 16,
                 random_state: int | None = 0):
        self.alpha = alpha
        self.head_chars = head_chars
        self.n_features_log2 = n_features_log2
        self.random_state = random_state

    # features
    def _design(self, heads: list[str], tokens: np.ndarray) -> sp.csr_matrix:
        text = hash_text_features(heads, self.head_chars, self.n_features_log2)
        return sp.hstack([text, sp.csr_matrix(length_features(tokens))], format="csr")

    def fit(self, X: PredictorInput, y: Any, sample_weight: Any = None) -> LengthPredictor:
        from sklearn.linear_model import Ridge

        if not (isinstance(self.alpha, (int, float)) and self.alpha > 0):
            raise ConfigError(f"alpha must be > 0, got {self.alpha!r}")
        if not (isinstance(self.n_features_log2, int) and 8 <= self.n_features_log2 <= 24):
            raise ConfigError(f"n_features_log2 must be an integer in [8, 24], "
                              f"got {self.n_features_log2!r}")
        if not (isinstance(self.head_chars, int) and self.head_chars >= 1):
            raise ConfigError(f"head_chars must be an integer >= 1, got {self.head_chars!r}")
        heads, tokens = heads_and_tokens(X)
        y = np.asarray(y, dtype=np.float64)
        if len(y) != len(heads):
            raise ValueError(f"X has {len(heads)} rows but y has {len(y)}")
        if np.any(y < 0):
            raise ValueError("output lengths must be >= 0")
        design = self._design(heads, tokens)
        ridge = Ridge(alpha=float(self.alpha), solver="sparse_cg", tol=1e-6, max_iter=5000,
                      random_state=self.random_state)
        ridge.fit(design, np.log1p(y), sample_weight=sample_weight)
        n_text = 1 << self.n_features_log2
        coef = ridge.coef_.astype(np.float32)
        self.text_coef_ = coef[:n_text]
        self.length_coef_ = coef[n_text:]
        self.intercept_ = float(ridge.intercept_)
        self.train_median_ = float(np.median(y))
        self.n_train_ = int(len(y))
        self.n_features_in_ = 2
        self.feature_names_in_ = np.array(["prompt_head", "prompt_tokens"], dtype=object)
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "text_coef_"):
            from sklearn.exceptions import NotFittedError
            raise NotFittedError("LengthPredictor is not fitted: call fit() or "
                                 "LengthPredictor.load()")

    def predict_log(self, X: PredictorInput) -> np.ndarray:
        """The raw score, log1p(predicted output tokens)."""
        self._check_fitted()
        df = as_frame(X)
        tokens = df["prompt_tokens"].to_numpy(dtype=np.float64)
        if len(df) == 0:
            return np.zeros(0, dtype=np.float64)
        # Identical heads (same ShareGPT row) share their text score: featurize each once.
        codes, uniq = unique_heads(df["prompt_head"], self.head_chars)
        text_score = text_scores(uniq, self.text_coef_, self.head_chars)
        # Column by column (not a BLAS product) so that a row's score does not depend on the
        # batch it is in: the proxy's one-at-a-time predictions equal the simulator's batch.
        feats = length_features(tokens)
        score = text_score[codes] + self.intercept_
        for j, c in enumerate(self.length_coef_.astype(np.float64)):
            score = score + feats[:, j] * c
        return score

    def predict(self, X: PredictorInput, keys: Iterable[Any] | None = None) -> np.ndarray:
        """Predicted output tokens (float, in [1, 32768]); ``keys`` is accepted and ignored
        (the interface shared with `NoisyPredictor`)."""
        return np.clip(elementwise(math.expm1, self.predict_log(X)), 1.0, MAX_TOKENS)

    def predict_one(self, prompt_head: str, prompt_tokens: int, key: Any = None) -> float:
        """One request without building a DataFrame (the proxy's hot path); equal to `predict`."""
        self._check_fitted()
        coef = self.__dict__.get("_text_coef_list")
        if coef is None or len(coef) != len(self.text_coef_):  # the weights as Python floats, made once
            coef = self._text_coef_list = self.text_coef_.astype(np.float64).tolist()
        score = text_score_one(prompt_head, coef, self.head_chars) + float(self.intercept_)
        # the columns of `length_features`: its logarithms by the same C library functions, the rest in
        # Python floats (IEEE doubles: the same sums and products, in the same order, as the batch)
        pt = max(float(prompt_tokens), 0.0)
        lp, l2 = math.log1p(pt), math.log2(pt + 1.0)
        feats = [lp, lp * lp / 10.0, *(max(l2 - k, 0.0) for k in range(1, 16))]
        for f, c in zip(feats, self.length_coef_.tolist(), strict=True):
            score = score + f * c
        return min(max(math.expm1(score), 1.0), float(MAX_TOKENS))

    # persistence
    def save(self, path: str | Path = PREDICTOR_DIR, extra: dict[str, Any] | None = None) -> Path:
        """Write ``model.npz`` + ``model.json`` into directory ``path``."""
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path / "model.npz", text_coef=self.text_coef_,
                            length_coef=self.length_coef_)
        meta = {
            "format": MODEL_FORMAT,
            "class": "LengthPredictor",
            "params": self.get_params(),
            "intercept": self.intercept_,
            "train_median": self.train_median_,
            "n_train": self.n_train_,
            "features": {
                "text": "hashed unigram+bigram counts / sqrt(row total) (repro.routing.predictor."
                        "hash_text_features)",
                "length": "log1p(L), log1p(L)^2/10, max(log2(1+L)-k, 0) for k=1..15",
                "target": "log1p(output_tokens)",
            },
        }
        if extra:
            meta.update(extra)
        (path / "model.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path = PREDICTOR_DIR) -> LengthPredictor:
        path = Path(path)
        meta_path = path / "model.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{meta_path} is missing; train it with "
                                    "`python -m repro.routing.predictor`")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != MODEL_FORMAT or meta.get("class") != "LengthPredictor":
            raise ValueError(f"{meta_path}: unsupported model format {meta.get('format')!r}")
        model = cls(**meta["params"])
        with np.load(path / "model.npz") as z:
            model.text_coef_ = z["text_coef"].astype(np.float32)
            model.length_coef_ = z["length_coef"].astype(np.float32)
        if len(model.text_coef_) != 1 << model.n_features_log2:
            raise ValueError(f"{path}: coefficient count does not match n_features_log2")
        model.intercept_ = float(meta["intercept"])
        model.train_median_ = float(meta["train_median"])
        model.n_train_ = int(meta["n_train"])
        model.n_features_in_ = 2
        model.feature_names_in_ = np.array(["prompt_head", "prompt_tokens"], dtype=object)
        return model


@functools.lru_cache(maxsize=1)
def load_default() -> LengthPredictor:
    """The shipped model (``data/predictor``), loaded once per process."""
    return LengthPredictor.load(PREDICTOR_DIR)


def default_train_median() -> float:
    """The shipped model's training median (the constant baseline's value)."""
    return json.loads((PREDICTOR_DIR / "model.json").read_text())["train_median"]

