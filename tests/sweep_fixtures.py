"""Policies that only tests use, importable by worker processes (``tests.sweep_fixtures:Name``)."""

from __future__ import annotations

from repro.routing.policies.baselines import RoundRobin


class Explodes(RoundRobin):
    """Round-robin that raises on its 50th decision: a run that fails part-way through, on a worker."""

    name = "explodes"

    def place(self, request, view):  # type: ignore[no-untyped-def]
        self._count = getattr(self, "_count", 0) + 1
        if self._count == 50:
            raise RuntimeError("explodes on its 50th decision (a test fixture)")
        return super().place(request, view)
