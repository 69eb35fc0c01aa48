"""The routing-policy interface: what a policy is handed, what it must return, and how its options are
declared. No policy lives here (the paper's are in `repro.routing.policies.baselines` and
`repro.routing.policies.marginal_cost`, ours in `repro.routing.policies.batching`, the production routers'
in `repro.routing.policies.production`; `repro.routing.policies` is the registry).

Contract
--------
A policy sees only what a deployed router can see (`ClusterView`): per instance, the router's own
in-flight ledger (seconds of backlog, in-flight count and tokens), the polled KV-cache usage and
its age, and health; plus the request's admission-time facts (`RequestInfo`: prompt length, the
predictor's output-length estimate, SLO class). Never the simulator's ground truth, and never the
request's ``max_tokens`` (the harness sets it to the true output length to enforce the token-count
contract, so reading it would be an oracle).

The same policy objects run in the simulator (virtual time) and in the proxy (physics time); all
times are seconds on the caller's clock, all lengths tokens.

- `Policy.place` is called once per admitted request, in arrival order, and returns a `Placement`
  (indices into ``view.prefill`` / ``view.decode``, which must name healthy instances) or a
  `Rejection` (the request is not served; it counts as not good). It must not keep or mutate
  ``view``: the router reuses the same `InstanceSignals` objects for every decision.
- `Policy.output_estimate` is the number of output tokens the router charges to its ledger for the
  placed request (by default the predictor's estimate).
- A policy may keep state between calls (round-robin counters, a seeded RNG); given the same
  requests and views in the same order it must make the same decisions (journals are compared
  byte for byte).

Options
-------
A policy's options are its constructor's keyword arguments after ``cost_model``, each with a
default, stored unchanged-in-meaning on an attribute of the same name (as scikit-learn estimators
do). `Policy.get_params` and `Policy.describe` read them from the signature, and
`repro.routing.policies.make_policy` rejects any other name with a `ConfigError` listing these.
A user's own policy is given as an import path ``package.module:ClassName`` (or
``package.module.ClassName``) and must subclass `Policy` or provide ``place``. What is checked when
it is named (`repro.routing.policies.contract_problems`): it is a class; it has a ``place`` callable
as ``place(request, view)`` (a `Policy` subclass must implement it, not inherit the base's); its
``name``, if it has one, is a non-empty str (a `Policy` subclass sets it; a class without one is
named by its import path); and its constructor can be called as ``Cls(cost_model=..., **options)``
with the spec's options (``Cls(**options)`` if it takes no ``cost_model``), so every option without
a value in the spec needs a default.

When a policy misbehaves
------------------------
Nothing is lost and every error names what went wrong, on one line:

- **The import path does not resolve** (no such module, the module or one of its imports raises --
  a SyntaxError, a missing dependency, its own error -- or no such class in it): a
  `repro.errors.ConfigError` naming the path, the module that failed and its error with file and
  line, before anything runs (the command line: exit code 2).
- **The class misses part of the contract** (above): one `ConfigError` listing everything missing
  (``repro run``: exit code 2). An error its constructor raises is a `ConfigError` naming it.
- **place raises**: the run stops with a `repro.errors.PolicyError` naming the policy, the request id,
  the candidates (each pool's instance names and whether healthy) and the original exception's type
  and message (kept as its ``__cause__``). A simulated run writes nothing: the sweep's other runs are
  kept (a parallel sweep names the run id and its grid fields), and the run, which has no manifest,
  is redone by the next sweep once the policy is fixed. In the proxy the request fails with 500 and a
  JSON error of type ``PolicyError`` (journaled as failed, reason ``policy error: ...``) and the proxy
  serves on; a live run stops after its replay with that `PolicyError` and no manifest (its
  ``proxy.jsonl`` / ``client.jsonl`` keep every row).
- **The decision names no usable instance**: a `Placement` whose index is out of range, negative
  (a Python list would quietly take the last instance), not an int (numpy integers are fine), or
  names an unhealthy instance; or a return value that is neither a `Placement` nor a `Rejection`:
  a `PolicyError` naming the request id, what was returned and the valid (healthy) indices, handled
  as above. `repro.routing.router.Router.route` checks every decision of every policy.
- **Decisions are too slow**: the router times each ``place`` call (wall time on the machine that
  runs it: a report, never an input to a result); a run records the p50, p99, max and count as
  ``decision_time`` in its manifest (a live run always; a simulated run when its spec sets a budget,
  since a simulated manifest is otherwise the same bytes on every machine), and the proxy exports
  the ``repro_proxy_decision_seconds`` histogram. A spec's ``decision_budget_us`` (None: no budget)
  fails a run whose p99 exceeds it with a `PolicyError` naming p50, p99, max and the budget; the run
  is not marked finished.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

from repro.routing.cost_model import CostModel
from repro.routing.policies.view import ClusterView, InstanceSignals, PoolArrays, RequestInfo

__all__ = ["NO_HEALTHY", "ClusterView", "Decision", "InstanceSignals", "Placement", "Policy", "PoolArrays",
           "Rejection", "RequestInfo", "constructor_params", "option_defaults"]


@dataclass(slots=True, frozen=True)
class Placement:
    """Serve the request on this (prefill, decode) pair."""

    prefill: int
    """Index into ``view.prefill``."""
    decode: int
    """Index into ``view.decode``."""


NO_HEALTHY = "no healthy instance"
"""A `Rejection` reason reserved for "a pool has no healthy instance": the proxy turns it into a
failure (503, the dead engines' reasons), since no policy chose it."""


@dataclass(slots=True, frozen=True)
class Rejection:
    """Do not serve the request."""

    reason: str
    """One line for the journal's ``reason`` column."""
    retry_after_s: float | None = None
    """Seconds after which a retry might be admitted (the proxy's ``Retry-After``), if known."""


Decision = Placement | Rejection


class Policy:
    """Base class of routing policies. Subclasses set `name` and implement `place`.

    Options are the constructor's keyword arguments after ``cost_model`` (see the module
    docstring); each is stored on an attribute of the same name so that `get_params` can read it.

    Parameters
    ----------
    cost_model : the router's belief (possibly miscalibrated), given to every policy; the shipped
        ``calibrated`` model when None.
    """

    name: ClassVar[str] = "policy"
    """The registry name (`repro.routing.policies.POLICIES`) and the journal's policy label."""

    ledger_anchor: str = "decode_start"
    """When the router's ledger starts counting down a request's decode work
    (`repro.vocab.LedgerAnchor`, `repro.routing.ledger`): the `Router` builds its ledger with the
    policy's. ``decode_start``, what a deployed proxy can book, for every policy unless it says
    otherwise (the paper's router takes it as an option)."""

    def __init__(self, cost_model: CostModel | None = None) -> None:
        self.cost_model = cost_model or CostModel.load("calibrated")

    def place(self, request: RequestInfo, view: ClusterView) -> Decision:  # pragma: no cover - abstract
        """The decision for ``request`` given the cluster as the router sees it now."""
        raise NotImplementedError

    def output_estimate(self, request: RequestInfo) -> float:
        """Output tokens the router charges to its ledger for this request."""
        return request.predicted_output_tokens

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """The option names, in signature order: the constructor's named parameters after
        ``cost_model``. A constructor that forwards ``**kwargs`` to its base class also accepts the
        base class's options (the nearest base constructor in the MRO)."""
        return constructor_params(cls)

    def get_params(self) -> dict[str, Any]:
        """Each option's current value, read from the attribute of the same name."""
        return {key: getattr(self, key) for key in self.param_names()}

    def describe(self) -> dict[str, Any]:
        """``{"policy": name, **options}``: what a manifest records about this policy."""
        return {"policy": self.name, **self.get_params()}


def constructor_params(cls: type) -> tuple[str, ...]:
    """The option names a class's constructor takes: its named parameters other than ``self`` and
    ``cost_model``; through a ``**kwargs`` that forwards to a base class, that base's as well
    (`Policy.param_names`), or, where the class has a typed options record (a dataclass ``Options``, e.g.
    `repro.routing.policies.scoring.ScorerOptions`), that record's fields. Works for any class (a user's
    policy need not subclass `Policy`)."""
    return tuple(option_defaults(cls))


def option_defaults(cls: type) -> dict[str, Any]:
    """`constructor_params`' names, in order, each with its default (`inspect.Parameter.empty`: none): what a
    policy made without options runs with."""
    out: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:  # inherits its constructor
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):  # a builtin's constructor: no introspectable options
            break
        forwards = False
        for p in params:
            if p.kind is p.VAR_KEYWORD:
                forwards = True
            elif p.kind is not p.VAR_POSITIONAL and p.name not in ("self", "cost_model") and p.name not in out:
                out[p.name] = p.default
        if forwards and dataclasses.is_dataclass(getattr(cls, "Options", None)):  # a typed options record
            out.update({f.name: f.default for f in dataclasses.fields(cls.Options) if f.name not in out})
            break
        if not forwards:
            break
    return out
