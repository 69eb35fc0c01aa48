"""`Section`: the context of one section notebook, made by one call at its top.

::

    ctx = Section.setup(notebook="04_mixed_goodput", backend=backend, scale=scale, seeds=seeds, cluster=cluster,
                        n_requests=n_requests, quick_seeds=(1, 2, 3), time_scale=time_scale,
                        runs_dir=runs_dir, results_dir=results_dir, figures_dir=figures_dir)

`Section.setup` checks the shared parameters (backend, scale, seeds, requests, the cluster file;
a bad one stops the notebook with what to do), sets the figure style, applies the time-scale rule
(emulated engines run ``time_scale`` times faster than the wall clock; other backends in real
time) and the scale plan (`repro.paper.plans`: the traces and requests per run). The context
then runs the notebook's specs (`Section.run`, one row per run), finds its operating rates
(`Section.operating_rates`) and writes its outputs (`write_results`, `save`, `write_headline`)
into the folders it was given.

``backend='sim'`` runs in-process, deterministically and without files; ``emulated`` and
``vllm`` go through the live harness (`repro.experiment.runner.run`, resumable from
``runs_dir`` by the run id of each spec). Conventions: tidy frames, times in seconds, rates in
requests per second, goodput a fraction of the requests sent.

This module holds the context's fields; what it does lives in its parts (`repro.paper.context`):
``setup`` (checks, plan, time-scale rule), ``runs`` (running specs, rows, outcomes kept, the live
cluster), ``rates`` (operating rates, saturation), ``estimates`` (goodput, differences, bootstrap)
and ``outputs`` (tables, figures, headline, Findings, checked output).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from repro.experiment.metrics import RequestOutcomes
from repro.paper.context.estimates import SectionEstimates
from repro.paper.context.outputs import SectionOutputs
from repro.paper.context.rates import SectionRates
from repro.paper.context.runs import LIVE_COLUMNS, SUMMARY_COLUMNS, Labelled, LiveRun, SectionRuns
from repro.paper.context.setup import SectionSetup, check_cluster, check_seeds
from repro.paper.plans import FULL_SEEDS, SIM_REQUESTS
from repro.paths import resolve_dir

__all__ = ["LIVE_COLUMNS", "SUMMARY_COLUMNS", "Labelled", "Section", "check_cluster", "check_seeds"]


@dataclass(frozen=True)
class Section(SectionSetup, SectionRuns, SectionRates, SectionEstimates, SectionOutputs):
    """What one section notebook runs on, and where its outputs go. Make it with `Section.setup`."""

    notebook: str
    """The notebook's stem, ``NN_name``: names its headline file and its golden files."""
    backend: str = "sim"
    """``sim`` | ``emulated`` | ``vllm`` (`repro.vocab.BACKENDS`)."""
    scale: str = "quick"
    """``quick`` | ``full`` (`repro.paper.plans`)."""
    seeds: tuple[int, ...] = FULL_SEEDS
    """Arrival traces, one seed each."""
    n_requests: int = SIM_REQUESTS[0]
    """Requests per run."""
    cluster: str | None = None
    """The checked cluster file of a live backend; None in sim or on emulated engines started here."""
    pool_cluster: str | None = None
    """The cluster the notebook's specs carry: ``cluster``, or in a sweep over pool shapes the
    parameter as given (``{topology}`` in it names one file per shape, `repro.paper.grids.shape_cluster`)."""
    time_scale: float = 1.0
    """Emulated engines run physics this many times faster than the wall clock (1 on other backends);
    each emulated run lowers it further to what the CPUs keep up with (`repro.paper.plans.for_this_machine`)."""
    results_dir: Path = resolve_dir("results")
    """Tidy CSVs (`write_results`, `write_headline`)."""
    figures_dir: Path = resolve_dir("figures")
    """PNG + PDF figures (`save`)."""
    runs_dir: Path = resolve_dir("runs/paper")
    """Journals and manifests of live runs (resumable)."""
    rates: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """The notebook's operating rates, workload -> req/s (`setup`'s ``rate`` or ``rates``; empty when it has none)."""
    live_runs: list[LiveRun] = dataclasses.field(default_factory=list, compare=False, repr=False)
    """Every live run this section used: run id, ``valid``, ``time_scale_used`` (`measured` sums them up)."""
    request_outcomes: dict[str, RequestOutcomes] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    """Run id -> its per-request outcomes (good flags, TTFTs; request-id order): the intervals of `goodput`,
    `difference` and `bootstrap`."""
    preempted: dict[str, float] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    """Run id -> the share of its requests a decode engine preempted (NaN: unknown): a headline row's
    ``kv_budget`` (`write_headline`)."""
