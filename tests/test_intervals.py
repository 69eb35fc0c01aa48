"""The block bootstraps' draws, made in one call, are arch's (`arch.bootstrap.CircularBlockBootstrap`), bit
for bit: the intervals did not move when they stopped drawing one resample per call."""

from __future__ import annotations

import numpy as np
import pytest
from arch.bootstrap import CircularBlockBootstrap

from repro.statistics import intervals


@pytest.mark.parametrize("n", [1, 2, 7, 100, 2001])
@pytest.mark.parametrize("length", [1, 3, 50])
@pytest.mark.parametrize("seed", [0, 12345])
def test_block_index_draws_are_archs(n: int, length: int, seed: int) -> None:
    ours = intervals._block_index_draws(n, length, 25, seed)
    bs = CircularBlockBootstrap(length, np.arange(n), seed=seed)
    theirs = np.stack([np.asarray(data[0][0]) for data in bs.bootstrap(25)])
    assert ours.shape == (25, n)
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("n,length", [(500, 7), (3000, 40), (9, 9), (10, 25), (1, 1)])
def test_block_means_are_archs(n: int, length: int) -> None:
    rng = np.random.default_rng(1)
    flags = (rng.random(n) < 0.7).astype(float)  # goodput's 0/1 flags: bit for bit
    theirs = CircularBlockBootstrap(length, flags, seed=4).apply(np.mean, 300)[:, 0]
    assert np.array_equal(intervals._block_means(flags, length, 300, 4), theirs)
    ttft = rng.lognormal(size=n)  # other values: to rounding
    theirs = CircularBlockBootstrap(length, ttft, seed=5).apply(np.mean, 300)[:, 0]
    np.testing.assert_allclose(intervals._block_means(ttft, length, 300, 5), theirs, rtol=1e-12)


@pytest.mark.parametrize("n,length", [(1, 1), (7, 3), (2001, 50), (100, 250)])
def test_block_draws_made_row_by_row_are_the_same(n: int, length: int) -> None:
    lazy = intervals._BlockDraws(n, length, 40, 3)
    whole = intervals._block_index_draws(n, length, 40, 3)
    assert all(np.array_equal(lazy[j], whole[j]) for j in range(40))
