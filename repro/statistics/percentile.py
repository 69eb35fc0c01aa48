"""One percentile of a 1-D sample, the very number ``numpy.percentile(values, q)`` gives (its default
'linear' method, Hyndman and Fan's 7th), from a partial sort.

The bootstraps take a P99 of each trace at every resample (hundreds of thousands of times in a coverage
test); ``numpy.percentile``'s general machinery (any axis, any method, array ``q``) costs ~10x the
two order statistics it needs. This computes them with ``numpy.partition`` and interpolates between them
as numpy does (``_lerp``: from the upper neighbour when the weight is 0.5 or more), so the result is
bit-for-bit numpy's (tests/test_percentile.py checks it on arbitrary samples)."""

from __future__ import annotations

import math

import numpy as np


def percentile(values: np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0 <= q <= 100) of the 1-D float array ``values``, NaN-free (the caller drops
    NaNs), at least one value: ``float(numpy.percentile(values, q))``, exactly."""
    n = values.size
    if n == 0:
        raise ValueError("percentile: needs at least one value")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile: q must be within [0, 100], got {q}")
    virtual = (n - 1) * float(np.true_divide(q, 100))
    lo = math.floor(virtual)
    if virtual >= n - 1:  # numpy takes the last order statistic twice, its weight measured from index -1
        lo, hi, gamma = n - 1, n - 1, virtual + 1.0
    else:
        hi, gamma = lo + 1, virtual - lo
    part = np.partition(values, (lo, hi) if hi != lo else lo)
    a, b = part[lo], part[hi]
    diff = b - a
    return float(b - diff * (1 - gamma)) if gamma >= 0.5 else float(a + diff * gamma)
