"""A whole validation on one cluster (`repro validate`): the calibration (the cluster file's, or measured
now), the simulator's physics from it, the saturation rate (found on the calibrated simulator), then per
load level, policy, trace and replay one live run (`repro.experiment.runner.run`: the real proxy and load
generator, validity-checked) and its simulated twin (`repro.validation.twin`), paired request by request.
The judged runs go in passes (replay r of every level, policy and trace in pass r), after the training run and
the host probes; the training trace runs again before each later pass (``training-pass-<r>``) and after the
last (``training-end``): the machine's drift, and a fit that meets it where the judged runs did. The physics
variants that are fitted are fitted after all of them, on the training runs and probes alone.

Everything lands in ``out_dir`` (resumable: a finished live run is found by its spec and skipped)::

    validation.json     configuration, conditions (commit, cluster, backend), physics and where it came
                        from, saturation, the budget and the load trusted up to, residual patterns
    validation.csv      one row per (load level, policy): `repro.validation.accuracy.level_table`
    ordering.csv        the policies' goodput differences, live vs simulated, per level
    runs.csv            one row per live run: keys, goodputs, validity, wall time, run folder
    requests.parquet    every paired request (`repro.validation.accuracy.pair`) with its run's keys
    residuals.csv       error against prompt length, output length and load (`accuracy.error_by`)
    stages.csv          each stage of a request's time, live and simulated, per level (`decomposition.stage_table`)
    account.csv         each part's CPU share and each engine's own account of its requests, per level
                        (`decomposition.account_table`, from the live runs' ``account.json``)
    saturation_account.csv  the live saturation probes' CPU by part and per request (`decomposition.probe_account`)
    physics.json        the simulator's engine profile (a hardware-profile file: ``repro run --profile``);
                        with ``--in-situ`` also physics-in-situ.json (the fitted one)
    validation.md       the tables as text; figures: predicted_vs_measured.png, error_vs_load.png
    live/, sim/<variant>/, saturation/, training/, training-pass-<r>/, training-end/, host/
                        the live runs (journal, manifest, validity), the twins' journals per physics
                        variant, the live saturation probes, the training runs (before the judged runs,
                        before each later pass, after the last), the shared host's probes
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import pandas as pd

from repro.errors import ConfigError, RunInvalid
from repro.experiment.inputs import cluster_calibration, truth_cost_model
from repro.experiment.journal import write_frame
from repro.experiment.manifest import versions, write_json_atomic
from repro.experiment.metrics import summarize
from repro.experiment.spec import LiveConfig, RunSpec
from repro.routing.cost_model import CostModel
from repro.sources import commit_id
from repro.validation import accuracy, decomposition
from repro.validation.drift import (
    at_speed,
    drift,
    drift_text,
    fit_speed,
    search_factor,
    search_speed,
    speed_at,
    speed_text,
)
from repro.validation.drift import started as run_started
from repro.validation.host import admission_formula, hop_points
from repro.validation.host import admission_points as host_points
from repro.validation.host import markdown as host_markdown
from repro.validation.plan import ValidationConfig
from repro.validation.twin import PhysicsRecord, fit_in_situ, twin_goodput, twin_journal, validation_physics

if TYPE_CHECKING:
    from repro.engine.physics import Physics
    from repro.experiment.runner import RunResult
    from repro.experiment.saturation import SaturationResult

SATURATION_PROBE_REQUESTS = 400
"""Requests of each simulated probe of the saturation search."""
PROMPT_BINS = (0, 64, 256, 1024, 2048, 4096, 1 << 30)
OUTPUT_BINS = (0, 64, 256, 512, 1024, 4096, 1 << 30)


class SaturationHow(TypedDict, total=False):
    """How `saturation_rate` found the load levels' reference rate: ``how`` in words; the calibrated
    simulator's rate (req/s) and its probes (``[rate, goodput]`` each), always; a searched rate's goodput at
    the light rate and the target (fractions); a search on the cluster's live probes and the rates of the
    probes the machine could not keep up with (req/s, counted as collapsed); whether a probe came within the
    search's band (else the rate is the crossing in its last bracket)."""

    how: str
    simulator_rate: float
    simulator_probes: list[list[float]]
    simulator_rate_by_variant: dict[str, float]
    light_goodput: float
    target_goodput: float
    probes: list[list[float]]
    probes_invalid: list[float]
    converged: bool


class ReplayKeys(TypedDict):
    """One live replay of the validation: load ``fraction`` of saturation, ``rate`` (req/s), ``policy``, trace
    ``seed``, ``replay`` (1, 2, ...)."""

    fraction: float
    rate: float
    policy: str
    seed: int
    replay: int


class ReplayRow(ReplayKeys):
    """A live replay's row (`validate`'s ``on_run``): its requests, whether it was valid (after
    ``invalid_tries`` invalid tries, their reasons ``|``-separated), wall time (s), run folder (relative to
    the validation's; "" when invalid), live goodput (a fraction; NaN when invalid) and start (Unix s, from
    its manifest; NaN when invalid)."""

    n_requests: int
    valid: bool
    invalid_tries: int
    invalid_reasons: str
    wall_s: float
    run_dir: str
    live_goodput: float
    started_unix: float


class RunRow(ReplayRow):
    """A row of ``runs.csv``: a `ReplayRow` beside one physics ``variant``'s simulated goodput (a fraction)."""

    variant: str
    sim_goodput: float


