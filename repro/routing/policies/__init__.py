"""Routing policies, by name: the registry.

- `repro.routing.policies.base`: the interface every policy implements (`Policy`, and what it is
  handed and returns: `RequestInfo`, `ClusterView`, `InstanceSignals`, `Placement`, `Rejection`).
- the paper's four policies (§IV): `repro.routing.policies.baselines` (round-robin, least-loaded, the
  length threshold) and `repro.routing.policies.marginal_cost` (``marginal_cost``, the scorer of §III);
  `repro.routing.policies.readings`: that scorer under its prior readings (the sensitivity rows).
- `repro.routing.policies.batching`: ours on the marginal-cost machinery, `MarginalCostBatching` and
  `MarginalCostPlus`. The machinery the scorers share is `repro.routing.policies.scoring`
  (`MarginalCostBase`), its numpy path for large pools `repro.routing.policies.vectorized`, and their
  pair loop `repro.routing.policies.pricing` (compiled).
- `repro.routing.policies.production`: production routers restated (vllm-router, Dynamo, llm-d,
  SGLang).

`POLICIES` below is the whole registry: a plain table from name to class, written out. A new
policy is added by adding its row. A user's policy that is not in the table is named by import
path, ``package.module:ClassName`` (or ``package.module.ClassName``), wherever a policy name is
accepted (specs, CLI, proxy).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies.base import Policy, constructor_params
from repro.routing.policies.baselines import LeastLoaded, LengthThreshold, RoundRobin
from repro.routing.policies.batching import MarginalCostBatching, MarginalCostPlus
from repro.routing.policies.marginal_cost import MarginalCost
from repro.routing.policies.production import DynamoKV, LlmdWeighted, PowerOfTwo, SglangLeastLoad
from repro.routing.policies.readings import MarginalCostBacklogTpot, MarginalCostPrefillAnchor, MarginalCostPrior

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

    Raises `ConfigError` for an unknown name, an import path that does not import (naming the
    module that failed and its error), or a class that does not meet the contract of
    `repro.routing.policies.base` (`contract_problems`: everything missing, in one message).
    """
    if name in POLICIES:
        return POLICIES[name]
    cls = import_policy(name)
    problems = contract_problems(cls)
    if problems:
        raise ConfigError(contract_message(name, problems))
    return cls


def import_policy(name: str) -> Any:
    """The object an import path ``pkg.module:Class`` (or ``pkg.module.Class``) names, unchecked;
    `ConfigError` if it does not resolve: no such module, a module that raises on import (its own
    error or one of its imports': which module and why), no such attribute."""
    if ":" not in name and "." not in name:
        raise ConfigError(
            f"policy: unknown policy {name!r}; allowed: {available_policies()} or an import path 'pkg.module:Class'"
        )
    module_name, _, attr = name.partition(":") if ":" in name else name.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"policy: import path {name!r} must be 'package.module:ClassName'")
    try:
        from repro.sources import fresh_module

        fresh_module(module_name)  # imported, or reloaded when its files changed since (an edited policy)
        module = sys.modules[module_name]
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(f"policy: cannot import {name!r}: no module named {exc.name!r} "
                              "(is its folder on the Python path?)") from None
        raise ConfigError(f"policy: cannot import {name!r}: importing module {module_name!r} failed: "
                          f"{_import_failure(exc)}") from None
    except Exception as exc:  # the module (or one it imports) raised: a SyntaxError, its own error
        raise ConfigError(f"policy: cannot import {name!r}: importing module {module_name!r} failed: "
                          f"{_import_failure(exc)}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = sorted(k for k, v in vars(module).items() if isinstance(v, type)
                           and callable(getattr(v, "place", None)) and v.__module__ == module.__name__)
            hint = f"; its classes with a place method: {', '.join(found[:10])}" if found else ""
            raise ConfigError(f"policy: cannot import {name!r}: module {module_name!r} has no attribute "
                              f"{attr!r}{hint}")
        obj = getattr(obj, part)
    return obj


def _import_failure(exc: BaseException) -> str:
    """``Type: message (file, line N)``: why a module raised on import, and where."""
    import traceback

    from repro.errors import one_line

    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
        text = exc.msg
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        user = [f for f in frames if "importlib" not in f.filename]
        if user:
            where = f" ({user[-1].filename}, line {user[-1].lineno})"
        text = str(exc)
    return f"{type(exc).__name__}: {one_line(text, 500)}{where}"


