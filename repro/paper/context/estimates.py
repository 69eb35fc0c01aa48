"""Numbers with their 95 % intervals from a notebook's rows of runs: the verdicts' inputs.

`SectionEstimates.goodput` (mean goodput), `difference` (paired by trace; goodput paired by
request), `least_difference` (against the best or worst of several rivals, selection-aware) and
`bootstrap` (any statistic of several groups) take rows of `Section.run` (one configuration, one row
per trace) and return `repro.statistics.intervals.Estimate`s. They use the per-request outcomes the runs
left on the context (`request_outcomes`); rows read back from a CSV fall back to intervals over the
traces. Goodput is a fraction of the requests sent; other columns keep their own units. A bad input
raises `ConfigError`. Part of `repro.paper.section.Section`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import pandas as pd

from repro.errors import ConfigError
from repro.statistics.intervals import (
    Estimate,
    Outcomes,
    goodput_estimate,
    joint_bootstrap,
    least_of,
    over_traces,
    paired_difference,
    t_interval,
)

if TYPE_CHECKING:
    import numpy as np

    from repro.experiment.metrics import RequestOutcomes


class SectionEstimates:
    """Estimates from the rows of a `Section`'s runs. Reads the fields below."""

    notebook: str
    seeds: tuple[int, ...]
    n_requests: int
    request_outcomes: dict[str, RequestOutcomes]

    def outcomes(self, runs: pd.DataFrame) -> list[RequestOutcomes] | None:
        """The per-request outcomes of ``runs`` (rows of `run`, one per trace) in seed order; None when a
        run's are not at hand (e.g. a row read back from a CSV)."""
        if "run_id" not in runs.columns or not all(r in self.request_outcomes for r in runs.run_id):
            return None
        return [self.request_outcomes[r] for r in runs.sort_values("seed").run_id]

    def _flags(self, runs: pd.DataFrame) -> list[np.ndarray] | None:
        out = self.outcomes(runs)
        return None if out is None else [o.good for o in out]

    def bootstrap(self, groups: Mapping[str, pd.DataFrame], stat: Callable[[Outcomes], Mapping[str, float]], *,
                  resample_traces: bool = True) -> dict[str, Estimate]:
        """Statistics of several groups of runs (name -> rows of `run`, one per trace, the same traces in
        every group) with their 95 % intervals (`repro.statistics.intervals.joint_bootstrap`: over traces, the t
        interval with a bootstrap standard error; within one trace, a block bootstrap over requests;
        ``stat`` maps name -> per-trace `RequestOutcomes` to named numbers). Raises ConfigError when a
        group's per-request outcomes are not at hand."""
        data = {}
        for name, runs in groups.items():
            got = self.outcomes(runs)
            if got is None or not got:
                raise ConfigError(f"{self.notebook}: no per-request outcomes for group {name!r} (runs "
                                  f"{self.run_ids(runs)})")
            data[name] = got
        return joint_bootstrap(data, stat, resample_traces=resample_traces)

    def goodput(self, runs: pd.DataFrame) -> Estimate:
        """The mean goodput of ``runs`` (rows of `run`: one configuration, one row per trace) with its 95 %
        interval (`repro.statistics.intervals.goodput_estimate`; over the traces' goodputs alone when the
        per-request flags are not at hand)."""
        if runs.empty:
            raise ConfigError(f"{self.notebook}: goodput of no runs")
        flags = self._flags(runs)
        if flags is None:
            return over_traces(runs.sort_values("seed").goodput.to_list())
        return goodput_estimate(flags)

    def difference(self, a: pd.DataFrame, b: pd.DataFrame, column: str = "goodput") -> Estimate:
        """``column`` of ``a`` minus that of ``b``, paired trace by trace (rows matched on ``seed``; each
        side one row per trace), with its 95 % interval: goodput paired by request
        (`repro.statistics.intervals.paired_difference`: t over traces, a block bootstrap within one), any other
        column by a t interval over the traces' differences (`repro.statistics.intervals.over_traces`; none with
        one trace). For goodput,
        positive means ``a`` is better."""
        seeds = sorted(set(a.seed) & set(b.seed))
        if not seeds or len(seeds) != len(a) or len(seeds) != len(b):
            raise ConfigError(f"{self.notebook}: a paired difference needs the same traces on both sides, one row "
                              f"each (got seeds {sorted(a.seed)} vs {sorted(b.seed)})")
        fa, fb = (self._flags(a), self._flags(b)) if column == "goodput" else (None, None)
        if fa is None or fb is None or any(len(x) != len(y) for x, y in zip(fa, fb, strict=True)):
            ga, gb = a.set_index("seed")[column], b.set_index("seed")[column]
            return over_traces([float(ga[s] - gb[s]) for s in seeds])
        return paired_difference(fa, fb)

    def least_difference(self, a: pd.DataFrame, rivals: Mapping[str, pd.DataFrame], column: str = "goodput", *,
                         worst: bool = False) -> tuple[Estimate, str]:
        """``a`` minus the best of ``rivals`` (name -> rows of `run`, one per trace, the same traces as
        ``a``) picked after the fact, selection-aware (`repro.statistics.intervals.least_of`: the minimum over
        the rivals of their paired differences, with simultaneous Bonferroni intervals). With ``worst``
        the other way round: the minimum over the rivals of (rival - ``a``), i.e. by how much the worst
        rival still beats ``a`` ("every B beats A"). Goodput is paired by request
        (`paired_difference`), any other ``column`` by trace (`t_interval` of the per-trace differences).
        Returns the estimate and the rival that is now the closest."""
        if not rivals:
            raise ConfigError(f"{self.notebook}: a best-of comparison needs at least one rival")
        seeds = sorted(set(a.seed))
        for name, r in rivals.items():
            if sorted(set(r.seed)) != seeds or len(r) != len(seeds) or len(a) != len(seeds):
                raise ConfigError(f"{self.notebook}: a paired difference needs the same traces on both sides, one row "
                                  f"each (got seeds {sorted(a.seed)} vs {name}: {sorted(r.seed)})")
        level = 1 - 0.05 / len(rivals)
        per: dict[str, Estimate] = {}
        for name, r in rivals.items():
            x, y = (r, a) if worst else (a, r)
            fx, fy = (self._flags(x), self._flags(y)) if column == "goodput" else (None, None)
            if fx is not None and fy is not None and all(len(u) == len(v) for u, v in zip(fx, fy, strict=True)):
                per[name] = paired_difference(fx, fy, level=level)
            else:
                vx, vy = x.set_index("seed")[column], y.set_index("seed")[column]
                per[name] = t_interval([float(vx[s] - vy[s]) for s in seeds], level=level)
        return least_of(per)

    def run_ids(self, *frames: pd.DataFrame) -> list[str]:
        """The run ids of the given rows of `run`, each once, in order."""
        ids: list[str] = []
        for f in frames:
            ids += [str(r) for r in f.get("run_id", pd.Series(dtype=str))]
        return list(dict.fromkeys(ids))

    def describe_runs(self, runs: pd.DataFrame, what: str, noun: str = "runs") -> str:
        """One line on a grid just run: ``<n> runs: <what>, <requests> requests each, seeds [...]``."""
        return f"{len(runs)} {noun}: {what}, {self.n_requests} requests each, seeds {list(self.seeds)}"
