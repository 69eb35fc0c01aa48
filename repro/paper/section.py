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
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment import runner
from repro.experiment.metrics import RequestOutcomes
from repro.experiment.spec import RunSpec
from repro.paper import figures
from repro.paper.grids import check_rates, shape_cluster
from repro.paper.plans import (
    FULL_SEEDS,
    SIM_FULL_SEEDS,
    SIM_REQUESTS,
    check_backend_scale,
    fixed_rates,
    for_this_machine,
    is_live_quick,
    pick,
    probe_requests,
    probe_size,
    searches_rates,
    seeds_and_requests,
    value,
)
from repro.paper.verdicts import (
    Estimate,
    Outcomes,
    goodput_estimate,
    joint_bootstrap,
    least_of,
    over_traces,
    paired_difference,
    t_interval,
)
from repro.paths import resolve_dir
from repro.vocab import DEFAULT_PROFILE, WORKLOADS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from repro.cluster.topology import Instance

SUMMARY_COLUMNS = ("goodput", "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                   "token_skew", "request_skew", "requests", "completed", "failed", "rejected", "preempted_fraction")
"""The summary numbers (`repro.experiment.metrics.summarize`) in each row of `Section.run`."""

LIVE_COLUMNS = ("valid", "time_scale_used")
"""What a live run's row adds: whether the run was ``valid`` (`repro.live.validity`) and the
``time_scale_used`` (an invalid attempt is retried at a lower one)."""

Labelled = tuple[dict[str, Any], RunSpec]
"""A spec with labels (column -> value) that tell it apart in a grid of variants."""


def check_cluster(backend: str, cluster: str, *, need_calibration: bool = True) -> str | None:
    """The cluster file for a live backend (None for sim). Stops at once, saying what to do, when the
    file is missing or malformed, when ``vllm`` engines have no calibration (``need_calibration``;
    notebook 01, which makes one, passes False), or when remote engines do not answer ``/health``."""
    if backend == "sim":
        return None
    if backend == "vllm" and not cluster:
        raise ConfigError("backend 'vllm' needs a cluster file: pass cluster='cluster.yaml' "
                          "(repro paper --backend vllm --cluster cluster.yaml); see data/clusters/")
    if not cluster:
        return None
    from repro.cluster.launchers import wait_healthy
    from repro.cluster.topology import Instance, parse_topology

    topo = parse_topology(cluster)  # validates: a missing or malformed file (or calibration file) raises ConfigError
    if backend == "vllm" and need_calibration and "calibration" not in topo.options:
        raise ConfigError(f"cluster {cluster} has no 'calibration': the router's cost model and the SLO targets come "
                          f"from calibrating these engines. Run notebook 01 on it (repro paper --only 01 --backend "
                          f"vllm --cluster {cluster}) or `repro calibrate --cluster {cluster} --out calibration.json`, "
                          "then add 'calibration: calibration.json' to the file ('calibration: calibrated' uses the "
                          "paper's A40 constants)")
    remote = [Instance(name=i.name, role=i.role, url=i.url) for i in topo.instances if i.url]
    if remote:
        try:
            wait_healthy(remote, timeout=2.0)
        except RuntimeError as exc:  # the launcher's own health check, with a short deadline
            raise ConfigError(f"cluster {cluster}: no answer from GET /health within 2 s: {exc}") from None
    return cluster


def check_seeds(seeds: Sequence[int]) -> None:
    """A notebook's ``seeds`` given as they are (no scale default): a non-empty list of integers >= 0."""
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ConfigError(f"parameter 'seeds' = {seeds!r} must be a non-empty list of integers >= 0")


@dataclass(frozen=True)
class Section:
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
    live_runs: list[dict[str, Any]] = dataclasses.field(default_factory=list, compare=False, repr=False)
    """Every live run this section used: run id, ``valid``, ``time_scale_used`` (`measured` sums them up)."""
    request_outcomes: dict[str, RequestOutcomes] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    """Run id -> its per-request outcomes (good flags, TTFTs; request-id order): the intervals of `goodput`,
    `difference` and `bootstrap`."""
    preempted: dict[str, float] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    """Run id -> the share of its requests a decode engine preempted (NaN: unknown): a headline row's
    ``kv_budget`` (`write_headline`)."""

    @classmethod
    def setup(cls, *, notebook: str, backend: str, scale: str, seeds: Sequence[int], cluster: str = "",
              results_dir: str | Path = "", figures_dir: str | Path = "",
              runs_dir: str | Path = "runs/paper", time_scale: float = 1.0, n_requests: int = 0,
              quick_seeds: Sequence[int] | None = None, full_seeds: Sequence[int] | None = None,
              sim_requests: tuple[int, int] = SIM_REQUESTS,
              uses_cluster: bool = True, need_calibration: bool = True, shape_sweep: bool = False,
              rate: float | None = None, workloads: Sequence[str] = ("mixed",),
              rates: Mapping[str, float] | None = None) -> Section:
        """Check a notebook's shared parameters and make its context; also sets the figure style and finds
        the operating rates.

        Traces and requests (`repro.paper.plans.seeds_and_requests`): with ``quick_seeds`` the
        notebook follows the scale plan (``seeds=[]`` means ``quick_seeds`` in sim quick, one trace
        on a live backend at quick scale, at full scale ``full_seeds`` (default: the ten traces of
        `repro.paper.plans.SIM_FULL_SEEDS` in sim, the paper's three live); ``n_requests=0`` means
        ``sim_requests`` (quick, full) in sim, `repro.paper.plans.LIVE_REQUESTS` live). Without
        ``quick_seeds`` the seeds are used as given and must not be empty.

        Cluster (`check_cluster`): not looked at when ``uses_cluster`` is False; a ``vllm`` cluster
        must carry a calibration unless ``need_calibration`` is False; with ``shape_sweep`` a
        ``{topology}`` template is not checked here but per pool shape when specs are made.

        Operating rates (`rates`, req/s): with ``rate`` those of ``workloads`` (`operating_rates`:
        ``rate`` when > 0, else each one's saturation rate); with ``rates`` a rate per workload of
        `repro.vocab.WORKLOADS` (`workload_rates`: ``{}`` means a saturation search).
        Relative folders are relative to the repository root; empty ``results_dir`` / ``figures_dir``
        mean ``results/<backend>-<scale>`` / ``figures/<backend>-<scale>`` (as `repro paper`). Bad values
        raise `ConfigError`.
        """
        check_backend_scale(backend, scale)
        if quick_seeds is None:
            check_seeds(seeds)
            chosen, n = seeds_and_requests(backend, scale, seeds, n_requests, sim=sim_requests)
        else:
            full = full_seeds if full_seeds is not None else (SIM_FULL_SEEDS if backend == "sim" else FULL_SEEDS)
            chosen, n = seeds_and_requests(backend, scale, seeds, n_requests, quick_seeds=quick_seeds,
                                           full_seeds=full, sim=sim_requests)
        if not uses_cluster or (shape_sweep and "{topology}" in cluster):
            cluster_file = None
        else:
            cluster_file = check_cluster(backend, cluster, need_calibration=need_calibration)
        figures.set_style()
        ctx = cls(notebook=notebook, backend=backend, scale=scale, seeds=tuple(chosen), n_requests=n,
                  cluster=cluster_file, pool_cluster=(cluster or None) if shape_sweep else cluster_file,
                  time_scale=time_scale if backend == "emulated" else 1.0,
                  results_dir=resolve_dir(results_dir or f"results/{backend}-{scale}"),
                  figures_dir=resolve_dir(figures_dir or f"figures/{backend}-{scale}"),
                  runs_dir=resolve_dir(runs_dir))
        if rate is not None and rates is not None:
            raise ConfigError("Section.setup: give 'rate' (one operating rate) or 'rates' (per workload), not both")
        if rate is not None:
            return dataclasses.replace(ctx, rates=ctx.operating_rates(workloads, rate))
        if rates is not None:
            return dataclasses.replace(ctx, rates=ctx.workload_rates(rates))
        return ctx

    # ---- the plan --------------------------------------------------------------------------------
    @property
    def rate(self) -> float:
        """The operating rate of the mixed workload (req/s), the one most sections run at."""
        if "mixed" not in self.rates:
            raise ConfigError(f"{self.notebook}: no operating rate of 'mixed' (Section.setup takes rate= or rates=)")
        return self.rates["mixed"]

    @property
    def live(self) -> bool:
        """True on a live backend (``emulated``, ``vllm``)."""
        return self.backend != "sim"

    @property
    def live_quick(self) -> bool:
        """True for the smoke-sized plan: a live backend at quick scale."""
        return is_live_quick(self.backend, self.scale)

    @property
    def searches_rates(self) -> bool:
        """Whether an operating rate of 0 means a saturation search here (else the simulator's rates)."""
        return searches_rates(self.backend, self.scale)

    @property
    def probe_requests(self) -> int:
        """Requests per probe of a saturation search here (`repro.paper.plans.probe_requests`)."""
        return probe_requests(self.backend, self.scale, self.n_requests)

    def pick(self, name: str, given: Sequence[Any] | None, default: Sequence[Any]) -> list[Any]:
        """The values of grid ``name``: ``given`` when not empty, else this plan's (`repro.paper.plans.pick`)."""
        return pick(name, given, self.backend, self.scale, default)

    def value(self, name: str, given: float, default: float) -> float:
        """A single setting: ``given`` when > 0, else this plan's (`repro.paper.plans.value`)."""
        return value(name, given, self.backend, self.scale, default)

    def simulator(self) -> Section:
        """This context on the simulator (same traces, requests and folders; no cluster, real time)."""
        return dataclasses.replace(self, backend="sim", cluster=None, pool_cluster=None, time_scale=1.0)

    # ---- running ---------------------------------------------------------------------------------
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

    def run_summary(self, spec: RunSpec) -> dict[str, Any]:
        """Run one spec (emulated time scale capped for this machine) and return its summary."""
        return self.summary_of(for_this_machine(spec))

    def summary_of(self, spec: RunSpec) -> dict[str, Any]:
        """The summary of ``spec`` run as it is: simulated in-process, or a live run (resumed if finished)."""
        return self._note(runner.run_or_simulate(spec, self.runs_dir, sim_in_memory=True)).summary

    def run_journal(self, spec: RunSpec) -> pd.DataFrame:
        """Run one spec and return its journal (one row per request, `repro.experiment.journal`)."""
        if spec.backend == "sim":
            return runner.simulate_spec(spec)
        return self._note(runner.run(for_this_machine(spec), self.runs_dir)).journal()

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

    # ---- uncertainty (repro.paper.verdicts) -----------------------------------------------------
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
        every group) with their 95 % intervals (`repro.paper.verdicts.joint_bootstrap`: over traces, the t
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
        interval (`repro.paper.verdicts.goodput_estimate`; over the traces' goodputs alone when the
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
        (`repro.paper.verdicts.paired_difference`: t over traces, a block bootstrap within one), any other
        column by a t interval over the traces' differences (`repro.paper.verdicts.over_traces`; none with
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
        ``a``) picked after the fact, selection-aware (`repro.paper.verdicts.least_of`: the minimum over
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

    def measured(self) -> str:
        """How this section's numbers were measured, for its headline rows: ``sim``, or the backend,
        the number of live runs, whether all were valid (`repro.live.validity`) and the time scales."""
        if not self.live_runs:
            return "sim" if self.backend == "sim" else f"{self.backend}: no live run"
        by_id = {r["run_id"]: r for r in self.live_runs}
        bad = [i for i, r in by_id.items() if not r["valid"]]
        ks = sorted({float(r["time_scale_used"]) for r in by_id.values()})
        k = f"K={ks[0]:g}" if len(ks) == 1 else f"K={ks[0]:g}-{ks[-1]:g}"
        verdict = "all valid" if not bad else f"{len(bad)} INVALID"
        return f"{self.backend}, {len(by_id)} live runs, {verdict}, {k}"

    def live_cluster(self, topology: str = "1p1d") -> AbstractContextManager[list[Instance]]:
        """The live cluster a step needs, up for the ``with`` block: the cluster file, else emulated
        engines of ``topology`` at this time scale. Not on ``sim``."""
        return _live_cluster(self.backend, self.cluster, topology, self.time_scale)

    # ---- operating rates ------------------------------------------------------------------------
    def saturation(self, workloads: Sequence[str] = WORKLOADS, *, n_requests: int,
                   fixed: Mapping[str, float] | None = None, max_probes: int = 16) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The saturation search per workload (§IV-B) on 2p4d with the first trace: ``(rates, probes)``.

        ``rates``: workload, saturation_rate (req/s), rate_lo/rate_hi (`rate_band`: the rates whose
        round-robin goodput is within the search's band; NaN for a given rate), light_goodput,
        target_goodput, probes;
        ``probes``: workload, probe, rate, round_robin_goodput. ``n_requests`` per probe. With
        ``fixed`` (workload -> req/s) there is no search: one round-robin probe per workload at the
        given rate checks that operating point (``light_goodput`` and ``target_goodput`` NaN).
        """
        from repro.experiment.saturation import light_rate_for, rate_band, saturation_search

        cluster = shape_cluster(self.pool_cluster, "2p4d", sweep=False)

        def live_probe(spec: RunSpec) -> float:
            if self.backend == "vllm":  # probes sized by duration (real engines serve in real time)
                spec = spec.replace(n_requests=probe_size(self.backend, self.scale, n_requests, float(spec.rate)))
            return self.run_summary(spec)["goodput"]

        probe = None if self.backend == "sim" else live_probe
        rates, probes = [], []
        for wl in workloads:
            base = RunSpec.from_flat(backend=self.backend, workload=wl, seed=self.seeds[0], n_requests=n_requests,
                                     topology="2p4d", cluster=cluster, time_scale=self.time_scale)
            if fixed is not None:
                if wl not in fixed:
                    raise ConfigError(f"saturation: no fixed rate for workload {wl!r}; given: {sorted(fixed)}")
                spec = base.replace(policy="round_robin", policy_options={}, rate=float(fixed[wl]))
                if probe is None:
                    g = runner.simulated_summary(spec)[0]["goodput"]
                else:
                    g = probe(spec)
                rates.append({"workload": wl, "saturation_rate": float(fixed[wl]), "rate_lo": np.nan,
                              "rate_hi": np.nan, "light_goodput": np.nan, "target_goodput": np.nan, "probes": 1})
                probes.append({"workload": wl, "probe": 0, "rate": float(fixed[wl]), "round_robin_goodput": float(g)})
                continue
            # on real engines the paper's 1 req/s start may already be overload: start from the calibration
            light = light_rate_for(base) if self.backend == "vllm" else 1.0
            res = saturation_search(base, probe=probe, max_probes=max_probes, light_rate=light)
            lo, hi = rate_band(res.probes, res.target_goodput)
            rates.append({"workload": wl, "saturation_rate": res.rate, "rate_lo": lo, "rate_hi": hi,
                          "light_goodput": res.light_goodput, "target_goodput": res.target_goodput,
                          "probes": len(res.probes)})
            for i, (r, g) in enumerate(res.probes):
                probes.append({"workload": wl, "probe": i, "rate": r, "round_robin_goodput": g})
        return pd.DataFrame(rates), pd.DataFrame(probes)

    def operating_rates(self, workloads: Sequence[str], rate: float = 0.0) -> dict[str, float]:
        """Workload -> its operating rate (req/s): ``rate`` for every workload when > 0; else the testbed's
        (`testbed_rates`: the paper's stated mixed rate, the identified chat and documents rates); else its
        saturation rate (round-robin mid-collapse on 2p4d): searched with probes of at most
        `probe_requests` requests, except at live quick scale on ``emulated``, which takes the
        simulator's rates (`repro.paper.plans.SIM_SATURATION_RATES`)."""
        if rate > 0:
            return {wl: float(rate) for wl in workloads}
        known = self.testbed_rates()
        out = {wl: known[wl] for wl in workloads if wl in known}
        rest = [wl for wl in workloads if wl not in out]
        if rest and not self.searches_rates:
            out.update(fixed_rates(rest))
        elif rest:
            rates, _ = self.saturation(rest, n_requests=self.probe_requests)
            out.update({r.workload: float(r.saturation_rate) for r in rates.itertuples()})
        return {wl: out[wl] for wl in workloads}

    def testbed_rates(self) -> dict[str, float]:
        """The identified testbed's operating rates (req/s; `repro.identify.testbed.operating_rates`), on the
        backends that run its physics (``sim``, ``emulated``); none on real engines."""
        from repro.identify.testbed import operating_rates

        return operating_rates(self.testbed) if self.testbed else {}

    def operating_rate(self, rate: float, workload: str = "mixed") -> float:
        """``rate`` (req/s) when > 0, else ``workload``'s saturation rate (`operating_rates`)."""
        return self.operating_rates([workload], rate)[workload]

    def workload_rates(self, rates: Mapping[str, float]) -> dict[str, float]:
        """A rate (req/s) per workload of `repro.vocab.WORKLOADS`: ``rates`` checked
        (`repro.paper.grids.check_rates`), or for ``{}`` each one's `operating_rates` (the testbed's, else
        a saturation search, at any scale)."""
        if not rates:
            rates = self.operating_rates(WORKLOADS)
        return check_rates(rates)

    # ---- outputs --------------------------------------------------------------------------------
    def describe_runs(self, runs: pd.DataFrame, what: str, noun: str = "runs") -> str:
        """One line on a grid just run: ``<n> runs: <what>, <requests> requests each, seeds [...]``."""
        return f"{len(runs)} {noun}: {what}, {self.n_requests} requests each, seeds {list(self.seeds)}"

    def write_results(self, df: pd.DataFrame, name: str) -> pd.DataFrame:
        """Write ``df`` to ``<results_dir>/<name>.csv`` (deterministic, `repro.paper.figures.write_results`)
        and return it, so that a notebook can write and show a table in one go."""
        figures.write_results(df, name, self.results_dir)
        return df

    def save(self, fig: Figure, name: str) -> list[Path]:
        """``<figures_dir>/<name>.png`` and ``.pdf``, byte-identical on rerun (`repro.paper.figures.save`)."""
        return figures.save(fig, name, self.figures_dir)

    def write_headline(self, rows: list[dict[str, Any]]) -> None:
        """Judge the section's headline rows and write ``<results_dir>/<NN>_headline.csv``, the numbers
        `repro paper` summarises and `findings` shows (`repro.paper.headline.write_headline`)."""
        from repro.paper.headline import kv_budget_note, write_headline

        for row in rows:
            if "kv_budget" not in row:
                row["kv_budget"] = kv_budget_note([self.preempted.get(r, float("nan")) for r in row.get("runs") or ()])
        write_headline(rows, self.notebook, self.results_dir, measured=self.measured(), testbed=self.testbed)

    @property
    def testbed(self) -> str:
        """The hardware profile this section's numbers were simulated on ("" on real engines, ``vllm``): the
        default profile (the identified A40 testbed, `repro.vocab.DEFAULT_PROFILE`)."""
        return "" if self.backend == "vllm" else DEFAULT_PROFILE

    def findings(self, title: str = "") -> Any:
        """The notebook's **Findings** (`repro.paper.findings`): the verdict table of the rows `write_headline`
        wrote, with the caveats of this backend, scale and validity. Markdown in a notebook (shown as the
        cell's output), plain text elsewhere."""
        from repro.paper.findings import findings_markdown

        nn = self.notebook.split("_", 1)[0]
        path = self.results_dir / f"{nn}_headline.csv"
        if not path.exists():
            raise ConfigError(f"{self.notebook}: no {path.name} yet: call ctx.write_headline(...) first")
        head = pd.read_csv(path, keep_default_na=True)
        text = findings_markdown(head, title=title or self.notebook, backend=self.backend, scale=self.scale,
                                 traces=len(self.seeds), requests=self.n_requests, measured=self.measured())
        try:
            from IPython.display import Markdown
        except ImportError:  # pragma: no cover - IPython comes with the notebooks extra
            return text
        return Markdown(text)

    def expected_output(self, index: int) -> AbstractContextManager[None]:
        """Print what the block prints; in the test run compare it with ``notebooks/expected/<notebook>-<index>.txt``
        (`repro.paper.runner.expected_output`)."""
        from repro.paper.runner import expected_output

        return expected_output(self.notebook, index)


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
