"""`repro identify`: fit a testbed's unstated constants to measured baseline numbers (`repro.identify`)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from repro.errors import ConfigError
from repro.paths import resolve_dir

PAPER_TARGETS = "data/identify/paper_baselines.csv"
PAPER_PREDICTIONS = "data/identify/paper_predictions.csv"
ESTIMATED_PROFILE = "a40-qwen2.5-3b"
IDENTIFIED_PROFILE = "a40-identified"


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
    targets: Path = typer.Option(Path(PAPER_TARGETS), "--targets",
                                 help="the measured numbers (CSV; repro.identify.targets): the paper's baselines "
                                      "by default"),
    profile: str = typer.Option(ESTIMATED_PROFILE, "--profile",
                                help="the base hardware profile (its stated constants stay)"),
    name: str = typer.Option(IDENTIFIED_PROFILE, "--name",
                             help="the identified testbed: data/hardware/NAME.json and data/identify/NAME/"),
    params: str = typer.Option("", "--params",
                               help="comma-separated parameters to fit (default: all of the paper's space; "
                                    "repro.identify.space.PAPER_SPACE)"),
    range_: list[str] = typer.Option([], "--range", help="a parameter's prior range, NAME=LO:HI (repeatable)"),
    physical_bounds: bool = typer.Option(True, "--physical-bounds/--no-physical-bounds",
                                         help="refuse priors beyond the A40 and Qwen2.5-3B's physical bounds "
                                              "(off for other hardware)"),
    predictions: str = typer.Option(PAPER_PREDICTIONS, "--predictions",
                                    help="rows to predict across the ensemble (CSV; '' for none)"),
    stated_rate: list[str] = typer.Option(["rate_mixed=24.0"], "--stated-rate",
                                          help="a rate the measurements state, NAME=REQ_PER_S (repeatable; the paper: "
                                               "mixed 2p4d at 24.0 req/s, §VI): the predictions' @NAME on every "
                                               "identified testbed"),
    reference: str = typer.Option(ESTIMATED_PROFILE, "--reference",
                                  help="a profile to predict the same rows on, for comparison ('' for none)"),
    popsize: int = typer.Option(6, "--popsize", min=2, max=50, help="differential evolution: vectors per parameter "
                                                                    "per generation"),
    generations: int = typer.Option(20, "--generations", min=0, max=500,
                                    help="generations after the initial one (20: the shipped fit)"),
    seed: int = typer.Option(0, "--seed", min=0, help="the search's seed (the same seed, the same fit)"),
    ensemble_size: int = typer.Option(24, "--ensemble-size", min=2, max=500, help="plausible testbeds kept"),
    measure_on: str = typer.Option("", "--measure-on",
                                   help="emulated | vllm: first measure every row of --targets on that backend (the "
                                        "engines of --truth-profile, or of --cluster's file) and fit to those values; "
                                        "the measured table is written beside the report"),
    truth_profile: str = typer.Option("", "--truth-profile",
                                      help="with --measure-on emulated: the profile the emulated engines run "
                                           "(default --profile)"),
    cluster: str = typer.Option("", "--cluster", help="with --measure-on vllm: the cluster file"),
    profile_dir: Path = typer.Option(Path("data/hardware"), "--profile-dir", help="where the profile is written"),
    out_dir_opt: Path | None = typer.Option(None, "--out-dir", help="the report folder (default data/identify/NAME)"),
    report_only: bool = typer.Option(False, "--report-only",
                                     help="rewrite the profile and report from data/identify/NAME/history.csv "
                                          "without searching again"),
    executor: str = typer.Option("", "--executor", help="local | serial | ray (default $REPRO_EXECUTOR or local)"),
    jobs: int = typer.Option(0, "--jobs", min=0, help="worker processes (0: one per core)"),
    ray_address: str = typer.Option("", "--ray-address", help="a Ray cluster's address (implies --executor ray)"),
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
    from repro.identify.space import PAPER_SPACE, Parameter, space_by_name
    from repro.identify.targets import load_targets

    rows = tuple(load_targets(resolve_dir(targets)))
    if measure_on and measure_on not in ("emulated", "vllm"):
        raise ConfigError(f"identify: --measure-on {measure_on!r}; allowed: emulated, vllm")
    if measure_on == "vllm" and not cluster:
        raise ConfigError("identify: --measure-on vllm needs --cluster FILE (the engines to measure)")
    names = [n.strip() for n in params.split(",") if n.strip()] or [p.name for p in PAPER_SPACE]
    space = list(space_by_name(names))
    for pname, (lo, hi) in _ranges(range_).items():
        idx = [i for i, p in enumerate(space) if p.name == pname]
        if not idx:
            raise ConfigError(f"identify: --range names {pname!r}, which is not fitted; fitted: {names}")
        p = space[idx[0]]
        space[idx[0]] = Parameter(p.name, p.kind, lo, hi, p.unit, f"given on the command line (--range {pname})", p.log)
    problem = Problem(profile, rows, tuple(space), physical_bounds=physical_bounds)
    kind, env_jobs, address = settings_from_env()
    ex = make_executor("ray" if ray_address else (executor or kind), jobs or env_jobs, ray_address or address)
    console = Console()
    out_dir = resolve_dir(out_dir_opt) if out_dir_opt else testbed.report_dir(name)
    started = time.monotonic()
    before: dict[str, object] = {}
    try:
        if measure_on and not report_only:
            from repro.identify.targets import measure, to_frame

            out_dir.mkdir(parents=True, exist_ok=True)
            measured, runs = measure(rows, backend=measure_on, profile=truth_profile or profile,
                                     cluster=cluster or None, rates=_stated(stated_rate),
                                     runs_dir=out_dir / "runs")
            to_frame(measured).to_csv(out_dir / "measured_targets.csv", index=False)
            runs.to_csv(out_dir / "measured_runs.csv", index=False)
            rows = tuple(measured)
            problem = Problem(profile, rows, tuple(space), physical_bounds=physical_bounds)
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
            ident = identify(problem, executor=ex, popsize=popsize, generations=generations, seed=seed,
                             progress=lambda n, best: console.print(f"  {n} testbeds simulated, best chi2 {best:.1f}"))
            wall = time.monotonic() - started
        inputs = tuple(f"saturation_rate_{n.removeprefix('rate_')}" for n in _stated(stated_rate))
        searched_on = before.get("executor", ex.describe()) if report_only else ex.describe()
        paths = testbed.write(ident, name, size=ensemble_size, profile_dir=resolve_dir(profile_dir), out_dir=out_dir,
                              extra={"fit_wall_s": wall, "executor": searched_on}, inputs=inputs,
                              stated_rates=_stated(stated_rate))
        _show_fit(console, ident, ensemble_size)
        if predictions:
            pred_rows = load_targets(resolve_dir(predictions))
            fitted = {t.key for t in rows}
            clash = sorted(fitted & {t.key for t in pred_rows})
            if clash:
                raise ConfigError(f"identify: rows both fitted and predicted: {clash}")
            ens = ident.ensemble(ensemble_size)
            t0 = time.monotonic()
            stated = _stated(stated_rate)
            long = pred.predict(ens, space, profile, pred_rows, stated=stated, reference=reference or None,
                                executor=ex)
            table = pred.robustness(pred_rows, long, ens, space)
            long.to_csv(out_dir / "predictions.csv", index=False)
            table.to_csv(out_dir / "robustness.csv", index=False)
            _show_predictions(console, table, time.monotonic() - t0)
            peaks = _kv_peaks(ident, space, profile, stated, reference, long)
            if peaks is not None:
                peaks.to_csv(out_dir / "kv_peak.csv", index=False)
                console.print(peaks.to_string(index=False))
    finally:
        ex.close()
    console.print(f"profile: {paths['profile']}\nreport: {out_dir}/")


def _kv_peaks(ident, space, profile: str, stated: dict[str, float], reference: str, long):  # type: ignore[no-untyped-def]
    """The most KV tokens a decode engine held at mixed's operating point (2p4d, the stated rate on the best
    testbed; the reference profile's own searched rate), per baseline and the router, seeds 1-3."""
    import pandas as pd

    from repro.identify.predictions import kv_peak_tokens
    from repro.identify.space import settings

    if "rate_mixed" not in stated:
        return None
    best = settings(space, [p.to_internal(float(ident.best[p.name])) for p in space])
    where = [("identified (best)", profile, stated["rate_mixed"], best)]
    ref = long[(long["member"] == "reference") & (long["key"] == "rate:rate_mixed")]
    if reference and len(ref):
        where.append((f"reference {reference}", reference, float(ref["value"].iloc[0]), {}))
    rows = []
    for label, prof, rate, s in where:
        for pol in ("round_robin", "least_loaded", "marginal_cost"):
            peaks = [kv_peak_tokens(prof, rate=rate, policy=pol, seed=seed, settings=s) for seed in (1, 2, 3)]
            rows.append({"testbed": label, "rate": rate, "policy": pol, "kv_peak_tokens_max": max(peaks),
                         "kv_peak_tokens_seeds": " ".join(map(str, peaks)), "kv_budget_tokens": 60000})
    return pd.DataFrame(rows)


