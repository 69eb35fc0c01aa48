"""Workload families and traces: determinism, family contrasts, exact prompt text."""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.errors import ConfigError
from repro.workload import traces as W
from repro.workload.arrivals import ArrivalSpec
from repro.workload.sharegpt import load_table
from repro.workload.tokenizer import DEFAULT_TOKENIZER as TOK
from repro.workload.traces import (
    COLUMNS,
    DOCUMENTS_MAX,
    DOCUMENTS_MEDIAN,
    DOCUMENTS_MIN,
    FAMILIES,
    WORKLOADS,
    Trace,
    filler_text,
    make_trace,
    predictor_frame,
    prompt_heads,
    prompt_text,
    synthesize,
    table_one,
)


@pytest.fixture(scope="module")
def traces():
    return {w: make_trace(w, 3, 5.0, 4000) for w in WORKLOADS}


def test_columns_and_dtypes(traces):
    for w, t in traces.items():
        df = t.df
        assert tuple(df.columns) == COLUMNS
        assert df["arrival_s"].dtype == np.float64
        for c in ("source_index", "prompt_tokens", "output_tokens"):
            assert df[c].dtype == np.int64
        for c in ("request_id", "family", "slo_class"):
            assert pd.api.types.is_string_dtype(df[c])
        assert df["arrival_s"].is_monotonic_increasing and df["arrival_s"].iloc[0] > 0
        assert df["request_id"].iloc[42] == f"{w}-s3-000042"
        assert df["request_id"].is_unique
        assert set(df["slo_class"]) == {"tight", "loose"}
        assert t.meta["workload"] == w and t.meta["seed"] == 3 and t.meta["rate"] == 5.0
        assert t.meta["n_requests"] == len(t) == 4000
        assert t.arrival == W.default_arrival(w)


def test_same_arguments_same_trace():
    a = make_trace("mixed", 7, 2.5, 3000)
    b = make_trace("mixed", 7, 2.5, 3000)
    pd.testing.assert_frame_equal(a.df, b.df, check_exact=True)
    assert a == b
    c = make_trace("mixed", 8, 2.5, 3000)
    assert not a.df["source_index"].equals(c.df["source_index"])


def test_save_load_round_trip_exact(tmp_path, traces):
    for w in ("mixed", "documents"):
        t = traces[w]
        path = t.save(tmp_path / f"{w}.parquet")
        back = Trace.load(path)
        pd.testing.assert_frame_equal(back.df, t.df, check_exact=True)
        assert back.meta == t.meta
        assert back == t
        assert back.arrival == t.arrival
    burst = make_trace("chat", 1, 3.0, 100, ArrivalSpec("burst", burst_factor=2, duty=0.3))
    assert Trace.load(burst.save(tmp_path / "b.parquet")).arrival == burst.arrival


def test_rate_and_arrival_process_do_not_change_lengths():
    base = make_trace("mixed", 5, 1.0, 2000)
    for rate, arrival in ((9.0, None), (1.0, ArrivalSpec("poisson")),
                          (3.0, ArrivalSpec("burst", burst_factor=2.0, duty=0.4))):
        other = make_trace("mixed", 5, rate, 2000, arrival)
        cols = [c for c in COLUMNS if c != "arrival_s"]
        pd.testing.assert_frame_equal(other.df[cols], base.df[cols], check_exact=True)
    fast = make_trace("mixed", 5, 4.0, 2000)
    np.testing.assert_allclose(fast.df["arrival_s"] * 4.0, base.df["arrival_s"], rtol=1e-12)


def test_prefix_stability():
    long = make_trace("mixed", 2, 3.0, 5000)
    short = make_trace("mixed", 2, 3.0, 800)
    pd.testing.assert_frame_equal(short.df, long.df.iloc[:800], check_exact=True)


