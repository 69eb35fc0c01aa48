"""`repro validate --cluster FILE`: the simulator against a real cluster, request by request
(`repro.validation`)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import typer
from rich.console import Console

from repro.cli.common import RUNNING
from repro.cli.compare import frame_table


def _floats(value: str, field: str) -> tuple[float, ...]:
    from repro.errors import ConfigError

    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"validate: field '{field}' must be numbers separated by commas, got {value!r}") from None


WHAT = "What is replayed"
TWIN = "The simulator's engine timing"
SATURATION = "Saturation (what the load levels are fractions of)"
BUDGET = "Error budget"
LIVE = "Live runs and output"


def validate_cli(
    cluster: str = typer.Option(..., "--cluster", "-c", rich_help_panel=WHAT,
                                help="cluster file (data/clusters/NAME.yaml, a name there, or a path); with "
                                     "--backend emulated also a shorthand such as 1p1d" + RUNNING),
    backend: str | None = typer.Option(None, "--backend", rich_help_panel=WHAT,
                                       help="vllm | emulated (default: vllm for a cluster "
                                            "with a vllm or remote launcher, else emulated)"),
    workload: str = typer.Option("mixed", "--workload", "-w", rich_help_panel=WHAT,
                                 help="chat | reasoning | documents | mixed"),
    rates: str = typer.Option("0.25,0.5,0.8,1.0", "--rates", rich_help_panel=WHAT,
                              help="load levels as fractions of the cluster's saturation, comma-separated"),
    policies: str = typer.Option("round_robin,marginal_cost", "--policies", rich_help_panel=WHAT,
                                 help="policies (registered names or module:Class), comma-separated; the "
                                      "first is the one the others' ordering is measured against"),
    repeats: int = typer.Option(3, "--repeats", rich_help_panel=WHAT,
                                help="traces per level and policy (seeds seed, seed + 1, ...)"),
    replays: int = typer.Option(1, "--replays", rich_help_panel=WHAT,
                                help="live replays of each trace (2 or more: the machine's "
                                                     "noise floor)"),
    duration_s: float = typer.Option(60.0, "--duration", rich_help_panel=WHAT, help="seconds of arrivals per trace"),
    min_requests: int = typer.Option(30, "--min-requests", rich_help_panel=WHAT, help="requests per trace at least"),
    seed: int = typer.Option(1, "--seed", rich_help_panel=WHAT, help="first trace seed"),
    physics: str = typer.Option("auto", "--physics", rich_help_panel=TWIN,
                                help="the simulator's engine timing: calibration | profile | "
                                                          "auto (the calibration on real engines, else the "
                                                          "profile)"),
    calibrate: bool = typer.Option(False, "--calibrate", rich_help_panel=TWIN,
                                   help="measure the cluster first and use that calibration"),
    in_situ: bool = typer.Option(False, "--in-situ", rich_help_panel=TWIN,
                                 help="fit the decode step's factor and the serving path's TTFT "
                                                         "on one training replay of a trace no judged run uses"),
    shared_host: bool = typer.Option(False, "--shared-host", rich_help_panel=TWIN,
                                     help="measure the CPU the serving path takes of this machine's cores (an idle "
                                          "window, two probes) and simulate the engines sharing them; the verdict's "
                                          "physics then"),
    track_drift: bool = typer.Option(False, "--track-drift", rich_help_panel=TWIN,
                                     help="simulate each judged run at the machine's speed when it started, read off "
                                          "the training trace's runs (with --in-situ or --shared-host); the "
                                          "verdict's physics then"),
    calibration_budget_s: float = typer.Option(300.0, "--calibration-budget", rich_help_panel=TWIN,
                                               help="seconds the calibration may take"),
    context_share: float = typer.Option(0.0, "--context-share", rich_help_panel=TWIN,
                                        help="part (0..1) of the calibrated decode slope put on the context"),
    saturation: str = typer.Option("auto", "--saturation", rich_help_panel=SATURATION,
                                   help="where saturation is found: cluster (live probes) | simulator | auto "
                                        "(cluster on real engines, simulator on emulated ones)"),
    probe_duration_s: float = typer.Option(20.0, "--probe-duration", rich_help_panel=SATURATION,
                                           help="seconds of arrivals per live "
                                                                           "saturation probe"),
    saturation_rate: float | None = typer.Option(None, "--saturation-rate", rich_help_panel=SATURATION,
                                                 help="the saturation rate in req/s (default: searched on "
                                                      "the calibrated simulator)"),
    budget_ttft: float = typer.Option(0.10, "--budget-ttft", rich_help_panel=BUDGET,
                                      help="median TTFT error allowed (fraction)"),
    budget_tpot: float = typer.Option(0.10, "--budget-tpot", rich_help_panel=BUDGET,
                                      help="median TPOT error allowed (fraction)"),
    budget_goodput: float = typer.Option(0.03, "--budget-goodput", rich_help_panel=BUDGET,
                                         help="goodput difference allowed (absolute)"),
    time_scale: float = typer.Option(1.0, "--time-scale", rich_help_panel=LIVE,
                                     help="emulated engines' speed-up K (1 on real engines)"),
    redo: int = typer.Option(2, "--redo", rich_help_panel=LIVE,
                             help="times an invalid live run is run again before it is left out"),
    out: Path | None = typer.Option(None, "--out", "-o", rich_help_panel=LIVE,
                                    help="output folder (default results/validation-<cluster>-<backend>)"),
) -> None:
    """Replay the same traces on a cluster and on the simulator calibrated to it, from light load to
    saturation, and report per load level and policy how far the simulator is from the cluster: the
    per-request TTFT, TPOT and end-to-end errors, the goodput difference with its interval over traces,
    whether the policies' ordering agrees, and the load up to which the simulator stays within its
    error budget. Writes validation.csv, validation.json, validation.md, the paired requests and two
    figures; resumable (finished live runs are kept)."""
    from repro.paths import resolve_dir
    from repro.validation.plan import ErrorBudget, ValidationConfig
    from repro.validation.run import validate

    cfg = ValidationConfig(
        cluster=cluster, backend=backend, workload=workload, fractions=_floats(rates, "rates"),
        policies=tuple(p.strip() for p in policies.split(",") if p.strip()), repeats=repeats, replays=replays,
        duration_s=duration_s, min_requests=min_requests, seed=seed, physics=physics, calibrate=calibrate,
        in_situ=in_situ, shared_host=shared_host, track_drift=track_drift,
        calibration_budget_s=calibration_budget_s, context_share=context_share, saturation=saturation,
        probe_duration_s=probe_duration_s, saturation_rate=saturation_rate,
        time_scale=time_scale, redo=redo,
        budget=ErrorBudget(ttft=budget_ttft, tpot=budget_tpot, goodput=budget_goodput),
    )
    from repro.routing.policies import make_policy

    for p in cfg.policies:
        make_policy(p, None)  # a bad name fails here, before any engine starts
    name = Path(cluster).stem if cluster.endswith((".yaml", ".yml")) else cluster
    folder = out or resolve_dir(f"results/validation-{name}-{cfg.backend_used}")
    result = validate(cfg, folder, progress=True)
    console = Console(width=None if sys.stdout.isatty() else 160)
    table = result.table
    if len(table):
        shown = pd.DataFrame({
            "load": table["fraction"].map("{:g}".format), "req/s": table["rate"].map("{:.3g}".format),
            "policy": table["policy"], "traces": table["traces"], "requests": table["requests"],
            "TTFT err": [_pct(v, lo, hi) for v, lo, hi in zip(table["ttft_err"], table["ttft_err_lo"],
                                                              table["ttft_err_hi"], strict=True)],
            "TPOT err": [_pct(v, lo, hi) for v, lo, hi in zip(table["tpot_err"], table["tpot_err_lo"],
                                                              table["tpot_err_hi"], strict=True)],
            "e2e err": table["e2e_err"].map(lambda v: _pct(v)),
            "goodput live": table["live_goodput"].map("{:.3f}".format),
            "sim": table["sim_goodput"].map("{:.3f}".format),
            "sim - live": [_diff(v, lo, hi) for v, lo, hi in zip(table["goodput_diff"], table["goodput_diff_lo"],
                                                                 table["goodput_diff_hi"], strict=True)],
            "within": table["within_budget"].map({True: "yes", False: "no"}),
        })
        console.print(frame_table(shown, f"simulator vs {cluster} ({cfg.backend_used}), saturation "
                                         f"{result.record['saturation_rate']:.3g} req/s"))
    trusted = result.trusted_up_to
    if math.isnan(trusted):
        console.print("no valid live run: nothing compared")
    elif trusted > 0:
        console.print(f"within budget up to {trusted:g} x saturation", highlight=False)
    else:
        console.print("[red]not within budget even at the lightest load[/red]", highlight=False)
    for r in result.ordering.itertuples():
        console.print(f"ordering at {r.fraction:g} x saturation: {r.policy} - {r.versus}: live {r.live_diff:+.3f}, "
                      f"sim {r.sim_diff:+.3f}: {r.agreement}", highlight=False)
    console.print(f"validation: {folder}", highlight=False, soft_wrap=True)


def _pct(v: float, lo: float = math.nan, hi: float = math.nan) -> str:
    if math.isnan(v):
        return "n/a"
    if math.isnan(lo):
        return f"{100 * v:.1f}%"
    return f"{100 * v:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def _diff(v: float, lo: float, hi: float) -> str:
    if math.isnan(lo):
        return f"{v:+.3f}"
    return f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]"
