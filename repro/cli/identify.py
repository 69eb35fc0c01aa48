"""`repro identify`: fit a testbed's unstated constants to measured baseline numbers (`repro.identify`)."""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repro.cli.common import RUNNING
from repro.engine.mechanisms import CATALOGUE as MECHANISMS
from repro.engine.mechanisms import resolve as resolve_mechanisms
from repro.errors import ConfigError
from repro.identify.space import CATALOGUE, PAPER_SPACE, mechanism_space
from repro.paths import REPO_ROOT, user_path

PAPER_TARGETS = "data/identify/paper_baselines.csv"
PAPER_PREDICTIONS = "data/identify/paper_predictions.csv"
PROFILE_DIR = "data/hardware"
ESTIMATED_PROFILE = "a40-qwen2.5-3b"
IDENTIFIED_PROFILE = "a40-identified"

WHAT, SEARCH, MEASURE, OUTPUT, EXECUTION = ("What to fit", "Search", "Measuring on a cluster", "Output", "Execution")
"""The --help panels of `repro identify`'s options."""

RELATIVE = ("a relative path is read from the current directory (from the repository root only if it is not "
            "there); the default is the repository's")


def _rows_in(rel: str) -> str:
    """``N rows in REL``: a shipped targets table's size for --help (counted here, without pandas)."""
    try:
        with open(REPO_ROOT / rel, newline="") as f:
            lines = [line for line in f if line.strip() and not line.lstrip().startswith("#")]
        return f"{max(sum(1 for _ in csv.reader(lines)) - 1, 0)} rows in {rel}"
    except OSError:
        return rel


PAPER_ROWS = _rows_in(PAPER_TARGETS)
DEFAULT_PARAMS = ", ".join(p.name for p in PAPER_SPACE)
OTHER_PARAMS = ", ".join(p.name for p in CATALOGUE if p not in PAPER_SPACE)


def _ranges(assignments: list[str]) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for a in assignments:
        name, _, rng = a.partition("=")
        lo, _, hi = rng.partition(":")
        try:
            out[name.strip()] = (float(lo), float(hi))
        except ValueError:
            raise ConfigError(f"identify: --range {a!r} must be NAME=LO:HI (numbers in the parameter's unit)") from None
    return out