class ValidationRecord(TypedDict):
    """``validation.json``: the configuration (`repro.validation.plan.ValidationConfig.to_dict`), cluster,
    backend, workload; the calibration used (its path, or ``none``) and the physics (`PhysicsRecord`); the
    saturation rate (req/s) and how it was found; the SLO targets (s) and the error budget (fractions); the
    primary physics ``variant`` and all; the load trusted up to (a fraction of saturation), per variant too;
    versions, commit, start (Unix s) and wall time (s); live runs and invalid ones; requests completed on
    one side only (``live_only``, ``sim_only``); the engines' ``length_cap`` when requests were cut; the
    residual patterns per variant (`residual_patterns`) when any request was paired; the mean time between two
    replays of one trace (minutes, `replay_spacing`; NaN with one replay) and, with a training run, how far the
    machine moved over the judged runs (`drift`)."""

    config: dict[str, Any]
    cluster: str
    backend: str
    workload: str
    calibration: str
    physics: PhysicsRecord
    saturation_rate: float
    saturation: SaturationHow
    slo: dict[str, float]
    budget: dict[str, float]
    variant: str
    variants: list[str]
    trusted_up_to: float
    trusted_up_to_by_variant: dict[str, float]
    versions: dict[str, str]
    commit: str
    started_unix: float
    wall_s: float
    runs: int
    invalid_runs: int
    unpaired: dict[str, int]
    length_cap: dict[str, Any] | None
    residuals: NotRequired[dict[str, dict[str, Any]]]
    replays_minutes_apart: float
    drift: NotRequired[dict[str, Any]]


@dataclass
class Validation:
    """What `validate` found for its primary physics variant (``record["variant"]``: ``in-situ`` with
    ``--in-situ``, else ``calibration``): the level table, the ordering, the live runs, the paired requests,
    the load trusted up to, and the record written to ``validation.json`` (every variant's files hold all)."""

    out_dir: Path
    table: pd.DataFrame
    ordering: pd.DataFrame
    runs: pd.DataFrame
    pairs: pd.DataFrame
    trusted_up_to: float
    record: ValidationRecord

    def markdown(self) -> str:
        """The validation as a Markdown section (what ``validation.md`` holds)."""
        return (self.out_dir / "validation.md").read_text()


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(msg, file=sys.stderr, flush=True)


@contextmanager
def _cluster(cfg: ValidationConfig, work: Path) -> Iterator[str]:
    """The cluster file every live run of the validation reaches: real engines started once (a remote twin
    of them) for ``vllm``; the cluster itself for ``emulated`` (each run starts its own emulated engines)."""
    if cfg.backend_used == "emulated":
        yield cfg.cluster
        return
    from repro.cluster.launchers import hold_cluster

    with hold_cluster(cfg.cluster, work) as held:
        yield held


