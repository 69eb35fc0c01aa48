"""Held-out tuning of ``marginal_cost_plus``: its settings chosen on traces that no
notebook evaluates, then re-measured on the evaluation traces.

`repro.routing.policies.batching.MarginalCostPlus` is a marginal-cost scorer with our additions beyond
the paper on by default (`repro.routing.policies.scoring.MarginalCostBase` documents them): power-of-d
sampled candidates (``sample_d``) and the admission guard (``admission_guard``, ``guard_margin``).
This module grid-searches those settings, and the scorer they build on (the paper's ``marginal_cost``
or our ``marginal_cost_batching``), on `TUNING_SEEDS`, arrival traces disjoint from every evaluation
trace (`EVALUATION_SEEDS`; checked at import), over the cells notebook 13 judges our router on
(`CELLS`: mixed traffic at its operating rate on every pool shape of the frontier, and the four
workloads at their operating rates on 2p4d; `repro.paper.sections.beyond`).

The objective (`tuning_table`, `select`): per cell, a setting's *gap* is its mean goodput over the
tuning traces minus the best mean goodput of the baselines (`BASELINES`: the paper's four policies,
its own router included, and the production routers) in that cell (goodput a fraction; positive
means the setting beats every baseline there). A setting's objective is its *worst gap* over the
cells (notebook 13's goal "never more than 0.03 below the best baseline", made the thing to
maximise); ties are broken by the *mean gap* over the cells, then by fewer additions switched on
(the simpler router), then by the label. The chosen setting is `MarginalCostPlus`'s default; its
docstring records the seeds, the grid and the result on tuning and evaluation traces.

Runs are simulated (`repro.experiment.runner.simulated_summary`, cached per spec and code); the
default size is `TUNING_REQUESTS` requests per run, 3 traces. `benchmarks/tune_plus.py` prints
the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper.plans import FULL_SEEDS, LIVE_QUICK_SEEDS, SIM_FULL_SEEDS, SIM_SATURATION_RATES
from repro.paper.sections.beyond import FRONTIER_SHAPES, PRODUCTION
from repro.paths import TUNING_DIR
from repro.routing.policies import PAPER_POLICIES
from repro.routing.policies.base import option_defaults
from repro.vocab import WORKLOADS

if TYPE_CHECKING:
    from pathlib import Path

    from repro.paper.context.runs import Labelled

TUNING_SEEDS = (101, 102, 103)
"""Arrival traces the settings are chosen on (one seed = one trace); disjoint from `EVALUATION_SEEDS`."""
EVALUATION_SEEDS = tuple(sorted({*FULL_SEEDS, *SIM_FULL_SEEDS, *LIVE_QUICK_SEEDS}))
"""Every arrival trace a notebook evaluates on: sim full's ten (`repro.paper.plans.SIM_FULL_SEEDS`), the
paper's three (`repro.paper.plans.FULL_SEEDS`; the notebooks' quick plans and saturation searches use
subsets of them) and live quick's."""
if set(TUNING_SEEDS) & set(EVALUATION_SEEDS):  # pragma: no cover - a guard on the constants above
    raise ConfigError(f"tuning: TUNING_SEEDS {TUNING_SEEDS} overlap the evaluation seeds {EVALUATION_SEEDS}")

TUNING_REQUESTS = 3000
"""Requests per tuning run (each of `TUNING_SEEDS`, each cell, each setting and baseline)."""

BASES = ("marginal_cost", "marginal_cost_batching")
"""The scorers a setting may build on: the paper's (§III) and ours for batching decode engines."""
SAMPLE_D = (0, 2)
"""Candidates priced per pool: every instance (0), or power-of-2."""
GUARD_MARGINS: tuple[float | None, ...] = (None, 1.0, 1.25, 1.5, 2.0)
"""The admission guard: off (None), or on at this multiple of the class's TTFT target."""

BASELINES = (*PAPER_POLICIES, *PRODUCTION)
"""What a setting must beat in each cell: the paper's four policies (its router ``marginal_cost``
included) and the production routers."""

CELLS: tuple[tuple[str, str, float], ...] = (
    *(("mixed", shape, SIM_SATURATION_RATES["mixed"]) for shape in FRONTIER_SHAPES),
    *((wl, "2p4d", SIM_SATURATION_RATES[wl]) for wl in WORKLOADS if wl != "mixed"),
)
"""(workload, pool shape, rate in req/s): notebook 13's frontier (mixed at its operating rate on every
shape) and its workload table (each workload at its operating rate on 2p4d; mixed 2p4d is a frontier
cell already), at the simulator's saturation rates (`repro.paper.plans.SIM_SATURATION_RATES`)."""