def _stated(assignments: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in assignments:
        name, _, value = a.partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = math.nan
        if not name.strip() or not math.isfinite(rate) or rate <= 0:
            raise ConfigError(f"identify: --stated-rate {a!r} must be NAME=REQ_PER_S (a rate > 0)")
        out[name.strip()] = rate
    return out


def identify_cli(
    targets: Path = typer.Option(Path(PAPER_TARGETS), "--targets", rich_help_panel=WHAT,
                                 help=f"the measured numbers to fit (CSV; repro.identify.targets; baselines only, "
                                      f"never the policy predicted). Default: the paper's baselines, "
                                      f"{PAPER_ROWS}; {RELATIVE}"),
    profile: str = typer.Option(ESTIMATED_PROFILE, "--profile", rich_help_panel=WHAT,
                                help="the base hardware profile (its stated constants stay)"),
    params: str = typer.Option("", "--params", rich_help_panel=WHAT,
                               help=f"comma-separated parameters to fit. Default: the paper's space "
                                    f"(repro.identify.space.PAPER_SPACE): {DEFAULT_PARAMS}. Also allowed: "
                                    f"{OTHER_PARAMS}"),
    mechanisms: str = typer.Option("", "--mechanisms", rich_help_panel=WHAT,
                                   help="comma-separated mechanisms of the model (repro.engine.mechanisms: "
                                        f"{', '.join(m.name for m in MECHANISMS)}): what each fixes applies to "
                                        "every run, and the parameters each frees join the fit (default: none, "
                                        "the base model)"),
    range_: list[str] = typer.Option([], "--range", rich_help_panel=WHAT,
                                     help="a parameter's prior range, NAME=LO:HI (repeatable)"),
    physical_bounds: bool = typer.Option(True, "--physical-bounds/--no-physical-bounds", rich_help_panel=WHAT,
                                         help="refuse priors beyond the A40 and Qwen2.5-3B's physical bounds "
                                              "(off for other hardware)"),
    stated_rate: list[str] = typer.Option(["rate_mixed=24.0"], "--stated-rate", rich_help_panel=WHAT,
                                          help="a rate the measurements state, NAME=REQ_PER_S (repeatable; the paper: "
                                               "mixed 2p4d at 24.0 req/s, §VI): fills the rate @NAME of the training "
                                               "rows and of the predictions on every identified testbed; a stated "
                                               "rate is not fitted (naming it in --params too is an error)"),
    popsize: int = typer.Option(6, "--popsize", min=2, max=50, rich_help_panel=SEARCH,
                                help="differential evolution: vectors per parameter per generation"),
    generations: int = typer.Option(20, "--generations", min=0, max=500, rich_help_panel=SEARCH,
                                    help="generations after the initial one (20: the shipped fit)"),
    seed: int = typer.Option(0, "--seed", min=0, rich_help_panel=SEARCH,
                             help="the search's seed (the same seed, the same fit)"),
    ensemble_size: int = typer.Option(24, "--ensemble-size", min=2, max=500, rich_help_panel=SEARCH,
                                      help="plausible testbeds kept"),
    measure_on: str = typer.Option("", "--measure-on", rich_help_panel=MEASURE,
                                   help="emulated | vllm: first measure every row of --targets on that backend (the "
                                        "engines of --truth-profile, or of --cluster's file) and fit to those values; "
                                        "the measured table is written beside the report"),
    truth_profile: str = typer.Option("", "--truth-profile", rich_help_panel=MEASURE,
                                      help="with --measure-on emulated: the profile the emulated engines run "
                                           "(default --profile)"),
    cluster: str = typer.Option("", "--cluster", rich_help_panel=MEASURE,
                                help="with --measure-on vllm: the cluster file (or a name in data/clusters/"
                                     + RUNNING + f"); {RELATIVE}"),
    name: str = typer.Option(IDENTIFIED_PROFILE, "--name", rich_help_panel=OUTPUT,
                             help="the identified testbed: its profile NAME.json in --profile-dir and its report "
                                  "folder data/identify/NAME/. An existing profile or a non-empty report folder is "
                                  "never replaced without --overwrite (the default name is the shipped testbed's)"),
    overwrite: bool = typer.Option(False, "--overwrite", rich_help_panel=OUTPUT,
                                   help="replace an existing profile NAME.json and the files of a non-empty report "
                                        "folder (without it: refused, give --name NEW)"),
    profile_dir: Path = typer.Option(Path(PROFILE_DIR), "--profile-dir", rich_help_panel=OUTPUT,
                                     help=f"where the profile is written; {RELATIVE}"),
    out_dir_opt: Path | None = typer.Option(None, "--out-dir", rich_help_panel=OUTPUT,
                                            help=f"the report folder (default data/identify/NAME); {RELATIVE}"),
    report_only: bool = typer.Option(False, "--report-only", rich_help_panel=OUTPUT,
                                     help="rewrite the profile and report from the report folder's history.csv "
                                          "without searching again; it may overwrite that same name's profile and "
                                          "report (they are rewritten from their own history) without --overwrite"),
    predictions: str = typer.Option(PAPER_PREDICTIONS, "--predictions", rich_help_panel=OUTPUT,
                                    help=f"rows to predict across the ensemble (CSV; '' for none); {RELATIVE}"),
    reference: str = typer.Option(ESTIMATED_PROFILE, "--reference", rich_help_panel=OUTPUT,
                                  help="a profile to predict the same rows on, for comparison ('' for none)"),
    executor: str = typer.Option("", "--executor", rich_help_panel=EXECUTION,
                                 help="local | serial | ray (default $REPRO_EXECUTOR or local)"),
    jobs: int = typer.Option(0, "--jobs", min=0, rich_help_panel=EXECUTION, help="worker processes (0: one per core)"),
    ray_address: str = typer.Option("", "--ray-address", rich_help_panel=EXECUTION,
                                    help="a Ray cluster's address (implies --executor ray)"),
) -> None:
    """Identify a testbed: fit the constants nobody stated (prefill per token, transfer bandwidth and
    latency, per-sequence decode cost, the workloads' unstated lengths and burstiness, rates the
    measurements do not state) to a table of measured baseline numbers, on the simulator, in parallel.
    Writes the testbed's hardware profile (every fitted number says what it was identified from) and a
    fit report, then predicts the rows it was not fitted on across the ensemble of plausible testbeds."""
    from repro.experiment.executor import make_executor, settings_from_env
    from repro.identify import predictions as pred
    from repro.identify import testbed
    from repro.identify.fit import Problem, identify
    from repro.identify.space import Parameter, space_by_name
    from repro.identify.targets import check_training, load_targets

    targets_path = user_path(targets, default=PAPER_TARGETS)
    rows = tuple(load_targets(targets_path))
    if measure_on and measure_on not in ("emulated", "vllm"):
        raise ConfigError(f"identify: --measure-on {measure_on!r}; allowed: emulated, vllm")
    if measure_on == "vllm" and not cluster:
        raise ConfigError("identify: --measure-on vllm needs --cluster FILE (the engines to measure)")
    if cluster and user_path(cluster).exists():  # a file; a bare name stays a name in data/clusters/
        cluster = str(user_path(cluster))
    mechs = resolve_mechanisms([n.strip() for n in mechanisms.split(",") if n.strip()])
    names = ([n.strip() for n in params.split(",") if n.strip()]
             or [p.name for p in (*PAPER_SPACE, *mechanism_space(mechs))])
    space = list(space_by_name(names))
    for pname, (lo, hi) in _ranges(range_).items():
        idx = [i for i, p in enumerate(space) if p.name == pname]
        if not idx:
            raise ConfigError(f"identify: --range names {pname!r}, which is not fitted; fitted: {names}")
        p = space[idx[0]]
        space[idx[0]] = Parameter(p.name, p.kind, lo, hi, p.unit, f"given on the command line (--range {pname})", p.log)
    stated = _stated(stated_rate)
    problem = Problem(profile, rows, tuple(space), physical_bounds=physical_bounds, stated=stated,
                      mechanisms=tuple(m.name for m in mechs))
    pred_rows = load_targets(user_path(predictions, default=PAPER_PREDICTIONS)) if predictions else []
    clash = sorted({t.key for t in rows} & {t.key for t in pred_rows})
    if clash:
        raise ConfigError(f"identify: rows both fitted and predicted: {clash}")
    console = Console()
    shipped = targets_path.resolve() == (REPO_ROOT / PAPER_TARGETS).resolve()
    for warning in check_training(rows, pred_rows, origin=str(targets_path), shipped=shipped):
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)
    profile_dir = user_path(profile_dir, default=PROFILE_DIR)
    out_dir = user_path(out_dir_opt) if out_dir_opt else testbed.report_dir(name)
    if not (report_only or overwrite):
        _refuse_overwrite(profile_dir / f"{name}.json", out_dir)
    kind, env_jobs, address = settings_from_env()
    ex = make_executor("ray" if ray_address else (executor or kind), jobs or env_jobs, ray_address or address)
    started = time.monotonic()
    before: dict[str, object] = {}
    try:
        if measure_on and not report_only:
            from repro.identify.targets import measure, to_frame

            out_dir.mkdir(parents=True, exist_ok=True)
            measured, runs = measure(rows, backend=measure_on, profile=truth_profile or profile,
                                     cluster=cluster or None, rates=stated, runs_dir=out_dir / "runs")
            to_frame(measured).to_csv(out_dir / "measured_targets.csv", index=False)
            runs.to_csv(out_dir / "measured_runs.csv", index=False)
            rows = tuple(measured)
            problem = Problem(profile, rows, tuple(space), physical_bounds=physical_bounds, stated=stated,
                              mechanisms=tuple(m.name for m in mechs))
            console.print(f"measured {len(rows)} numbers on {measure_on} ({len(runs)} runs): "
                          f"{out_dir / 'measured_targets.csv'}")
        if report_only:
            hist = out_dir / "history.csv"
            if not hist.exists():
                raise ConfigError(f"identify: --report-only needs {hist} (run repro identify without it first)")
            ident = testbed.load_history(problem, hist)
            fit_json = out_dir / "fit.json"  # the search's own wall time and executor, as measured when it ran
            before = json.loads(fit_json.read_text()) if fit_json.exists() else {}
            wall = float(before.get("fit_wall_s", math.nan))
        else:
            console.print(f"identify: {len(space)} parameters, {len(rows)} measured numbers, on {ex.describe()}")
            journal = out_dir / f"search-{problem.fingerprint()}.jsonl"
            if journal.exists():
                console.print(f"  resuming from {journal}: its testbeds are read back, not simulated again")
            ident = identify(problem, executor=ex, popsize=popsize, generations=generations, seed=seed,
                             progress=lambda n, best: console.print(f"  {n} testbeds simulated, best chi2 {best:.1f}"),
                             journal=journal)
            wall = time.monotonic() - started
        inputs = tuple(f"saturation_rate_{n.removeprefix('rate_')}" for n in stated)
        searched_on = before.get("executor", ex.describe()) if report_only else ex.describe()
        paths = testbed.write(ident, name, size=ensemble_size, profile_dir=profile_dir, out_dir=out_dir,
                              extra={"fit_wall_s": wall, "executor": searched_on}, inputs=inputs,
                              stated_rates=stated)
        _show_fit(console, ident, ensemble_size)
        if pred_rows:
            ens = ident.ensemble(ensemble_size)
            t0 = time.monotonic()
            long = pred.predict(ens, space, profile, pred_rows, stated=stated, reference=reference or None,
                                executor=ex, fixed=problem.fixed)
            table = pred.robustness(pred_rows, long, ens, space)
            long.to_csv(out_dir / "predictions.csv", index=False)
            table.to_csv(out_dir / "robustness.csv", index=False)
            _show_predictions(console, table, time.monotonic() - t0)
            ref = long[(long["member"] == "reference") & (long["key"] == "rate:rate_mixed")]
            peaks = pred.kv_peaks(ident.best_settings(), profile, stated, reference=reference,
                                  reference_rate=float(ref["value"].iloc[0]) if reference and len(ref) else None)
            if peaks is not None:
                peaks.to_csv(out_dir / "kv_peak.csv", index=False)
                console.print(peaks.to_string(index=False))
    finally:
        ex.close()
    console.print(f"profile: {paths['profile']}\nreport: {out_dir}/")


