"""What each interval method covers, and at what measured level: the registry the rows' ``interval`` column and
the Findings read (`coverage_note`). The figures come from `repro.paper.coverage`'s Monte Carlo (its tests check
them against this registry); this module imports nothing of the sections, so `repro.paper.headline` may use it.
"""

from __future__ import annotations

import re

MEASURED: dict[str, dict[str, tuple[float, int]]] = {
    "t interval over N traces": {
        "normal spread (sd 0.01), 3 traces": (0.956, 1000),
        "normal spread (sd 0.03), 3 traces": (0.932, 1000),
        "normal spread (sd 0.01), 10 traces": (0.949, 1000),
        "skewed spread (sd 0.05), 3 traces": (0.889, 1000),
        "skewed spread (sd 0.05), 10 traces": (0.848, 1000),
    },
    "paired t interval over N traces": {
        "normal per-trace gaps, 3 traces": (0.944, 1000),
        "normal per-trace gaps, 10 traces": (0.945, 1000),
        "skewed per-trace gaps (sd 0.04), 3 traces": (0.887, 1000),
        "skewed per-trace gaps (sd 0.04), 10 traces": (0.822, 1000),
    },
    "block bootstrap over requests (blocks of": {
        "correlation time 50 requests": (0.940, 333),
        "correlation time 200 requests": (0.916, 333),
        "correlation time 500 requests": (0.844, 333),
    },
    "min over N rivals": {
        "3 rivals, 3 traces": (0.970, 1000),
        "6 rivals, 3 traces": (0.976, 1000),
        "3 rivals, 10 traces": (0.978, 1000),
        "skewed per-trace gaps (sd 0.04, long tail down), 3 rivals, 3 traces": (0.989, 1000),
        "skewed per-trace gaps (sd 0.04, long tail down), 3 rivals, 10 traces": (0.932, 1000),
        "skewed per-trace gaps (sd 0.04, long tail up), 3 rivals, 3 traces": (0.909, 1000),
        "skewed per-trace gaps (sd 0.04, long tail up), 3 rivals, 10 traces": (0.878, 1000),
    },
    "t interval over N traces (bootstrap standard error)": {
        "a count 3 standard errors from its step": (1.000, 500),
        "1 standard error from it": (0.994, 500),
        "on the step": (0.960, 500),
    },
    "block bootstrap over requests within each of N traces": {
        "these 3 traces' lowest P99": (0.885, 200),
        "these 3 traces' highest P99": (0.950, 200),
        "these 10 traces' lowest P99": (0.758, 66),
        "these 10 traces' highest P99": (0.970, 66),
        "the tail share of these 3 traces": (0.990, 200),
        "the population's mean P99, 3 traces, trace sd 5 %": (0.840, 200),
        "the population's mean P99, 3 traces, trace sd 15 %": (0.465, 200),
    },
    "block bootstrap over requests, N trace": {
        "this trace's P99": (0.910, 200),
        "the population's mean P99, trace sd 15 %": (0.495, 200),
    },
    "bootstrap over N (trace, window) blocks": {
        "independent windows": (0.949, 333),
        "the population, trace sd 0.02 s": (0.568, 333),
        "these traces, trace sd 0.02 s": (0.958, 333),
        "windows correlated (lag 1: 0.5)": (0.736, 333),
    },
    "F interval of an sd ratio (N traces of ours, N of the paper's)": {
        "normal trace values, 10 traces of ours and 3 of the paper's": (0.949, 2000),
    },
    "Wilson": {
        "independent units, the lowest of 18 (n, p)": (0.935, 0),
        "Fig. 7's windows correlated (lag 1: 0.5)": (0.757, 333),
    },
}
"""What `benchmarks/bench_coverage.py` measured (seed 0), per `METHOD_COVERAGE` key and condition:
``(coverage at nominal 0.95, draws)`` (draws 0: exact, not a Monte Carlo). The tests check their own,
smaller Monte Carlos against these."""

COVERS_POPULATION = frozenset({"t interval over N traces", "paired t interval over N traces", "min over N rivals",
                               "t interval over N traces (bootstrap standard error)", "Wilson",
                               "F interval of an sd ratio (N traces of ours, N of the paper's)"})
"""The methods whose interval is meant for the population's value (the others: one trace's, or these
traces'): `coverage_note` is empty for them when every measured condition reaches `NOMINAL_FLOOR`."""
NOMINAL_FLOOR = 0.93
"""A measured coverage at or above this is nominal 0.95 within the Monte Carlo's noise (1,000 draws: sd
0.007) and Wilson's exact oscillation (0.935-0.97)."""

_WITHIN = ("these traces only (a bootstrap within the given traces: their requests resampled, the traces kept): it "
           "covers the value of these traces, not the population's")
