"""Running specs: one run (`run`), many (`sweep`: the one grid runner, resumable), or a simulation
without files (`simulate_spec`, or `run_or_simulate` with ``sim_in_memory``)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import pandas as pd

from repro.errors import ConfigError, PolicyError, check_choice, check_decision_budget
from repro.experiment.backends import OnInvalid, live_harness
from repro.experiment.inputs import (
    build_predictions,
    build_trace,
    engine_pools,
    length_cap,
    make_router,
    truth_cost_model,
)
from repro.experiment.journal import frame_bytes
from repro.experiment.journal import read as read_journal
from repro.experiment.manifest import (
    Manifest,
    read_manifest,
    sha256,
    versions,
    write_bytes_atomic,
    write_json_atomic,
)
from repro.experiment.metrics import DecisionTimeSummary, RequestOutcomes, Summary, request_outcomes, summarize
from repro.experiment.spec import RunSpec
from repro.sim.simulator import Simulator

if TYPE_CHECKING:
    from repro.experiment.executor import Executor


# ---- running --------------------------------------------------------------------------------
@dataclass
class RunResult:
    """One finished run: its spec, its folder (None for an in-memory simulation), its summary
    (`repro.experiment.metrics.summarize`), and whether it was found finished and skipped."""

    spec: RunSpec
    run_dir: Path | None
    summary: Summary
    skipped: bool = False
    outcomes: RequestOutcomes | None = field(default=None, repr=False)
    """Per-request good flags and TTFTs in request-id order (`repro.experiment.metrics.RequestOutcomes`);
    None until `request_outcomes` reads them from the journal."""
    decision_time: DecisionTimeSummary | None = None
    """The policy's decision times (``p50_us``, ``p99_us``, ``max_us``, ``n``: wall time of ``place`` on
    the machine that ran it, `repro.routing.router.DecisionTimes`) when this process ran it; None for a
    run found finished or cached. A report, never an input to a result."""

    def request_outcomes(self) -> RequestOutcomes:
        """Per-request outcomes (request-id order), from memory or from the run's journal."""
        if self.outcomes is None:
            self.outcomes = request_outcomes(self.journal(), truth_cost_model(self.spec).slo)
        return self.outcomes

    def good_flags(self) -> np.ndarray:
        """Per-request good flags (0/1, request-id order; `request_outcomes`)."""
        return self.request_outcomes().good

    @property
    def journal_path(self) -> Path:
        if self.run_dir is None:
            raise ConfigError(f"run {self.spec.run_id} was simulated in memory: it has no journal file")
        return self.run_dir / "journal.jsonl"

    def journal(self) -> pd.DataFrame:
        return read_journal(self.journal_path)


def simulate_spec(spec: RunSpec) -> pd.DataFrame:
    """Run a spec on the simulator and return its journal (no files written)."""
    return simulate_timed(spec)[0]


def simulate_timed(spec: RunSpec) -> tuple[pd.DataFrame, DecisionTimeSummary]:
    """`simulate_spec`, and the policy's decision times (`repro.routing.router.Router.decision_time`:
    this machine's wall times, apart from the journal). A policy that breaks its contract raises
    `repro.errors.PolicyError`."""
    _, pre, _, dec = engine_pools(spec)
    trace = _trace(spec)
    pred = _predictions(spec, trace)
    router = make_router(spec)
    journal = Simulator(trace.df, pred, router, pre, dec, spec.sim, spec.poll_interval_s()).run()
    return journal, cast(DecisionTimeSummary, router.decision_time())  # (the compiled router's plain dict)


_TRACES: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()


def _trace(spec: RunSpec) -> Any:
    """`build_trace` of ``spec``, kept for this process's last `PREDICTIONS_KEPT` traces (the specs of a sweep
    share a few traces; the simulator only reads one). The key is what a trace is made of (`build_trace`)."""
    key = (spec.workload, spec.seed, spec.rate, spec.n_requests, spec.arrival_spec(), spec.workload_params(),
           length_cap(spec))
    got = _TRACES.get(key)
    if got is None:
        got = _TRACES[key] = build_trace(spec)
        while len(_TRACES) > PREDICTIONS_KEPT:
            _TRACES.popitem(last=False)
    else:
        _TRACES.move_to_end(key)
    return got


