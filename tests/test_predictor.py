"""Output-length predictors: accuracy vs a constant, persistence, keyed noise, speed."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.metrics import r2_score

from repro.errors import ConfigError
from repro.paths import PREDICTOR_DIR
from repro.routing import predictor as P
from repro.routing.predictor import (
    ConstantPredictor,
    LengthPredictor,
    NoisyPredictor,
    build_datasets,
    hash_text_features,
    length_metrics,
    load_default,
    noise_amplitude,
    spearman,
    text_scores,
)
from repro.routing.predictor import features as F
from repro.workload.sharegpt import heldout_mask, load_table
from repro.workload.traces import make_trace, predictor_frame


@pytest.fixture(scope="module")
def heldout():
    return build_datasets(splits=("heldout",))["heldout"]


@pytest.fixture(scope="module")
def model():
    return load_default()


@pytest.fixture(scope="module")
def small_model():
    t = load_table().iloc[:3000]
    return LengthPredictor(alpha=1.0, n_features_log2=12).fit(
        t[["prompt_head", "prompt_tokens"]], t["output_tokens"])


# ---- accuracy -------------------------------------------------------------------------------
@pytest.mark.parametrize("group", ["sharegpt", "chat", "reasoning"])
def test_beats_constant_baseline_on_heldout(model, heldout, group):
    X, y = heldout[group]
    pred = model.predict(X)
    base = np.full(len(y), model.train_median_)
    m, b = length_metrics(y, pred), length_metrics(y, base)
    assert m["mae_tokens"] < 0.95 * b["mae_tokens"]
    assert m["spearman"] > 0.3 > b["spearman"]
    assert m["median_abs_rel_error"] < b["median_abs_rel_error"]


def test_heldout_families_pooled_rank_well(model, heldout):
    ys, ps = [], []
    for g in ("chat", "reasoning", "documents"):
        X, y = heldout[g]
        ys.append(y)
        ps.append(model.predict(X))
    y, p = np.concatenate(ys), np.concatenate(ps)
    assert spearman(p, y) > 0.6
    assert np.mean(np.abs(p - y)) < 0.8 * np.mean(np.abs(model.train_median_ - y))
    # The templates carry the signal: reasoning predicted far longer than chat.
    assert np.median(ps[1]) > 3 * np.median(ps[0])


def test_shipped_metrics_file_matches_model(model, heldout):
    metrics = json.loads((PREDICTOR_DIR / "metrics.json").read_text())
    X, y = heldout["sharegpt"]
    m = length_metrics(y, model.predict(X))
    assert metrics["heldout"]["sharegpt"]["model"] == m
    assert metrics["constant_baseline_value"] == model.train_median_


def test_heldout_rows_are_not_trained_on():
    mask = heldout_mask(1000)
    assert mask.sum() == 500
    assert np.array_equal(mask, heldout_mask(1000))
    # workload traces draw only from the held-out rows: a run never predicts a training prompt
    from repro.workload.sharegpt import load_table
    from repro.workload.traces import make_trace

    held = heldout_mask(len(load_table()))
    for w in ("chat", "reasoning", "documents", "mixed"):
        src = make_trace(w, 3, 5.0, 2000).df["source_index"].to_numpy()
        assert held[src].all()


# ---- estimator conventions and persistence --------------------------------------------------
def test_sklearn_conventions(small_model):
    est = LengthPredictor(alpha=2.0, random_state=3)
    assert est.get_params() == {"alpha": 2.0, "head_chars": 256, "n_features_log2": 16,
                                "random_state": 3}
    c = clone(est)
    assert c.get_params() == est.get_params() and not hasattr(c, "text_coef_")
    for attr in ("text_coef_", "length_coef_", "intercept_", "train_median_", "n_features_in_"):
        assert hasattr(small_model, attr)
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):
        est.predict(pd.DataFrame({"prompt_head": ["x"], "prompt_tokens": [1]}))
    with pytest.raises(ConfigError, match="prompt_head"):
        small_model.predict(pd.DataFrame({"text": ["x"]}))


def test_fit_returns_self_and_predictions_are_sane(small_model):
    t = load_table().iloc[3000:4000]
    X = t[["prompt_head", "prompt_tokens"]]
    p = small_model.predict(X)
    assert p.dtype == np.float64 and p.shape == (1000,)
    assert (p >= 1).all() and (p <= 32768).all()
    est = LengthPredictor(n_features_log2=10)
    assert est.fit(X, t["output_tokens"]) is est
    # RegressorMixin's score is R^2 of these very predictions (not of some other transform)
    assert small_model.score(X, t["output_tokens"]) == pytest.approx(r2_score(t["output_tokens"], p), abs=1e-12)


def test_save_load_round_trip_identical(tmp_path, small_model, model):
    X = load_table().iloc[:2000][["prompt_head", "prompt_tokens"]]
    small_model.save(tmp_path / "m")
    back = LengthPredictor.load(tmp_path / "m")
    assert back.get_params() == small_model.get_params()
    assert np.array_equal(back.predict(X), small_model.predict(X))
    assert not list((tmp_path / "m").glob("*.pkl"))
    again = LengthPredictor.load(PREDICTOR_DIR)
    assert np.array_equal(again.predict(X), model.predict(X))


def test_shipped_model_is_small():
    size = sum(f.stat().st_size for f in PREDICTOR_DIR.iterdir())
    assert size < 1_000_000


def test_trace_input_equals_frame_input(model):
    t = make_trace("mixed", 2, 1.0, 300)
    assert np.array_equal(model.predict(t), model.predict(predictor_frame(t)))
    assert np.array_equal(model.predict(t.df), model.predict(predictor_frame(t)))


def test_prediction_depends_on_head_only_through_first_chars(model):
    X = pd.DataFrame({"prompt_head": ["a" * 300 + " tail one", "a" * 300 + " other tail"],
                      "prompt_tokens": [80, 80]})
    p = model.predict(X)
    assert p[0] == p[1]


def test_object_and_string_columns_agree(model):
    X = load_table().iloc[:500][["prompt_head", "prompt_tokens"]]
    Xo = X.assign(prompt_head=X["prompt_head"].astype(object))
    assert np.array_equal(model.predict(X), model.predict(Xo))
    # strings that Arrow cannot hold (lone surrogates) take the fallback path
    Xs = pd.DataFrame({"prompt_head": pd.Series(["bad \ud800 text"], dtype=object),
                       "prompt_tokens": [10]})
    assert model.predict(Xs)[0] >= 1


# ---- the hashed features --------------------------------------------------------------------
def test_hash_features_are_pinned():
    """Hashing is our own code: these columns must never change (the shipped model needs them)."""
    rows, cols = F._hash_entries(["Hello, World! hello"], 16)
    assert rows.tolist() == [0, 0, 0, 0, 0]
    assert cols[:3].tolist() == [cols[0], cols[1], cols[0]]  # case-folded unigrams
    assert cols.tolist() == [16163, 6282, 16163, 26783, 7940]


@settings(max_examples=50, deadline=None)
@given(texts=st.lists(st.text(max_size=300), min_size=1, max_size=20))
def test_text_scores_equal_matrix_product(texts):
    coef = np.random.default_rng(0).normal(size=1 << 12)
    X = hash_text_features(texts, 256, 12)
    np.testing.assert_allclose(text_scores(texts, coef, 256), X @ coef, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(X.multiply(X).sum(axis=1)).ravel()[
        [i for i, t in enumerate(texts) if X[i].nnz]], [
        (X[i].data ** 2).sum() for i, t in enumerate(texts) if X[i].nnz])


# ---- noise ----------------------------------------------------------------------------------
@pytest.mark.parametrize("r", [0.05, 0.3, 1.0, 1.5, 4.0, 10.0])
def test_noise_amplitude_solves_the_equation(r):
    a = noise_amplitude(r)
    assert (math.cosh(a) - 1) / a == pytest.approx(r, rel=1e-9)


@pytest.mark.parametrize("r", [0.1, 0.5, 1.0, 1.5])
def test_noisy_mean_abs_relative_error(r):
    n = 40_000
    X = pd.DataFrame({"prompt_head": [""] * n, "prompt_tokens": np.full(n, 10)})
    noisy = NoisyPredictor(ConstantPredictor(200.0), rel_error=r, random_state=5)
    p = noisy.predict(X, keys=[f"req-{i}" for i in range(n)])
    mare = np.mean(np.abs(p / 200.0 - 1.0))
    assert mare == pytest.approx(r, rel=0.04)
    a = noise_amplitude(r)
    assert np.log(p / 200.0).min() >= -a - 1e-12 and np.log(p / 200.0).max() <= a + 1e-12


def test_zero_noise_is_the_base(model):
    X = load_table().iloc[:200][["prompt_head", "prompt_tokens"]]
    assert np.array_equal(NoisyPredictor(model, 0.0).predict(X), model.predict(X))


def test_noise_is_keyed_not_positional(model):
    t = make_trace("mixed", 3, 1.0, 400)
    X, keys = predictor_frame(t), t.df["request_id"].tolist()
    noisy = NoisyPredictor(model, rel_error=1.0, random_state=9)
    p = noisy.predict(X, keys=keys)
    perm = np.random.default_rng(0).permutation(len(keys))
    p_perm = noisy.predict(X.iloc[perm], keys=[keys[i] for i in perm])
    assert np.array_equal(p_perm, p[perm])
    # one request at a time (as the proxy does) gives the same numbers
    single = [noisy.predict(X.iloc[[i]], keys=[keys[i]])[0] for i in range(0, 400, 37)]
    assert np.array_equal(single, p[0:400:37])
    # a fresh instance with the same random_state agrees; another random_state does not
    assert np.array_equal(NoisyPredictor(model, 1.0, 9).predict(X, keys=keys), p)
    assert not np.array_equal(NoisyPredictor(model, 1.0, 10).predict(X, keys=keys), p)
    # a trace supplies its request ids as keys
    assert np.array_equal(noisy.predict(t), p)
    # without keys, the row position is the key
    pos = noisy.predict(X.iloc[:50])
    assert np.array_equal(pos, noisy.predict(X.iloc[:50], keys=range(50)))


@pytest.mark.parametrize("bad", [-0.1, 10.5, float("nan"), "1.0", None])
def test_rel_error_validation(bad):
    with pytest.raises(ConfigError, match="rel_error"):
        NoisyPredictor(ConstantPredictor(5.0), rel_error=bad).predict(
            pd.DataFrame({"prompt_head": ["x"], "prompt_tokens": [1]}))


def test_constant_predictor():
    X = pd.DataFrame({"prompt_head": ["a", "b", "c"], "prompt_tokens": [1, 2, 3]})
    assert ConstantPredictor(42.0).predict(X).tolist() == [42.0] * 3
    assert ConstantPredictor().fit(X, [10, 20, 300]).predict(X).tolist() == [20.0] * 3
    assert ConstantPredictor().predict(X)[0] == load_default().train_median_
    with pytest.raises(ConfigError, match="value"):
        ConstantPredictor(0.0).fit()
    assert ConstantPredictor(7.0).predict(make_trace("chat", 0, 1.0, 5)).tolist() == [7.0] * 5


def test_predict_one_equals_the_batch_prediction():
    from repro.workload.traces import make_trace, predictor_frame

    t = make_trace("mixed", 5, 10.0, 200)
    X = predictor_frame(t)
    ids = t.df["request_id"].tolist()
    base = P.load_default()
    for model in (base, P.NoisyPredictor(base, 1.5, random_state=3), P.ConstantPredictor(100.0)):
        batch = model.predict(X, keys=ids)
        rows = zip(X["prompt_head"], X["prompt_tokens"], ids, strict=True)
        one = [model.predict_one(h, n, key=k) for h, n, k in rows]
        assert np.allclose(batch, one, rtol=1e-12, atol=0)


def test_predict_one_is_bit_identical_to_the_batch_on_many_texts():
    """The proxy's one-request path (`text_score_one`: plain Python, word hashes kept between calls)
    gives the batch's exact bits: on ShareGPT heads, on random texts with non-ASCII words, short
    and empty ones, and again once every word's hash is remembered."""
    import random

    from repro.workload.sharegpt import load_table

    rng = random.Random(7)
    heads = load_table()["prompt_head"].astype(str).tolist()[:1500]
    alphabet = "aB_ 9-\u00e9\u4e2d.,Zq\n'"
    heads += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400))) for _ in range(800)]
    heads += ["", "a", "ab", "a b", "__", "x" * 300]
    tokens = [rng.randint(0, 40_000) for _ in heads]
    model = P.load_default()
    batch = model.predict(pd.DataFrame({"prompt_head": heads, "prompt_tokens": tokens}))
    assert np.unique(batch).size > 500  # the texts matter: not one constant
    coef = model.text_coef_.astype(np.float64).tolist()
    assert np.array_equal(P.text_scores(heads, model.text_coef_),
                          [P.text_score_one(h, coef) for h in heads])
    for _ in range(2):  # cold, then warm word-hash tables
        assert np.array_equal(batch, [model.predict_one(h, n) for h, n in zip(heads, tokens, strict=True)])