def _show_fit(console: Console, ident, size: int) -> None:  # type: ignore[no-untyped-def]
    pars = ident.parameters(size)
    t = Table(title=f"identified constants (ensemble of {len(ident.ensemble(size))}; chi2 {ident.best['chi2']:.1f} "
                    f"on {ident.dof} dof)")
    for c in ("parameter", "best", "ensemble", "prior", "status", "physical bound"):
        t.add_column(c)
    for r in pars.itertuples():
        bound = "" if math.isnan(r.bound_lo) else f"[{r.bound_lo:.3g}, {r.bound_hi:.3g}]"
        t.add_row(r.parameter, f"{r.best:.4g}", f"[{r.ensemble_lo:.3g}, {r.ensemble_hi:.3g}]",
                  f"[{r.prior_lo:.3g}, {r.prior_hi:.3g}]", r.status, bound)
    console.print(t)
    res = ident.residuals(size)
    t = Table(title="training residuals (simulated at the best fit - measured; times: log ratio)")
    for c in ("row", "measured", "simulated", "residual", "in sd"):
        t.add_column(c)
    for r in res.itertuples():
        t.add_row(r.key, f"{r.measured:.3g}", f"{r.simulated:.3g}", f"{r.residual:+.3f}", f"{r.residual_sd:+.1f}")
    console.print(t)


def _show_predictions(console: Console, table, wall: float) -> None:  # type: ignore[no-untyped-def]
    t = Table(title=f"predictions (never fitted) across the ensemble ({wall:.0f} s)")
    for c in ("row", "paper", "best testbed", "ensemble", "holds", "robustness", "reference profile"):
        t.add_column(c)
    for r in table.itertuples():
        t.add_row(r.key, f"{r.paper:.3g}", f"{r.predicted:.3g}", f"[{r.ensemble_lo:.3g}, {r.ensemble_hi:.3g}]",
                  f"{r.holds}/{r.testbeds}", r.robustness,
                  f"{r.reference:.3g} ({'holds' if r.reference_holds else 'no'})")
    console.print(t)