_PREDICTIONS: collections.OrderedDict[tuple[Any, ...], np.ndarray] = collections.OrderedDict()
PREDICTIONS_KEPT = 32
"""Traces whose predictions a process keeps (`_predictions`)."""


def _predictions(spec: RunSpec, trace: Any) -> np.ndarray:
    """`build_predictions` of ``spec``'s own trace (``build_trace(spec)``), kept for this process's last
    `PREDICTIONS_KEPT` traces: the specs of a sweep share a few traces (every policy, pool shape and cost
    model of one trace), and the predictions (the predictor's features and model over every prompt) are a
    third of a simulation's cost. The key is what the trace and the predictions are made of (`build_trace`,
    `build_predictions`); the simulator only reads them (a copy is given all the same)."""
    key = (spec.workload, spec.seed, spec.rate, spec.n_requests, spec.arrival_spec(), spec.workload_params(),
           length_cap(spec), spec.predictor, spec.predictor_noise, spec.predictor_seed)
    got = _PREDICTIONS.get(key)
    if got is None:
        got = _PREDICTIONS[key] = build_predictions(spec, trace)
        while len(_PREDICTIONS) > PREDICTIONS_KEPT:
            _PREDICTIONS.popitem(last=False)
    else:
        _PREDICTIONS.move_to_end(key)
    return got.copy()


def code_fingerprint(spec: RunSpec) -> str:
    """What a finished run of ``spec`` must have been run by to be reused (its manifest's ``policy_code``):
    the policy's code and everything it imports (`repro.routing.policies.PolicyRef.fingerprint`); for a
    ``sim`` run also the whole package and its shipped data (`repro.experiment.simcache.fingerprint`:
    the simulator, the ledger, the workloads, the physics), since a simulated run is made of nothing else."""
    fp = spec.policy_ref.fingerprint
    if spec.backend != "sim":
        return fp
    from repro.experiment.simcache import fingerprint

    return hashlib.sha256(f"{fp}|{fingerprint()}".encode()).hexdigest()[:16]


def finished_run(spec: RunSpec, out_dir: str | Path) -> RunResult | None:
    """The finished run of ``spec`` under ``out_dir`` (a complete manifest, its journal's hash, and this
    code, `code_fingerprint`), skipped; else None. A finished run by other code is moved aside to
    ``<run_id>.code-<fingerprint>`` (kept, untouched) so the spec runs again."""
    run_dir = Path(out_dir) / spec.run_id
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.exists():
        return None
    manifest = read_manifest(manifest_path)
    journal_path = run_dir / "journal.jsonl"
    if not (manifest and manifest.get("complete") and journal_path.exists()
            and sha256(journal_path) == manifest.get("journal_sha256")):
        return None
    if manifest.get("policy_code") == code_fingerprint(spec):
        return RunResult(spec, run_dir, manifest["summary"], skipped=True)
    # the same spec run by other code (another formula of this policy name, another simulator or ledger, or
    # before fingerprints were kept): keep that run beside this one, untouched, and run the spec again
    stale = run_dir.with_name(f"{run_dir.name}.code-{manifest.get('policy_code') or 'unknown'}")
    if stale.exists():
        shutil.rmtree(stale)
    run_dir.rename(stale)
    print(f"run {spec.run_id}: finished by other code (policy {spec.policy!r} or what it runs on; kept in "
          f"{stale.name}); running it again", file=sys.stderr)
    return None


