"""Headline rows: the numbers `repro paper` summarises, each with its interval and verdict.

A section's headline function returns rows (`HeadlineRow` dicts); `write_headline` fills in what the reference
knows (`data/paper_reference.csv`: the paper's value, unit, meaning by key), judges each row
(`repro.paper.rules.judge`) and writes ``<results_dir>/<NN>_headline.csv`` with
`HEADLINE_COLUMNS`. A row's fields:

``key``
    one key per quantity (a reference key when the paper states the number).
``ours``
    our value: a float, or a `repro.statistics.intervals.Estimate` (value with its 95 % interval).
``kind``
    ``value`` (default), ``ordering`` (``ours`` is a paired difference A - B; sign convention:
    positive means A is better, and the paper's value carries the paper's sign) or ``input``.
``paper``, ``unit``, ``meaning``
    default from the reference by key; ``paper`` NaN when the paper states none.
``claim``
    an ordering's side of zero in the paper (+1: A better, -1: B better) when ``paper`` is not the
    paper's gap (NaN: the paper states the ordering, not the number).
``tolerance``
    the equivalence margin of a value (default `repro.paper.rules.equivalence_margin`), an ordering's size
    band, a tie's margin.
``paper_traces``
    the traces the paper's number rests on (default 3, its headline protocol; 1 for one trace's value such as
    a worst trace): the paper's own noise (`repro.paper.rules.paper_noise`).
``runs``
    the run ids the number rests on (a run feeding several rows is named in each, once).
``group``
    the tally's group (default `repro.paper.claims.group_of`).
``measured``
    how (`repro.paper.section.Section.measured`: the backend, live runs and their validity).
``kv_budget``
    whether the runs behind the row filled a decode engine's KV budget (requests preempted), which
    the paper says never happened on its testbed (§V-G: "the 60k-token KV budget never saturates");
    empty when none did or the backend cannot tell (`kv_budget_note`).
``robustness``
    on the simulated and emulated backends, whether the paper's claim of the row holds across the ensemble
    of plausible testbeds the identified profile keeps (`repro.identify.testbed.robustness_of`: "holds on
    every plausible testbed", "depends on the testbed (the deciding parameter)", "holds on none"); empty
    for a row not predicted there. A number the testbed was identified from (`repro.identify.testbed.
    fitted_keys`) is an ``input`` there, never a result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Required, TypedDict

import pandas as pd

from repro.paper.claims import group_of
from repro.paper.rules import judge as judge_verdict
from repro.statistics.intervals import Estimate

HEADLINE_COLUMNS = ("notebook", "key", "ours", "ours_lo", "ours_hi", "paper", "verdict", "reason", "group", "kind",
                    "unit", "meaning", "interval", "traces", "requests", "measured", "kv_budget", "robustness", "runs",
                    "claim", "tolerance", "paper_traces")
"""The columns of a headline file and of ``summary.csv`` (before the run context columns). The last three are the
rule's own inputs beside ``kind``, ``unit`` and ``paper`` (so a row can be judged again from the summary alone, as
`repro.paper.claims` does at a claim's corrected level)."""


class HeadlineRow(TypedDict, total=False):
    """A headline row as a section gives it (`repro.paper.section.Section.write_headline`): ``key`` and
    ``ours`` always, the rest optional (the module docstring says what each means and its default).
    Values in the row's ``unit`` (goodput a fraction, times in s; an ordering's ``ours`` a paired difference
    A - B, positive: A better)."""

    key: Required[str]
    ours: Required[float | Estimate]
    """Our value, or a `repro.statistics.intervals.Estimate` (with its 95 % interval)."""
    kind: str
    """``value`` (default) | ``ordering`` | ``input`` (`repro.statistics.intervals.KINDS`)."""
    paper: float
    """The paper's number (NaN: it states none); default from the reference."""
    unit: str
    meaning: str
    claim: float
    """An ordering's side of zero in the paper (+1: A better, -1: B better, 0: a tie)."""
    tolerance: float | None
    paper_traces: int
    runs: Sequence[str]
    """The run ids the number rests on."""
    group: str
    measured: str
    kv_budget: str
    robustness: str


class JudgedRow(TypedDict):
    """A headline row judged (`judge`): the columns of `HEADLINE_COLUMNS` but ``notebook``. ``ours`` with its
    95 % interval ``ours_lo`` / ``ours_hi`` (NaN without one) in ``unit``; ``paper`` NaN when the paper states
    no number; ``verdict`` one of `repro.paper.rules.VERDICTS`, ``reason`` why; ``interval`` the interval's
    method; ``traces`` / ``requests`` it rests on; ``runs`` the run ids, space-separated."""

    key: str
    ours: float
    ours_lo: float
    ours_hi: float
    paper: float
    verdict: str
    reason: str
    group: str
    kind: str
    unit: str
    meaning: str
    interval: str
    traces: int
    requests: int
    measured: str
    kv_budget: str
    robustness: str
    runs: str
    claim: float
    tolerance: float
    paper_traces: int