def _calibration(cfg: ValidationConfig, cluster: str, work: Path, progress: bool
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
            _say(progress, f"validate: the calibration of an earlier start: {path}")
            return CostModel.load(path), str(path), pd.read_csv(samples_path(path))
        _say(progress, f"validate: calibrating the cluster ({cfg.calibration_budget_s:g} s budget)")
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


def _live_spec(cfg: ValidationConfig, cluster: str, calibration_path: str | None, **fields: Any) -> RunSpec:
    extra: dict[str, Any] = {"cost_model": calibration_path} if calibration_path else {}
    if cfg.time_scale != 1.0:
        extra["live"] = LiveConfig(time_scale=cfg.time_scale)
    return RunSpec(backend=cfg.backend_used, cluster=cluster, workload=cfg.workload, **extra, **fields)


def simulated_saturation(base: RunSpec, cfg: ValidationConfig, physics: Physics) -> SaturationResult:
    """Where the simulator with ``physics`` puts the cluster's saturation: round-robin mid-collapse
    (`repro.experiment.saturation.saturation_search`), probes of `SATURATION_PROBE_REQUESTS` requests of the first
    judged trace seed through `twin_goodput`."""
    from repro.experiment.saturation import light_rate_for, saturation_search

    probe_spec = base.replace(n_requests=SATURATION_PROBE_REQUESTS, seed=cfg.seed)
    return saturation_search(probe_spec, light_rate=light_rate_for(probe_spec),
                             probe=lambda s: twin_goodput(s, physics))


@dataclass
class HostProbes:
    """What `_host_probes` measured of the serving path before the judged runs: the machine's cores, the idle
    window, each run's bins (`repro.validation.host.probe_bins`: the training run's, then each probe's), the
    admission points, the probes' specs and live journals (for the steal share), the prefill hop's points, the
    probes left out (the one at saturation when the machine could not keep up with it) and the run ids of those at
    saturation (not light load: the serving path's light-load TTFT is fitted without them)."""

    cores: int
    idle: Any
    bins: list[Any]
    points: list[Any]
    runs: list[tuple[RunSpec, pd.DataFrame]]
    hops: list[Any] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    at_saturation: list[str] = field(default_factory=list)


def _host_probes(cfg: ValidationConfig, cluster: str, cal_path: str | None, sat: float,
                 train_run: tuple[RunSpec, RunResult], out: Path, progress: bool) -> HostProbes:
    """Mechanism ``shared_host``'s live measurements (`repro.validation.host`): an idle window and the
    differential probes (of the training seed), beside the training run's own bins."""
    from repro.cluster.launchers.vllm_cpu import available_cores
    from repro.experiment.inputs import build_trace
    from repro.live.run_account import CpuAccount
    from repro.validation import host

    if cfg.topology.launcher == "remote":
        raise ConfigError(f"validate: --shared-host books this machine's CPU, but the cluster {cfg.cluster} runs its "
                          f"engines elsewhere (launcher remote)")
    idle_path = out / "host" / "idle.json"
    if idle_path.exists():
        idle = json.loads(idle_path.read_text())
    else:
        with CpuAccount({}) as account:
            time.sleep(host.IDLE_S)
        idle = host.idle_usage(account.cpu_s(), account.shares()["wall_s"])
        idle_path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(idle_path, idle)
    train, train_res = train_run
    mean_output = {w: float(build_trace(train.replace(workload=w, rate=1.0, n_requests=400)).df["output_tokens"].mean())
                   for w in ("mixed", *host.PROBE_WORKLOADS)}
    probes = HostProbes(len(available_cores()), idle, [host.probe_bins(train_res.run_dir)],
                        host.admission_points(train_res.run_dir), [], host.hop_points(train_res.run_dir))
    for (workload, rate), (_, share) in zip(host.probe_rates(sat, mean_output), host.PROBES, strict=True):
        spec = _live_spec(cfg, cluster, cal_path, seed=cfg.training_seed, rate=rate, n_requests=cfg.n_requests(rate),
                          policy=cfg.policies[0]).replace(workload=workload)
        res, _ = live_run(spec, out / "host", cfg.redo, progress)
        if res is None and share >= host.SATURATION_SHARE:
            probes.left_out.append(spec.run_id)
            _say(progress, f"validate: the shared-host probe at saturation ({spec.run_id}) left out: the machine "
                           f"could not keep up at {rate:.3g} req/s; the admission delay is fitted without it")
            continue
        if share >= host.SATURATION_SHARE:
            probes.at_saturation.append(spec.run_id)
        if res is None:
            raise RunInvalid(f"validate: the shared-host probe {spec.run_id} was invalid {cfg.redo + 1} times: the "
                             f"machine could not keep up at {rate:.3g} req/s")
        probes.bins.append(host.probe_bins(res.run_dir))
        probes.points += host.admission_points(res.run_dir)
        probes.hops += host.hop_points(res.run_dir)
        probes.runs.append((spec, res.journal()))
    return probes


def _shared_host(probes: HostProbes, physics: Physics, training: list[tuple[RunSpec, pd.DataFrame]],
                 progress: bool, points: Sequence[Any] = (),
                 hops: Sequence[Any] = ()) -> tuple[Physics, dict[str, Any]]:
    """Mechanisms ``shared_host``, ``stream_admission`` and ``prefill_hop`` fitted (`repro.validation.host`), on the
    runs of the training seed alone (none judged): the serving path's CPU on the probes' bins; the admission delay
    and the prefill hop against the streams on the probes' points and ``points`` / ``hops`` (the later training
    runs'); the steal share on the median TPOT
    of the probes and the ``training`` runs (specs and live journals: the training trace before, between and after
    the passes); then the serving path's light-load TTFT on the same runs but the probe at saturation. Returns the
    physics (``physics`` with the mechanisms on) and the record."""
    from repro.validation import host

    fit = host.fit_host(probes.cores, probes.idle, probes.bins)
    admission = host.fit_admission([*probes.points, *points])
    hop = host.fit_hop([*probes.hops, *hops])
    runs = [*training, *probes.runs]
    steal = host.fit_steal_share(host.with_host(physics, fit, admission, hop), runs)
    measured = host.with_host(physics, fit, admission, hop).with_overrides(host_steal_share=steal["share"])
    # its light-load TTFT on every run of the training seed below saturation (training runs and probes alike): one
    # run's offset is that run's luck (the training trace, run twice 25 s apart, once measured a median TTFT 17 ms
    # above the other); the probe at saturation is there for the admission delay, which it would otherwise absorb
    fitted, path = host.fit_serving_path([r for r in runs if r[0].run_id not in probes.at_saturation], measured)
    _say(progress, f"validate: shared host: {probes.cores} cores, the serving path {fit['base_cores']:.3f} cores + "
                   f"{1e3 * fit['per_request_s']:.1f} ms/request + {1e6 * fit['per_token_s']:.0f} us/token + "
                   f"{1e6 * fit['per_step_s']:.0f} us/step of CPU (R^2 {fit['r2']:.2f}), steal share "
                   f"{steal['share']:.3g} (TPOT of the training runs and the probes); admission "
                   f"{host.admission_formula(admission)} (R^2 {admission['r2']:.2f}"
                   f"{', the ' + admission['edge'] + ' at its edge' if admission['edge'] else ''}); prefill hop "
                   f"{host.hop_formula(hop)} (R^2 {hop['r2']:.2f}"
                   f"{', the ' + hop['edge'] + ' at its edge' if hop['edge'] else ''}); its light-load "
                   f"TTFT {1e3 * path['ttft_offset_s']:+.1f} ms")
    return fitted, {**fit, "admission": admission, "hop": hop, "steal": steal, "serving_path": path,
                    "probes_left_out": list(probes.left_out)}


DRIFT_VARIANTS = {"drift-tracked": True, "drift-engines": False}
"""Mechanism ``machine_drift``'s variants (`repro.validation.drift.at_speed`), each judged run simulated at its own
moment's speed: the whole machine's (the engines and the serving path: the verdict), the engines' alone."""


def replay_spacing(rows: pd.DataFrame) -> float:
    """The mean time (minutes) between consecutive replays of one trace at one level and policy (``runs.csv``'s
    rows of one variant); NaN without two valid replays of any."""
    if rows.empty or "started_unix" not in rows.columns:
        return float("nan")
    gaps = (rows.dropna(subset=["started_unix"]).sort_values("replay")
            .groupby(["fraction", "policy", "seed"])["started_unix"].diff().dropna())
    return float(gaps.mean() / 60) if len(gaps) else float("nan")


def saturation_rate(cfg: ValidationConfig, base: RunSpec, physics: Physics, out: Path, progress: bool
                    ) -> tuple[float, SaturationHow]:
    """The load levels' reference rate (req/s) and how it was found (`ValidationConfig.saturation`): where
    round-robin is mid-collapse (`repro.experiment.saturation.saturation_search`) on the cluster (live
    probes under ``out/saturation``; a probe the machine could not keep up with counts as collapsed) or on
    the calibrated simulator (probes of `SATURATION_PROBE_REQUESTS` requests through `twin_goodput`), or
    as stated. The simulator's rate is always searched and recorded (``simulator_rate``). An input to the
    validation's levels, never one of its results."""
    from repro.experiment.saturation import saturation_search

    simulated = simulated_saturation(base, cfg, physics)
    how: SaturationHow = {"simulator_rate": float(simulated.rate),
                           "simulator_probes": [list(p) for p in simulated.probes]}
    used = cfg.saturation_used
    if used == "stated":
        return float(cfg.saturation_rate or 0.0), {**how, "how": "stated (--saturation-rate)"}
    if used == "simulator":
        return float(simulated.rate), {**how, "how": "searched on the calibrated simulator (round-robin mid-collapse)",
                                       "light_goodput": simulated.light_goodput,
                                       "target_goodput": simulated.target_goodput}
    invalid: list[float] = []
    marks = out / "saturation" / "invalid.json"  # probes left out in an earlier start: a resumed search agrees

    def live_probe(spec: RunSpec) -> float:
        probe = probe_spec(cfg, spec)
        known = set(json.loads(marks.read_text())) if marks.exists() else set()
        res = None
        if probe.run_id not in known:
            res, _ = live_run(probe, out / "saturation", cfg.redo, progress)
            if res is None:
                marks.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(marks, sorted(known | {probe.run_id}))
        goodput = 0.0 if res is None else float(res.summary["goodput"])
        if res is None:
            invalid.append(spec.rate)
        _say(progress, f"validate: saturation probe {spec.rate:.3g} req/s ({probe.n_requests} requests): live goodput "
                       f"{goodput:.3f}" + (" (the machine could not keep up: counted as collapsed)" if res is None
                                           else ""))
        return goodput

    # from a sixteenth of the simulator's rate (a power of two, req/s): well below any collapse the simulator
    # sees, and a few doublings from one a cluster slower than it predicts reaches
    live_light = 2.0 ** math.floor(math.log2(simulated.rate / 16))
    found = saturation_search(base.replace(seed=cfg.seed), light_rate=live_light, probe=live_probe, band=0.03,
                              max_probes=cfg.max_probes)
    said = "searched on the cluster (live probes, round-robin mid-collapse)"
    if not found.converged:
        said = (f"searched on the cluster (live probes, round-robin mid-collapse; no probe within 0.03 of the "
                f"target goodput {found.target_goodput:.3f} in {len(found.probes)}: the crossing in the last bracket)")
    return float(found.rate), {**how, "how": said, "converged": found.converged,
                               "light_goodput": found.light_goodput, "target_goodput": found.target_goodput,
                               "probes": [list(p) for p in found.probes], "probes_invalid": invalid}


def probe_spec(cfg: ValidationConfig, spec: RunSpec) -> RunSpec:
    """A live saturation probe of ``spec`` (its rate): `ValidationConfig.probe_duration_s` of arrivals, at least
    `ValidationConfig.min_requests` requests."""
    return spec.replace(n_requests=max(cfg.min_requests, math.ceil(spec.rate * cfg.probe_duration_s)))


def search_probes(cfg: ValidationConfig, base: RunSpec, how: SaturationHow, out: Path
                  ) -> list[tuple[RunSpec, RunResult]]:
    """The live saturation search's valid probes (spec and result, from ``out/saturation``), as
    `saturation_rate` ran them."""
    from repro.experiment.runner import finished_run

    rr = base.replace(seed=cfg.seed).replace(policy="round_robin", policy_options={})
    found = []
    for rate, _ in how.get("probes", []):
        spec = probe_spec(cfg, rr.replace(rate=rate))
        res = finished_run(spec, out / "saturation")
        if res is not None:
            found.append((spec, res))
    return found


def collapsing_from(how: SaturationHow, band: float = 0.03) -> float:
    """The lowest rate (req/s) at which the live search's round-robin goodput fell to its target plus ``band``
    (the search's band; infinity when none did)."""
    target = how.get("target_goodput", math.nan)
    return min((r for r, g in how.get("probes", []) if g <= target + band), default=math.inf)


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
            _say(progress, f"validate: run {spec.run_id} invalid (the machine did not keep up: {reasons[-1]}); "
                           + ("redoing" if len(reasons) <= redo else "leaving it out"))
    return None, reasons


def validate(cfg: ValidationConfig, out_dir: str | Path, *, progress: bool = True,
             on_run: Callable[[ReplayRow], None] | None = None) -> Validation:
    """Run the whole validation (see the module docstring); ``on_run(row)`` is called after each live run.

    Each live run is compared with the twin of every physics variant: ``calibration`` (the cluster's
    calibration, `validation_physics`; ``profile`` with ``--physics profile``) and, with ``cfg.in_situ``,
    ``in-situ`` (fitted on a training run of a trace no judged run replays, `fit_in_situ`), the validation's
    verdict then."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with _cluster(cfg, out) as cluster:
        cal, cal_from, samples = _calibration(cfg, cluster, out, progress)
        cal_path = cal_from if cfg.calibrate else None
        base = _live_spec(cfg, cluster, cal_path, policy="round_robin")
        topo = base.topology_parsed()
        physics, physics_from = validation_physics(cfg, topo, cal, samples)
        write_json_atomic(out / "physics.json", physics.to_dict(slo=True))
        sat, sat_how = saturation_rate(cfg, base, physics, out, progress)
        _say(progress, f"validate: saturation {sat:.3g} req/s ({sat_how['how']}); levels "
                       f"{', '.join(f'{f:g}' for f in cfg.fractions)}")
        slo = truth_cost_model(base).slo
        variants = {physics_from["source"]: physics}  # "calibration" or "profile"
        train_run = None
        if cfg.in_situ or cfg.shared_host:
            rate = round(cfg.fractions[0] * sat, 6)
            train = _live_spec(cfg, cluster, cal_path, seed=cfg.training_seed, rate=rate,
                               n_requests=cfg.n_requests(rate), policy=cfg.policies[0])
            assert train.seed not in cfg.seeds  # the fit never sees a judged trace
            if not (out / "training" / train.run_id / "manifest.json").exists():
                # a replay of the same trace first, not used: engines just started (or idle) run their first
                # requests slower (a cold start measured 56 ms of serving path where warm ones showed 30)
                live_run(train, out / "training-warmup", cfg.redo, progress)
            res, _ = live_run(train, out / "training", cfg.redo, progress)
            if res is None:
                raise RunInvalid(f"validate: the in-situ training run {train.run_id} was invalid {cfg.redo + 1} "
                                 f"times: the machine could not keep up at {rate:.3g} req/s")
            train_run = (train, res)
        probes = (_host_probes(cfg, cluster, cal_path, sat, train_run, out, progress)
                  if cfg.shared_host and train_run is not None else None)
        # the judged runs in passes: replay r of every run in pass r, so two replays of a trace lie a pass apart
        # and their spread (the noise floor) holds what the machine moves in that time, not only back to back
        judged = [(seed, fraction, policy,
                   _live_spec(cfg, cluster, cal_path, seed=seed, rate=round(fraction * sat, 6),
                              n_requests=cfg.n_requests(round(fraction * sat, 6)), policy=policy))
                  for seed in cfg.seeds for fraction in cfg.fractions for policy in cfg.policies]
        done: list[tuple[ReplayRow, RunResult | None, RunSpec]] = []
        trained: list[tuple[str, RunResult]] = [("before pass 1", train_run[1])] if train_run is not None else []
        for replay in range(1, cfg.replays + 1):
            if train_run is not None and replay > 1:  # the training trace again before each later pass
                again, _ = live_run(train_run[0], out / f"training-pass-{replay}", cfg.redo, progress)
                trained += [(f"before pass {replay}", again)] if again is not None else []
            for seed, fraction, policy, spec in judged:
                t0 = time.monotonic()
                res, invalid = live_run(spec, out / "live" / f"replay-{replay}", cfg.redo, progress)
                row: ReplayRow = {"fraction": fraction, "rate": spec.rate, "policy": policy, "seed": seed,
                                  "replay": replay, "n_requests": spec.n_requests,
                                  "valid": res is not None, "invalid_tries": len(invalid),
                                  "invalid_reasons": " | ".join(invalid),
                                  "wall_s": round(time.monotonic() - t0, 1),
                                  "run_dir": str(res.run_dir.relative_to(out)) if res else "",
                                  "live_goodput": float(res.summary["goodput"]) if res is not None else float("nan"),
                                  "started_unix": run_started(res)}
                done.append((row, res, spec))
                _say(progress, f"validate: {policy} at {fraction:g} x saturation ({spec.rate:.3g} req/s), "
                               f"trace {seed}, replay {replay}: live goodput {row['live_goodput']:.3f}"
                               + ("" if res else " (invalid: left out)"))
                if on_run is not None:
                    on_run(row)
        training: list[tuple[RunSpec, pd.DataFrame]] = []
        moved: dict[str, Any] | None = None
        if train_run is not None:  # the training trace again: how far the machine moved over the judged runs
            end, _ = live_run(train_run[0], out / "training-end", cfg.redo, progress)
            trained += [("after the last pass", end)] if end is not None else []
            moved = drift(train_run[0], trained)
            training = [(train_run[0], res.journal()) for _, res in trained]
            _say(progress, "validate: " + drift_text(moved))
        if cfg.in_situ and train_run is not None:
            variants["in-situ"], fit = fit_in_situ(train_run[1].journal(), train_run[0], physics)
            physics_from["in_situ"] = fit
            write_json_atomic(out / "physics-in-situ.json", variants["in-situ"].to_dict(slo=True))
            _say(progress, f"validate: in-situ fit on trace {train_run[0].seed} at {train_run[0].rate:.3g} req/s: "
                           f"decode step x {fit['decode_factor']:.3f}, serving path "
                           f"{1e3 * fit['ttft_offset_s']:+.1f} ms TTFT")
        if probes is not None:
            later = [p for _, res in trained[1:] for p in host_points(res.run_dir)]  # the first is in probes
            hops = [p for _, res in trained[1:] for p in hop_points(res.run_dir)]
            variants["shared-host"], host_record = _shared_host(probes, physics, training, progress, later, hops)
            physics_from["shared_host"] = host_record
            write_json_atomic(out / "physics-shared-host.json", variants["shared-host"].to_dict(slo=True))
        primary = "shared-host" if cfg.shared_host else "in-situ" if cfg.in_situ else physics_from["source"]
        speed = None
        if cfg.track_drift and train_run is not None:  # mechanism machine_drift on the verdict's physics
            speed = fit_speed(primary, train_run[0], trained, variants[primary])
            physics_from["drift"] = speed
            _say(progress, "validate: " + speed_text(speed))
            # as a physics of its own: the machine at the live saturation search's moment, read from the search's
            # own probes below the collapse (the training trace only runs after it); the first training run's
            # speed when the search was not live
            at_search, engines_at_search = speed_at(speed, math.nan), speed_at(speed, math.nan, "engines_factor")
            if sat_how.get("probes"):
                try:
                    found = search_speed(primary, search_probes(cfg, base, sat_how, out), variants[primary],
                                         collapsing_from(sat_how))
                except ValueError as exc:
                    _say(progress, f"validate: {exc}: the saturation simulated at the first training run's speed")
                else:
                    at_search, engines_at_search = search_factor(found), search_factor(found, "engines_factor")
                    physics_from["drift_at_search"] = found
                    _say(progress, f"validate: the machine's speed at the live saturation search (its probes "
                                   f"below the collapse, median TPOT over their twins'): x {at_search:.3f} ("
                                   + ", ".join(f"{p['label']}: x {p['factor']:.3f}" for p in found["points"]) + ")")
            # the whole machine at its speed (the verdict), and its engines alone (variant drift-engines, beside it)
            variants["drift-tracked"] = at_speed(variants[primary], at_search)
            variants["drift-engines"] = at_speed(variants[primary], engines_at_search, serving_path=False)
            primary = "drift-tracked"
        if primary != physics_from["source"]:  # where the verdict's physics puts saturation, searched the same way
            sat_how["simulator_rate_by_variant"] = {physics_from["source"]: sat_how["simulator_rate"]}
            for name, phys in variants.items():
                if name != physics_from["source"]:
                    sat_how["simulator_rate_by_variant"][name] = simulated_saturation(base, cfg, phys).rate
            sat_how["simulator_rate"] = sat_how["simulator_rate_by_variant"][primary]
            _say(progress, f"validate: the simulator ({primary}) puts saturation at {sat_how['simulator_rate']:.3g} "
                           f"req/s (the cluster's: {sat:.3g})")
        # every live run against its twin under each physics (fitted only now: the training trace after the
        # judged runs is one of the fit's; no judged trace ever is)
        run_rows: list[RunRow] = []
        pair_frames: list[pd.DataFrame] = []
        gaps: list[dict[str, Any]] = []
        twins: dict[str, dict[str, pd.DataFrame]] = {}
        for row, res, spec in done:
            sims = twins.setdefault(spec.run_id, {})
            for name, phys in variants.items():
                if name not in sims and name not in DRIFT_VARIANTS:
                    sims[name] = twin_journal(spec, phys)
                    write_frame(sims[name], out / "sim" / name / f"{spec.run_id}.jsonl")
            mine = dict(sims)
            if speed is not None:  # each replay at its own moment: a twin per run, not per trace
                source = variants[speed["variant"]]
                for name, whole in DRIFT_VARIANTS.items():
                    factor = speed_at(speed, row["started_unix"], "factor" if whole else "engines_factor")
                    mine[name] = twin_journal(spec, at_speed(source, factor, serving_path=whole))
                    write_frame(mine[name], out / "sim" / name / f"{spec.run_id}-r{row['replay']}.jsonl")
            keys = {k: row[k] for k in ("fraction", "rate", "policy", "seed", "replay")}
            live = res.journal() if res is not None else None
            for name, sim in mine.items():
                run_rows.append({**row, "variant": name, "sim_goodput": float(summarize(sim, slo)["goodput"])})
                if live is not None:
                    pair_frames.append(accuracy.pair(live, sim, slo).assign(**keys, variant=name))
                    gaps.append({**keys, "variant": name, **accuracy.unpaired(live, sim)})
    runs = pd.DataFrame(run_rows)
    pairs = pd.concat(pair_frames, ignore_index=True) if pair_frames else pd.DataFrame()
    tables, orders, trusted = [], [], {}
    for name in variants:
        r = runs[runs["variant"] == name] if len(runs) else runs
        p = pairs[pairs["variant"] == name] if len(pairs) else pairs
        t = accuracy.level_table(p, r, cfg.budget) if len(p) else pd.DataFrame()
        tables.append(t.assign(variant=name) if len(t) else t)
        o = accuracy.ordering(r, list(cfg.policies)) if len(r) else pd.DataFrame()
        orders.append(o.assign(variant=name) if len(o) else o)
        trusted[name] = accuracy.trusted_up_to(t)
    table = pd.concat(tables, ignore_index=True)
    order = pd.concat(orders, ignore_index=True)
    live_rows = runs[runs["variant"] == primary] if len(runs) else runs
    record: ValidationRecord = {
        "config": cfg.to_dict(), "cluster": cfg.cluster, "backend": cfg.backend_used, "workload": cfg.workload,
        "calibration": cal_from, "physics": physics_from, "saturation_rate": sat, "saturation": sat_how,
        "slo": {"ttft_tight_s": slo.ttft_tight_s, "tpot_tight_s": slo.tpot_tight_s, "loose_factor": slo.loose_factor},
        "budget": {"ttft": cfg.budget.ttft, "tpot": cfg.budget.tpot, "goodput": cfg.budget.goodput},
        "variant": primary, "variants": list(variants), "trusted_up_to": trusted[primary],
        "trusted_up_to_by_variant": trusted, "versions": versions(), "commit": commit_id(), "started_unix": started,
        "wall_s": round(time.time() - started, 1), "runs": len(live_rows),
        "invalid_runs": int((~live_rows["valid"].astype(bool)).sum()) if len(live_rows) else 0,
        "unpaired": ({k: int(v) for k, v in pd.DataFrame(gaps).query("variant == @primary")[["live_only", "sim_only"]]
                      .sum().items()} if gaps else {}),
        "length_cap": _length_cap(out),
        "replays_minutes_apart": replay_spacing(live_rows),
    }
    if moved is not None:
        record["drift"] = moved
    if len(pairs):
        record["residuals"] = {name: residual_patterns(pairs[pairs["variant"] == name]) for name in variants}
    write_outputs(out, record, table, order, runs, pairs)
    mine = table[table["variant"] == primary].reset_index(drop=True) if len(table) else table
    return Validation(out, mine, order[order["variant"] == primary] if len(order) else order, live_rows,
                      pairs[pairs["variant"] == primary] if len(pairs) else pairs, trusted[primary], record)


def _length_cap(out: Path) -> dict[str, Any] | None:
    """The live runs' ``length_cap`` (requests cut to the engines' context), from one manifest."""
    for manifest in sorted((out / "live").glob("replay-*/*/manifest.json")):
        cap = json.loads(manifest.read_text()).get("length_cap")
        if cap:
            return {k: cap[k] for k in ("max_model_len", "rule") if k in cap}
    return None


def residual_patterns(pairs: pd.DataFrame) -> dict[str, Any]:
    """Where the errors come from: the median signed TTFT / TPOT / e2e error by prompt length, by output
    length and by load level."""
    out: dict[str, Any] = {}
    for metric in accuracy.METRICS:
        name = metric.removesuffix("_s")
        out[f"{name}_by_prompt"] = accuracy.error_by(pairs, "prompt_tokens", PROMPT_BINS, metric).astype(
            {"bin": str}).to_dict("records")
        out[f"{name}_by_output"] = accuracy.error_by(pairs, "output_tokens", OUTPUT_BINS, metric).astype(
            {"bin": str}).to_dict("records")
        by_load = pairs.groupby("fraction")[f"err_{metric}"].median()
        out[f"{name}_bias_by_load"] = {f"{k:g}": float(v) for k, v in by_load.items()}
    return out


def write_outputs(out: Path, record: ValidationRecord, table: pd.DataFrame, order: pd.DataFrame,
                  runs: pd.DataFrame, pairs: pd.DataFrame) -> None:
    """The validation's files (see the module docstring) and its figures (per request: the primary variant;
    error against load: every variant)."""
    write_json_atomic(out / "validation.json", record)
    table.to_csv(out / "validation.csv", index=False)
    order.to_csv(out / "ordering.csv", index=False)
    runs.to_csv(out / "runs.csv", index=False)
    if len(pairs):
        pairs.to_parquet(out / "requests.parquet", index=False)
        frames = []
        for name, mine in pairs.groupby("variant", sort=False):
            for metric in accuracy.METRICS:
                for col, bins in (("prompt_tokens", PROMPT_BINS), ("output_tokens", OUTPUT_BINS)):
                    frames.append(accuracy.error_by(mine, col, bins, metric).assign(metric=metric, by=col,
                                                                                   variant=name))
        pd.concat(frames, ignore_index=True).to_csv(out / "residuals.csv", index=False)
        from repro.validation.figures import error_vs_load, predicted_vs_measured

        fig = predicted_vs_measured(pairs[pairs["variant"] == record["variant"]])
        fig.savefig(out / "predicted_vs_measured.png", dpi=110, bbox_inches="tight")
        if len(table):
            fig = error_vs_load(table, record["budget"])
            fig.savefig(out / "error_vs_load.png", dpi=110, bbox_inches="tight")
    stages = decomposition.stage_table(pairs) if len(pairs) else pd.DataFrame()
    live_runs = runs[runs["variant"] == record["variant"]] if len(runs) else runs
    account = decomposition.account_table(out, live_runs) if len(live_runs) else pd.DataFrame()
    probes = decomposition.probe_account(out / "saturation")
    stages.to_csv(out / "stages.csv", index=False)
    account.to_csv(out / "account.csv", index=False)
    probes.to_csv(out / "saturation_account.csv", index=False)
    host_fit = record["physics"].get("shared_host")
    (out / "validation.md").write_text(markdown(record, table, order) + "\n".join(
        ["", *decomposition.markdown(stages, account, record["variant"]), *decomposition.probe_markdown(probes),
         *(["", "#### The shared host", "", *host_markdown(host_fit, host_fit.get("admission"), host_fit.get("steal"),
                                                            host_fit.get("hop"))] if host_fit else [])]))


def _pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f} %"


def _abs_pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"


def _pct_interval(v: float, lo: float, hi: float, sign: str = "") -> str:
    """``12.3 % [4.5, 20.1]`` (percent of fractions; ``sign='+'``: signed; the value alone without an interval)."""
    if math.isnan(v):
        return "n/a"
    f = f"{sign}.1f"
    return f"{100 * v:{f}} %" + ("" if math.isnan(lo) or math.isnan(hi) else f" [{100 * lo:{f}}, {100 * hi:{f}}]")


def physics_text(physics: PhysicsRecord) -> str:
    """Where the simulator's engine timing came from, in words (``validation.json``'s ``physics``)."""
    parts = ([f"the hardware profile {physics['profile']}"] if physics["source"] == "profile" else
             [f"calibration {physics.get('calibration')}"])
    settings = physics.get("engine_settings") or {}
    if settings:
        parts.append(f"chunked-prefill budget {settings['max_num_batched_tokens']} tokens, block "
                     f"{settings['block_size']}, {settings['max_num_seqs']} sequences")
    curve = physics.get("prefill_curve")
    if curve:
        parts.append(f"prefill curve {1e3 * curve['base_s']:.2f} ms + {1e6 * curve['per_token_s']:.2f} us/token + "
                     f"{1e9 * curve['per_token2_s']:.2f} ns/token^2 (fit residual <= "
                     f"{100 * curve['max_rel_residual']:.1f} %)")
    path = physics.get("serving_path_s")
    if path:
        parts.append(f"API servers' time {1e3 * path['total']:.1f} ms per request on the KV hop")
    fit = physics.get("in_situ")
    if fit:
        parts.append(f"in situ (variant in-situ): fitted on a training trace (seed {fit['seed']}, {fit['rate']:.3g} "
                     f"req/s, not judged): decode step x {fit['decode_factor']:.3f}, serving path "
                     f"{1e3 * fit['ttft_offset_s']:+.1f} ms")
    host = physics.get("shared_host")
    if host:
        parts.append(f"shared host (variant shared-host, mechanism shared_host): {host['cores']} cores, the "
                     f"serving path's CPU measured at {host['base_cores']:.3f} cores + "
                     f"{1e3 * host['per_request_s']:.1f} ms per request + {1e6 * host['per_token_s']:.0f} us per "
                     f"token + {1e6 * host['per_step_s']:.0f} us per decode step, steal share "
                     f"{host['steal']['share']:.3g} (fitted on the TPOT of the training runs and the probes)"
                     + (f"; admission through the decode API server's event loop {admission_formula(adm)} "
                        f"(mechanism stream_admission, R^2 {adm['r2']:.2f})"
                        if (adm := host.get("admission") or {}).get("loop_s") else
                        f"; admission behind the streams {1e3 * adm['per_stream_s']:.3f} ms x "
                        f"streams^{adm['exponent']:.2f} (mechanism stream_admission)" if adm.get("per_stream_s")
                        else "")
                     + f"; its light-load TTFT {1e3 * host['serving_path']['ttft_offset_s']:+.1f} ms (training "
                       f"trace seed {host['serving_path']['seed']}, not judged)")
    speed = physics.get("drift")
    if speed:
        at = physics.get("drift_at_search")
        parts.append(speed_text(speed) + (f"; at the live saturation search x {search_factor(at):.3f} (its "
                                          f"{len(at['points'])} probes below the collapse)" if at else ""))
    return ", ".join(parts)


def _other_rates(record: ValidationRecord) -> str:
    by = record["saturation"].get("simulator_rate_by_variant") or {}
    others = [f"{name} {rate:.3g}" for name, rate in by.items() if name != record["variant"]]
    return f"; the other physics: {', '.join(others)}" if others else ""


def markdown(record: ValidationRecord, table: pd.DataFrame, order: pd.DataFrame) -> str:
    """The validation as Markdown: conditions, then per physics variant (the primary first) the level table,
    the load trusted up to and the ordering."""
    b = record["budget"]
    lines = [f"### Simulator validation on {record['cluster']} ({record['backend']})", "",
             f"Workload {record['workload']}; saturation {record['saturation_rate']:.3g} req/s "
             f"({record['saturation']['how']}; the simulator ({record['variant']}) puts it at "
             f"{record['saturation']['simulator_rate']:.3g} req/s{_other_rates(record)}); "
             f"physics: {physics_text(record['physics'])}; "
             f"{record['runs']} live runs ({record['invalid_runs']} invalid, left out); commit "
             f"{record.get('commit', '?')}.", "",
             f"Budget: median TTFT and TPOT error <= {b['ttft']:.0%} / {b['tpot']:.0%}, goodput within "
             f"+-{b['goodput']:g}. Errors: mean over traces of each trace's median |sim / live - 1| "
             f"[95 % t interval over traces]; bias: the same of the signed median (negative: the simulator is "
             f"faster; the machine's noise averages out of it); noise: the machine's own median per-request "
             f"spread between two live runs of one trace with the same placements (replays, or policies that "
             f"placed alike): per-request errors below it cannot be told from noise here; within noise: both "
             f"median errors at most the larger of their budget and that noise (no goodput; never the load "
             f"trusted up to).", ""]
    apart = record.get("replays_minutes_apart", float("nan"))
    said = []
    if apart == apart:  # not NaN
        said.append(f"Replays run in passes (replay r of every run in pass r): two replays of one trace lie "
                    f"{apart:.1f} min apart on average, so the noise floor holds what the machine moves in that time.")
    if "drift" in record:
        said.append(f"The machine's drift: {drift_text(record['drift'])}.")
    if said:
        lines += [" ".join(said), ""]
    if table.empty:
        return "\n".join(lines + ["No valid live run: nothing to compare."])
    names = [record["variant"]] + [v for v in record.get("variants", []) if v != record["variant"]]
    for name in names:
        t = table[table["variant"] == name] if "variant" in table.columns else table
        o = order[order["variant"] == name] if "variant" in order.columns else order
        lines += [f"#### Physics: {name}" + (" (the validation's verdict)" if name == record["variant"] else ""), "",
                  "| load | rate req/s | policy | traces | requests | TTFT err | TPOT err | e2e err | TTFT bias | "
                  "TPOT bias | noise TTFT/TPOT | goodput live | sim | sim - live | within budget | within noise |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in t.itertuples():
            lines.append(
                f"| {r.fraction:g} | {r.rate:.3g} | {r.policy} | {r.traces} | {r.requests} | "
                f"{_pct_interval(r.ttft_err, r.ttft_err_lo, r.ttft_err_hi)} | "
                f"{_pct_interval(r.tpot_err, r.tpot_err_lo, r.tpot_err_hi)} | "
                f"{_abs_pct(r.e2e_err)} | {_pct_interval(r.ttft_bias, r.ttft_bias_lo, r.ttft_bias_hi, '+')} | "
                f"{_pct_interval(r.tpot_bias, r.tpot_bias_lo, r.tpot_bias_hi, '+')} | "
                f"{_abs_pct(r.ttft_noise)} / {_abs_pct(r.tpot_noise)} | {r.live_goodput:.3f} | {r.sim_goodput:.3f} | "
                f"{accuracy.estimate_text(r.goodput_diff, r.goodput_diff_lo, r.goodput_diff_hi)} | "
                f"{'yes' if r.within_budget else 'no'} | "
                f"{'yes' if getattr(r, 'within_noise', False) else 'no'} |")
        trusted = record.get("trusted_up_to_by_variant", {}).get(name, record["trusted_up_to"])
        rate = trusted * record["saturation_rate"]
        lines += ["", (f"**Within budget up to {trusted:g} x saturation** ({rate:.3g} req/s)."
                       if trusted > 0 else "**Not within budget even at the lightest load.**")]
        if len(o):
            lines += ["", "Policies' ordering (goodput difference per trace, live [t interval] vs simulated):", ""]
            for r in o.itertuples():
                lines.append(f"- {r.fraction:g} x saturation: {r.policy} - {r.versus}: live "
                             f"{accuracy.estimate_text(r.live_diff, r.live_diff_lo, r.live_diff_hi)}, sim "
                             f"{r.sim_diff:+.3f}: {r.agreement}")
        lines.append("")
    return "\n".join(lines)
