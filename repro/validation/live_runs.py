"""A validation's live side: the cluster its live runs reach (`held_cluster`), the calibration it uses
(`validation_calibration`), each live run's spec (`live_spec`) and the run itself, run again when the machine
could not keep up (`live_run`); `say` writes its progress lines."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from repro.errors import RunInvalid
from repro.experiment.inputs import cluster_calibration
from repro.experiment.spec import LiveConfig, RunSpec
from repro.routing.cost_model import CostModel
from repro.validation.plan import ValidationConfig

if TYPE_CHECKING:
    from repro.experiment.runner import RunResult


def say(progress: bool, msg: str) -> None:
    """``msg`` on stderr, flushed, when ``progress``."""
    if progress:
        print(msg, file=sys.stderr, flush=True)


@contextmanager
def held_cluster(cfg: ValidationConfig, work: Path) -> Iterator[str]:
    """The cluster file every live run of the validation reaches: real engines started once (a remote twin
    of them) for ``vllm``; the cluster itself for ``emulated`` (each run starts its own emulated engines)."""
    if cfg.backend_used == "emulated":
        yield cfg.cluster
        return
    from repro.cluster.launchers import hold_cluster

    with hold_cluster(cfg.cluster, work) as held:
        yield held


def validation_calibration(cfg: ValidationConfig, cluster: str, work: Path, progress: bool
                           ) -> tuple[CostModel | None, str, pd.DataFrame | None]:
    """The calibration the validation uses, where it came from, and its samples when they are kept beside it
    (``<name>.samples.csv``): measured now (``cfg.calibrate``: the benchmark on the running engines, written
    to ``calibration.json``; a resumed validation keeps the one it measured), else the cluster file's."""
    from repro.live.calibration_bench import samples_path

    if cfg.calibrate:
        from repro.cluster.launchers import launch
        from repro.live.calibration_bench import calibrate

        opts: dict[str, Any] = {"launcher": "emulated"} if cfg.backend_used == "emulated" else {}
        path = work / "calibration.json"
        if path.exists() and samples_path(path).exists():
            say(progress, f"validate: the calibration of an earlier start: {path}")
            return CostModel.load(path), str(path), pd.read_csv(samples_path(path))
        say(progress, f"validate: calibrating the cluster ({cfg.calibration_budget_s:g} s budget)")
        with launch(cluster, **opts) as instances:
            cm, samples = calibrate(instances, budget_s=cfg.calibration_budget_s, out=path)
        return cm, str(path), samples
    spec = RunSpec(backend="vllm" if cfg.backend_used == "vllm" else "emulated", cluster=cluster)
    name = cluster_calibration(spec)
    if not name or name in ("calibrated", "sim_derived"):
        return None, "none", None
    cm = CostModel.load(name)
    found = samples_path(name) if Path(name).suffix == ".json" else None
    return cm, str(name), pd.read_csv(found) if found is not None and found.exists() else None


def live_spec(cfg: ValidationConfig, cluster: str, calibration_path: str | None, **fields: Any) -> RunSpec:
    """A live run of the validation on ``cluster``: its backend, workload and time scale, the calibration measured
    now when ``calibration_path`` is given, and ``fields`` (seed, rate, requests, policy)."""
    extra: dict[str, Any] = {"cost_model": calibration_path} if calibration_path else {}
    if cfg.time_scale != 1.0:
        extra["live"] = LiveConfig(time_scale=cfg.time_scale)
    return RunSpec(backend=cfg.backend_used, cluster=cluster, workload=cfg.workload, **extra, **fields)


def live_run(spec: RunSpec, out_dir: Path, redo: int, progress: bool) -> tuple[RunResult | None, list[str]]:
    """`repro.experiment.runner.run` of ``spec`` into ``out_dir``, run again up to ``redo`` times when the
    machine could not keep up (`RunInvalid`); (the `RunResult` or None, the reasons of each invalid try)."""
    from repro.experiment.runner import run

    reasons: list[str] = []
    for _ in range(redo + 1):
        try:
            return run(spec, out_dir), reasons
        except RunInvalid as exc:
            reasons.append(str(exc).splitlines()[0][:300])
            say(progress, f"validate: run {spec.run_id} invalid (the machine did not keep up: {reasons[-1]}); "
                          + ("redoing" if len(reasons) <= redo else "leaving it out"))
    return None, reasons