def judge(row: HeadlineRow, ref: pd.DataFrame | None = None, measured: str = "",
          testbed: str = "") -> JudgedRow:
    """One headline row, completed from the reference (indexed by key) and judged; ``testbed``: the
    identified hardware profile the row was simulated on ("" for none: measured on real engines), whose
    training numbers are inputs and whose ensemble gives the row's ``robustness``."""
    from repro.identify.testbed import fitted_keys, robustness_of
    from repro.paper import reference as paper_reference

    ref = paper_reference.load().set_index("key") if ref is None else ref
    key = str(row["key"])
    ours = row["ours"]
    est = ours if isinstance(ours, Estimate) else Estimate(float(ours))
    paper = row.get("paper")
    if paper is None:
        paper = float(ref.loc[key, "value"]) if key in ref.index else math.nan
    unit = row.get("unit") or (str(ref.loc[key, "unit"]) if key in ref.index else "")
    meaning = row.get("meaning") or (str(ref.loc[key, "quantity"]) if key in ref.index else "")
    kind = row.get("kind", "value")
    runs: Sequence[str] = row.get("runs") or ()
    fitted = bool(testbed) and kind != "input" and key.partition("@")[0] in fitted_keys(testbed)
    if fitted:
        kind = "input"
    tolerance = row.get("tolerance")
    claim = row.get("claim")
    paper_traces = int(row.get("paper_traces", 3))
    j = judge_verdict(kind, est, float(paper), unit=unit, tolerance=tolerance, claim=claim, paper_traces=paper_traces)
    reason = (f"the testbed {testbed} was identified from this number (repro identify): an input, not a result"
              if fitted else j.reason)
    from repro.identify.certificate import note_for

    cert = note_for(key)
    if cert and kind != "input":
        reason += f"; {cert}"
    kv = str(row.get("kv_budget", "") or "")
    if kv.startswith(PREEMPTION_FLAG_WORD):
        reason += (f"; flagged: its runs preempt more than {PREEMPTION_FLAG:.0%} of requests where the paper says "
                   "the KV budget never fills (§V-G)")
    return {"key": key, "ours": est.value, "ours_lo": est.lo, "ours_hi": est.hi, "paper": float(paper),
            "verdict": j.verdict, "reason": reason, "group": row.get("group") or group_of(key, kind, float(paper)),
            "kind": kind, "unit": unit, "meaning": meaning,
            "interval": "none: an input (given, not measured)" if kind == "input" and est.method == "none"
            else _interval_text(est.method),
            "traces": est.traces, "requests": est.requests, "measured": row.get("measured", measured),
            "kv_budget": row.get("kv_budget", ""),
            "robustness": row.get("robustness", robustness_of(testbed, key) if testbed else ""),
            "runs": " ".join(dict.fromkeys(runs)),
            "claim": math.nan if claim is None else float(claim),
            "tolerance": math.nan if tolerance is None else float(tolerance), "paper_traces": paper_traces}


def _interval_text(method: str) -> str:
    """A row's ``interval``: its method, and where that method does not cover 95 % of the population in every
    tested condition, what it covers (`repro.paper.interval_coverage.coverage_note`)."""
    from repro.paper.interval_coverage import coverage_note

    note = coverage_note(method)
    return f"{method} [coverage: {note}]" if note else method


def kv_budget_note(preempted: Sequence[float]) -> str:
    """The ``kv_budget`` of a row from its runs' ``preempted_fraction`` (NaN: unknown): how many filled
    a decode engine's KV budget, and the share of requests preempted; "" when none did or none can tell."""
    known = [float(x) for x in preempted if not math.isnan(float(x))]
    full = [x for x in known if x > 0]
    if not full:
        return ""
    share = sum(known) / len(known)
    flag = f"{PREEMPTION_FLAG_WORD}: " if share > PREEMPTION_FLAG else ""
    return (f"{flag}filled in {len(full)} of {len(known)} runs ({100 * share:.2g} % of requests "
            f"preempted; the paper: never saturates, §V-G)")


PREEMPTION_FLAG = 0.03
"""A row whose runs preempt more than this share of their requests (mean over runs) works in a regime the paper
says its testbed never reached (§V-G: "the 60k-token KV budget never saturates"): its ``kv_budget`` starts
with `PREEMPTION_FLAG_WORD` and its reason says so."""
PREEMPTION_FLAG_WORD = "FLAGGED"


def headline_frame(rows: Sequence[HeadlineRow], notebook: str, measured: str = "", testbed: str = "") -> pd.DataFrame:
    """The judged rows of one notebook (`HEADLINE_COLUMNS`; ``testbed`` as `judge`); a key given twice is an error."""
    from repro.paper import reference as paper_reference

    keys = [str(r["key"]) for r in rows]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError(f"{notebook}: headline keys given twice: {dup} (one key per quantity)")
    ref = paper_reference.load().set_index("key")
    out = [{"notebook": notebook, **judge(r, ref, measured, testbed)} for r in rows]
    return pd.DataFrame(out, columns=list(HEADLINE_COLUMNS))


def write_headline(rows: Sequence[HeadlineRow], notebook: str, out_dir: str | Path = "results",
                   measured: str = "", testbed: str = "") -> Path:
    """``<out_dir>/<NN>_headline.csv``: the judged rows of one notebook (``testbed`` as `judge`)."""
    from repro.paper.figures import write_results

    nn = notebook.split("_", 1)[0]
    return write_results(headline_frame(rows, notebook, measured, testbed), f"{nn}_headline", out_dir)
