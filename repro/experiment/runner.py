"""Running specs: one run (`run`), many (`sweep`: the one grid runner, resumable), or a simulation
without files (`simulate_spec`, or `run_or_simulate` with ``sim_in_memory``)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from repro.errors import ConfigError, check_choice
from repro.experiment.inputs import (
    build_predictions,
    build_trace,
    engine_pools,
    length_cap,
    make_router,
    truth_cost_model,
)
from repro.experiment.journal import read as read_journal
from repro.experiment.journal import write_frame
from repro.experiment.manifest import read_manifest, sha256, versions, write_json_atomic
from repro.experiment.metrics import RequestOutcomes, request_outcomes, summarize
from repro.experiment.spec import RunSpec
from repro.routing.policies import policy_fingerprint
from repro.sim.simulator import Simulator


# ---- running --------------------------------------------------------------------------------
@dataclass
class RunResult:
    """One finished run: its spec, its folder (None for an in-memory simulation), its summary
    (`repro.experiment.metrics.summarize`), and whether it was found finished and skipped."""

    spec: RunSpec
    run_dir: Path | None
    summary: dict[str, Any]
    skipped: bool = False
    outcomes: RequestOutcomes | None = field(default=None, repr=False)
    """Per-request good flags and TTFTs in request-id order (`repro.experiment.metrics.RequestOutcomes`);
    None until `request_outcomes` reads them from the journal."""

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
    _, pre, _, dec = engine_pools(spec)
    trace = build_trace(spec)
    pred = build_predictions(spec, trace)
    router = make_router(spec)
    return Simulator(trace.df, pred, router, pre, dec, spec.sim, spec.poll_interval_s()).run()


OnInvalid = Literal["retry", "keep"]
"""What `run` does with a live run the machine could not keep up with (`repro.live.validity`):
``retry`` it at lower time scales and raise `RunInvalid` if no attempt is valid (the default);
``keep`` it, marked ``valid: false`` (for experiments about validity itself)."""


def run(spec: RunSpec, out_dir: str | Path = "runs", resume: bool = True, on_invalid: OnInvalid = "retry") -> RunResult:
    """Run one spec, writing journal + manifest under ``out_dir/<run_id>/``; skip if finished.

    A live run gets a validity verdict (`repro.live.validity`); the manifest records ``valid``, the
    ``validity`` of the kept attempt, every attempt (``attempts``: time scale, valid, reasons) and
    the ``time_scale_used``. See `OnInvalid` for what happens to an invalid run."""
    run_dir = Path(out_dir) / spec.run_id
    manifest_path = run_dir / "manifest.json"
    code = policy_fingerprint(spec.policy)
    if resume and manifest_path.exists():
        manifest = read_manifest(manifest_path)
        journal_path = run_dir / "journal.jsonl"
        if (manifest and manifest.get("complete") and journal_path.exists()
                and sha256(journal_path) == manifest.get("journal_sha256")):
            if manifest.get("policy_code") == code:
                return RunResult(spec, run_dir, manifest["summary"], skipped=True)
            # the same spec run by another formula of this policy name (or before fingerprints were kept):
            # keep that run beside this one, untouched, and run the spec again
            stale = run_dir.with_name(f"{run_dir.name}.policy-{manifest.get('policy_code') or 'unknown'}")
            if stale.exists():
                shutil.rmtree(stale)
            run_dir.rename(stale)
            print(f"run {spec.run_id}: finished by other code of policy {spec.policy!r} (kept in {stale.name}); "
                  "running it again", file=sys.stderr)
    check_choice("run", "on_invalid", on_invalid, ("retry", "keep"))
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    live: dict[str, Any] = {}
    if spec.backend == "sim":
        journal = simulate_spec(spec)
        write_frame(journal, run_dir / "journal.jsonl")
    else:
        journal, live = run_live_valid(spec, run_dir, on_invalid)
    summary = summarize(journal, truth_cost_model(spec).slo, sent=spec.n_requests)
    if live:  # validity beside every live number
        summary.update(valid=live["valid"], time_scale_used=live["time_scale_used"])
    manifest = {
        "run_id": spec.run_id,
        "spec": spec.to_dict(),
        "complete": True,
        "policy_code": code,
        "started_unix": None if spec.backend == "sim" else started,
        "wall_s": None if spec.backend == "sim" else time.time() - started,
        "versions": versions(),
        "journal_sha256": sha256(run_dir / "journal.jsonl"),
        "summary": summary,
        **live,
    }
    if length_cap(spec) is not None:  # requests were cut to the engines' context: say so beside the numbers
        manifest["length_cap"] = build_trace(spec).meta["length_cap"]
    write_json_atomic(manifest_path, manifest)
    return RunResult(spec, run_dir, summary)  # good flags: read from the journal when asked (good_flags)


def run_live_valid(spec: RunSpec, run_dir: Path, on_invalid: OnInvalid = "retry",
                   attempt: Callable[[RunSpec, Path], pd.DataFrame] | None = None,
                   ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Run a live spec until an attempt is valid (time scales of `time_scales_to_try`; one attempt
    with ``keep``); the journal and the manifest's validity fields. ``attempt(spec, run_dir)`` runs
    one attempt and writes its ``validity.json`` (default `repro.live.run.run_live`: our proxy;
    `repro.live.external_router.run_external` passes its own). Every attempt's verdict is kept in
    ``attempts.jsonl``; an invalid last attempt raises `RunInvalid` (``retry``)."""
    import json

    from repro.errors import RunInvalid
    from repro.live.run import run_live  # emulated / vllm: real HTTP path
    from repro.live.validity import ADVICE, Verdict, time_scales_to_try

    attempt = attempt or run_live

    (run_dir / "attempts.jsonl").unlink(missing_ok=True)
    scales = time_scales_to_try(spec.live.time_scale) if on_invalid == "retry" else [spec.live.time_scale]
    attempts = []
    for k, ts in enumerate(scales):
        journal = attempt(spec if ts == spec.live.time_scale else spec.replace(time_scale=ts), run_dir)
        verdict = Verdict.from_dict(json.loads((run_dir / "validity.json").read_text()))
        attempts.append({"attempt": k + 1, "time_scale": ts, "valid": verdict.valid, "reasons": verdict.reasons})
        with open(run_dir / "attempts.jsonl", "a") as f:
            f.write(json.dumps({**attempts[-1], "measured": verdict.measured}) + "\n")
        if verdict.valid or on_invalid == "keep":
            break
    else:
        tried = ", ".join(f"K={a['time_scale']:g}: {'; '.join(a['reasons'])}" for a in attempts)
        raise RunInvalid(f"run {spec.run_id}: no valid attempt in {len(attempts)} ({tried}). {ADVICE}. "
                         f"Each attempt's measurements: {run_dir / 'attempts.jsonl'}")
    return journal, {"valid": verdict.valid, "validity": verdict.to_dict(), "attempts": attempts,
                     "time_scale_used": attempts[-1]["time_scale"]}


