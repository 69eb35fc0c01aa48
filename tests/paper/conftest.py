"""Helpers of the paper tests: a notebook context without the notebook, and fake grids of runs."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest

from repro.paper.section import Section


def make_section(*, backend: str = "sim", scale: str = "quick", seeds: Sequence[int] = (1,), n_requests: int = 200,
                 time_scale: float = 1.0, **fields: Any) -> Section:
    """A `Section` as a notebook's setup would make it (no checks, no figure style), for the section modules."""
    return Section(notebook="00_test", backend=backend, scale=scale, seeds=tuple(seeds), n_requests=n_requests,
                   time_scale=time_scale, **fields)


@pytest.fixture
def section() -> Callable[..., Section]:
    return make_section


def make_fake_runs(**axes: Sequence[Any]) -> pd.DataFrame:
    """One row per combination of ``axes`` with seeded random goodput and P99 TTFT (rows of `Section.run`)."""
    rows = []
    rng = np.random.default_rng(0)
    keys = list(axes)
    for combo in itertools.product(*axes.values()):
        row = dict(zip(keys, combo, strict=True))
        row.setdefault("cost_model", "calibrated")
        row.update(goodput=float(rng.uniform(0.5, 0.9)), ttft_p99_s=float(rng.uniform(0.2, 1.0)),
                   token_skew=1.05, request_skew=1.01)
        rows.append(row)
    return pd.DataFrame(rows)


@pytest.fixture
def fake_runs() -> Callable[..., pd.DataFrame]:
    return make_fake_runs
