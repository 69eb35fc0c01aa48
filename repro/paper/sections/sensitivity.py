"""Sensitivity to our estimated constants, in notebook 10: do the paper's orderings
survive when the constants the paper does not state take other plausible values?

The A40 testbed (``data/hardware/a40-identified.json``, identified from the paper's baselines by `repro
identify`; the hand estimates 6.0e-5 s/token and 20 GB/s are ``a40-qwen2.5-3b``) has two constants the
paper does not state that matter for TTFT: the prefill cost per prompt token (6.56e-5 s/token at the
file's best fit, at a bound of its prior's ensemble) and the KV transfer bandwidth (loose: the paper's
baselines cannot see it; 5.8 GB/s at the file's best fit; the file's ``params`` hold each value with its
ensemble). With either, a share of ``documents`` requests cannot meet their TTFT target even on an idle
cluster (`idle_miss_share` computes it; the notebook prints it), so they shape every TTFT-bound result. Each is
swept alone (the other at its default), in the hardware truth and in the calibrated router's constants together
(a calibrated router knows its hardware: a spec's ``physics`` overrides, `repro.experiment.spec.RunSpec`);
the constants the paper states (prefill base, decode, KV bytes per token, the KV budget, the SLO
targets) never move, nor do the simulator-derived constants (what a simulator believed).

The ranges (`SWEEP`), why plausible:

- ``prefill_per_token_s``, 3.8e-5 .. 1.2e-4 s/token (and the testbed's own value): prefill of Qwen2.5-3B
  costs 2 x 2.77e9 non-embedding parameters = 5.5 GFLOP per token; at the A40's 149.7 TFLOP/s dense BF16
  peak that is 3.7e-5 s/token, so 3.8e-5 is ~97 % of peak (a floor no engine reaches), the identified
  6.56e-5 56 %, the hand estimate 6e-5 61 %,
  9e-5 41 % and 1.2e-4 31 % (a poorly batched prefill, or attention's quadratic term on long prompts,
  which the profile's linear model leaves out).
- ``transfer_bandwidth_bytes_per_s``, 2 .. 32 GB/s (and the testbed's own value): 36,864 KV bytes per
  token move from the prefill to the decode GPU. 32 GB/s is PCIe Gen4 x16 raw (the physical bound,
  `repro.identify.bounds`); 20 GB/s UCX cuda_ipc over it (the hand estimate); 10 GB/s PCIe staged
  through host memory or 100 Gb/s RDMA between nodes; 5 GB/s a congested or Gen3 path; 2 GB/s TCP over
  ~20 GbE (NIXL without RDMA).

At each point the operating rate is searched again (`point_rates`: the paper's saturation search,
round-robin mid-collapse on 2p4d, `repro.experiment.saturation.saturation_search`), since the
hardware's capacity moves with the constants, and four orderings are measured as paired differences
over the same traces and requests (`ORDERINGS`; `repro.statistics.intervals.paired_difference`; positive =
the paper's side). Goodput a fraction; rates in req/s; constants in s/token and bytes/s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper.plans import FULL_SEEDS
from repro.statistics.intervals import Estimate
from repro.vocab import DEFAULT_PROFILE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Labelled, Section

_PROFILE = load_profile(DEFAULT_PROFILE).physics
DEFAULTS: dict[str, float] = {"prefill_per_token_s": _PROFILE.prefill_per_token_s,
                              "transfer_bandwidth_bytes_per_s": _PROFILE.transfer_bandwidth_bytes_per_s}
"""The profile's estimates (s/token, bytes/s): each sweep's default point."""

SWEEP: dict[str, tuple[float, ...]] = {
    "prefill_per_token_s": tuple(sorted({3.8e-5, DEFAULTS["prefill_per_token_s"], 6.0e-5, 9.0e-5, 1.2e-4})),
    "transfer_bandwidth_bytes_per_s": tuple(sorted({2.0e9, DEFAULTS["transfer_bandwidth_bytes_per_s"], 5.0e9, 1.0e10,
                                                    2.0e10, 3.2e10})),
}
"""Each constant's values at full scale (the module docstring says why these); the other constant stays
at its default. 10 distinct points (the default is shared)."""
QUICK_SWEEP: dict[str, tuple[float, ...]] = {
    "prefill_per_token_s": (DEFAULTS["prefill_per_token_s"], 1.2e-4),
    "transfer_bandwidth_bytes_per_s": (DEFAULTS["transfer_bandwidth_bytes_per_s"], 3.2e10),
}
"""Quick scale: the default and the far end of each range (3 distinct points)."""
SENSITIVITY_REQUESTS = (200, 2000)
"""Requests per run at (quick, full) scale. Full: 10 points x 3 traces x 8 runs of 2,000 requests and a
saturation search per point (probes of 1,000) cost about 55 s of one core (10,000 requests would be
five times that); quick: 3 points x 1 trace x 8 runs of 200, about 5 s."""
QUICK_TRACES = 1
"""Traces of the quick sweep (the first of the notebook's); full scale runs every trace of the notebook."""

CONSTANT_LABELS = {"prefill_per_token_s": "prefill per token",
                   "transfer_bandwidth_bytes_per_s": "KV transfer bandwidth"}
CONSTANT_UNITS = {"prefill_per_token_s": (1e-6, "us/token"), "transfer_bandwidth_bytes_per_s": (1e9, "GB/s")}
"""Display scale and unit of each constant (value / scale, unit)."""


@dataclass(frozen=True)
class Ordering:
    """A paper ordering as a paired difference A - B (goodput; positive = the paper's side)."""

    key: str
    a: tuple[str, str]
    """(variant, topology) of side A: the one the paper finds better."""
    b: tuple[str, str] | None
    """(variant, topology) of side B; None: the best of `BEST_BASELINES` at that point (mean goodput)."""
    meaning: str
    title: str
    """The figure panel's title (short)."""


BEST_BASELINES = ("round_robin", "least_loaded", "length_threshold")
"""The baselines of Table II (the paper's counting policies)."""
ORDERINGS: tuple[Ordering, ...] = (
    Ordering("table2_lead", ("marginal_cost", "2p4d"), None,
             "marginal_cost minus the best baseline, mixed 2p4d (Table II)",
             "Table II: marginal_cost - best baseline (2p4d)"),
    Ordering("scarcity_inversion", ("round_robin", "1p2d"), ("marginal_cost", "1p2d"),
             "round-robin minus marginal_cost, mixed 1p2d (the scarcity inversion, §V-E)",
             "§V-E: round-robin - marginal_cost (1p2d)"),
    Ordering("calibration_gain", ("marginal_cost", "2p4d"), ("marginal_cost@sim_derived", "2p4d"),
             "marginal_cost calibrated minus simulator-derived constants, mixed 2p4d (Table II)",
             "Table II: calibrated - simulator-derived (2p4d)"),
    Ordering("length_gain", ("marginal_cost", "2p4d"), ("marginal_cost-length", "2p4d"),
             "marginal_cost minus marginal_cost without the predicted length, mixed 2p4d (Fig. 8)",
             "Fig. 8: with - without predicted length (2p4d)"),
)
"""The four orderings measured at each point."""

VARIANTS: dict[str, tuple[str, dict[str, Any], str]] = {
    "round_robin": ("round_robin", {}, "calibrated"),
    "least_loaded": ("least_loaded", {}, "calibrated"),
    "length_threshold": ("length_threshold", {}, "calibrated"),
    "marginal_cost": ("marginal_cost", {}, "calibrated"),
    "marginal_cost@sim_derived": ("marginal_cost", {}, "sim_derived"),
    "marginal_cost-length": ("marginal_cost", {"use_length": False}, "calibrated"),
}
"""variant -> (policy, options, cost model)."""
CELLS: tuple[tuple[str, str], ...] = (
    *((v, "2p4d") for v in ("round_robin", "least_loaded", "length_threshold", "marginal_cost",
                            "marginal_cost@sim_derived", "marginal_cost-length")),
    ("round_robin", "1p2d"), ("marginal_cost", "1p2d"),
)
"""(variant, topology) runs per point and trace: 8."""


Hardware = tuple[tuple[str, float], ...]
"""A point's hardware: its overrides, sorted (`Point.hardware`); () is the shipped profile."""


@dataclass(frozen=True)
class Point:
    """One point of the sweep: ``constant`` at ``value`` (s/token or bytes/s), the other at its default."""

    constant: str
    value: float

    @property
    def physics(self) -> dict[str, float] | None:
        """The spec's ``physics`` override (None at the default: the shipped profile, so its runs are the
        other notebooks' own)."""
        return None if math.isclose(self.value, DEFAULTS[self.constant]) else {self.constant: float(self.value)}

    @property
    def is_default(self) -> bool:
        return self.physics is None

    @property
    def hardware(self) -> Hardware:
        """The overrides as a sorted tuple: points on the same hardware (the default of each sweep) share it."""
        return tuple(sorted((self.physics or {}).items()))


def sweep_points(sweep: Mapping[str, Sequence[float]] = SWEEP) -> list[Point]:
    """The points of ``sweep`` (constant -> values), in order; a bad constant or value is a ConfigError."""
    from repro.engine.physics import check_overrides

    out = []
    for constant, values in sweep.items():
        if constant not in DEFAULTS:
            raise ConfigError(f"sensitivity: constant {constant!r}; allowed: {sorted(DEFAULTS)}")
        if not values:
            raise ConfigError(f"sensitivity: no values for {constant!r}")
        for v in values:
            check_overrides({constant: v}, f"sensitivity: sweep of {constant!r}")
            out.append(Point(constant, float(v)))
    return out


def point_rates(ctx: Section, points: Sequence[Point], n_requests: int) -> dict[Hardware, float]:
    """The operating rate (req/s) of each distinct hardware of ``points``: the saturation search (round-robin
    mid-collapse on mixed 2p4d, `repro.experiment.saturation.saturation_search`) on ``ctx``'s first trace,
    probes of ``n_requests`` requests (the rows' own: a shorter probe lands elsewhere). Keyed by `Point.hardware`."""
    from repro.experiment.saturation import saturation_search

    rates: dict[Hardware, float] = {}
    for p in points:
        k = p.hardware
        if k in rates:
            continue
        base = RunSpec.from_flat(workload="mixed", topology="2p4d", seed=int(ctx.seeds[0]),
                                 n_requests=int(n_requests), physics=p.physics)
        rates[k] = float(saturation_search(base).rate)
    return rates


def sensitivity_specs(ctx: Section, points: Sequence[Point], rates: Mapping[Hardware, float],
                      n_requests: int) -> list[Labelled]:
    """``(labels, spec)`` per point x `CELLS` x trace of ``ctx`` (simulated, ``n_requests`` each, mixed at the
    point's rate from `point_rates`); labels: constant, value, variant. A spec shared by two points (the
    default, in each constant's sweep) appears once per point."""
    out = []
    for p in points:
        rate = rates[p.hardware]
        for variant, topo in CELLS:
            policy, options, cm = VARIANTS[variant]
            for s in ctx.seeds:
                spec = RunSpec.from_flat(workload="mixed", topology=topo, seed=int(s), rate=rate,
                                         n_requests=int(n_requests), policy=policy, policy_options=dict(options),
                                         cost_model=cm, physics=p.physics)
                out.append(({"constant": p.constant, "value": p.value, "variant": variant}, spec))
    return out


def idle_miss_share(physics: dict[str, float] | None, seeds: Sequence[int], n_requests: int) -> float:
    """The share of ``documents`` requests (fraction, over the traces of ``seeds``, ``n_requests`` each)
    whose TTFT on an idle cluster (prefill alone + KV transfer + one decode step) exceeds their class's
    target: work no router can make good."""
    from repro.experiment.inputs import build_trace, engine_pools, truth_cost_model

    miss = total = 0
    for s in seeds:
        spec = RunSpec.from_flat(workload="documents", seed=int(s), n_requests=int(n_requests), rate=1.0,
                                 physics=physics)
        ph = engine_pools(spec)[3][0]
        slo = truth_cost_model(spec).slo
        df = build_trace(spec).df
        for L, cls in zip(df.prompt_tokens.to_numpy(), df.slo_class, strict=True):
            ttft = ph.prefill_request_time_s(int(L)) + ph.transfer_time_s(int(L)) + ph.decode_step_s(1, int(L))
            miss += ttft > slo.ttft_s(cls)
        total += len(df)
    return miss / total if total else math.nan


TABLE_COLUMNS = ("constant", "value", "ratio", "is_default", "rate", "ordering", "a", "b", "a_goodput", "b_goodput",
                 "diff", "lo", "hi", "method", "traces", "requests", "documents_idle_miss", "runs")


def sensitivity_table(runs: pd.DataFrame, ctx: Section, *, idle_requests: int = 0) -> pd.DataFrame:
    """One row per (point, ordering): the paired difference A - B (goodput, positive = the paper's side)
    with its 95 % interval (``diff``, ``lo``, ``hi``: `Section.difference`, over the traces and their
    requests), the point (``constant``, ``value``, ``ratio`` to the default), its operating ``rate``
    (req/s), the two sides (``a``, ``b``: ``variant@topology``; for ``table2_lead`` B is the best
    Table II baseline at that point) and their mean goodputs, the share of documents requests that
    miss their TTFT even on an idle cluster at that point (`idle_miss_share`, over ``ctx``'s traces
    of ``idle_requests`` each; 0: skipped), and the run ids."""
    if runs.empty:
        raise ConfigError("sensitivity_table: no runs")
    rows = []
    for (constant, value), g in runs.groupby(["constant", "value"], sort=False):
        point = Point(str(constant), float(value))
        miss = idle_miss_share(point.physics, ctx.seeds, idle_requests) if idle_requests else math.nan

        def side(variant: str, topo: str, g: pd.DataFrame = g) -> pd.DataFrame:
            return g[(g.variant == variant) & (g.topology == topo)]

        for o in ORDERINGS:
            b = o.b
            if b is None:
                means = {v: side(v, o.a[1]).goodput.mean() for v in BEST_BASELINES}
                b = (max(means, key=lambda v: (means[v], v)), o.a[1])
            ra, rb = side(*o.a), side(*b)
            if ra.empty or rb.empty:
                continue
            est = ctx.difference(ra, rb)
            rows.append({"constant": point.constant, "value": point.value,
                         "ratio": point.value / DEFAULTS[point.constant], "is_default": point.is_default,
                         "rate": float(ra.rate.iloc[0]), "ordering": o.key, "a": "@".join(o.a), "b": "@".join(b),
                         "a_goodput": float(ra.goodput.mean()), "b_goodput": float(rb.goodput.mean()),
                         "diff": est.value, "lo": est.lo, "hi": est.hi, "method": est.method, "traces": est.traces,
                         "requests": est.requests, "documents_idle_miss": miss,
                         "runs": " ".join(ctx.run_ids(ra, rb))})
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def run_sensitivity(ctx: Section, sweep: Mapping[str, Sequence[float]] = SWEEP, *, n_requests: int,
                    traces: int | None = None, save_as: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The whole sweep on the simulator (whatever ``ctx``'s backend: the overrides are the simulator's), on
    the first ``traces`` of ``ctx``'s traces (None: all): the points' operating rates, their runs
    (``ctx.simulator().run``; written as ``save_as`` when named) and `sensitivity_table`. Returns
    ``(runs, table)``."""
    sim = ctx.simulator()
    if traces is not None:
        sim = dataclasses.replace(sim, seeds=tuple(sim.seeds[:traces]))
    points = sweep_points(sweep)
    rates = point_rates(sim, points, n_requests)
    items = sensitivity_specs(sim, points, rates, n_requests)
    first: dict[str, int] = {}  # run id -> its first item: the default point's runs are run once, shown in each sweep
    for k, (_, spec) in enumerate(items):
        first.setdefault(spec.run_id, k)
    ran = sim.run([items[k] for k in sorted(first.values())])
    row_of = {rid: j for j, rid in enumerate(ran.run_id)}
    runs = ran.iloc[[row_of[spec.run_id] for _, spec in items]].reset_index(drop=True)
    runs["constant"] = [lab["constant"] for lab, _ in items]
    runs["value"] = [lab["value"] for lab, _ in items]
    if save_as:
        sim.write_results(runs, save_as)
    return runs, sensitivity_table(runs, sim, idle_requests=n_requests)


def sensitivity_headline(tab: pd.DataFrame) -> list[HeadlineRow]:
    """Headline rows, one per ordering: its smallest paired difference over the sweep (the point where the
    paper's side is weakest), with that point's 95 % interval, an ordering on the paper's side (claim
    +1; the paper states the orderings, not these numbers)."""
    out = []
    for o in ORDERINGS:
        g = tab[tab.ordering == o.key]
        if g.empty:
            continue
        r = g.sort_values(["diff", "constant", "value"], kind="mergesort").iloc[0]
        est = Estimate(float(r["diff"]), float(r["lo"]), float(r["hi"]), str(r["method"]), int(r["traces"]),
                       int(r["requests"]))
        scale, unit = CONSTANT_UNITS[r["constant"]]
        out.append({"key": f"sensitivity_{o.key}_min", "ours": est, "kind": "ordering", "claim": 1,
                    "unit": "fraction", "runs": str(r["runs"]).split(),
                    "meaning": f"{o.meaning}: the smallest over the sweep of our estimated constants, at "
                               f"{CONSTANT_LABELS[r['constant']]} = {r['value'] / scale:g} {unit} "
                               f"(of {len(tab[tab.ordering == o.key])} values of {tab.constant.nunique()} constants), "
                               "paired by trace"})
    return out


def sensitivity_figure(tab: pd.DataFrame, *, title: str = "") -> Figure:
    """One panel per ordering: the paired difference (goodput, with its 95 % interval) against each constant's
    value as a ratio to its default (log x), one line per constant, zero and the default marked."""
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    orderings = [o for o in ORDERINGS if o.key in set(tab.ordering)]
    if not orderings:
        raise ConfigError("sensitivity_figure: no orderings in the table")
    n = len(orderings)
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.1 * rows + 0.5), squeeze=False)
    colors = {"prefill_per_token_s": "#4477AA", "transfer_bandwidth_bytes_per_s": "#EE6677"}
    markers = {"prefill_per_token_s": "o", "transfer_bandwidth_bytes_per_s": "s"}
    for ax, o in zip(axes.flat, orderings, strict=False):
        g = tab[tab.ordering == o.key]
        for k, (constant, c) in enumerate(g.groupby("constant", sort=False)):
            c = c.sort_values("ratio")
            x = c.ratio.to_numpy(float) * (1.0 + 0.025 * (k - 0.5))  # side by side: intervals do not hide
            y = c["diff"].to_numpy(float)
            scale, unit = CONSTANT_UNITS[constant]
            ax.errorbar(x, y, yerr=[y - c.lo.to_numpy(float), c.hi.to_numpy(float) - y], color=colors[constant],
                        marker=markers[constant], ms=4, lw=1.2, capsize=2.5,
                        label=f"{CONSTANT_LABELS[constant]} (1 = {DEFAULTS[constant] / scale:g} {unit})")
        ax.axhline(0.0, color="black", lw=0.8)
        ax.axvline(1.0, color="#888888", ls=":", lw=0.9, label="our estimate (default)")
        ax.set_xscale("log")
        ratios = sorted(set(tab.ratio.round(6)))
        ax.set_xticks(ratios)
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("constant / our estimate (log scale)")
        ax.set_ylabel("A - B goodput, paired")
        ax.set_title(o.title, fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


@dataclass(frozen=True)
class Plan:
    """What the sweep runs at one scale (`plan`)."""

    sweep: dict[str, tuple[float, ...]]
    """Constant -> its values (s/token, bytes/s)."""
    n_requests: int
    """Requests per run."""
    traces: int | None
    """How many of the notebook's traces (the first ones); None: all."""


def plan(scale: str, requests: int = 0) -> Plan:
    """The sweep of a scale: full `SWEEP` on the paper's three traces (`repro.paper.plans.FULL_SEEDS`: a
    robustness sweep of our constants, not a claim of the paper; its t intervals stay valid, only wider),
    quick `QUICK_SWEEP` on `QUICK_TRACES`, with
    `SENSITIVITY_REQUESTS` requests per run unless ``requests`` > 0."""
    full = scale == "full"
    if isinstance(requests, bool) or not isinstance(requests, int) or requests < 0:
        raise ConfigError(f"parameter 'sensitivity_requests' = {requests!r} must be an integer >= 0 (0 = the scale "
                          "default)")
    return Plan(dict(SWEEP if full else QUICK_SWEEP), int(requests) or SENSITIVITY_REQUESTS[1 if full else 0],
                len(FULL_SEEDS) if full else QUICK_TRACES)

