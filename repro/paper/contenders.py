"""A policy of yours as a contender of the paper's router (`repro paper --policy`, notebook 15): which
policies may contend (`check_policies`), what a policy reads (`reads`: whether its decisions change with
the predicted length and with the router's cost model, and its decision times), and how its runs take
the paper's router's place in a section's runs (`contender_specs`, `as_router`).

Rates in requests per second; decision times in microseconds of this machine's wall time (a report,
never an input to a result).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.routing.policies import PAPER_POLICIES, resolve_policy

if TYPE_CHECKING:
    from repro.experiment.metrics import DecisionTimeSummary
    from repro.paper.context.runs import Labelled

LEARNED = "marginal_cost"
"""The paper's router: the policy whose place a contender takes."""
BASELINES = tuple(p for p in PAPER_POLICIES if p != LEARNED)
"""The paper's three baselines."""


class PolicyReads(TypedDict, total=False):
    """What a policy reads (`reads`, which gives all three): whether its decisions change with the predicted
    length (``predictions``) and with the router's cost model (``cost_model``), and its decision times in the
    probe run (``decision_time``, microseconds on this machine)."""

    predictions: bool
    cost_model: bool
    decision_time: DecisionTimeSummary


def check_policies(policies: Sequence[str]) -> list[str]:
    """The contenders as given, each resolved (`repro.routing.policies.resolve_policy`: a registered name or
    an import path ``pkg.mod:Class``; a bad one raises `ConfigError` naming it). Not the paper's router
    itself, and each once."""
    out: list[str] = []
    for p in policies:
        if not isinstance(p, str) or not p.strip():
            raise ConfigError(f"parameter 'policies' = {list(policies)!r}: each must be a policy name or an import "
                              "path 'pkg.module:Class'")
        if p == LEARNED:
            raise ConfigError(f"parameter 'policies': {LEARNED!r} is the paper's router, what every policy is scored "
                              "against; name another policy (yours by import path 'pkg.module:Class')")
        resolve_policy(p)
        if p not in out:
            out.append(p)
    return out


def reads(policy: str, *, rate: float = 24.0, n_requests: int = 400, seed: int = 1) -> PolicyReads:
    """Whether ``policy``'s decisions depend on the predictor and on the router's cost model: a simulated
    run of mixed on 2p4d at ``rate`` req/s (``n_requests``, trace ``seed``) against the same with 150 %
    predictor error (``predictions``) and with the uncalibrated cost model (``cost_model``). Identical
    placements mean it does not read them (through ``RequestInfo`` or the ledger, which prices
    backlog with the cost model and charges the predicted length). Also ``decision_time``: the wall
    time of its decisions in the first run (`repro.routing.router.DecisionTimes`: p50, p99, max in
    microseconds, on this machine: a report, not a result)."""
    from repro.experiment.runner import simulate_timed

    base = RunSpec(policy=policy, workload="mixed", topology="2p4d", rate=float(rate), n_requests=int(n_requests),
                   seed=int(seed))
    cols = ["request_id", "prefill_instance", "decode_instance"]
    journal, timing = simulate_timed(base)
    plain = journal[cols].reset_index(drop=True)

    def same(spec: RunSpec) -> bool:
        return plain.equals(simulate_timed(spec)[0][cols].reset_index(drop=True))

    return {"predictions": not same(base.replace(predictor_noise=1.5, predictor_seed=int(seed))),
            "cost_model": not same(base.replace(cost_model="sim_derived")), "decision_time": timing}


def contender_specs(items: Sequence[RunSpec] | Sequence[Labelled], policy: str) -> list[RunSpec] | list[Labelled]:
    """The learned router's items (specs, or ``(labels, spec)`` pairs) with ``policy`` in its place, keeping
    the router's options only where ``policy`` takes them (the other items are left out)."""
    takes = set(resolve_policy(policy).params)

    def one(spec: RunSpec) -> RunSpec:
        opts = {k: v for k, v in spec.policy_options.items() if k in takes}
        return spec.replace(policy=policy, policy_options=opts)

    out = []
    for it in items:
        spec = it[1] if isinstance(it, tuple) else it
        if spec.policy != LEARNED:
            continue
        out.append((it[0], one(spec)) if isinstance(it, tuple) else one(spec))
    return out


def as_router(runs: pd.DataFrame, policy: str) -> pd.DataFrame:
    """The paper's policies' runs with ``policy``'s in the learned router's place (relabelled
    ``marginal_cost``), so that a section's own code judges them; other contenders' runs left out."""
    keep = runs[runs.policy.isin([b for b in BASELINES if b != policy]) | (runs.policy == policy)]
    return keep.assign(policy=keep.policy.replace({policy: LEARNED}))
