"""Policies of "a user", by import path (``tests.contenders:Name``), for the scorecard's tests."""

from repro.routing.policies.baselines import LeastLoaded, RoundRobin
from repro.routing.policies.marginal_cost import MarginalCost


class RouterClone(MarginalCost):
    """The paper's router under another name: every decision the same."""

    name = "router_clone"


class RoundRobinClone(RoundRobin):
    """Round-robin under another name: reads neither the predictor nor the cost model."""

    name = "rr_clone"


class LeastLoadedClone(LeastLoaded):
    """Least-loaded under another name: a policy that differs from the paper's router."""

    name = "ll_clone"
