"""Policies that break the contract of `repro.routing.policies.base` on purpose (tests/test_bad_policies.py),
importable by path (``tests.policies_bad:Name``) here, on workers and in a proxy process."""

from __future__ import annotations

import numpy as np

from repro.routing.policies.base import Placement, Policy
from repro.routing.policies.baselines import RoundRobin


class RaisesOnFifth(RoundRobin):
    """Round-robin until its 5th decision, which raises."""

    name = "raises_on_fifth"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        self._count = getattr(self, "_count", 0) + 1
        if self._count == 5:
            return 1 / 0
        return super().place(request, view)


class Raises(RoundRobin):
    """Raises on every decision, with a message of two lines."""

    name = "raises"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        raise ValueError("no route today\nsecond line")


class EstimateRaises(RoundRobin):
    """Places well, but its output estimate raises."""

    name = "estimate_raises"

    def output_estimate(self, request):  # type: ignore[no-untyped-def]
        raise KeyError(request.request_id)


class OutOfRange(Policy):
    """A prefill index one past the pool."""

    name = "out_of_range"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        return Placement(len(view.prefill), 0)


class Negative(Policy):
    """A negative decode index (a Python list would take it: the last instance)."""

    name = "negative"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        return Placement(0, -1)


class NotAnInt(Policy):
    """Indices that are not ints: a float and a bool."""

    name = "not_an_int"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        return Placement(1.0, True)  # type: ignore[arg-type]


class WrongType(Policy):
    """A tuple instead of a Placement."""

    name = "wrong_type"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        return (0, 1)


class AlwaysFirst(Policy):
    """The first instance of each pool, healthy or not."""

    name = "always_first"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        return Placement(0, 0)


class NumpyRoundRobin(RoundRobin):
    """Round-robin whose indices are numpy integers (allowed: the router takes them as ints)."""

    name = "numpy_round_robin"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        d = super().place(request, view)
        return Placement(np.int64(d.prefill), np.intp(d.decode))


# ---- classes that miss part of the contract -------------------------------------------------------
class NoPlace:
    """No place method at all."""

    name = "no_place"


class WrongArity(Policy):
    """place without the view."""

    name = "wrong_arity"

    def place(self, request):  # type: ignore[no-untyped-def,override]
        return Placement(0, 0)


class NotImplemented_(Policy):
    """A Policy subclass that never implements place."""

    name = "not_implemented"


class Broken:
    """Everything wrong at once: a place of the wrong arity, a name that is not a str, a constructor
    that needs an option without a default."""

    name = 3

    def __init__(self, cost_model=None, *, needed):  # type: ignore[no-untyped-def]
        self.needed = needed

    def place(self, request, view, extra):  # type: ignore[no-untyped-def]
        return Placement(0, 0)


class NeedsOption:
    """A fine policy whose option has no default (given, it works)."""

    def __init__(self, cost_model=None, threshold=None, *, needed):  # type: ignore[no-untyped-def]
        self.needed = needed

    def place(self, request, view):  # type: ignore[no-untyped-def]
        return Placement(0, 0)


class ConstructorRaises(Policy):
    """A constructor that raises its own error."""

    name = "constructor_raises"

    def __init__(self, cost_model=None):  # type: ignore[no-untyped-def]
        raise KeyError("missing table")

    def place(self, request, view):  # type: ignore[no-untyped-def]
        return Placement(0, 0)


def not_a_class(request, view):  # type: ignore[no-untyped-def]
    """A function where a class is expected."""
    return Placement(0, 0)
