"""A predictor's inputs and features: what ``X`` may be (`PredictorInput`), and the columns
`repro.routing.predictor.model.LengthPredictor` regresses on.

Input ``X``: a DataFrame with ``prompt_head`` (first characters of the prompt, str) and ``prompt_tokens``
(int); a `repro.workload.traces.Trace`, a trace-shaped DataFrame or a dict of columns is accepted too
(`as_frame`).

- text: word unigrams and bigrams of the first ``head_chars`` (256) characters, hashed into
  ``2**n_features_log2`` (65,536) columns; a row holds each column's count divided by the
  square root of the row's total count. Tokens are maximal runs of ASCII letters, digits,
  ``_`` or non-ASCII bytes of the UTF-8 text, ASCII-lowercased, at least 2 bytes long.
  The hashing is our own vectorized numpy code (a polynomial hash mod 2**64 of each token's
  bytes, bigrams combined from their two token hashes, then a multiplicative mix), so it is
  stateless, stable across library versions, and fast: heads are deduplicated and the whole
  batch is featurized with array operations, no per-token Python (`hash_text_features`,
  `text_scores`); `text_score_one` gives one text's score bit for bit in plain Python (the proxy's
  path). (On held-out data the first 256 characters predicted as well as the first 1000, and they
  keep most of the filler of long documents out of the features.) The hashes must never change:
  the shipped model's coefficients are indexed by them.
- length: ``log1p(prompt_tokens)``, its square / 10, and hinges ``max(log2(1 + L) - k, 0)``
  for k = 1..15 (a piecewise-linear response to prompt length, `length_features`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pandas as pd
import scipy.sparse as sp

from repro.errors import ConfigError

if TYPE_CHECKING:
    from repro.workload.traces import Trace

PredictorInput: TypeAlias = "pd.DataFrame | Trace | dict[str, Any]"
"""A predictor's ``X``: a DataFrame (or dict of columns) with ``prompt_head`` and ``prompt_tokens``,
a trace-shaped DataFrame, or a `repro.workload.traces.Trace`."""

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


def elementwise(fn: Callable[[float], float], values: np.ndarray) -> np.ndarray:
    """``fn`` (one of `math`'s: the C library's) of every element of ``values``, as float64. Not numpy's own
    loops: those of ``log1p``, ``log2``, ``expm1`` and ``exp`` differ with the CPU (Intel's SVML where AVX-512 is
    found, the C library elsewhere) in the last bits, and a journal must not depend on the machine's instruction
    set (`tests/test_journal_golden.py`)."""
    flat = np.asarray(values, dtype=np.float64)
    return np.fromiter(map(fn, flat.ravel().tolist()), dtype=np.float64, count=flat.size).reshape(flat.shape)


def length_features(prompt_tokens: np.ndarray) -> np.ndarray:
    """The prompt-length columns (see the module docstring)."""
    pt = np.maximum(np.asarray(prompt_tokens, dtype=np.float64), 0.0)
    lp = elementwise(math.log1p, pt)
    l2 = elementwise(math.log2, pt + 1.0)
    hinges = np.maximum(l2[:, None] - np.arange(1, 16, dtype=np.float64)[None, :], 0.0)
    return np.column_stack((lp, lp * lp / 10.0, hinges))


def as_frame(X: PredictorInput) -> pd.DataFrame:
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


def unique_heads(heads: pd.Series, head_chars: int) -> tuple[np.ndarray, list[str]]:
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


def heads_and_tokens(X: PredictorInput) -> tuple[list[str], np.ndarray]:
    df = as_frame(X)
    heads = ["" if not isinstance(h, str) else h for h in df["prompt_head"].tolist()]
    return heads, df["prompt_tokens"].to_numpy(dtype=np.float64)

