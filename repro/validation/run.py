"""A whole validation on one cluster (`repro validate`): the calibration (the cluster file's, or measured
now), the simulator's physics from it, the saturation rate (found on the calibrated simulator), then per
load level, policy, trace and replay one live run (`repro.experiment.runner.run`: the real proxy and load
generator, validity-checked) and its simulated twin (`repro.validation.twin`), paired request by request.
The judged runs go in passes (replay r of every level, policy and trace in pass r), after the training run and
the host probes; the training trace runs again before each later pass (``training-pass-<r>``) and after the
last (``training-end``): the machine's drift, and a fit that meets it where the judged runs did. The physics
variants that are fitted are fitted after all of them, on the training runs and probes alone. Its parts:
`repro.validation.live_runs` (the cluster, the calibration, each live run), `repro.validation.saturation` (the load
levels' reference rate), `repro.validation.outputs` (the files below from the runs and twins, ``validation.md``).

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import pandas as pd

from repro.errors import ConfigError, RunInvalid
from repro.experiment.inputs import truth_cost_model
from repro.experiment.journal import write_frame
from repro.experiment.manifest import versions, write_json_atomic
from repro.experiment.metrics import summarize
from repro.experiment.spec import RunSpec
from repro.sources import commit_id
from repro.validation import accuracy
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
from repro.validation.host import admission_points as host_points
from repro.validation.host import hop_points
from repro.validation.live_runs import held_cluster, live_run, live_spec, say, validation_calibration
from repro.validation.outputs import ValidationRecord, length_cap, residual_patterns, write_outputs
from repro.validation.plan import ValidationConfig
from repro.validation.saturation import collapsing_from, saturation_rate, search_probes, simulated_saturation
from repro.validation.twin import fit_in_situ, twin_journal, validation_physics

if TYPE_CHECKING:
    from repro.engine.physics import Physics
    from repro.experiment.runner import RunResult


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
        spec = live_spec(cfg, cluster, cal_path, seed=cfg.training_seed, rate=rate, n_requests=cfg.n_requests(rate),
                         policy=cfg.policies[0]).replace(workload=workload)
        res, _ = live_run(spec, out / "host", cfg.redo, progress)
        if res is None and share >= host.SATURATION_SHARE:
            probes.left_out.append(spec.run_id)
            say(progress, f"validate: the shared-host probe at saturation ({spec.run_id}) left out: the machine "
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
    say(progress, f"validate: shared host: {probes.cores} cores, the serving path {fit['base_cores']:.3f} cores + "
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
    with held_cluster(cfg, out) as cluster:
        cal, cal_from, samples = validation_calibration(cfg, cluster, out, progress)
        cal_path = cal_from if cfg.calibrate else None
        base = live_spec(cfg, cluster, cal_path, policy="round_robin")
        topo = base.topology_parsed()
        physics, physics_from = validation_physics(cfg, topo, cal, samples)
        write_json_atomic(out / "physics.json", physics.to_dict(slo=True))
        sat, sat_how = saturation_rate(cfg, base, physics, out, progress)
        say(progress, f"validate: saturation {sat:.3g} req/s ({sat_how['how']}); levels "
                      f"{', '.join(f'{f:g}' for f in cfg.fractions)}")
        slo = truth_cost_model(base).slo
        variants = {physics_from["source"]: physics}  # "calibration" or "profile"
        train_run = None
        if cfg.in_situ or cfg.shared_host:
            rate = round(cfg.fractions[0] * sat, 6)
            train = live_spec(cfg, cluster, cal_path, seed=cfg.training_seed, rate=rate,
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
                   live_spec(cfg, cluster, cal_path, seed=seed, rate=round(fraction * sat, 6),
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
                say(progress, f"validate: {policy} at {fraction:g} x saturation ({spec.rate:.3g} req/s), "
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
            say(progress, "validate: " + drift_text(moved))
        if cfg.in_situ and train_run is not None:
            variants["in-situ"], fit = fit_in_situ(train_run[1].journal(), train_run[0], physics)
            physics_from["in_situ"] = fit
            write_json_atomic(out / "physics-in-situ.json", variants["in-situ"].to_dict(slo=True))
            say(progress, f"validate: in-situ fit on trace {train_run[0].seed} at {train_run[0].rate:.3g} req/s: "
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
            say(progress, "validate: " + speed_text(speed))
            # as a physics of its own: the machine at the live saturation search's moment, read from the search's
            # own probes below the collapse (the training trace only runs after it); the first training run's
            # speed when the search was not live
            at_search, engines_at_search = speed_at(speed, math.nan), speed_at(speed, math.nan, "engines_factor")
            if sat_how.get("probes"):
                try:
                    found = search_speed(primary, search_probes(cfg, base, sat_how, out), variants[primary],
                                         collapsing_from(sat_how))
                except ValueError as exc:
                    say(progress, f"validate: {exc}: the saturation simulated at the first training run's speed")
                else:
                    at_search, engines_at_search = search_factor(found), search_factor(found, "engines_factor")
                    physics_from["drift_at_search"] = found
                    say(progress, f"validate: the machine's speed at the live saturation search (its probes "
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
            say(progress, f"validate: the simulator ({primary}) puts saturation at {sat_how['simulator_rate']:.3g} "
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
        "length_cap": length_cap(out),
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