def run(spec: RunSpec, out_dir: str | Path = "runs", resume: bool = True, on_invalid: OnInvalid = "retry") -> RunResult:
    """Run one spec, writing journal + manifest under ``out_dir/<run_id>/``; skip if finished.

    A live run goes to its backend's harness (`repro.experiment.backends.live_harness`) and gets a validity
    verdict (`repro.live.validity`); the manifest records ``valid``, the
    ``validity`` of the kept attempt, every attempt (``attempts``: time scale, valid, reasons) and
    the ``time_scale_used``. See `OnInvalid` for what happens to an invalid run."""
    if resume and (done := finished_run(spec, out_dir)) is not None:
        return done
    if spec.backend == "sim":
        return commit_simulated(spec, simulate_output(SimTask(spec, journal=True)), out_dir)
    check_choice("run", "on_invalid", on_invalid, ("retry", "keep"))
    run_dir = Path(out_dir) / spec.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    # a run under way has no manifest: one it stops part-way (a PolicyError, Ctrl-C) is not mistaken for
    # an earlier finished one (with --fresh) and is redone
    (run_dir / "manifest.json").unlink(missing_ok=True)
    started = time.time()
    journal, live = live_harness(spec.backend)(spec, run_dir, on_invalid)
    summary = summarize(journal, truth_cost_model(spec).slo, sent=spec.n_requests)
    summary.update(valid=live["valid"], time_scale_used=live["time_scale_used"])  # validity beside every number
    length = build_trace(spec).meta["length_cap"] if length_cap(spec) is not None else None
    res = _write_manifest(spec, run_dir, summary, {"started_unix": started, "wall_s": time.time() - started,
                                                   **live}, length)
    res.decision_time = live.get("decision_time")
    return res


def _write_manifest(spec: RunSpec, run_dir: Path, summary: Summary, extra: dict[str, Any],
                    length: Any) -> RunResult:
    manifest: Manifest = {
        "run_id": spec.run_id,
        "spec": spec.to_dict(),
        "complete": True,
        "policy_code": code_fingerprint(spec),
        "started_unix": None,
        "wall_s": None,
        "versions": versions(),
        "journal_sha256": sha256(run_dir / "journal.jsonl"),
        "summary": summary,
        **extra,  # type: ignore[typeddict-item]
    }
    if length is not None:  # requests were cut to the engines' context: say so beside the numbers
        manifest["length_cap"] = length
    write_json_atomic(run_dir / "manifest.json", manifest)
    return RunResult(spec, run_dir, summary)  # good flags: read from the journal when asked (good_flags)


# ---- one simulation, on any worker ------------------------------------------------------------
@dataclass(frozen=True)
class SimTask:
    """One ``sim`` spec to simulate on a worker: ``journal`` = also send back the journal file's bytes
    (a run written to a folder), else only the summary and outcomes (a simulation in memory)."""

    spec: RunSpec
    journal: bool


@dataclass
class SimOutput:
    """What a worker sends back for a `SimTask`: the summary (`summarize`), the per-request outcomes
    (in memory only: a written run reads them from its journal, as a resumed one does), the journal
    file's exact bytes (`repro.experiment.journal.frame_bytes`) and the trace's ``length_cap`` meta
    (None unless requests were cut to the engines' context)."""

    summary: Summary
    outcomes: RequestOutcomes | None = field(default=None, repr=False)
    journal: bytes | None = field(default=None, repr=False)
    length_cap: Any = None
    decision_time: DecisionTimeSummary | None = None
    """The worker's decision times (`simulate_timed`): kept out of the summary (cached, compared)."""


def simulate_output(task: SimTask) -> SimOutput:
    """Simulate one spec where this runs (a top-level function: workers of `repro.experiment.executor`
    call it). Writes nothing: the journal's bytes come back in the output. A policy that breaks its
    contract, or whose p99 decision time exceeds the spec's ``decision_budget_us``, raises
    `repro.errors.PolicyError` (nothing of the run is kept: a rerun redoes it)."""
    spec = task.spec
    journal, timing = simulate_timed(spec)
    check_decision_budget(spec.policy, timing, spec.decision_budget_us)
    slo = truth_cost_model(spec).slo
    summary = summarize(journal, slo, sent=spec.n_requests)
    if not task.journal:
        return SimOutput(summary, request_outcomes(journal, slo), decision_time=timing)
    data = frame_bytes(journal)
    length = build_trace(spec).meta["length_cap"] if length_cap(spec) is not None else None
    return SimOutput(summary, journal=data, length_cap=length, decision_time=timing)