def contract_problems(cls: Any, options: dict[str, Any] | None = None) -> list[str]:
    """What ``cls`` lacks of the policy contract (`repro.routing.policies.base`), one entry each;
    empty if nothing. A class, with a ``place(request, view)`` method it implements, a ``name`` that
    is a string if it has one, and (``options`` given) a constructor callable as
    ``cls(cost_model=..., **options)`` (as ``cls(**options)`` if it takes no ``cost_model``)."""
    if not isinstance(cls, type):
        return [f"it is not a class but a {type(cls).__name__} (a policy is a class with a place(request, view) "
                "method)"]
    problems = []
    raw = inspect.getattr_static(cls, "place", None)
    place = getattr(cls, "place", None)
    if raw is None:
        problems.append("it has no place(request, view) method")
    elif not callable(place):
        problems.append(f"its place is not a method but a {type(raw).__name__}")
    elif place is Policy.place:
        problems.append("it does not implement place(request, view) (it inherits Policy.place, which raises)")
    else:
        bound = isinstance(raw, (staticmethod, classmethod))
        try:
            sig = inspect.signature(place)
        except (TypeError, ValueError):  # a builtin: nothing to check
            sig = None
        if sig is not None:
            try:
                sig.bind(*(("request", "view") if bound else ("self", "request", "view")))
            except TypeError:
                problems.append(f"its place{sig} cannot be called as place(request, view)")
    if hasattr(cls, "name") and not (isinstance(cls.name, str) and cls.name):
        problems.append(f"its name = {cls.name!r} is not a non-empty str")
    if options is not None:
        try:
            sig = inspect.signature(cls)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            kwargs = {**({"cost_model": None} if _takes_cost_model(cls) else {}), **options}
            try:
                sig.bind(**kwargs)
            except TypeError as exc:
                call = ", ".join(["cost_model=..."] * ("cost_model" in kwargs) + [f"{k}=..." for k in options])
                problems.append(f"its constructor __init__{sig} cannot be called as {cls.__name__}({call}): {exc} "
                                "(every option needs a default, or a value given with the spec's policy_options)")
    return problems


def contract_message(name: str, problems: list[str]) -> str:
    """The `ConfigError` text for a policy whose class lacks ``problems`` (`contract_problems`)."""
    return (f"policy {name!r} does not meet the policy contract (repro.routing.policies.base): "
            f"{'; '.join(problems)}")


def _takes_cost_model(cls: type) -> bool:
    """Whether ``cls``'s constructor takes ``cost_model`` (by name, or through ``**kwargs``)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return "cost_model" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


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
    the constructor takes one (every `Policy` does). A user's class is checked against the contract
    first (`contract_problems`, with these options: one `ConfigError` listing all that is missing),
    and an error its constructor raises is a `ConfigError` naming it.
    """
    registered = name in POLICIES
    cls = POLICIES[name] if registered else import_policy(name)
    if not registered:  # the constructor is checked with these options unless one is unknown (said below)
        known = isinstance(cls, type) and set(options) <= set(constructor_params(cls))
        problems = contract_problems(cls, options if known else None)
        if problems:
            raise ConfigError(contract_message(name, problems))
    allowed = list(constructor_params(cls))
    for key in options:
        if key not in allowed:
            raise ConfigError(f"policy {name}: unknown option {key!r}; allowed: {allowed}")
    kwargs = {"cost_model": cost_model} if _takes_cost_model(cls) else {}
    if registered:
        return cls(**kwargs, **options)
    try:
        return cls(**kwargs, **options)
    except ConfigError:
        raise
    except Exception as exc:
        from repro.errors import one_line

        raise ConfigError(f"policy {name!r}: its constructor raised {type(exc).__name__}: {one_line(exc, 500)}") \
            from exc


__all__ = [
    "PAPER_POLICIES",
    "POLICIES",
    "READINGS",
    "PRODUCTION_POLICIES",
    "available_policies",
    "contract_problems",
    "import_policy",
    "make_policy",
    "policy_class",
]
