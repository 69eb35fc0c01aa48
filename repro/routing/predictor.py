"""Output-length predictors with scikit-learn's estimator API.

`LengthPredictor` (the shipped model, ``data/predictor/``)
    Input ``X``: a DataFrame with ``prompt_head`` (first characters of the prompt, str) and
    ``prompt_tokens`` (int); a `repro.workload.traces.Trace` is accepted too. Target: output tokens.
    Model: ridge regression on ``log1p(output_tokens)``; ``predict`` returns
    ``expm1(score)`` clipped to [1, 32768] (a conditional-median-like estimate, in tokens).
    Features:

    - text: word unigrams and bigrams of the first ``head_chars`` (256) characters, hashed into
      ``2**n_features_log2`` (65,536) columns; a row holds each column's count divided by the
      square root of the row's total count. Tokens are maximal runs of ASCII letters, digits,
      ``_`` or non-ASCII bytes of the UTF-8 text, ASCII-lowercased, at least 2 bytes long.
      The hashing is our own vectorized numpy code (a polynomial hash mod 2**64 of each token's
      bytes, bigrams combined from their two token hashes, then a multiplicative mix), so it is
      stateless, stable across library versions, and fast: heads are deduplicated and the whole
      batch is featurized with array operations, no per-token Python. (On held-out data the
      first 256 characters predicted as well as the first 1000, and they keep most of the
      filler of long documents out of the features.)
    - length: ``log1p(prompt_tokens)``, its square / 10, and hinges ``max(log2(1 + L) - k, 0)``
      for k = 1..15 (a piecewise-linear response to prompt length).

    Persistence without pickles: ``model.npz`` (float32 coefficients) + ``model.json``
    (hyperparameters, feature spec, training record). Predictions of a loaded model equal the
    saved model's exactly.

Training data (`train_default`, ``python -m repro.routing.predictor``): the ShareGPT pairs table is split
by row with a fixed seed (80% train / 20% held out). The training set is the raw training rows
plus, on the same rows, requests synthesized by the three workload families
(`repro.workload.traces.synthesize`: chat, reasoning, documents), so that the model sees the prompt
templates and filler the traces actually send and learns that the reasoning template means long
outputs and documents' answers are short. Held-out metrics are computed on the held-out rows the
same way (raw ShareGPT, and per family), for the model and for a constant baseline predicting
the training median: MAE in tokens, median absolute relative error |pred - y| / y, and Spearman
rank correlation (0 for a constant prediction, which carries no rank information).

`NoisyPredictor(base, rel_error, random_state)` multiplies the base prediction by exp(u),
u ~ Uniform(-a, a) with (cosh a - 1) / a = rel_error, which makes the mean absolute relative
error E|e^u - 1| equal ``rel_error`` (the paper's 0..150% study). u is keyed per request, not by
position in a batch: U = (first 8 bytes of BLAKE2b(f"{random_state}:{key}"), big-endian) / 2**64,
u = a (2U - 1); so the simulator and the proxy give a request the same noise.

`ConstantPredictor(value)` predicts one number for everyone (the "no length signal" ablation).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin

from repro.errors import ConfigError
from repro.paths import PREDICTOR_DIR
from repro.workload.sharegpt import HELDOUT_FRACTION, SPLIT_SEED, heldout_mask

if TYPE_CHECKING:
    from repro.workload.traces import Trace

PredictorInput: TypeAlias = "pd.DataFrame | Trace | dict[str, Any]"
"""A predictor's ``X``: a DataFrame (or dict of columns) with ``prompt_head`` and ``prompt_tokens``,
a trace-shaped DataFrame, or a `repro.workload.traces.Trace`."""

MODEL_FORMAT = 1
MAX_TOKENS = 32_768

REL_ERROR_MAX = 10.0

# ---- fast hashed n-gram features ------------------------------------------------------------
_M64 = (1 << 64) - 1
_P = np.uint64(0x100000001B3)  # FNV prime: odd, so invertible mod 2**64
_MIX = np.uint64(0x9E3779B97F4A7C15)
_BIGRAM_MUL = np.uint64(0xC2B2AE3D27D4EB4F)
_BIGRAM_ADD = np.uint64(0x165667B19E3779F9)
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[ord("A"):ord("Z") + 1] += 32
_WORD = np.zeros(256, dtype=bool)
for _lo, _hi in (("0", "9"), ("a", "z"), ("A", "Z")):
    _WORD[ord(_lo):ord(_hi) + 1] = True
_WORD[ord("_")] = True
_WORD[0x80:] = True
_CHUNK_DOCS = 32_768


@functools.lru_cache(maxsize=8)
def _powers(n: int) -> np.ndarray:
    """P**j mod 2**64 for j < n."""
    out = np.empty(n, dtype=np.uint64)
    out[0] = 1
    with np.errstate(over="ignore"):
        if n > 1:
            out[1:] = np.cumprod(np.full(n - 1, _P, dtype=np.uint64), dtype=np.uint64)
    return out


def _mix(h: np.ndarray, n_bits: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint64(29))
        h = h * _MIX
        h = h ^ (h >> np.uint64(32))
        h = h * _MIX
    return (h >> np.uint64(64 - n_bits)).astype(np.int64)


def _hash_entries(texts: Sequence[str], n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of every unigram and bigram occurrence in ``texts`` (one row per text)."""
    enc = [t.encode("utf-8", "surrogatepass") for t in texts]
    lens = np.fromiter((len(e) + 1 for e in enc), dtype=np.int64, count=len(enc))
    starts = np.cumsum(lens) - lens
    buf = np.frombuffer(b"\x00".join(enc) + b"\x00", dtype=np.uint8)
    word = _WORD[buf]
    edge = np.diff(np.concatenate(([False], word, [False])).view(np.int8))
    tok_s = np.flatnonzero(edge == 1)
    tok_l = np.flatnonzero(edge == -1) - tok_s
    if len(tok_s) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # Polynomial hash of each token's lowercased bytes: sum_j b_j * P**j (mod 2**64).
    offsets = np.cumsum(tok_l) - tok_l
    step = np.ones(int(tok_l.sum()), dtype=np.int32)  # position inside the token, by cumsum
    step[offsets[1:]] = 1 - tok_l[:-1]
    step[0] = 0
    rel = np.cumsum(step, dtype=np.int32)
    pw = _powers(1 << max(6, int(tok_l.max()).bit_length()))
    with np.errstate(over="ignore"):
        vals = _LOWER[buf[word]].astype(np.uint64) * pw[rel]
        h = np.add.reduceat(vals, offsets, dtype=np.uint64)
        keep = tok_l >= 2
        h, tok_s = h[keep], tok_s[keep]
        doc = np.searchsorted(starts, tok_s, side="right") - 1
        same = doc[:-1] == doc[1:]
        hb = (h[:-1][same] * _BIGRAM_MUL + h[1:][same]) ^ _BIGRAM_ADD
    rows = np.concatenate((doc, doc[:-1][same]))
    cols = np.concatenate((_mix(h, n_bits), _mix(hb, n_bits)))
    return rows, cols


