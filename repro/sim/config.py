"""The simulator's switches (`SimConfig`): a typed option group, validated once, here."""

from __future__ import annotations

from dataclasses import dataclass

from repro.errors import check_choice
from repro.vocab import BACKLOG_SOURCES, SERVICES, BacklogSource, Service


@dataclass(frozen=True)
class SimConfig:
    """How the ``sim`` backend models the cluster and what it lets the policy see."""

    service: Service = "batching"
    """Decode service model: ``batching`` (continuous batching, as vLLM) or ``serial`` (the paper's
    original simulator, one sequence at a time; §VI)."""
    backlog: BacklogSource = "ledger"
    """What the policy sees as backlog: ``ledger`` (the router's own priced estimate, as deployed) or
    ``oracle`` (the true remaining work: information no deployment has; §VI)."""

    def __post_init__(self) -> None:
        check_choice("spec", "service", self.service, SERVICES)
        check_choice("spec", "backlog", self.backlog, BACKLOG_SOURCES)
