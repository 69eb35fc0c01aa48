"""The per-request journal: one schema for every backend (sim, emulated, vllm).

A journal is a JSON-Lines file, one object per request, fields in the order of `FIELDS`. It is
append-only: the proxy appends and flushes each row as the request ends; the simulator writes the
whole file at the end (deterministically: same inputs, same bytes). A row counts once its newline
is written: a torn last line (a writer killed mid-write: no newline, or not valid JSON) is dropped
on read and truncated away when a writer reopens the file.

Times are seconds from the run's start, on the backend's clock (virtual time in ``sim``, physics
time in ``emulated``/``vllm``: the wall clock times the emulator's time-scale factor).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from repro.journal_schema import FIELD_NAMES, FIELDS

if TYPE_CHECKING:  # pandas is imported where a frame is read or made: the proxy only writes (JournalWriter)
    import pandas as pd

_FIELD_SET = frozenset(FIELD_NAMES)


class JournalWriter:
    """Append-only, line-flushed JSONL writer (one row per request, `FIELDS` order)."""

    def __init__(self, path: str | Path, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_tail(self.path)
        self._fh = open(self.path, "a", encoding="utf-8")
        self._fsync = fsync

    def write(self, row: dict[str, Any]) -> None:
        """Append one row (fields in `FIELDS` order, missing ones null, NaN/inf null) and flush it."""
        if not _FIELD_SET.issuperset(row):
            raise ValueError(f"journal: unknown field(s) {sorted(set(row) - _FIELD_SET)}")
        get = row.get
        ordered = {name: _plain(get(name)) for name in FIELD_NAMES}
        self._fh.write(json.dumps(ordered, separators=(",", ":")) + "\n")
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _plain(value: Any) -> Any:
    """A JSON-ready value: numpy scalars as Python ones, non-finite floats as None (null)."""
    kind = type(value)
    if kind is float:  # the common cases first, without numpy (the proxy writes a row per request)
        return value if math.isfinite(value) else None
    if kind is str or kind is int or value is None or kind is bool:
        return value
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        value = float(value)
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _drop_torn_tail(path: Path) -> None:
    """Truncate a last line that has no newline or is not valid JSON (a killed writer's)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        data = fh.read()
        keep = len(data)
        if not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
        else:
            last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
            try:
                json.loads(data[last_start:])
            except ValueError:
                keep = last_start
        if keep != len(data):
            fh.truncate(keep)


def frame_bytes(df: pd.DataFrame) -> bytes:
    """A whole journal's file contents (deterministic bytes for the same frame; `write_frame`)."""
    missing = [n for n in FIELD_NAMES if n not in df.columns]
    if missing:
        raise ValueError(f"journal: frame lacks field(s) {missing}")
    text = _records_lines(df[list(FIELD_NAMES)])
    if text and not text.endswith("\n"):
        text += "\n"
    return text.encode("utf-8")


def write_frame(df: pd.DataFrame, path: str | Path) -> None:
    """Write a whole journal at once (`frame_bytes`); atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = frame_bytes(df)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _records_lines(df: pd.DataFrame) -> str:
    """``df.to_json(orient="records", lines=True, double_precision=15)``, byte for byte, faster.

    pandas writes the records as one JSON array and then turns each top-level comma into a newline
    with a byte-by-byte scan that tracks quotes and brackets (a third of the write's time). The
    records are flat objects, so the top-level commas are exactly the ``},{`` between two rows; when
    ``},{`` occurs exactly ``len(df) - 1`` times (no string value contains it), replacing it is the
    same conversion. Otherwise (or for an empty frame) pandas converts it."""
    if len(df) == 0:
        return df.to_json(orient="records", lines=True, double_precision=15)
    text = df.to_json(orient="records", double_precision=15)
    if text[0] != "[" or text[-1] != "]" or text.count("},{") != len(df) - 1:
        return df.to_json(orient="records", lines=True, double_precision=15)
    return text[1:-1].replace("},{", "}\n{") + "\n"


def read(path: str | Path) -> pd.DataFrame:
    """Read a journal; a torn last line is dropped. Columns typed per `FIELDS`."""
    path = Path(path)
    data = path.read_bytes() if path.exists() else b""
    lines = data.split(b"\n")
    if lines and lines[-1].strip():  # no newline after the last row: its write never finished (as the writer rules)
        lines[-1] = b""
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i >= len(lines) - 2:  # the last (torn) line only
                break
            raise ValueError(f"journal {path}: line {i + 1} is not valid JSON") from None
    return frame(rows)


def frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows (dicts) to a typed journal DataFrame."""
    import pandas as pd

    df = pd.DataFrame(list(rows), columns=list(FIELD_NAMES))
    for f in FIELDS:
        if f.dtype == "int64":
            df[f.name] = pd.to_numeric(df[f.name]).astype("Int64")
        elif f.dtype == "float64":
            df[f.name] = pd.to_numeric(df[f.name]).astype("float64")
        else:
            df[f.name] = df[f.name].astype("string")
    return df
