"""§IV, notebook 03: Table I, the correctness gates before every live measurement, and the
per-workload saturation search (each family driven where round-robin is mid-collapse, §IV-B;
`repro.paper.section.Section.saturation`). Rates in requests per second.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import pandas as pd

from repro.experiment.saturation import SATURATION_BAND
from repro.statistics.intervals import Estimate

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from repro.live.gates import GateResult, GatesReport
    from repro.paper.headline import HeadlineRow
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


def saturation_headline(rates: pd.DataFrame, searched: bool = True) -> list[HeadlineRow]:
    """One headline row per workload: its saturation rate (req/s) with the interval of rates that meet the
    search's criterion (`repro.experiment.saturation.rate_band`: round-robin's goodput within the band
    around its target). Rates given rather than searched (``searched`` False: a live quick run checks
    the simulator's rate with one probe) are ``input``."""
    if not searched:
        return [{"key": f"saturation_rate_{r.workload}", "ours": r.saturation_rate, "unit": "req/s", "kind": "input",
                 "meaning": "the simulator's saturation rate, given (not searched)"} for r in rates.itertuples()]
    band = f"rates whose round-robin goodput is within +-{SATURATION_BAND:g} of the target (probe curve)"
    return [{"key": f"saturation_rate_{r.workload}", "unit": "req/s",
             "ours": Estimate(float(r.saturation_rate), float(r.rate_lo), float(r.rate_hi), band, traces=1),
             "meaning": f"round-robin mid-collapse on 2p4d ({int(r.probes)} probes, first trace)"}
            for r in rates.itertuples()]


def saturation_figure(rates: pd.DataFrame, probes: pd.DataFrame, *, title: str,
                      reference: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> Figure:
    """One panel per workload: round-robin goodput of each saturation probe against its arrival rate
    (req/s, log axis), the chosen rate (dashed) and the mid-collapse target (dotted) when searched.

    ``reference``: the simulator's own search, ``(rates, probes)`` of `Section.saturation`, drawn in
    grey beneath: a live check of one fixed rate (one probe) is read against the curve it came from.
    """
    import matplotlib.pyplot as plt

    from repro.paper import figures as F

    rr = F.policy_color("round_robin")
    n = len(rates)
    fig, axes = plt.subplots(1, n, figsize=(3.0 * n + 0.5, 3.2), squeeze=False)
    for ax, r in zip(axes[0], rates.itertuples(), strict=True):
        if reference is not None:
            ref_rates, ref_probes = reference
            rp = ref_probes[ref_probes.workload == r.workload].sort_values("rate")
            ax.plot(rp.rate, rp.round_robin_goodput, "o-", ms=3, lw=1.0, color="#999999",
                    label="simulator's search (probes)")
            for rr_row in ref_rates[ref_rates.workload == r.workload].itertuples():
                if pd.notna(rr_row.target_goodput):
                    ax.axhline(rr_row.target_goodput, color="#999999", ls=":", lw=0.8,
                               label="simulator's mid-collapse target")
        p = probes[probes.workload == r.workload].sort_values("rate")
        searched = len(p) > 1
        ax.plot(p.rate, p.round_robin_goodput, "o-" if searched else "o", ms=3 if searched else 6, color=rr,
                label="round-robin probes" if searched else f"round-robin probe ({len(p)} run)", zorder=4)
        if pd.notna(r.target_goodput):
            ax.axhline(r.target_goodput, color="black", ls=":", lw=0.8, label="mid-collapse target")
        ax.axvline(r.saturation_rate, color="black", ls="--", lw=0.8,
                   label="chosen rate" if searched else "rate checked (given)")
        ax.set_xscale("log")
        F.plain_log_axis(ax, "x")
        ax.set_title(f"{r.workload}: {r.saturation_rate:.1f} req/s")
        ax.set_xlabel("arrival rate (req/s)")
    axes[0][0].set_ylabel("round-robin goodput (fraction)")
    fig.suptitle(textwrap.fill(title, max(60, 45 * n)), y=1.02)
    fig.tight_layout()
    handles, labels = F.merged_handles(axes[0])  # one legend for all panels, outside the last one
    F.legend_outside(axes[0][-1], handles=handles, labels=labels)
    return fig
