"""Every number the paper states (``data/paper_reference.csv``), with its section and meaning.

Columns: key, section, figure_or_table, quantity, policy, workload, value, unit, note.
A stated range ("0.42 to 0.52 s") is two rows (``..._lo`` and ``..._hi``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

from repro.errors import ConfigError
from repro.paths import DATA_DIR

REFERENCE_PATH = DATA_DIR / "paper_reference.csv"
COLUMNS = ["key", "section", "figure_or_table", "quantity", "policy", "workload", "value", "unit", "note"]


@lru_cache(maxsize=4)
def _read(path: str) -> pd.DataFrame:
    df = pd.read_csv(path, dtype={c: "string" for c in COLUMNS if c != "value"}, keep_default_na=False)
    if list(df.columns) != COLUMNS:
        raise ConfigError(f"paper reference: {path} must have columns {COLUMNS}, got {list(df.columns)}")
    if not df["key"].is_unique:
        dup = df.loc[df["key"].duplicated(), "key"].tolist()
        raise ConfigError(f"paper reference: duplicate keys {dup}")
    df["value"] = df["value"].astype(float)
    return df


def load(path: str | Path = REFERENCE_PATH) -> pd.DataFrame:
    """The paper's numbers as a DataFrame (a copy; empty strings where a column does not apply)."""
    return _read(str(path)).copy()


def lookup(key: str, path: str | Path = REFERENCE_PATH) -> float:
    """The value of one paper number by key; an unknown key is a ConfigError naming it."""
    df = _read(str(path))
    hit = df.loc[df["key"] == key, "value"]
    if hit.empty:
        raise ConfigError(f"paper reference: unknown key {key!r} (see {REFERENCE_PATH.name})")
    return float(hit.iloc[0])


def row(key: str, path: str | Path = REFERENCE_PATH) -> dict:
    """The whole row of one paper number."""
    df = _read(str(path))
    hit = df.loc[df["key"] == key]
    if hit.empty:
        raise ConfigError(f"paper reference: unknown key {key!r} (see {REFERENCE_PATH.name})")
    return hit.iloc[0].to_dict()


def select(section: str | None = None, figure_or_table: str | None = None, **eq: str) -> pd.DataFrame:
    """Rows matching a section, a figure/table and any other column equalities."""
    df = load()
    if section is not None:
        df = df[df["section"] == section]
    if figure_or_table is not None:
        df = df[df["figure_or_table"] == figure_or_table]
    for col, val in eq.items():
        if col not in df.columns:
            raise ConfigError(f"paper reference: unknown column {col!r}")
        df = df[df[col] == val]
    return df.reset_index(drop=True)