def run_or_simulate(spec: RunSpec, out_dir: str | Path, *, sim_in_memory: bool = False,
                    on_invalid: OnInvalid = "retry") -> RunResult:
    """`run` into ``out_dir``; with ``sim_in_memory`` a ``sim`` spec is simulated in memory instead
    (no files, the same summary; `RunResult.run_dir` is None). Live runs always go to ``out_dir``
    (they are resumed from it)."""
    if not (sim_in_memory and spec.backend == "sim"):
        return run(spec, out_dir, on_invalid=on_invalid)
    summary, outcomes = simulated_summary(spec)
    return RunResult(spec, None, summary, outcomes=outcomes)


def simulated_summary(spec: RunSpec) -> tuple[dict[str, Any], RequestOutcomes]:
    """A ``sim`` spec's summary (``sent`` = its requests) and per-request outcomes, simulated once per
    spec and code (`repro.experiment.simcache`; identical to simulating it again)."""
    from repro.experiment import simcache

    hit = simcache.load(spec)
    if hit is not None:
        return hit
    journal = simulate_spec(spec)
    slo = truth_cost_model(spec).slo
    summary, outcomes = summarize(journal, slo, sent=spec.n_requests), request_outcomes(journal, slo)
    simcache.store(spec, summary, outcomes)
    return summary, outcomes


RowMaker = Callable[[RunResult], dict[str, Any]]
"""Turns one finished run into its row of a sweep's table."""


def sweep(specs: Sequence[RunSpec], out_dir: str | Path = "runs", progress: bool = True,
          row: RowMaker | None = None, *, sim_in_memory: bool = False,
          on_invalid: OnInvalid = "retry") -> pd.DataFrame:
    """Run many specs in order (resumable: finished ones are skipped); one row per run.

    This is the one grid runner: the CLI and the notebooks (`repro.paper.section.Section.run`) both
    use it. ``sim_in_memory`` simulates ``sim`` specs without files (`run_or_simulate`). ``row`` makes
    each row (default `run_row`: run id, the spec's grid fields and the summary).
    """
    make_row = row or run_row
    how: dict[str, Any] = {"sim_in_memory": sim_in_memory, "on_invalid": on_invalid}
    rows = []
    if progress:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("runs", total=len(specs))
            for spec in specs:
                rows.append(make_row(run_or_simulate(spec, out_dir, **how)))
                bar.advance(task)
    else:
        for spec in specs:
            rows.append(make_row(run_or_simulate(spec, out_dir, **how)))
    return pd.DataFrame(rows)


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