def _chunks(texts: Sequence[str], head_chars: int) -> Iterable[tuple[int, list[str]]]:
    for i in range(0, len(texts), _CHUNK_DOCS):
        yield i, [t[:head_chars] if isinstance(t, str) else "" for t in texts[i:i + _CHUNK_DOCS]]


def hash_text_features(texts: Sequence[str], head_chars: int = 256,
                       n_features_log2: int = 16) -> sp.csr_matrix:
    """Hashed unigram+bigram counts of each text's first ``head_chars`` characters, divided by
    the square root of the row's total count (a length normalisation that, unlike the l2 norm
    of the counts, needs no sorting: `text_scores` computes X @ w with two bincounts)."""
    parts = []
    for _, chunk in _chunks(texts, head_chars):
        rows, cols = _hash_entries(chunk, n_features_log2)
        n = len(chunk)
        total = np.bincount(rows, minlength=n).astype(np.float64)
        scale = 1.0 / np.sqrt(np.maximum(total, 1.0))
        m = sp.csr_matrix((scale[rows], (rows, cols)), shape=(n, 1 << n_features_log2))
        m.sum_duplicates()
        parts.append(m)
    if not parts:
        return sp.csr_matrix((0, 1 << n_features_log2), dtype=np.float64)
    return sp.vstack(parts, format="csr")


def text_scores(texts: Sequence[str], coef: np.ndarray, head_chars: int = 256) -> np.ndarray:
    """``hash_text_features(texts) @ coef`` without building the matrix."""
    n_bits = int(len(coef)).bit_length() - 1
    coef = np.asarray(coef, dtype=np.float64)
    out = np.zeros(len(texts), dtype=np.float64)
    for i, chunk in _chunks(texts, head_chars):
        rows, cols = _hash_entries(chunk, n_bits)
        n = len(chunk)
        total = np.bincount(rows, minlength=n).astype(np.float64)
        acc = np.bincount(rows, weights=coef[cols], minlength=n)
        out[i:i + n] = acc / np.sqrt(np.maximum(total, 1.0))
    return out


