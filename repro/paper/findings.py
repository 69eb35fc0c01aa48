"""A section's **Findings**: its verdict table and the caveats that follow from how it was measured.

`findings_markdown` turns a notebook's judged headline rows (`repro.paper.headline`) into Markdown:
one line per claim (ours with its interval, the paper's value, the verdict), a tally, and
caveats derived from the backend, the scale, the traces and requests behind the numbers and the
live runs' validity. `repro.paper.section.Section.findings` shows it as the notebook's last cell.
"""

from __future__ import annotations

import pandas as pd

from repro.paper.figures import num
from repro.paper.rules import VERDICTS
from repro.statistics.intervals import Estimate

VERDICT_MARK = {"reproduced": "✅ reproduced", "not reproduced": "❌ not reproduced", "contradicted": "⛔ contradicted",
                "within noise": "〰 within noise", "input": "▫ input", "context": "· context"}


def verdict_lines(head: pd.DataFrame) -> list[str]:
    """The Markdown table of judged rows: claim, ours [interval], paper, verdict, why (with, where the row was
    predicted across the identified testbed's ensemble, its robustness). Each interval is its method's (the
    row's ``interval``), 95 % where that method's coverage was measured at 95 %; the caveats name the others."""
    lines = ["| claim | ours [interval] | paper | verdict | why |", "|---|---:|---:|---|---|"]
    for r in head.itertuples():
        est = Estimate(float(r.ours), float(r.ours_lo), float(r.ours_hi))
        unit = "" if pd.isna(r.unit) or r.unit in ("fraction", "") else f" {r.unit}"
        meaning = "" if pd.isna(r.meaning) else str(r.meaning)
        claim = f"`{r.key}`" + (f": {meaning}" if meaning else "")
        reason = "" if pd.isna(getattr(r, "reason", "")) else str(getattr(r, "reason", ""))
        robust = getattr(r, "robustness", "")
        if isinstance(robust, str) and robust:
            note = f"across plausible testbeds: {robust}"
            reason = f"{reason}; {note}" if reason else note
        lines.append(f"| {claim} | {est.text(3)}{unit} | {num(float(r.paper), '.4g')} | "
                     f"{VERDICT_MARK.get(str(r.verdict), str(r.verdict))} | {reason} |")
    return lines


def caveats(head: pd.DataFrame, *, backend: str, scale: str, traces: int, requests: int,
            measured: str) -> list[str]:
    """What a reader must know before trusting the table, from how it was measured."""
    out = []
    if scale == "quick":
        out.append(f"quick scale: {traces} trace(s) x {requests} requests per run, below the paper's protocol "
                   "(3 x 10,000); intervals are wide and orderings often within noise (`--scale full`).")
    if traces == 1:
        out.append("one trace: intervals are a block bootstrap over its requests only; trace-to-trace variation "
                   "(the paper's Table II spread) is not in them.")
    elif traces < 5:
        out.append(f"{traces} traces: t intervals with {traces - 1} degrees of freedom are wide (more traces narrow "
                   "them).")
    short = [(str(r.key), str(r.interval).split("[coverage: ", 1)[1].rstrip("]"))
             for r in head.itertuples() if "[coverage: " in str(getattr(r, "interval", ""))]
    if short:
        notes = "; ".join(f"`{k}`: {n}" for k, n in short)
        out.append(f"intervals that do not cover 95 % of the population in every tested condition "
                   f"(repro.paper.coverage, docs/VERDICTS.md): {notes}.")
    if backend == "sim":
        out.append("sim: the deterministic simulator on the A40 testbed identified from the paper's baseline numbers "
                   "(`repro identify`, docs/IDENTIFY.md); the same seed gives the same numbers on every machine. It "
                   "speaks to the policies' logic under that testbed's timing, not to real engines.")
    elif backend == "emulated":
        out.append("emulated: the real proxy and load generator over HTTP against emulated engines on this machine; "
                   "numbers depend on the machine keeping up (each run's validity is in `measured`).")
    else:
        out.append("vllm: real engines; the paper's values are from A40 GPUs, so value claims on other hardware are "
                   "not expected to match (orderings may).")
    if "INVALID" in measured:
        out.append(f"**some live runs were invalid** ({measured}): their numbers are not results.")
    budget = head.get("kv_budget", pd.Series("", index=head.index))
    filled = head[budget.notna() & (budget.astype(str) != "")]
    if len(filled):
        out.append(f"the KV budget filled (requests preempted) in the runs behind {len(filled)} of {len(head)} rows "
                   "(their `kv_budget`); the paper says its 60k-token budget never saturates (§V-G): where it "
                   "does, our decode engines work in a regime the paper's did not (docs/ROUTER_READING.md).")
    if (head.kind == "input").any():
        out.append("rows marked input are numbers the model was given (or tuned to hit; on the identified testbed, "
                   "the baseline numbers it was fitted to): never counted as reproduced.")
    robust = head.get("robustness", pd.Series("", index=head.index)).astype(object).fillna("").astype(str)
    if (robust != "").any():
        out.append("across plausible testbeds: the paper's claim of a row checked on each testbed of the identified "
                   "ensemble, those that fit the paper's baseline numbers about as well as the best "
                   "(`repro identify`, data/identify/; its fit.json says whether the best is within the numbers' "
                   "noise): a verdict that depends on the testbed rests on constants the paper does not state. "
                   "Across models: the same on every testbed of each model of the mechanism catalogue that "
                   "`repro models` fitted to the same numbers (data/identify/models/robustness.csv): a verdict "
                   "that depends on the model rests on a mechanism the paper's numbers do not decide.")
    if ((head.kind == "ordering") & (head.verdict == "within noise")).any():
        out.append("within noise: the paired interval neither shows the paper's direction and size nor a difference "
                   "from them, so the data cannot decide, whichever point estimate is larger (the row says about "
                   "how many traces would, or that the paper's own noise keeps any number from deciding).")
    return out


def findings_markdown(head: pd.DataFrame, *, title: str, backend: str, scale: str, traces: int, requests: int,
                      measured: str) -> str:
    """The Findings cell's Markdown for one section's judged rows."""
    tally = ", ".join(f"{int((head.verdict == v).sum())} {v}" for v in VERDICTS if (head.verdict == v).any())
    parts = [f"### Findings: {title}", "",
             f"*{backend}, {scale} scale, {traces} trace(s) x {requests} requests per run; {measured}.* "
             f"Verdicts: {tally or 'none'}.", ""]
    parts += verdict_lines(head) if len(head) else ["(no headline numbers)"]
    notes = caveats(head, backend=backend, scale=scale, traces=traces, requests=requests, measured=measured)
    if notes:
        parts += ["", "**Caveats**", ""] + [f"- {n}" for n in notes]
    return "\n".join(parts)