def commit_simulated(spec: RunSpec, out: SimOutput, out_dir: str | Path) -> RunResult:
    """Keep a worker's simulation here: with journal bytes, write the run's journal (atomically) and
    manifest under ``out_dir/<run_id>/``; without, store it in the simulation cache
    (`repro.experiment.simcache`) and return it in memory.

    The decision times (`SimOutput.decision_time`) go into the manifest (``decision_time``) only when
    the spec sets ``decision_budget_us``: a simulated run's manifest is otherwise the same bytes on
    every machine and executor (a resumed or parallel sweep writes what one process writes); they
    are on the `RunResult` either way."""
    if out.journal is None:
        from repro.experiment import simcache

        simcache.store(spec, out.summary, out.outcomes)
        return RunResult(spec, None, out.summary, outcomes=out.outcomes, decision_time=out.decision_time)
    run_dir = Path(out_dir) / spec.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(run_dir / "journal.jsonl", out.journal)
    timed = spec.decision_budget_us is not None and out.decision_time is not None
    res = _write_manifest(spec, run_dir, out.summary, {"decision_time": out.decision_time} if timed else {},
                          out.length_cap)
    res.decision_time = out.decision_time
    return res


def run_or_simulate(spec: RunSpec, out_dir: str | Path, *, sim_in_memory: bool = False,
                    on_invalid: OnInvalid = "retry") -> RunResult:
    """`run` into ``out_dir``; with ``sim_in_memory`` a ``sim`` spec is simulated in memory instead
    (no files, the same summary; `RunResult.run_dir` is None). Live runs always go to ``out_dir``
    (they are resumed from it)."""
    if not (sim_in_memory and spec.backend == "sim"):
        return run(spec, out_dir, on_invalid=on_invalid)
    summary, outcomes = simulated_summary(spec)
    return RunResult(spec, None, summary, outcomes=outcomes)


def simulated_summary(spec: RunSpec) -> tuple[Summary, RequestOutcomes]:
    """A ``sim`` spec's summary (``sent`` = its requests) and per-request outcomes, simulated once per
    spec and code (`repro.experiment.simcache`; identical to simulating it again)."""
    from repro.experiment import simcache

    hit = simcache.load(spec)
    if hit is not None:
        return hit
    res = commit_simulated(spec, simulate_output(SimTask(spec, journal=False)), "")
    return res.summary, res.request_outcomes()


def simulated_summaries(specs: Sequence[RunSpec], executor: Executor | None = None,
                        ) -> list[tuple[Summary, RequestOutcomes]]:
    """`simulated_summary` of each spec (in order), the missing ones simulated on ``executor``
    (default: the environment's, `repro.experiment.executor.shared_executor`)."""
    results = sweep_results(specs, "", sim_in_memory=True, executor=executor)
    return [(r.summary, r.request_outcomes()) for r in results]


RowMaker = Callable[[RunResult], dict[str, Any]]
"""Turns one finished run into its row of a sweep's table."""


def sweep(specs: Sequence[RunSpec], out_dir: str | Path = "runs", progress: SweepProgress | None = None,
          row: RowMaker | None = None, *, sim_in_memory: bool = False,
          on_invalid: OnInvalid = "retry", executor: Executor | None = None) -> pd.DataFrame:
    """Run many specs (resumable: finished ones are skipped); one row per run, in ``specs`` order.

    This is the one grid runner: the CLI and the notebooks (`repro.paper.section.Section.run`) both
    use it. ``sim_in_memory`` simulates ``sim`` specs without files (`run_or_simulate`). ``row`` makes
    each row (default `run_row`: run id, the spec's grid fields and the summary). ``sim`` specs run
    on ``executor`` (default: the environment's, one local process per core; `sweep_results`); the
    table is the same for any executor and any number of workers.
    """
    make_row = row or run_row
    results = sweep_results(specs, out_dir, progress, sim_in_memory=sim_in_memory, on_invalid=on_invalid,
                            executor=executor)
    return pd.DataFrame([make_row(r) for r in results])


def describe_spec(spec: RunSpec) -> str:
    """A spec's grid fields in one line, for progress and error messages."""
    return (f"{spec.backend} {spec.workload} {spec.topology_parsed().shorthand} {spec.policy} "
            f"rate {spec.rate:g} seed {spec.seed} n {spec.n_requests}")