METHOD_COVERAGE: dict[str, str] = {
    "F interval of an sd ratio (N traces of ours, N of the paper's)":
        "the ratio of the two populations' trace-to-trace sds: exact for normal trace values (measured 0.95 with 10 "
        "traces of ours and the paper's 3; tests/paper/test_coverage.py); a skewed spread is not among its tested "
        "conditions",
    "t interval over N traces":
        "the population's mean over traces, 95 % when the trace-to-trace spread is about normal (measured 0.96 over "
        "3 traces, 0.93 at a larger spread, 0.95 over 10); with a skewed spread (a few traces far below the rest) "
        "it covers less: 0.89 over 3 traces, 0.85 over 10",
    "paired t interval over N traces":
        "the population's mean gap over traces, 95 % when the per-trace gaps spread about normally (measured 0.94 "
        "over 3 and over 10 traces); with skewed per-trace gaps (a few traces where the edge is far smaller) it "
        "covers less: 0.89 over 3 traces, 0.82 over 10",
    "block bootstrap over requests (blocks of":
        "that one trace's own value, not the population's (one trace shows nothing of the trace-to-trace spread): "
        "0.94 at a within-trace correlation time of 50 requests (the simulator's), 0.92 at 200, 0.84 at 500 (too few "
        "blocks in 10,000 requests)",
    "paired block bootstrap over requests (blocks of":
        "that one trace's own gap, not the population's (as the block bootstrap of one trace: 0.94 at the "
        "simulator's correlation time, less at longer ones)",
    "constant over requests":
        "every request of the one trace had the same value: a zero-width interval that claims no uncertainty "
        "(untested)",
    "paired constant over requests":
        "every request of the one trace had the same difference: a zero-width interval that claims no uncertainty "
        "(untested)",
    "min over N rivals":
        "the minimum of the true gaps over the rivals (the best picked after the fact), at least 95 % when the "
        "per-trace gaps spread about normally (Bonferroni is conservative: measured 0.97 with 3 rivals and 0.98 with "
        "6 over 3 traces, 0.98 over 10); with skewed per-trace gaps (3 rivals) it depends on which way their long "
        "tail runs: with a few traces where the gaps are far smaller, 0.99 over 3 traces and 0.93 over 10; with a "
        "few where they are far larger it covers less, 0.91 over 3 traces and 0.88 over 10 (most draws then lack "
        "such a trace and put every gap a little low, and one rival's interval below the truth is enough for the "
        "minimum's to miss)",
    "t interval over N traces (bootstrap standard error)":
        "the population's value of a statistic of the traces (Fig. 4's GPU count off a frontier: measured 1.00 "
        "three standard errors from a step, 0.99 one from it, 0.96 on it); a zero-width interval means every "
        "resample gave the same count, and a rate searched beforehand is held fixed",
    "block bootstrap over requests within each of N traces":
        f"{_WITHIN}. These traces' P99 TTFT (each trace's at infinite length): the lowest of 3 traces 0.89, of 10 "
        "0.76 (the lowest of noisy P99s sits below the lowest true one), the highest 0.95 and 0.97, the tail share "
        "0.99; the population's mean P99: 0.84 at a trace-to-trace sd of 5 %, 0.47 at 15 %",
    "block bootstrap over requests, N trace":
        f"{_WITHIN}. This trace's P99 TTFT 0.91; the population's mean P99 0.49 at a trace-to-trace sd of 15 %",
    "bootstrap over N (trace, window) blocks":
        "windows taken as independent units: the population's mean when they are (measured 0.95); when traces "
        "differ it covers these traces' mean (0.96) but not the population's (0.57 at a trace-to-trace sd of "
        "0.02 s against 0.05 s between windows), and less when consecutive windows are correlated (0.74 at lag-1 "
        "correlation 0.5)",
    "t interval over N (trace, window) blocks (bootstrap standard error)":
        "windows taken as independent units (as the bootstrap over (trace, window) blocks: not the population's "
        "mean when traces differ or consecutive windows are correlated)",
    "bootstrap over N held-out requests":
        "the held-out requests taken as independent units: the percentile bootstrap covers 0.95 over independent "
        "units (measured on windows); requests of one trace are autocorrelated, which would narrow it (untested)",
    "Wilson":
        "a proportion of independent units, exactly 0.94-0.97 (Wilson's oscillation: 0.935 at its lowest over 50-407 "
        "units; 0.95 at Fig. 7's 407 windows); "
        "Fig. 7's windows are not independent: 0.76 when consecutive windows correlate at 0.5",
    "rates whose round-robin goodput":
        "a band of rates read off a probe curve, not a confidence interval: no coverage is claimed",
    "the anchors' probe curves":
        "a band of rates read off the anchors' probe curves, not a confidence interval: no coverage is claimed",
}
"""Per interval method (`Estimate.method` with every number written N; `method_key` finds a method's key),
what its interval covers and at what measured level (`MEASURED`, `benchmarks/bench_coverage.py`)."""


def _normalized(method: str) -> str:
    """``method`` with every number written N, a level suffix (`` at 98.3%``) and the named rival
    (``(now round_robin)``) left out: the form of `METHOD_COVERAGE`'s keys."""
    text = re.sub(r" at \d+(\.\d+)?%", "", method)
    text = re.sub(r" \(now [^)]*\)", "", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def method_key(method: str) -> str | None:
    """The `METHOD_COVERAGE` key of ``method`` (`Estimate.method`): the longest key that begins it, its
    numbers written N; None when none does."""
    text = _normalized(method)
    keys = [k for k in METHOD_COVERAGE if text.startswith(k)]
    return max(keys, key=len) if keys else None


def coverage_note(method: str) -> str:
    """The sentence on what an interval of ``method`` (`Estimate.method`) covers and at what measured level
    (`METHOD_COVERAGE`): "" when there is no interval (``none: ...``) or when the method is meant for the
    population and covered its nominal 95 % in every condition tested (`COVERS_POPULATION`,
    `NOMINAL_FLOOR`); "coverage not measured (...)" for a method `METHOD_COVERAGE` does not know."""
    if not method or method.startswith("none"):
        return ""
    key = method_key(method)
    if key is None:
        return "coverage not measured (repro.paper.coverage has no test of this method)"
    measured = MEASURED.get(key, {})
    if key in COVERS_POPULATION and measured and min(r for r, _ in measured.values()) >= NOMINAL_FLOOR:
        return ""
    return METHOD_COVERAGE[key]
