"""The simulator's per-request table, in and out: a trace read into plain per-request lists (`trace_columns`), and
those lists turned into the journal schema's frame (`repro.journal_schema`), one row per request in trace order
(`journal_frame`).

Times are seconds from the trace's clock origin; token counts are ints; a request that did not complete has NaN
times (its ``status`` and ``reason`` say why).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.journal_schema import FIELD_NAMES
from repro.vocab import SloClass


def trace_columns(trace: pd.DataFrame, predicted_output_tokens: np.ndarray) -> tuple[
        list[str], list[str], list[SloClass], list[float], list[int], list[int], list[float]]:
    """A trace's columns as plain Python lists (request ids, families, SLO classes, arrival times in seconds, prompt
    and output tokens, the router's predicted output tokens). A ConfigError names the field when the predictions do
    not match the trace or the arrivals are not finite and sorted."""
    ids: list[str] = _strings(trace["request_id"])
    family: list[str] = _strings(trace["family"])
    slo: list[SloClass] = _strings(trace["slo_class"])  # type: ignore[assignment]
    arrivals = trace["arrival_s"].to_numpy(dtype=float)
    arrival: list[float] = arrivals.tolist()
    prompt: list[int] = trace["prompt_tokens"].to_numpy(dtype=np.int64).tolist()
    out: list[int] = trace["output_tokens"].to_numpy(dtype=np.int64).tolist()
    pred: list[float] = np.asarray(predicted_output_tokens, dtype=float).tolist()
    if len(pred) != len(ids):
        raise ConfigError("sim: predicted_output_tokens must have one value per request")
    if not np.isfinite(arrivals).all():
        raise ConfigError("sim: trace field 'arrival_s' must be finite seconds")
    if (np.diff(arrivals) < 0).any():
        raise ConfigError("sim: trace field 'arrival_s' must be sorted ascending")
    return ids, family, slo, arrival, prompt, out, pred


def _strings(column: pd.Series) -> list[str]:
    """A column as a list of str (a string column as it is; any other's values converted)."""
    if pd.api.types.is_string_dtype(column.dtype):
        return column.to_numpy(dtype=object).tolist()
    return column.astype(str).tolist()


def journal_frame(*, ids: Sequence[str], family: Sequence[str], slo: Sequence[str], prompt: Sequence[int],
                  out: Sequence[int], pred: Sequence[float], prefill_names: Sequence[str],
                  decode_names: Sequence[str], p_of: Sequence[int], d_of: Sequence[int], status: Sequence[str],
                  reason: Sequence[str | None], arrival: Sequence[float], t_pre_end: Sequence[float],
                  t_joined: Sequence[float], t_first: Sequence[float], t_finish: Sequence[float],
                  preemptions: Sequence[int]) -> pd.DataFrame:
    """The journal of one simulated run. Per request (aligned lists): ``p_of``/``d_of`` the engine indices into
    ``prefill_names``/``decode_names`` (-1: not placed); ``status`` "" for a request the run did not finish (it
    becomes "failed", "simulation ended before completion"); ``t_pre_end`` when its prefill was done as the router
    saw it, ``t_joined`` when it first joined a decode batch, ``t_first``/``t_finish`` its first and last token."""
    arrival_a = np.asarray(arrival)
    first = np.asarray(t_first)
    finish = np.asarray(t_finish)
    out_a = np.asarray(out, dtype=np.int64)
    status_a = np.asarray([s or "failed" for s in status], dtype=object)
    ok = status_a == "ok"
    reasons = [
        (rs if rs is not None else ("simulation ended before completion" if st != "ok" else None))
        for rs, st in zip(reason, status_a, strict=True)
    ]
    ttft = np.where(ok, first - arrival_a, np.nan)
    e2e = np.where(ok, finish - arrival_a, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(ok & (out_a >= 2), (e2e - ttft) / (out_a - 1), np.nan)
    placed = np.asarray(p_of) >= 0
    cols = {
        "request_id": ids,
        "family": family,
        "slo_class": slo,
        "prompt_tokens": np.asarray(prompt, dtype=np.int64),
        "output_tokens": out_a,
        "predicted_output_tokens": np.asarray(pred, dtype=float),
        "prefill_instance": [prefill_names[p] if p >= 0 else None for p in p_of],
        "decode_instance": [decode_names[d] if d >= 0 else None for d in d_of],
        "status": status_a,
        "reason": reasons,
        "arrival_s": arrival_a,
        "prefill_start_s": np.where(placed, arrival_a, np.nan),
        "prefill_end_s": np.asarray(t_pre_end),
        "decode_start_s": np.asarray(t_pre_end),
        "decode_started_s": np.asarray(t_joined),
        "first_token_s": np.where(ok, first, np.nan),
        "finish_s": np.where(ok, finish, np.nan),
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_s": e2e,
        "generated_tokens": np.where(ok, out_a, 0),
        "preemptions": np.asarray(preemptions, dtype=np.int64),
    }
    return pd.DataFrame(cols, columns=list(FIELD_NAMES))
