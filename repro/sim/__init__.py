"""The ``sim`` backend: a deterministic discrete-event simulator of a P/D cluster (`Simulator`)."""

from repro.sim.simulator import SimConfig, Simulator

__all__ = ["SimConfig", "Simulator"]
