"""Coverage of every interval method the main job uses, and of the ones they replaced (docs/VERDICTS.md quotes this).

Usage: python benchmarks/bench_coverage.py [--reps 1000] [--seed 0] [--only t,block,...]

Synthetic draws with a known truth (`repro.paper.coverage`) are drawn per row; each procedure's 95 %
interval is checked against the truth, through the function the sections call. Cheap rows draw
``--reps`` times, costly ones a stated fraction of it (the reps column). Groups (``--only``):

- ``t``: the goodput over 3 and 10 traces (t over traces, and the two-level bootstrap no verdict
  uses, `legacy_two_level`): normal trace-to-trace spread (sd 0.01, 0.03) and a skewed one (lognormal,
  sd 0.05, long tail downward).
- ``block``: one trace's own goodput (block bootstrap, 500 resamples; and an iid bootstrap over
  requests) at within-trace correlation times of 50, 200 and 500 requests.
- ``paired``: a paired difference over 3 and 10 traces, its per-trace gaps normal or skewed.
- ``best``: "A minus the best of k" picked after the fact through `SectionEstimates.least_difference`
  (goodput paired by request; a per-trace column, ``worst``), and the naive best-by-point; normal
  per-trace gaps, and skewed ones (A's edge over its 3 rivals, sd 0.04) over 3 and 10 traces.
- ``within``: P99 TTFT statistics within given traces (`joint_bootstrap(resample_traces=False)` on
  calibration's `tail_statistics`): against these traces' values and the population's.
- ``step``: a GPU count off a frontier (`joint_bootstrap` over traces) near and far from a step.
- ``windows``: Fig. 7's windows as independent units (`rolling_estimates`, Wilson on the share).
- ``wilson``: Wilson's exact coverage over independent units.

Prints coverage with its Wilson interval, the mean width and how many intervals had zero width.
"""

from __future__ import annotations

import argparse
import time

from repro.paper.coverage import (
    TraceModel,
    coverage,
    least_difference_coverage,
    legacy_two_level,
    paired_coverage,
    step_coverage,
    wilson_coverage,
    window_coverage,
    within_traces_coverage,
)
from repro.statistics.intervals import block_bootstrap_mean, goodput_estimate

SKEWED = {"mean": 0.6, "width": 0.2, "between_sd": 0.05, "skew": 1.0}
"""The skewed trace-to-trace spread: lognormal levels (skewness -6.2), sd 0.05, within-trace swing 0.2."""

PAIRED_SKEWED = {"mean": 0.5, "width": 0.1, "between_sd": 0.01}
"""The model of the skewed paired and best-of-k rows (room for A's edge to vary: no probability leaves [0, 1] but
below 1e-3)."""

GROUPS = ("t", "block", "paired", "best", "within", "step", "windows", "wilson")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated groups of {GROUPS}")
    a = ap.parse_args()
    only = set(a.only.split(","))
    r, seed = a.reps, a.seed

    def show(tag: str, c, reps_note: str = "") -> None:
        print(f"[{tag}] {c.text()}{reps_note}", flush=True)

    if "t" in only:
        rows = [("3 traces, normal sd 0.01", TraceModel(traces=3)),
                ("3 traces, normal sd 0.03", TraceModel(traces=3, mean=0.6, width=0.25, between_sd=0.03)),
                ("10 traces, normal sd 0.01", TraceModel(traces=10)),
                ("3 traces, skewed sd 0.05", TraceModel(traces=3, **SKEWED)),
                ("10 traces, skewed sd 0.05", TraceModel(traces=10, **SKEWED))]
        for label, model in rows:
            for name, proc in (("t over traces", goodput_estimate), ("two-level bootstrap (before)", legacy_two_level)):
                t0 = time.perf_counter()
                c = coverage(proc, model, reps=r, seed=seed, name=f"{label}: {name}")
                show("t", c, f"  ({time.perf_counter() - t0:.0f} s)")
    if "block" in only:
        n = max(50, r // 3)
        for phi in (0.98, 0.995, 0.998):
            model = TraceModel(traces=1, phi=phi)
            procs = {"block bootstrap (500 resamples)": lambda t: block_bootstrap_mean(t[0], b=500)}
            if phi == 0.98:
                procs["iid bootstrap over requests (before)"] = legacy_two_level
            for name, proc in procs.items():
                t0 = time.perf_counter()
                c = coverage(proc, model, reps=n, seed=seed, per_trace=True,
                             name=f"1 trace, correlation time {1 / (1 - phi):.0f} requests: {name}")
                show("block", c, f"  ({time.perf_counter() - t0:.0f} s)")
    if "paired" in only:
        for traces in (3, 10):
            show("paired", paired_coverage(TraceModel(traces=traces), reps=r, seed=seed))
        for traces in (3, 10):  # A's edge 0.03 over the population, skewed from trace to trace (sd 0.04)
            show("paired", paired_coverage(TraceModel(traces=traces, **PAIRED_SKEWED), gap=0.03, interaction_sd=0.04,
                                           skew=1.0, reps=r, seed=seed))
    if "best" in only:
        model = TraceModel(traces=3, requests=2000)
        for k in (3, 6):
            for kw in ({}, {"by_trace": True}, {"selection_aware": False}):
                show("best", least_difference_coverage(model, rivals=k, reps=r, seed=seed, **kw))
        show("best", least_difference_coverage(TraceModel(traces=10, requests=2000), rivals=3, reps=r, seed=seed))
        for traces in (3, 10):  # all tied over the population; A's edge skewed from trace to trace (sd 0.04)
            for kw in ({}, {"by_trace": True}):
                t0 = time.perf_counter()
                c = least_difference_coverage(TraceModel(traces=traces, **PAIRED_SKEWED), rivals=3,
                                              interaction_sd=0.04, skew=1.0, reps=r, seed=seed, **kw)
                show("best", c, f"  ({time.perf_counter() - t0:.0f} s)")
    if "within" in only:
        n = max(40, r // 5)
        # 2,000 requests at a correlation time of 10: as many correlation times as 10,000 at 50 (the main job's)
        for traces, trace_sd in ((1, 0.15), (3, 0.05), (3, 0.15), (10, 0.05)):
            t0 = time.perf_counter()
            cs = within_traces_coverage(TraceModel(traces=traces, requests=2000, phi=0.9), trace_sd=trace_sd,
                                        reps=n if traces == 3 else max(20, n // 3), b=200, seed=seed)
            for c in cs.values():
                show("within", c, f"  (trace sd {trace_sd:g}; {time.perf_counter() - t0:.0f} s)")
    if "step" in only:
        for gap in (3.0, 1.0, 0.0):
            show("step", step_coverage(gap_sd=gap, reps=max(50, r // 2), b=200, requests=500, seed=seed))
    if "windows" in only:
        for kw in ({}, {"between_sd": 0.02}, {"phi": 0.5}):
            for c in window_coverage(reps=max(50, r // 3), b=200, seed=seed, **kw).values():
                show("windows", c)
    if "wilson" in only:
        for n in (50, 100, 407):
            cov = {p: wilson_coverage(n, p) for p in (0.1, 0.3, 0.5, 0.62, 0.8, 0.95)}
            print(f"[wilson] {n} independent units: exact coverage " +
                  ", ".join(f"{c:.3f} at p {p:g}" for p, c in cov.items()), flush=True)


if __name__ == "__main__":
    main()
