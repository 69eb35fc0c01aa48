"""The ``sim`` backend: a deterministic discrete-event simulator of a P/D cluster (`Simulator`)."""

from repro.sim.config import SimConfig
from repro.sim.simulator import Simulator

__all__ = ["SimConfig", "Simulator"]