@dataclass(frozen=True)
class Setting:
    """One point of the grid: the scorer it builds on and our additions' options."""

    base: str
    """``marginal_cost`` or ``marginal_cost_batching`` (`BASES`)."""
    sample_d: int = 0
    """Candidates priced per pool (0: all)."""
    guard_margin: float | None = None
    """The admission guard's threshold (a multiple >= 1 of the TTFT target); None: the guard is off."""

    def __post_init__(self) -> None:
        if self.base not in BASES:
            raise ConfigError(f"tuning: field 'base' = {self.base!r}; allowed: {list(BASES)}")
        if isinstance(self.sample_d, bool) or not isinstance(self.sample_d, int) or self.sample_d < 0:
            raise ConfigError(f"tuning: field 'sample_d' = {self.sample_d!r} must be an integer >= 0")
        if self.guard_margin is not None and not self.guard_margin >= 1.0:
            raise ConfigError(f"tuning: field 'guard_margin' = {self.guard_margin!r} must be >= 1 (or None: off)")

    def options(self) -> dict[str, Any]:
        """The base policy's options for this setting, those at the base's defaults left out (so a
        setting with no addition is the base policy's own run)."""
        out: dict[str, Any] = {}
        if self.sample_d:
            out["sample_d"] = self.sample_d
        if self.guard_margin is not None:
            out["admission_guard"] = True
            out["guard_margin"] = float(self.guard_margin)
        return out

    @property
    def additions(self) -> int:
        """How many of our additions are on (0, 1 or 2)."""
        return int(self.sample_d > 0) + int(self.guard_margin is not None)

    @property
    def label(self) -> str:
        guard = "off" if self.guard_margin is None else f"{self.guard_margin:g}"
        return f"{self.base} d={self.sample_d} guard={guard}"

    def to_row(self) -> dict[str, Any]:
        return {"setting": self.label, "base": self.base, "sample_d": self.sample_d,
                "admission_guard": self.guard_margin is not None,
                "guard_margin": math.nan if self.guard_margin is None else float(self.guard_margin)}

    @classmethod
    def from_row(cls, row: Any) -> Setting:
        """The setting of a row of `tuning_table` (a mapping or a pandas row)."""
        guard = bool(row["admission_guard"])
        return cls(str(row["base"]), int(row["sample_d"]), float(row["guard_margin"]) if guard else None)


GRID: tuple[Setting, ...] = tuple(Setting(b, d, g) for b in BASES for d in SAMPLE_D for g in GUARD_MARGINS)
"""The tuning grid: `BASES` x `SAMPLE_D` x `GUARD_MARGINS` (20 settings; the two without additions
are ``marginal_cost`` and ``marginal_cost_batching`` themselves)."""


def tuning_specs(seeds: Sequence[int] = TUNING_SEEDS, n_requests: int = TUNING_REQUESTS, *,
                 grid: Sequence[Setting] = GRID, cells: Sequence[tuple[str, str, float]] = CELLS,
                 baselines: Sequence[str] = BASELINES) -> list[Labelled]:
    """``(labels, spec)`` per cell x (baseline or setting) x trace, simulated; labels: workload, topology,
    rate (req/s), variant (a baseline's name or a setting's label), kind ('baseline' or 'setting'), seed."""
    out = []
    for wl, shape, rate in cells:
        variants = [(b, b, {}, "baseline") for b in baselines] + \
                   [(s.label, s.base, s.options(), "setting") for s in grid]
        for label, policy, options, kind in variants:
            for seed in seeds:
                spec = RunSpec.from_flat(backend="sim", workload=wl, topology=shape, rate=float(rate), seed=int(seed),
                                         n_requests=int(n_requests), policy=policy, policy_options=dict(options))
                out.append(({"workload": wl, "topology": shape, "rate": float(rate), "variant": label,
                             "kind": kind, "seed": int(seed)}, spec))
    return out