_WORD_RUN = re.compile(b"[" + b"".join(re.escape(bytes([b])) for b in range(256) if _WORD[b]) + b"]+")
_LOWER_TABLE = bytes(_LOWER.tolist())
_P_INT, _MIX_INT = int(_P), int(_MIX)
_BIGRAM_MUL_INT, _BIGRAM_ADD_INT = int(_BIGRAM_MUL), int(_BIGRAM_ADD)


_TOKEN_HASHES: dict[bytes, tuple[int, int]] = {}  # word -> (hash, mixed hash): prompts share most words
_BIGRAM_HASHES: dict[tuple[bytes, bytes], int] = {}  # (word, next word) -> mixed hash
_HASHES_MAX = 200_000  # entries per table; a full table starts again empty


def _remember(table: dict, key: Any, value: Any) -> Any:
    if len(table) >= _HASHES_MAX:
        table.clear()
    table[key] = value
    return value


def _mix_int(h: int, n_bits: int) -> int:
    h ^= h >> 29
    h = (h * _MIX_INT) & _M64
    h ^= h >> 32
    h = (h * _MIX_INT) & _M64
    return h >> (64 - n_bits)


def text_score_one(text: str, coef: Sequence[float], head_chars: int = 256) -> float:
    """``text_scores([text], coef, head_chars)[0]`` for one text, in plain Python (no array set-up;
    the proxy's path). ``coef``: the weights as Python floats (``coef.astype(float64).tolist()``:
    `text_scores` sums in float64 too). The same hashes in the same order, summed in the order
    `numpy.bincount` sums them, so the result is bit-identical (tested)."""
    n_bits = int(len(coef)).bit_length() - 1
    data = (text[:head_chars] if isinstance(text, str) else "").encode("utf-8", "surrogatepass")
    tokens, hashes, cols = [], [], []
    for token in _WORD_RUN.findall(data.translate(_LOWER_TABLE)):  # lowercasing keeps word bytes word bytes
        if len(token) < 2:
            continue  # hashed, then dropped (and no bigram spans it): only tokens of >= 2 bytes count
        known = _TOKEN_HASHES.get(token)
        if known is None:
            h = 0
            for b in reversed(token):  # sum_j b_j P**j (mod 2**64), by Horner's rule
                h = (h * _P_INT + b) & _M64
            known = _remember(_TOKEN_HASHES, token, (h, _mix_int(h, 64)))
        tokens.append(token)
        hashes.append(known[0])
        cols.append(known[1] >> (64 - n_bits))
    for i in range(1, len(tokens)):
        pair = (tokens[i - 1], tokens[i])
        mixed = _BIGRAM_HASHES.get(pair)
        if mixed is None:
            mixed = _remember(_BIGRAM_HASHES, pair,
                              _mix_int(((hashes[i - 1] * _BIGRAM_MUL_INT + hashes[i]) & _M64) ^ _BIGRAM_ADD_INT, 64))
        cols.append(mixed >> (64 - n_bits))
    acc = 0.0
    for c in cols:
        acc += coef[c]
    return float(acc / np.sqrt(max(float(len(cols)), 1.0)))


def length_features(prompt_tokens: np.ndarray) -> np.ndarray:
    """The prompt-length columns (see the module docstring)."""
    pt = np.maximum(np.asarray(prompt_tokens, dtype=np.float64), 0.0)
    lp = np.log1p(pt)
    l2 = np.log2(pt + 1.0)
    hinges = np.maximum(l2[:, None] - np.arange(1, 16, dtype=np.float64)[None, :], 0.0)
    return np.column_stack((lp, lp * lp / 10.0, hinges))


def _as_frame(X: PredictorInput) -> pd.DataFrame:
    """Accept a DataFrame with prompt_head/prompt_tokens, or a Trace."""
    if hasattr(X, "features") and hasattr(X, "df"):  # repro.workload.traces.Trace
        return X.features()
    if isinstance(X, pd.DataFrame):
        if "prompt_head" not in X.columns or "prompt_tokens" not in X.columns:
            if {"family", "source_index", "prompt_tokens", "request_id"} <= set(X.columns):
                from repro.workload.traces import predictor_frame
                return predictor_frame(X)
            raise ConfigError("predictor input must have columns prompt_head and prompt_tokens "
                              f"(got {list(X.columns)})")
        return X
    if isinstance(X, dict):
        return pd.DataFrame(X)
    raise ConfigError(f"predictor input must be a DataFrame or a Trace, got {type(X).__name__}")