def test_families_stress_different_resources(traces):
    stats = {w: t.df[["prompt_tokens", "output_tokens"]].mean() for w, t in traces.items()}
    chat, reas, docs = stats["chat"], stats["reasoning"], stats["documents"]
    assert docs["prompt_tokens"] > 10 * chat["prompt_tokens"]
    assert reas["output_tokens"] > 3 * chat["output_tokens"]
    assert docs["output_tokens"] < 1.5 * chat["output_tokens"]
    assert reas["prompt_tokens"] < 2 * chat["prompt_tokens"]
    c = traces["chat"].df
    assert c["prompt_tokens"].max() <= 1024 and c["output_tokens"].max() <= 512
    r = traces["reasoning"].df
    assert r["output_tokens"].between(512, 8192).all()
    d = traces["documents"].df
    assert d["prompt_tokens"].between(DOCUMENTS_MIN, DOCUMENTS_MAX).all() and d["output_tokens"].max() <= 512
    assert 0.85 * DOCUMENTS_MEDIAN <= d["prompt_tokens"].median() <= 1.15 * DOCUMENTS_MEDIAN


def test_family_lengths_follow_sharegpt(traces):
    table = load_table()
    c = traces["chat"].df
    src = table.iloc[c["source_index"].to_numpy()]
    assert np.array_equal(src["prompt_tokens"].to_numpy(), c["prompt_tokens"].to_numpy())
    assert np.array_equal(src["output_tokens"].to_numpy(), c["output_tokens"].to_numpy())
    r = traces["reasoning"].df
    base = table["output_tokens"].to_numpy()[r["source_index"].to_numpy()]
    assert (r["prompt_tokens"].to_numpy()
            == table["prompt_tokens"].to_numpy()[r["source_index"].to_numpy()]
            + W.prefix_tokens("reasoning")).all()
    # output ~ sharegpt output x lognormal(log 4, 0.3), then clipped: strongly correlated
    free = (r["output_tokens"] > 512) & (r["output_tokens"] < 8192)
    ratio = r["output_tokens"][free] / base[free.to_numpy()]
    assert 3.3 < np.median(ratio) < 4.8
    assert np.corrcoef(np.log(base), np.log(r["output_tokens"]))[0, 1] > 0.7


def test_mixed_composition(traces):
    df = make_trace("mixed", 0, 1.0, 40_000).df
    share = df["family"].value_counts(normalize=True)
    assert share["chat"] == pytest.approx(0.5, abs=0.015)
    assert share["reasoning"] == pytest.approx(0.25, abs=0.015)
    assert share["documents"] == pytest.approx(0.25, abs=0.015)
    assert (df["slo_class"] == "tight").mean() == pytest.approx(0.5, abs=0.015)
    gaps = np.diff(df["arrival_s"].to_numpy())
    assert gaps.std() / gaps.mean() == pytest.approx(2 ** 0.5, rel=0.05)  # burstiness 0.5
    for fam in FAMILIES:  # each family's rows obey that family's rules
        sub = df[df["family"] == fam]
        pool = W.family_pools()[fam]
        assert np.isin(sub["source_index"], pool).all()


def _check_prompts(df, rows):
    heads = prompt_heads(df.iloc[rows])
    for k, i in enumerate(rows):
        text = prompt_text(df, i)
        assert TOK.count(text) == df["prompt_tokens"].iat[i], (i, df.iloc[i].to_dict())
        assert heads[k] == text[:1000]


def test_prompt_text_exact_and_heads_are_prefixes(traces):
    for t in traces.values():
        df = t.df
        rows = list(range(0, len(df), 13))
        _check_prompts(df, rows)


def test_heads_match_for_every_request_of_a_trace():
    t = make_trace("mixed", 11, 1.0, 1500)
    heads = prompt_heads(t)
    for i in range(len(t)):
        text = prompt_text(t, i)
        assert heads[i] == text[:1000]
        assert TOK.count(text) == t.df["prompt_tokens"].iat[i]


def test_prompt_text_content():
    t = make_trace("mixed", 1, 1.0, 300)
    table = load_table()
    for i in range(60):
        row = t.request(i)
        text = prompt_text(row)
        head = table["prompt_head"].iat[row["source_index"]].strip()
        if row["family"] == "reasoning":
            assert text.startswith(W.REASONING_PREFIX)
        elif row["family"] == "documents":
            assert text.startswith(W.DOCUMENT_PREFIX)
            assert W.DOCUMENT_SUFFIX in text
        probe = head[:50]
        if TOK.count(text) >= TOK.count(head) + W.prefix_tokens(row["family"]):
            assert probe in text
    # same row -> same text; different entry points agree
    assert prompt_text(t, 5) == prompt_text(t.df, 5) == prompt_text(t.df.iloc[5]) == \
        prompt_text(t.request(5)) == t.prompt_text(5)
    assert prompt_text(next(t.df.itertuples()), None) == prompt_text(t, 0)


