"""§IV, notebook 03: Table I, the correctness gates before every live measurement, and the
per-workload saturation search (each family driven where round-robin is mid-collapse, §IV-B;
`repro.paper.section.Section.saturation`). Rates in requests per second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from repro.live.gates import GateResult, GatesReport
    from repro.paper.section import Section

PROBE_REQUESTS = (1000, 4000)
"""Requests per saturation probe in sim at (quick, full) scale (live: `repro.paper.plans.LIVE_REQUESTS`)."""
GATES_TOPOLOGY = "1p2d"
"""The emulated pool the gates run on when no cluster file is given."""
SIM_GATES_NOTE = ("Gates (token-count contract, greedy equivalence across decode GPUs, warm-up of every pair, "
                  "prefix-cache reset) apply to live backends; rerun with backend='emulated' or 'vllm' to see them.")


def gates_table(report: GatesReport | GateResult) -> pd.DataFrame:
    """A gates report as a tidy frame (gate, instance, ok, detail, latency_s)."""
    rows = []
    for rep in getattr(report, "reports", [report]):
        for c in rep.checks:
            rows.append({"gate": rep.gate, "instance": c.instance, "ok": bool(c.ok), "detail": c.detail,
                         "latency_s": c.latency_s})
    return pd.DataFrame(rows, columns=["gate", "instance", "ok", "detail", "latency_s"])


def check_gates(ctx: Section) -> tuple[str, pd.DataFrame | None]:
    """Run the correctness gates on ``ctx``'s live cluster: ``(report text, gates_table)``.

    In sim there are no gates: `SIM_GATES_NOTE` and None.
    """
    if ctx.backend == "sim":
        return SIM_GATES_NOTE, None
    from repro.live.gates import render_text, run_gates

    with ctx.live_cluster(GATES_TOPOLOGY) as instances:
        report = run_gates(instances)
    return render_text(report), gates_table(report)


def saturation_headline(rates: pd.DataFrame) -> list[dict[str, float | str]]:
    """One headline row per workload: its saturation rate (req/s)."""
    return [{"key": f"saturation_rate_{r.workload}", "ours": r.saturation_rate, "unit": "req/s"}
            for r in rates.itertuples()]
