"""`write_frame` writes exactly the bytes of pandas' ``to_json(orient="records", lines=True,
double_precision=15)`` (the journal format), including when a string value contains the row
separator ``},{`` that its fast path replaces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repro.experiment.journal import write_frame
from repro.journal_schema import FIELD_NAMES


def _frame(reasons: list[str | None]) -> pd.DataFrame:
    n = len(reasons)
    cols = {name: [None] * n for name in FIELD_NAMES}
    cols["request_id"] = [f"r{i}" for i in range(n)]
    cols["reason"] = reasons
    cols["arrival_s"] = np.linspace(0.0, 1.0 / 3.0, n)
    cols["ttft_s"] = [np.nan if i % 2 else 1e-9 * (i + 1) for i in range(n)]
    cols["prompt_tokens"] = np.arange(n, dtype=np.int64)
    return pd.DataFrame(cols, columns=list(FIELD_NAMES))


@pytest.mark.parametrize("reasons", [
    [None, "plain", None],
    ["a },{ b", None, 'quote " and },{"x'],  # the separator inside a string: pandas' own scan
    ['back\\slash },{', "ok"],
    ["only one row"],
    [],
])
def test_write_frame_bytes_are_pandas_lines(reasons: list[str | None], tmp_path: Path) -> None:
    df = _frame(reasons)
    path = tmp_path / "j.jsonl"
    write_frame(df, path)
    want = df[list(FIELD_NAMES)].to_json(orient="records", lines=True, double_precision=15)
    if want and not want.endswith("\n"):
        want += "\n"
    assert path.read_text(encoding="utf-8") == want
    assert path.read_text(encoding="utf-8").count("\n") == max(len(df), 1 if want else 0)