def test_documents_do_not_share_long_prefixes():
    # Two requests on the same ShareGPT row get different filler (keyed by request id).
    df = synthesize("documents", [10, 10], seed=0)
    a, b = prompt_text(df, 0), prompt_text(df, 1)
    common = len(os.path.commonprefix([a, b]))
    assert common < 1500


def test_edge_lengths_cut_and_beyond_filler():
    df = synthesize("documents", [0, 1], seed=0)
    df.loc[0, "prompt_tokens"] = 3  # shorter than the template: cut
    df.loc[1, "prompt_tokens"] = 70_000  # longer than the filler: padded
    _check_prompts(df, [0, 1])
    chat = synthesize("chat", [2], seed=0)
    chat.loc[0, "prompt_tokens"] = 0
    assert prompt_text(chat, 0) == ""


@settings(max_examples=150, deadline=None)
@given(prefix=st.text(max_size=80), k=st.integers(0, 300), start=st.integers(0, 5000))
def test_filler_adds_exactly_one_token_per_piece(prefix, k, start):
    _, _, starts = W._filler()
    off = int(starts[start % len(starts)])
    assert TOK.count(prefix + filler_text(k, off)) == TOK.count(prefix) + k


def test_other_tokenizers_get_exact_counts():
    class WordTokenizer:
        def count(self, text):
            return len(text.split())

        def encode(self, text):
            return [len(w) for w in text.split()]

        def fit(self, text, n):
            words = text.split()
            words = words[:n] + ["pad"] * max(0, n - len(words))
            return " ".join(words)

    t = make_trace("mixed", 4, 1.0, 50)
    tok = WordTokenizer()
    for i in range(50):
        assert tok.count(prompt_text(t, i, tokenizer=tok)) == t.df["prompt_tokens"].iat[i]


@pytest.mark.parametrize("kwargs,field", [
    (dict(workload="poetry"), "workload"),
    (dict(workload=None), "workload"),
    (dict(rate=0), "rate"),
    (dict(rate=-2.0), "rate"),
    (dict(rate=float("nan")), "rate"),
    (dict(n_requests=0), "n_requests"),
    (dict(n_requests=2.5), "n_requests"),
    (dict(seed=-1), "seed"),
    (dict(arrival="poisson"), "arrival"),
])
def test_bad_input(kwargs, field):
    args = dict(workload="chat", seed=0, rate=1.0, n_requests=10) | kwargs
    with pytest.raises(ConfigError, match=field) as exc:
        make_trace(**args)
    if field == "workload":
        assert "chat, reasoning, documents, mixed" in str(exc.value)


def test_make_trace_is_fast():
    make_trace("mixed", 0, 1.0, 1000)  # warm the table cache
    best = min(_timed(lambda: make_trace("mixed", 1, 10.0, 100_000)) for _ in range(2))
    assert best < 1.0


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_predictor_frame_and_synthesize():
    t = make_trace("reasoning", 0, 1.0, 20)
    X = predictor_frame(t)
    assert list(X.columns) == ["prompt_head", "prompt_tokens"]
    assert X["prompt_head"].iloc[0].startswith("Solve the following problem")
    assert (X["prompt_tokens"].to_numpy() == t.df["prompt_tokens"].to_numpy()).all()
    s = synthesize("reasoning", [0, 1, 2], seed=1)
    assert tuple(s.columns) == COLUMNS and len(s) == 3
    with pytest.raises(ConfigError, match="family"):
        synthesize("mixed", [0])


def test_table_one():
    t1 = table_one(seed=0, n=4000)
    assert list(t1["workload"]) == list(WORKLOADS)
    for col in ("stresses", "prompt_mean", "prompt_p50", "prompt_p90", "prompt_p99",
                "prompt_max", "output_mean", "output_p99", "output_max"):
        assert col in t1.columns
    by = t1.set_index("workload")
    assert by.loc["documents", "prompt_p50"] > 10 * by.loc["chat", "prompt_p50"]
    assert by.loc["reasoning", "output_p50"] > 3 * by.loc["chat", "output_p50"]
    assert (by["prompt_p50"] <= by["prompt_p90"]).all() and (by["prompt_p99"] <= by["prompt_max"]).all()
