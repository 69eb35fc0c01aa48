"""The project's shared names: the closed choices that appear in specs, CLIs, notebooks and files.

Each choice is a `Literal` type (for annotations and static checking) and a tuple of its values
(for validation and error messages, in the order shown to users). Validate with
`repro.errors.check_choice`.
"""

from __future__ import annotations

from typing import Literal, get_args

Backend = Literal["sim", "emulated", "vllm"]
"""Where a run happens: the discrete-event simulator, emulated vLLM engines over HTTP, or real vLLM."""
Role = Literal["prefill", "decode"]
"""An engine's role in a disaggregated cluster."""
Workload = Literal["chat", "reasoning", "documents", "mixed"]
"""The paper's four workloads (Table I): three families and their mix."""
Family = Literal["chat", "reasoning", "documents"]
"""A request's family (the trace's ``family`` column; ``mixed`` draws each request's family)."""
Launcher = Literal["emulated", "vllm", "remote"]
"""How a cluster's engines are started (or found, for ``remote``)."""
Scale = Literal["quick", "full"]
"""How much a notebook runs: CI-sized (``quick``) or the paper's protocol (``full``)."""
PredictorKind = Literal["default", "constant", "oracle"]
"""The router's output-length predictor: the trained model, a constant, or the true length."""
Service = Literal["batching", "serial"]
"""The simulator's decode service model: continuous batching, or the paper's original serial one."""
BacklogSource = Literal["ledger", "oracle"]
"""What the policy sees as backlog in the simulator: the router's ledger, or the true remaining work."""
LedgerAnchor = Literal["decode_start", "prefill_answer"]
"""When the router's ledger starts counting down a request's decode work: when its decode starts (the
request joins the decode batch; a proxy sees the decode engine's first token), or when its prefill
answers (an alternative reading, kept for the sensitivity rows: a request still queued for decode drains
from the backlog)."""
TpotReading = Literal["batch", "backlog"]
"""The paper's router's predicted TPOT: the per-token time of the batch the request joins
(``tau_dec(n_d)``), or the decode backlog plus its own work spread over its tokens (an alternative
reading, kept for the sensitivity rows)."""
SloClass = Literal["tight", "loose"]
"""A request's SLO class."""
Status = Literal["ok", "failed", "rejected"]
"""A journal row's outcome."""

BACKENDS: tuple[str, ...] = get_args(Backend)
ROLES: tuple[str, ...] = get_args(Role)
WORKLOADS: tuple[str, ...] = get_args(Workload)
FAMILIES: tuple[str, ...] = get_args(Family)  # order matters: traces store a family as its index here
SLO_CLASSES: tuple[str, ...] = get_args(SloClass)  # order matters: index 0 is tight in trace generation
LAUNCHERS: tuple[str, ...] = get_args(Launcher)
SCALES: tuple[str, ...] = get_args(Scale)
PREDICTORS: tuple[str, ...] = get_args(PredictorKind)
SERVICES: tuple[str, ...] = get_args(Service)
BACKLOG_SOURCES: tuple[str, ...] = get_args(BacklogSource)
LEDGER_ANCHORS: tuple[str, ...] = get_args(LedgerAnchor)
TPOT_READINGS: tuple[str, ...] = get_args(TpotReading)

DEFAULT_PROFILE = "a40-identified"
"""The hardware profile of the paper's testbed (A40 GPUs serving Qwen2.5-3B), in ``data/hardware/``: identified from
the paper's baseline numbers (`repro identify`, docs/IDENTIFY.md); our estimates before it stay as
``a40-qwen2.5-3b``."""