def _unique_heads(heads: pd.Series, head_chars: int) -> tuple[np.ndarray, list[str]]:
    """(codes, unique first-``head_chars`` texts) with ``uniq[codes[i]] == heads[i][:k]``."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc

        arr = pa.array(heads, type=pa.large_string())
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        enc = pc.dictionary_encode(pc.utf8_slice_codeunits(pc.fill_null(arr, ""), 0, head_chars))
        return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), \
            enc.dictionary.to_pylist()
    except (ImportError, TypeError, ValueError, UnicodeError, ArithmeticError,
            getattr(__import__("pyarrow"), "ArrowException", Exception)):
        cut = pd.Series([h[:head_chars] if isinstance(h, str) else "" for h in heads],
                        dtype=object)
        codes, uniq = pd.factorize(cut)
        return codes.astype(np.int64), list(uniq)


def _heads_and_tokens(X: PredictorInput) -> tuple[list[str], np.ndarray]:
    df = _as_frame(X)
    heads = ["" if not isinstance(h, str) else h for h in df["prompt_head"].tolist()]
    return heads, df["prompt_tokens"].to_numpy(dtype=np.float64)


# ---- metrics --------------------------------------------------------------------------------
def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation; 0.0 when either side is constant (no rank information)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return 0.0
    ra = pd.Series(a).rank().to_numpy()
    rb = pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


def length_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """MAE (tokens), median absolute relative error, Spearman; n."""
    y = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    return {
        "n": int(len(y)),
        "mae_tokens": round(float(np.mean(np.abs(p - y))), 2),
        "median_abs_rel_error": round(float(np.median(np.abs(p - y) / y)), 4),
        "spearman": round(spearman(p, y), 4),
    }


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
        heads, tokens = _heads_and_tokens(X)
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
        df = _as_frame(X)
        tokens = df["prompt_tokens"].to_numpy(dtype=np.float64)
        if len(df) == 0:
            return np.zeros(0, dtype=np.float64)
        # Identical heads (same ShareGPT row) share their text score: featurize each once.
        codes, uniq = _unique_heads(df["prompt_head"], self.head_chars)
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
        return np.clip(np.expm1(self.predict_log(X)), 1.0, MAX_TOKENS)

    def predict_one(self, prompt_head: str, prompt_tokens: int, key: Any = None) -> float:
        """One request without building a DataFrame (the proxy's hot path); equal to `predict`."""
        self._check_fitted()
        coef = self.__dict__.get("_text_coef_list")
        if coef is None or len(coef) != len(self.text_coef_):  # the weights as Python floats, made once
            coef = self._text_coef_list = self.text_coef_.astype(np.float64).tolist()
        score = text_score_one(prompt_head, coef, self.head_chars) + float(self.intercept_)
        # the columns of `length_features`: its logarithms by the same numpy loops, the rest in
        # Python floats (IEEE doubles: the same sums and products, in the same order, as the batch)
        pt = max(float(prompt_tokens), 0.0)
        lp, l2 = float(np.log1p(np.float64(pt))), float(np.log2(np.float64(pt + 1.0)))
        feats = [lp, lp * lp / 10.0, *(max(l2 - k, 0.0) for k in range(1, 16))]
        for f, c in zip(feats, self.length_coef_.tolist(), strict=True):
            score = score + f * c
        return min(max(float(np.expm1(np.float64(score))), 1.0), float(MAX_TOKENS))

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


# ---- ablations ------------------------------------------------------------------------------
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
        return np.clip(base * np.exp(u), 1.0, MAX_TOKENS)

    def predict_one(self, prompt_head: str, prompt_tokens: int, key: Any = None) -> float:
        """One request, keyed by ``key`` (its request id), equal to `predict` on that row."""
        self._validate()
        base = self._base().predict_one(prompt_head, prompt_tokens)
        a = noise_amplitude(self.rel_error)
        if a == 0:
            return base
        u = a * (2.0 * keyed_uniform([key], self.random_state)[0] - 1.0)
        return float(np.clip(base * np.exp(u), 1.0, MAX_TOKENS))


# ---- training -------------------------------------------------------------------------------
def build_datasets(seed: int = SPLIT_SEED, splits: Sequence[str] = ("train", "heldout")
                   ) -> dict[str, dict[str, tuple[pd.DataFrame, np.ndarray]]]:
    """``{"train"|"heldout": {group: (X, y)}}`` with groups sharegpt, chat, reasoning,
    documents (see the module docstring)."""
    from repro.vocab import FAMILIES
    from repro.workload.sharegpt import load_table
    from repro.workload.traces import family_pools, predictor_frame, synthesize

    table = load_table()
    held = heldout_mask(len(table), seed)
    pools = family_pools(all_rows=True)
    out: dict[str, dict[str, tuple[pd.DataFrame, np.ndarray]]] = {}
    for split, mask in (("train", ~held), ("heldout", held)):
        if split not in splits:
            continue
        rows = np.flatnonzero(mask)
        groups: dict[str, tuple[pd.DataFrame, np.ndarray]] = {}
        groups["sharegpt"] = (
            pd.DataFrame({"prompt_head": table["prompt_head"].to_numpy()[rows],
                          "prompt_tokens": table["prompt_tokens"].to_numpy()[rows]}),
            table["output_tokens"].to_numpy()[rows].astype(np.float64),
        )
        for k, fam in enumerate(FAMILIES):
            src = np.intersect1d(pools[fam], rows)
            synth = synthesize(fam, src, seed=seed + 1 + k + (0 if split == "train" else 100),
                               id_prefix=f"{split}-{fam}-")
            groups[fam] = (predictor_frame(synth),
                           synth["output_tokens"].to_numpy().astype(np.float64))
        out[split] = groups
    return out


def evaluate(model: OutputLengthModel, datasets: dict[str, tuple[pd.DataFrame, np.ndarray]],
             baseline: float) -> dict[str, Any]:
    """Held-out metrics per group (and pooled families) for ``model`` and the constant."""
    res: dict[str, Any] = {}
    pooled_y, pooled_p = [], []
    for group, (X, y) in datasets.items():
        p = model.predict(X)
        res[group] = {"model": length_metrics(y, p),
                      "constant_baseline": length_metrics(y, np.full(len(y), baseline))}
        if group != "sharegpt":
            pooled_y.append(y)
            pooled_p.append(p)
    y, p = np.concatenate(pooled_y), np.concatenate(pooled_p)
    res["families_pooled"] = {"model": length_metrics(y, p),
                              "constant_baseline": length_metrics(y, np.full(len(y), baseline))}
    return res


def train_default(out: str | Path | None = PREDICTOR_DIR, seed: int = SPLIT_SEED,
                  **params: Any) -> dict[str, Any]:
    """Train on the training split, evaluate on the held-out split, save to ``out``.

    Returns the metrics dict (also written to ``out/metrics.json``).
    """
    t0 = time.perf_counter()
    data = build_datasets(seed)
    train = data["train"]
    X = pd.concat([x for x, _ in train.values()], ignore_index=True)
    y = np.concatenate([y for _, y in train.values()])
    model = LengthPredictor(**params).fit(X, y)
    metrics = {
        "split": {"seed": seed, "heldout_fraction": HELDOUT_FRACTION,
                  "train_rows": {g: int(len(v[1])) for g, v in train.items()},
                  "heldout_rows": {g: int(len(v[1])) for g, v in data["heldout"].items()}},
        "constant_baseline_value": model.train_median_,
        "heldout": evaluate(model, data["heldout"], model.train_median_),
        "train_seconds": round(time.perf_counter() - t0, 2),
    }
    if out is not None:
        out = Path(out)
        model.save(out, extra={"training": {"split_seed": seed,
                                            "heldout_fraction": HELDOUT_FRACTION,
                                            "groups": list(train)}})
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        load_default.cache_clear()
    return metrics


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else PREDICTOR_DIR
    metrics = train_default(out)
    print(f"wrote {out}")
    for group, m in metrics["heldout"].items():
        a, b = m["model"], m["constant_baseline"]
        print(f"{group:16s} n={a['n']:5d}  MAE {a['mae_tokens']:8.1f} vs {b['mae_tokens']:8.1f}  "
              f"MdARE {a['median_abs_rel_error']:.3f} vs {b['median_abs_rel_error']:.3f}  "
              f"Spearman {a['spearman']:.3f} vs {b['spearman']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
