"""Running a notebook's specs: one row per run, and what each run leaves behind for the verdicts.

`SectionRuns.run` runs specs in order over `repro.experiment.runner.sweep` (``sim`` in-process and
deterministic, without files; ``emulated`` / ``vllm`` through the live harness, resumable from
``runs_dir`` by each spec's run id; an emulated time scale capped for this machine,
`repro.paper.plans.for_this_machine`). A row is the spec's grid fields and its summary
(`SUMMARY_COLUMNS`, `LIVE_COLUMNS`): times in seconds, rates in req/s, goodput a fraction of the
requests sent. Every run's per-request outcomes, preempted share and (live) validity are kept on
the context (`request_outcomes`, `preempted`, `live_runs`) for `repro.paper.context.estimates`
and `repro.paper.context.outputs`. Part of `repro.paper.section.Section`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment import runner
from repro.experiment.spec import RunSpec
from repro.paper.plans import for_this_machine

if TYPE_CHECKING:
    from pathlib import Path

    from repro.cluster.topology import Instance
    from repro.experiment.metrics import RequestOutcomes, Summary

SUMMARY_COLUMNS = ("goodput", "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                   "token_skew", "request_skew", "requests", "completed", "failed", "rejected", "preempted_fraction")
"""The summary numbers (`repro.experiment.metrics.summarize`) in each row of `Section.run`."""

LIVE_COLUMNS = ("valid", "time_scale_used")
"""What a live run's row adds: whether the run was ``valid`` (`repro.live.validity`) and the
``time_scale_used`` (an invalid attempt is retried at a lower one)."""

Labelled = tuple[dict[str, Any], RunSpec]
"""A spec with labels (column -> value) that tell it apart in a grid of variants."""


class LiveRun(TypedDict):
    """A live run a section used (`SectionRuns.live_runs`): its run id, whether it was a valid measurement
    (`repro.live.validity`; None when its summary does not say) and the time scale K it ran at."""

    run_id: str
    valid: bool | None
    time_scale_used: float


class SectionRuns:
    """Running specs for a `Section`. Reads the fields below and fills the last three."""

    backend: str
    cluster: str | None
    time_scale: float
    runs_dir: Path
    live_runs: list[LiveRun]
    request_outcomes: dict[str, RequestOutcomes]
    preempted: dict[str, float]

    if TYPE_CHECKING:  # from repro.paper.context.outputs
        def write_results(self, df: pd.DataFrame, name: str) -> pd.DataFrame: ...

    def run(self, specs: Sequence[RunSpec] | Sequence[Labelled], save_as: str | None = None) -> pd.DataFrame:
        """Run specs in order; one row per run, also written to ``<results_dir>/<save_as>.csv`` when named.

        A row has the spec's grid fields (workload, topology, policy, cost_model, seed, rate,
        n_requests, backend, time_scale as run) and its summary (`SUMMARY_COLUMNS`). Items given as
        ``(labels, spec)`` pairs get their labels first, then the switches that tell variants apart
        (``policy_options`` as sorted JSON, ``predictor_noise``, ``service``, ``backlog``).
        """
        runs = self._rows(specs)
        return runs if save_as is None else self.write_results(runs, save_as)

    def _rows(self, specs: Sequence[RunSpec] | Sequence[Labelled]) -> pd.DataFrame:
        items = list(specs)
        if not items:
            return pd.DataFrame()
        labelled = isinstance(items[0], tuple)
        plain = [for_this_machine(s) for _, s in items] if labelled else [for_this_machine(s) for s in items]
        runs = runner.sweep(plain, self.runs_dir, progress=False, row=lambda res: self.row_of(self._note(res)),
                            sim_in_memory=True)
        if not labelled:
            return runs
        extra = pd.DataFrame([{**lab, "policy_options": json.dumps(s.policy_options, sort_keys=True),
                               "predictor_noise": float(s.predictor_noise), "service": s.sim.service,
                               "backlog": s.sim.backlog} for lab, s in items])
        dup = [c for c in extra.columns if c in runs.columns]
        return pd.concat([extra, runs.drop(columns=dup)], axis=1)

    def prefetch(self, specs: Sequence[RunSpec] | Sequence[Labelled]) -> None:
        """Simulate the ``sim`` specs among ``specs`` all at once on the worker processes, so that the `run`s
        that follow, one small grid at a time with work of their own in between, read them from the
        simulation cache (`repro.experiment.simcache`): the same rows, without a wait on the workers per grid.
        Does nothing without a cache, without workers, or for live specs."""
        from repro.experiment import simcache
        from repro.experiment.executor import shared_executor

        plain = [for_this_machine(s[1] if isinstance(s, tuple) else s) for s in specs]
        sims = list({s.run_id: s for s in plain if s.backend == "sim"}.values())
        if len(sims) > 1 and simcache.cache_dir() is not None and shared_executor().jobs > 1:
            runner.simulated_summaries(sims)

    def grid_row(self, spec: RunSpec) -> dict[str, Any]:
        """Run one spec (time scale capped for this machine) and return its row of `run`."""
        spec = for_this_machine(spec)
        return self.row_of(runner.RunResult(spec, None, self.summary_of(spec)))

    @staticmethod
    def row_of(res: runner.RunResult) -> dict[str, Any]:
        """One row of `run`: the spec's grid fields (time scale as run; the topology as run: a cluster
        file's, e.g. ``1p2d``) and its summary (`SUMMARY_COLUMNS`)."""
        spec, summary = res.spec, res.summary
        return {"run_id": spec.run_id, "workload": spec.workload, "topology": spec.topology_parsed().shorthand,
                "policy": spec.policy,
                "cost_model": spec.cost_model, "seed": spec.seed, "rate": spec.rate,
                "n_requests": spec.n_requests, "backend": spec.backend, "time_scale": spec.live.time_scale,
                **{k: summary.get(k, np.nan) for k in SUMMARY_COLUMNS},
                **{k: summary[k] for k in LIVE_COLUMNS if k in summary}}

    def run_summary(self, spec: RunSpec) -> Summary:
        """Run one spec (emulated time scale capped for this machine) and return its summary."""
        return self.summary_of(for_this_machine(spec))

    def summary_of(self, spec: RunSpec) -> Summary:
        """The summary of ``spec`` run as it is: simulated in-process, or a live run (resumed if finished)."""
        return self._note(runner.run_or_simulate(spec, self.runs_dir, sim_in_memory=True)).summary

    def run_journal(self, spec: RunSpec) -> pd.DataFrame:
        """Run one spec and return its journal (one row per request, `repro.experiment.journal`)."""
        if spec.backend == "sim":
            return runner.simulate_spec(spec)
        return self._note(runner.run(for_this_machine(spec), self.runs_dir)).journal()

    def run_journals(self, specs: Sequence[RunSpec]) -> list[pd.DataFrame]:
        """`run_journal` of each spec, in order; the ``sim`` ones simulated at once on the worker processes
        (`repro.experiment.executor.shared_executor`; the same journals as one at a time)."""
        from repro.experiment.executor import shared_executor

        specs = list(specs)
        got: dict[int, pd.DataFrame] = {}
        sims = [i for i, s in enumerate(specs) if s.backend == "sim"]
        ex = shared_executor() if len(sims) > 1 else None
        if ex is not None and ex.jobs > 1:
            for j, journal in ex.imap_unordered(runner.simulate_spec, [specs[i] for i in sims]):
                got[sims[j]] = journal
        return [got[i] if i in got else self.run_journal(s) for i, s in enumerate(specs)]

    def _note(self, res: runner.RunResult) -> runner.RunResult:
        """Keep a run's per-request outcomes (`request_outcomes`) and record a live run in `live_runs`;
        returns ``res``."""
        self.preempted[res.spec.run_id] = float(res.summary.get("preempted_fraction", float("nan")))
        if res.outcomes is not None or res.run_dir is not None:  # (a summary alone carries no per-request data)
            self.request_outcomes[res.spec.run_id] = res.request_outcomes()
        if res.spec.backend != "sim":
            self.live_runs.append({"run_id": res.spec.run_id, "valid": res.summary.get("valid"),
                                   "time_scale_used": res.summary.get("time_scale_used", res.spec.live.time_scale)})
        return res

    def live_cluster(self, topology: str = "1p1d") -> AbstractContextManager[list[Instance]]:
        """The live cluster a step needs, up for the ``with`` block: the cluster file, else emulated
        engines of ``topology`` at this time scale. Not on ``sim``."""
        return _live_cluster(self.backend, self.cluster, topology, self.time_scale)


@contextmanager
def _live_cluster(backend: str, cluster: str | None, topology: str, time_scale: float) -> Iterator[list[Instance]]:
    from repro.cluster.launchers import launch

    if backend == "sim":
        raise ConfigError("live_cluster: backend 'sim' has no cluster")
    if cluster:
        with launch(cluster) as instances:
            yield instances
    else:
        with launch(topology, launcher="emulated", time_scale=time_scale) as instances:
            yield instances