def _refuse_overwrite(profile_path: Path, out_dir: Path) -> None:
    """A `ConfigError` when the profile ``profile_path`` exists or the report folder ``out_dir`` holds files
    (an interrupted search's journal, ``search-*.jsonl``, aside: a rerun resumes it): `repro identify`
    replaces neither without ``--overwrite``."""
    taken = [str(profile_path)] if profile_path.exists() else []
    if out_dir.is_dir() and any(not f.name.startswith("search-") for f in out_dir.iterdir()):
        taken.append(f"{out_dir}/ (not empty)")
    if taken:
        raise ConfigError(f"identify: refusing to overwrite {' and '.join(taken)}; give --name NEW for a new "
                          "testbed, or --overwrite to replace it")


def _show_fit(console: Console, ident, size: int) -> None:  # type: ignore[no-untyped-def]
    from repro.identify.fit import status_words

    pars = ident.parameters(size)
    t = Table(title=f"identified constants (ensemble of {len(ident.ensemble(size))}; chi2 {ident.best['chi2']:.1f} "
                    f"on {ident.dof} dof)")
    for c in ("parameter", "best", "ensemble", "prior", "status", "physical bound"):
        t.add_column(c)
    for r in pars.itertuples():
        bound = "" if math.isnan(r.bound_lo) else f"[{r.bound_lo:.3g}, {r.bound_hi:.3g}]"
        t.add_row(r.parameter, f"{r.best:.4g}", f"[{r.ensemble_lo:.3g}, {r.ensemble_hi:.3g}]",
                  f"[{r.prior_lo:.3g}, {r.prior_hi:.3g}]", status_words(r.status, r.cut), bound)
    console.print(t)
    res = ident.residuals(size)
    t = Table(title="training residuals (simulated at the best fit - measured; times: log ratio)")
    for c in ("row", "measured", "simulated", "residual", "in sd"):
        t.add_column(c)
    for r in res.itertuples():
        t.add_row(r.key, f"{r.measured:.3g}", f"{r.simulated:.3g}", f"{r.residual:+.3f}", f"{r.residual_sd:+.1f}")
    console.print(t)
    console.print(ident.fit_quality(), highlight=False, soft_wrap=True)


def _show_predictions(console: Console, table, wall: float) -> None:  # type: ignore[no-untyped-def]
    t = Table(title=f"predictions (never fitted) across the ensemble ({wall:.0f} s)")
    for c in ("row", "paper", "best testbed", "ensemble", "holds", "robustness", "reference profile"):
        t.add_column(c)
    for r in table.itertuples():
        t.add_row(r.key, f"{r.paper:.3g}", f"{r.predicted:.3g}", f"[{r.ensemble_lo:.3g}, {r.ensemble_hi:.3g}]",
                  f"{r.holds}/{r.testbeds}", r.robustness,
                  f"{r.reference:.3g} ({'holds' if r.reference_holds else 'no'})")
    console.print(t)
