"""The per-request journal's schema: one row per request, the same columns on every backend.

The simulator (`repro.sim.simulator`) builds its journal frame with these columns; the experiment
(`repro.experiment.journal`: writing, reading, typing a journal file), the proxy and the load
generator write rows of it. This module holds only the schema, so that every floor that makes or
reads journals imports it from below.

Times are seconds from the run's start, on the backend's clock (virtual time in ``sim``, physics
time in ``emulated``/``vllm``: the wall clock times the emulator's time-scale factor); token counts
are tokens; a value that does not apply is null (None).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Literal, TypedDict

Status = Literal["ok", "failed", "rejected"]

STATUSES = ("ok", "failed", "rejected")


@dataclass(frozen=True)
class Field:
    """One journal column: its name, pandas dtype, unit and meaning."""

    name: str
    dtype: str  # pandas dtype
    unit: str
    doc: str


FIELDS: tuple[Field, ...] = (
    Field("request_id", "string", "", "id from the trace; also the X-Request-Id sent to both engines"),
    Field("family", "string", "", "workload family of this request: chat | reasoning | documents"),
    Field("slo_class", "string", "", "tight | loose"),
    Field("prompt_tokens", "int64", "tokens", "prompt length"),
    Field("output_tokens", "int64", "tokens", "requested output (max_tokens, with ignore_eos)"),
    Field("predicted_output_tokens", "float64", "tokens", "the router's output estimate"),
    Field("prefill_instance", "string", "", "chosen prefill instance name (null if rejected)"),
    Field("decode_instance", "string", "", "chosen decode instance name (null if rejected)"),
    Field("status", "string", "", "ok | failed | rejected"),
    Field("reason", "string", "", "why it failed or was rejected (null if ok)"),
    Field("arrival_s", "float64", "s", "arrival at the router"),
    Field("prefill_start_s", "float64", "s",
          "prefill request sent (sim: the arrival, placement being instant; the engine queue lies inside "
          "prefill_end_s - prefill_start_s)"),
    Field("prefill_end_s", "float64", "s", "prefill answered"),
    Field("decode_start_s", "float64", "s", "decode request sent"),
    Field("decode_started_s", "float64", "s",
          "the decode began, as the router's ledger saw it (sim: joined the decode batch; live: the decode "
          "engine's first streamed token reached the proxy); null if it never began"),
    Field("first_token_s", "float64", "s", "first output token reached the client"),
    Field("finish_s", "float64", "s", "last output token reached the client (or failure time)"),
    Field("ttft_s", "float64", "s", "first_token_s - arrival_s"),
    Field("tpot_s", "float64", "s", "(e2e - ttft) / (generated_tokens - 1); null if < 2 tokens"),
    Field("e2e_s", "float64", "s", "finish_s - arrival_s"),
    Field("generated_tokens", "int64", "tokens", "output tokens actually received"),
    Field("preemptions", "int64", "", "times the decode engine preempted it (sim; -1 if unknown)"),
)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)


class JournalRow(TypedDict):
    """One journal row as the writers build it (`FIELDS` order; units in `FIELDS`). A writer may leave
    fields out: `repro.experiment.journal.JournalWriter` writes them as null."""

    request_id: str
    family: str | None
    slo_class: str | None
    prompt_tokens: int | None
    output_tokens: int | None
    predicted_output_tokens: float | None
    prefill_instance: str | None
    decode_instance: str | None
    status: Status | None
    reason: str | None
    arrival_s: float | None
    prefill_start_s: float | None
    prefill_end_s: float | None
    decode_start_s: float | None
    decode_started_s: float | None
    first_token_s: float | None
    finish_s: float | None
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    generated_tokens: int | None
    preemptions: int | None


def empty_row() -> JournalRow:
    """A row with every field null (a writer fills in what it knows)."""
    return {name: None for name in FIELD_NAMES}  # type: ignore[return-value]


def tpot(e2e_s: float, ttft_s: float, tokens: int | None) -> float | None:
    """TPOT as vLLM's benchmark defines it: (e2e - ttft) / (output_tokens - 1), seconds per token;
    None below 2 tokens."""
    if tokens is None or tokens < 2:
        return None
    return (e2e_s - ttft_s) / (tokens - 1)


def schema_markdown() -> str:
    """The schema as a Markdown table (docs/ARCHITECTURE.md, "Journal schema")."""
    out = io.StringIO()
    out.write("| field | unit | meaning |\n|---|---|---|\n")
    for f in FIELDS:
        out.write(f"| `{f.name}` | {f.unit} | {f.doc} |\n")
    return out.getvalue()