def tuning_runs(seeds: Sequence[int] = TUNING_SEEDS, n_requests: int = TUNING_REQUESTS, *,
                grid: Sequence[Setting] = GRID, cells: Sequence[tuple[str, str, float]] = CELLS,
                baselines: Sequence[str] = BASELINES,
                progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Simulate `tuning_specs` (each spec once per code version: `repro.experiment.simcache`); one row per
    run: its labels, run id, goodput (fraction of requests sent) and rejected requests.
    ``progress(done, total)`` is called after each run."""
    from repro.experiment.runner import simulated_summary

    items = tuning_specs(seeds, n_requests, grid=grid, cells=cells, baselines=baselines)
    rows = []
    for k, (labels, spec) in enumerate(items):
        summary, _ = simulated_summary(spec)
        rows.append({**labels, "run_id": spec.run_id, "goodput": float(summary["goodput"]),
                     "rejected": int(summary.get("rejected", 0))})
        if progress:
            progress(k + 1, len(items))
    return pd.DataFrame(rows)


TABLE_COLUMNS = ("setting", "base", "sample_d", "admission_guard", "guard_margin", "worst_gap", "worst_cell",
                 "mean_gap", "scarcity_gap", "mixed_lead", "seeds", "n_requests")


def cell_name(workload: str, topology: str) -> str:
    return f"{workload}/{topology}"


def tuning_table(runs: pd.DataFrame, grid: Sequence[Setting] = GRID, *, n_requests: int | None = None) -> pd.DataFrame:
    """Per setting of ``grid``: the objective and what it rests on (goodput differences, fractions).

    ``runs``: rows of `tuning_runs` (every baseline and setting on the same cells and traces). Columns
    (`TABLE_COLUMNS`): the setting; ``worst_gap`` (the objective: the smallest over cells of the
    setting's mean goodput over traces minus the best baseline's) and the ``worst_cell`` where it
    occurs; ``mean_gap`` (the tie-break: the mean of the gaps over cells); ``scarcity_gap`` (minus
    round-robin at mixed/1p2d, notebook 13's first goal) and ``mixed_lead`` (minus the best baseline
    at mixed/2p4d, its second; NaN where the cell was not run); the traces and requests per run.
    """
    if runs.empty:
        raise ConfigError("tuning_table: no runs")
    mean = runs.groupby(["workload", "topology", "variant"], sort=False).goodput.mean()
    seeds = sorted(set(runs.seed))
    base_names = sorted(set(runs[runs.kind == "baseline"].variant))
    rows = []
    for s in grid:
        gaps: dict[str, float] = {}
        scarcity = lead = math.nan
        for (wl, topo), g in mean.groupby(level=["workload", "topology"], sort=False):
            g = g.droplevel([0, 1])
            if s.label not in g.index:
                continue
            best = g.reindex(base_names).max()
            gap = float(g[s.label] - best)
            gaps[cell_name(wl, topo)] = gap
            if (wl, topo) == ("mixed", "1p2d") and "round_robin" in g.index:
                scarcity = float(g[s.label] - g["round_robin"])
            if (wl, topo) == ("mixed", "2p4d"):
                lead = gap
        if not gaps:
            raise ConfigError(f"tuning_table: setting {s.label!r} has no runs")
        worst = min(gaps, key=lambda c: (gaps[c], c))
        rows.append({**s.to_row(), "worst_gap": gaps[worst], "worst_cell": worst,
                     "mean_gap": float(sum(gaps.values()) / len(gaps)), "scarcity_gap": scarcity,
                     "mixed_lead": lead, "seeds": " ".join(str(x) for x in seeds),
                     "n_requests": n_requests if n_requests is not None else math.nan})
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def ranked(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (of `tuning_table`) best first: worst gap descending, then mean gap descending, then
    fewer additions, then the label (deterministic)."""
    t = table.copy()
    t["_additions"] = [Setting.from_row(r).additions for _, r in t.iterrows()]
    t = t.sort_values(["worst_gap", "mean_gap", "_additions", "setting"], ascending=[False, False, True, True],
                      kind="mergesort")
    return t.drop(columns="_additions").reset_index(drop=True)


def select(table: pd.DataFrame) -> Setting:
    """The setting the objective picks from a `tuning_table` (the first row of `ranked`)."""
    if table.empty:
        raise ConfigError("tuning: select needs a non-empty table")
    return Setting.from_row(ranked(table).iloc[0])


def shipped_setting() -> Setting:
    """The setting ``marginal_cost_plus`` ships: the scorer it builds on and its constructor's defaults."""
    from repro.routing.policies import POLICIES

    cls = POLICIES["marginal_cost_plus"]
    base = next(k.name for k in cls.__mro__[1:] if getattr(k, "name", None) in BASES)
    defaults = option_defaults(cls)
    guard = float(defaults["guard_margin"]) if defaults["admission_guard"] else None
    return Setting(base, int(defaults["sample_d"]), guard)


TABLE_FILE = TUNING_DIR / "marginal_cost_plus.csv"
"""The tuning table shipped with the code (`tuning_table` on `TUNING_SEEDS`, `TUNING_REQUESTS` requests
per run): `select` on it gives `shipped_setting` (tested)."""


def load_table(path: str | Path = TABLE_FILE) -> pd.DataFrame:
    """A saved `tuning_table` (CSV)."""
    return pd.read_csv(path, keep_default_na=True)

