"""The policy registry: `POLICIES`, a plain table from name to class, written out (a new policy is added by
adding its row), and `resolve_policy`, which turns a name as a user gives it (a registered name, or a user's
class by import path ``package.module:ClassName``) into one typed `PolicyRef`: its class, checked against the
contract once, the fingerprint of its code, and `PolicyRef.build`. A run's spec holds the name
(`repro.experiment.spec.RunSpec.policy_ref` resolves it); everything downstream reads the `PolicyRef`."""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
import time
from dataclasses import dataclass
from typing import Any

from repro.errors import ConfigError, one_line
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import Policy, constructor_params
from repro.routing.policies.baselines import LeastLoaded, LengthThreshold, RoundRobin
from repro.routing.policies.batching import MarginalCostBatching, MarginalCostPlus
from repro.routing.policies.contract import contract_message, contract_problems, import_policy, takes_cost_model
from repro.routing.policies.marginal_cost import MarginalCost
from repro.routing.policies.production import DynamoKV, LlmdWeighted, PowerOfTwo, SglangLeastLoad
from repro.routing.policies.readings import MarginalCostBacklogTpot, MarginalCostPrefillAnchor, MarginalCostPrior

POLICIES: dict[str, type[Policy]] = {
    # the paper's (§IV)
    "round_robin": RoundRobin,
    "least_loaded": LeastLoaded,
    "length_threshold": LengthThreshold,
    "marginal_cost": MarginalCost,  # the paper's scorer (§III)
    # named readings of the paper's scorer (sensitivity rows): the alternative readings
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


@dataclass(frozen=True)
class PolicyRef:
    """A policy name resolved (`resolve_policy`): the ``name`` as given, its class (``cls``), whether it is in
    `POLICIES` (``registered``), and, computed on first use, the ``fingerprint`` of its code. A user's class
    has met the contract (`repro.routing.policies.contract.contract_problems`) when the ref is made."""

    name: str
    cls: type
    registered: bool

    @functools.cached_property
    def params(self) -> tuple[str, ...]:
        """The options its constructor takes (`repro.routing.policies.base.constructor_params`)."""
        return constructor_params(self.cls)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A short hash of its code: the source of its class and of its bases, and of every module they import
        outside the standard library (`repro.sources.import_closure`: the scorers' pair pricing in
        `repro.routing.policies.pricing`, the cost model, a user's own helpers; other installed distributions
        by their version). Two runs of one spec by different code under the same name get different
        fingerprints; a finished run is resumed only when its manifest's fingerprint matches
        (`repro.experiment.runner.finished_run`)."""
        from repro.sources import closure_hash

        parts, modules = [], set()
        for c in self.cls.__mro__:
            if c is object or c.__module__ in ("abc", "builtins"):
                continue
            modules.add(c.__module__)
            try:
                parts.append(inspect.getsource(c))
            except (OSError, TypeError):  # a class without source (built in, or made at run time)
                parts.append(f"{c.__module__}.{c.__qualname__}")
        parts.append(closure_hash(modules))
        return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:16]

    def check_contract(self, options: dict[str, Any]) -> None:
        """For a user's class: a `ConfigError` listing what its constructor misses of the contract when called
        with ``options`` (names it takes; an unknown name is `check_options`'). Checked once per set of names."""
        keys = frozenset(options)
        if self.registered or keys in self._contract_checked or not keys <= set(self.params):
            return
        problems = contract_problems(self.cls, options)
        if problems:
            raise ConfigError(contract_message(self.name, problems))
        self._contract_checked.add(keys)

    @functools.cached_property
    def _contract_checked(self) -> set[frozenset[str]]:
        return set()

    def check_options(self, options: dict[str, Any]) -> None:
        """A `ConfigError` naming an option its constructor does not take, and the allowed ones."""
        for key in options:
            if key not in self.params:
                raise ConfigError(f"policy {self.name}: unknown option {key!r}; allowed: {list(self.params)}")

    def build(self, cost_model: CostModel | None = None, **options: Any) -> Policy:
        """The policy, made with ``options`` (checked: `check_options`) and ``cost_model`` when its constructor
        takes one (every `repro.routing.policies.base.Policy` does). An error a user's constructor raises is a
        `ConfigError` naming it."""
        self.check_options(options)
        kwargs = {"cost_model": cost_model} if takes_cost_model(self.cls) else {}
        if self.registered:
            return self.cls(**kwargs, **options)
        try:
            return self.cls(**kwargs, **options)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"policy {self.name!r}: its constructor raised {type(exc).__name__}: "
                              f"{one_line(exc, 500)}") from exc


_RESOLVED: dict[str, tuple[PolicyRef, float, Any]] = {}
"""Name -> its `PolicyRef`, when (monotonic s) a user's module was last looked at for edits, and that module."""


def resolve_policy(name: str, options: dict[str, Any] | None = None) -> PolicyRef:
    """``name`` (a registered name or a user's import path) as a `PolicyRef`, made once per process and per
    version of a user's code: a user's module is looked at again for edits (`repro.sources.fresh_module`) at
    most every `repro.sources.RECHECK_S` seconds, and at once when it was taken out of ``sys.modules`` or
    reloaded; it is re-resolved when its class changed. In between, the ref is handed back as it is. Raises
    `ConfigError` for an unknown name, a path that does not import (naming the module that failed and why), or
    a user's class that does not meet the contract (everything missing, in one message; with ``options``, also
    whether its constructor can be called with them when it takes those names: checked once per set of
    names)."""
    from repro import sources

    if name in POLICIES:
        hit = _RESOLVED.get(name)
        if hit is None:
            hit = _RESOLVED[name] = (PolicyRef(name, POLICIES[name], registered=True), 0.0, None)
        return hit[0]
    now = time.monotonic()
    hit = _RESOLVED.get(name)
    if (hit is None or now - hit[1] >= sources.RECHECK_S
            or sys.modules.get(getattr(hit[0].cls, "__module__", "")) is not hit[2]):
        cls = import_policy(name, tuple(POLICIES))  # imported, or reloaded when its files changed
        module = sys.modules.get(getattr(cls, "__module__", ""))
        if hit is None or hit[0].cls is not cls:
            known = options is not None and isinstance(cls, type) and set(options) <= set(constructor_params(cls))
            problems = contract_problems(cls, options if known else None)  # all that is missing, in one message
            if problems:
                raise ConfigError(contract_message(name, problems))
            ref = PolicyRef(name, cls, registered=False)
            if known:
                ref._contract_checked.add(frozenset(options or ()))
            hit = (ref, now, module)
        _RESOLVED[name] = hit = (hit[0], now, module)
    ref = hit[0]
    if options is not None:
        ref.check_contract(options)
    return ref


def policy_class(name: str) -> type:
    """`resolve_policy`'s class."""
    return resolve_policy(name).cls


def policy_fingerprint(name: str) -> str:
    """`resolve_policy`'s fingerprint (`PolicyRef.fingerprint`)."""
    return resolve_policy(name).fingerprint


def make_policy(name: str, cost_model: CostModel | None = None, **options: Any) -> Policy:
    """A policy by name (or import path) with options: `resolve_policy` then `PolicyRef.build`."""
    return resolve_policy(name, options).build(cost_model, **options)