def sweep_results(specs: Sequence[RunSpec], out_dir: str | Path = "runs",
                  progress: SweepProgress | None = None, *, sim_in_memory: bool = False,
                  on_invalid: OnInvalid = "retry", executor: Executor | None = None,
                  resume: bool = True) -> list[RunResult]:
    """The `RunResult` of each spec, in ``specs`` order (what `sweep` tabulates).

    Here, in this process: what is done already (finished runs under ``out_dir``, or cached
    simulations with ``sim_in_memory``) is read back. The other ``sim`` specs (each run id once)
    are simulated on ``executor``'s workers, which send back summaries, outcomes and journal bytes;
    this process writes every journal and manifest, one run at a time as each arrives, so the
    workers need no shared file system and a killed sweep resumes from the runs it wrote. Live specs
    run last, here, one at a time (their validity needs the machine to themselves). A run that
    raises stops the sweep with `repro.errors.RunFailed` naming its spec. ``resume=False`` runs
    every spec again (finished runs are overwritten; the simulation cache is still used).
    ``progress`` (optional): ``progress(total, label)`` makes the `SweepBar` told of each run done
    (the command line's is a progress bar, `repro.cli.root`); None or False: nothing.
    """
    from repro.errors import RunFailed
    from repro.experiment import simcache
    from repro.experiment.executor import SerialExecutor, TaskFailed, shared_executor

    specs = list(specs)
    results: list[RunResult | None] = [None] * len(specs)
    todo: dict[str, list[int]] = {}  # sim run id -> the positions it fills (a spec given twice runs once)
    live: list[int] = []
    for i, spec in enumerate(specs):
        if spec.backend != "sim":
            live.append(i)
            continue
        if spec.run_id in todo:
            todo[spec.run_id].append(i)
            continue
        if sim_in_memory:
            hit = simcache.load(spec)
            done = RunResult(spec, None, hit[0], outcomes=hit[1]) if hit is not None else None
        else:
            done = finished_run(spec, out_dir) if resume else None
        if done is not None:
            results[i] = done
        else:
            todo[spec.run_id] = [i]
    first = [specs[idx[0]] for idx in todo.values()]
    ex = executor or shared_executor()
    if ex.jobs <= 1 or len(first) < 2:
        ex = SerialExecutor()  # nothing to share out: no worker start-up
    bar: SweepBar = progress(len(specs), f"runs ({ex.describe()})") if progress else _NoBar()
    bar.advance(len(specs) - len(live) - sum(len(idx) for idx in todo.values()))
    try:
        tasks = [SimTask(s, journal=not sim_in_memory) for s in first]
        try:
            for j, out in ex.imap_unordered(simulate_output, tasks):
                res = commit_simulated(first[j], out, out_dir)
                positions = todo[first[j].run_id]
                results[positions[0]] = res
                for k in positions[1:]:  # a spec given twice: later ones skip the first, as one after another
                    results[k] = res if sim_in_memory else dataclasses.replace(res, skipped=True)
                bar.advance(len(positions))
        except TaskFailed as exc:
            spec = first[exc.index]
            # a policy that broke its contract stays a PolicyError (the CLI says so), with the run's id
            kind, cause = ((PolicyError, str(exc.error)) if isinstance(exc.error, PolicyError) else
                           (RunFailed, exc.cause))
            raise kind(f"run {spec.run_id} ({describe_spec(spec)}) failed on {ex.describe()}: {cause}. "
                       f"The runs finished before it are kept under {out_dir or 'the simulation cache'}; "
                       "run the sweep again to resume") from exc
        for i in live:
            results[i] = run(specs[i], out_dir, resume=resume, on_invalid=on_invalid)
            bar.advance(1)
    finally:
        bar.close()
    return [r for r in results if r is not None]


class SweepBar(Protocol):
    """What a sweep reports its progress to: runs done (``advance``), then the end (``close``)."""

    def advance(self, n: int) -> None: ...

    def close(self) -> None: ...


SweepProgress = Callable[[int, str], SweepBar]
"""Makes a sweep's `SweepBar` from the number of runs and a label."""


class _NoBar:
    """No progress shown."""

    def advance(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def run_row(res: RunResult) -> dict[str, Any]:
    """The default row of `sweep`: run id, backend, grid fields, skipped, and the summary."""
    s = res.spec
    return {
        "run_id": s.run_id,
        "backend": s.backend,
        "workload": s.workload,
        "topology": s.topology_parsed().shorthand,
        "policy": s.policy,
        "cost_model": s.cost_model,
        "seed": s.seed,
        "rate": s.rate,
        "skipped": res.skipped,
        **res.summary,
    }


