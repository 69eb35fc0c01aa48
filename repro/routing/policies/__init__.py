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

`repro.routing.policies.registry`: `POLICIES`, the whole registry (a plain table from name to class,
written out: a new policy is added by adding its row), and `resolve_policy`, the one place a name becomes
a typed `PolicyRef`. A user's policy that is not in the table is named by import path,
``package.module:ClassName`` (or ``package.module.ClassName``), wherever a policy name is accepted (specs,
CLI, proxy); `repro.routing.policies.contract` checks it against the interface.
"""

from repro.routing.policies.contract import contract_problems, import_policy
from repro.routing.policies.registry import (
    PAPER_POLICIES,
    POLICIES,
    PRODUCTION_POLICIES,
    READINGS,
    PolicyRef,
    available_policies,
    make_policy,
    policy_class,
    policy_fingerprint,
    resolve_policy,
)

__all__ = [
    "PAPER_POLICIES",
    "POLICIES",
    "PRODUCTION_POLICIES",
    "READINGS",
    "PolicyRef",
    "available_policies",
    "contract_problems",
    "import_policy",
    "make_policy",
    "policy_class",
    "policy_fingerprint",
    "resolve_policy",
]
