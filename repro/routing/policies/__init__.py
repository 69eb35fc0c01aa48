"""Routing policies, by name: the registry.

- `repro.routing.policies.base`: the interface every policy implements (`Policy`, and what it is
  handed and returns: `RequestInfo`, `ClusterView`, `InstanceSignals`, `Placement`, `Rejection`).
- `repro.routing.policies.paper`: the paper's four policies (``marginal_cost`` is the scorer of §III),
  and ours on the marginal-cost machinery: `MarginalCostBatching` and `MarginalCostPlus`.
- `repro.routing.policies.production`: production routers restated (vllm-router, Dynamo, llm-d,
  SGLang).

`POLICIES` below is the whole registry: a plain table from name to class, written out. A new
policy is added by adding its row. A user's policy that is not in the table is named by import
path, ``package.module:ClassName`` (or ``package.module.ClassName``), wherever a policy name is
accepted (specs, CLI, proxy).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import Policy, constructor_params
from repro.routing.policies.paper import (
    LeastLoaded,
    LengthThreshold,
    MarginalCost,
    MarginalCostBacklogTpot,
    MarginalCostBatching,
    MarginalCostPlus,
    MarginalCostPrefillAnchor,
    MarginalCostPrior,
    RoundRobin,
)
from repro.routing.policies.production import DynamoKV, LlmdWeighted, PowerOfTwo, SglangLeastLoad

POLICIES: dict[str, type[Policy]] = {
    # the paper's (§IV)
    "round_robin": RoundRobin,
    "least_loaded": LeastLoaded,
    "length_threshold": LengthThreshold,
    "marginal_cost": MarginalCost,  # the paper's scorer (§III)
    # named readings of the paper's scorer (sensitivity rows): the readings before issue 29
    "marginal_cost_prefill_anchor": MarginalCostPrefillAnchor,  # decode counts down from the prefill answer
    "marginal_cost_backlog_tpot": MarginalCostBacklogTpot,  # TPOT_hat = (backlog + own work) / o
    "marginal_cost_prior": MarginalCostPrior,  # both
    # ours: the scorer re-reasoned for batching decode engines (beyond the paper)
    "marginal_cost_batching": MarginalCostBatching,
    # ours: the batching scorer with the admission guard (tuned: repro.paper.tuning)
    "marginal_cost_plus": MarginalCostPlus,
    # production routers (repro.routing.policies.production)
    "power_of_two": PowerOfTwo,
    "dynamo_kv": DynamoKV,
    "llmd_weighted": LlmdWeighted,
    "sglang_least_load": SglangLeastLoad,
}
"""Registered policy name -> class. Each class's ``name`` is its key here."""

PAPER_POLICIES: tuple[str, ...] = ("round_robin", "least_loaded", "length_threshold", "marginal_cost")
"""The paper's four policies, in the order its figures show them."""

READINGS: tuple[str, ...] = ("marginal_cost", "marginal_cost_prefill_anchor", "marginal_cost_backlog_tpot",
                             "marginal_cost_prior")
"""The readings of the paper's router: the default (the most faithful, `MarginalCost`'s docstring says
why) and the named prior readings the sensitivity rows vary it over."""

PRODUCTION_POLICIES: dict[str, type[Policy]] = {
    name: POLICIES[name] for name in ("power_of_two", "dynamo_kv", "llmd_weighted", "sglang_least_load")
}
"""The production-router baselines (a sub-table of `POLICIES`)."""


def available_policies() -> list[str]:
    """The registered policy names, sorted (a user's policy by import path is not listed)."""
    return sorted(POLICIES)


def policy_class(name: str) -> type:
    """A registered policy by name, or a user's class by import path ``pkg.mod:Cls``.

    Raises `ConfigError` for an unknown name, an import path that does not import, or a class
    without a ``place`` method.
    """
    if name in POLICIES:
        return POLICIES[name]
    if ":" in name or "." in name:
        if ":" in name:
            module_name, attr = name.split(":", 1)
        else:
            module_name, _, attr = name.rpartition(".")
        try:
            module = importlib.import_module(module_name)
            cls = getattr(module, attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"policy: cannot import {name!r} ({exc})") from None
        if not callable(getattr(cls, "place", None)):
            raise ConfigError(f"policy: {name!r} has no place(request, view) method")
        return cls
    raise ConfigError(
        f"policy: unknown policy {name!r}; allowed: {available_policies()} or an import path 'pkg.module:Class'"
    )


def policy_fingerprint(name: str) -> str:
    """A short hash of the code of policy ``name``: the source of its class and of its bases, and of
    every module they import outside the standard library (`repro.sources.import_closure`: the
    scorers' pair pricing in `repro.routing.policies.pricing`, the cost model, a user's own helpers;
    other installed distributions by their version). Two runs of one spec by different code under
    the same name get different fingerprints; a finished run is resumed only when its manifest's
    fingerprint matches (`repro.experiment.runner.finished_run`)."""
    import hashlib

    from repro.sources import closure_hash

    cls = policy_class(name)
    parts, modules = [], set()
    for c in cls.__mro__:
        if c is object or c.__module__ in ("abc", "builtins"):
            continue
        modules.add(c.__module__)
        try:
            parts.append(inspect.getsource(c))
        except (OSError, TypeError):  # a class without source (built in, or made at run time)
            parts.append(f"{c.__module__}.{c.__qualname__}")
    parts.append(closure_hash(modules))
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:16]


def make_policy(name: str, cost_model: CostModel | None = None, **options: Any) -> Policy:
    """Instantiate a policy by name (or import path) with options.

    ``options`` must be among the class's constructor keyword arguments (`Policy.param_names`); an
    unknown one is a `ConfigError` naming it and the allowed ones. ``cost_model`` is passed when
    the constructor takes one (every `Policy` does).
    """
    cls = policy_class(name)
    allowed = list(constructor_params(cls))
    for key in options:
        if key not in allowed:
            raise ConfigError(f"policy {name}: unknown option {key!r}; allowed: {allowed}")
    try:
        takes_cost_model = "cost_model" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        takes_cost_model = False
    if takes_cost_model:
        return cls(cost_model=cost_model, **options)
    return cls(**options)


__all__ = [
    "PAPER_POLICIES",
    "POLICIES",
    "READINGS",
    "PRODUCTION_POLICIES",
    "available_policies",
    "make_policy",
    "policy_class",
]
