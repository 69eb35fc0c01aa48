"""The paper's router under alternative readings of its ledger and TPOT_hat, named for the sensitivity
rows (`repro.routing.policies.READINGS`): `MarginalCost` with other defaults for its reading, the
ledger's decode countdown (``ledger_anchor``, `repro.vocab.LedgerAnchor`) and TPOT_hat (``tpot_reading``,
`repro.vocab.TpotReading`), given as (anchor, TPOT reading) in each class's ``READING``. Everything else,
options included, is `repro.routing.policies.marginal_cost.MarginalCost`'s (whose docstring says why
its own reading is the default). Registered in `repro.routing.policies`.
"""

from __future__ import annotations

from repro.routing.policies.marginal_cost import MarginalCost


class MarginalCostPrefillAnchor(MarginalCost):
    """A named reading of the paper's router (sensitivity rows): `MarginalCost` with the ledger's decode
    countdown restarted when the prefill answers (``ledger_anchor="prefill_answer"``), an
    alternative reading. Options as in `MarginalCost`; only that default differs."""

    name = "marginal_cost_prefill_anchor"
    READING = ("prefill_answer", "batch")


class MarginalCostBacklogTpot(MarginalCost):
    """A named reading of the paper's router (sensitivity rows): `MarginalCost` with TPOT_hat read as the
    decode backlog plus its own work over its tokens (``tpot_reading="backlog"``), an
    alternative reading. Options as in `MarginalCost`; only that default differs."""

    name = "marginal_cost_backlog_tpot"
    READING = ("decode_start", "backlog")


class MarginalCostPrior(MarginalCost):
    """A named reading of the paper's router (sensitivity rows): `MarginalCost` with both
    alternative readings at once (``ledger_anchor="prefill_answer"``,
    ``tpot_reading="backlog"``). Options as in `MarginalCost`; only those defaults differ."""

    name = "marginal_cost_prior"
    READING = ("prefill_answer", "backlog")

