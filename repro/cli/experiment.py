"""``repro run`` / ``saturate`` / ``anchor``: one experiment or a grid of them, the saturation search,
and §VI's anchoring of the simulator to a measured number."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from repro.cli.common import RUNNING, SweepBar, console, one_of, parse_options, parse_seeds, split, validity_cell
from repro.errors import ConfigError
from repro.experiment.executor import EXECUTORS
from repro.routing.policies import PAPER_POLICIES
from repro.vocab import BACKENDS, BACKLOG_SOURCES, DEFAULT_PROFILE, PREDICTORS, SERVICES, WORKLOADS

WHAT = "What runs"
ROUTER = "The router"
SIM = "Simulated runs (sim) and where they execute"
LIVE = "Live runs (emulated, vllm)"
OUT = "Output"


def run(
    spec_file: Path | None = typer.Option(None, "--spec", rich_help_panel=WHAT,
                                          help="YAML file with RunSpec fields; flags override it."),
    backend: str | None = typer.Option(None, rich_help_panel=WHAT, help=one_of(BACKENDS)),
    topology: str | None = typer.Option(None, rich_help_panel=WHAT, help="'2p4d' or a topology YAML"),
    profile: str | None = typer.Option(None, rich_help_panel=WHAT, help="hardware profile name or JSON path"),
    workload: str | None = typer.Option(None, rich_help_panel=WHAT, help=one_of(WORKLOADS)),
    seed: str | None = typer.Option(None, rich_help_panel=WHAT, help="trace seed, or a comma list (one run each)"),
    rate: float | None = typer.Option(None, rich_help_panel=WHAT, help="arrival rate (requests/s)"),
    n_requests: int | None = typer.Option(None, "--n-requests", "-n", rich_help_panel=WHAT,
                                          help="requests per run"),
    policy: str | None = typer.Option(None, rich_help_panel=ROUTER,
                                      help="policy name(s), comma list, or pkg.module:Class"),
    option: list[str] = typer.Option([], "--option", "-o", rich_help_panel=ROUTER,
                                     help="policy option KEY=VALUE (`repro policies`: each one's type)"),
    cost_model: str | None = typer.Option(None, "--cost-model", rich_help_panel=ROUTER,
                                          help="calibrated | sim_derived | path to calibration JSON"),
    predictor: str | None = typer.Option(None, rich_help_panel=ROUTER, help=one_of(PREDICTORS)),
    noise: float | None = typer.Option(None, "--noise", rich_help_panel=ROUTER,
                                       help="predictor relative error (0..10, e.g. 1.5 = 150%)"),
    service: str | None = typer.Option(None, rich_help_panel=SIM, help="sim: " + one_of(SERVICES)),
    backlog: str | None = typer.Option(None, rich_help_panel=SIM, help="sim: " + one_of(BACKLOG_SOURCES)),
    jobs: int | None = typer.Option(None, "--jobs", "-j", rich_help_panel=SIM, min=1, max=100_000,
                                    help="sim runs at once (default: one per core; ray: the cluster's CPUs)"),
    executor: str = typer.Option("local", "--executor", rich_help_panel=SIM,
                                 help="where sim runs execute: " + one_of(EXECUTORS)),
    address: str | None = typer.Option(None, "--address", rich_help_panel=SIM,
                                       help="ray: the head's HOST:PORT, or 'auto' (default $REPRO_RAY_ADDRESS)"),
    cluster: str | None = typer.Option(None, rich_help_panel=LIVE,
                                       help="cluster YAML (emulated/vllm backends)" + RUNNING),
    time_scale: float | None = typer.Option(None, "--time-scale", rich_help_panel=LIVE,
                                            help="emulated: physics runs K times faster than the wall clock"),
    on_invalid: str = typer.Option(
        "retry", rich_help_panel=LIVE,
        help="live runs the machine could not keep up with: retry (at lower time scales, then stop with exit code "
             "3) | keep (record them, marked invalid)"),
    out: Path = typer.Option(Path("runs"), rich_help_panel=OUT, help="output folder (one sub-folder per run)"),
    fresh: bool = typer.Option(False, rich_help_panel=OUT, help="rerun even if a finished run exists"),
) -> None:
    """Run one experiment (or a grid over comma-listed seeds/policies); print a summary.

    Sim runs of a grid run in parallel (--jobs local processes, or a Ray cluster with --executor ray
    --address HOST:PORT); the journals are written here, byte-identical to running them one by one.

    A live run (emulated, vllm) also prints its validity: whether this machine kept up with it
    (send lag, proxy loop lag, engine step lateness, CPU steal; `repro.live.validity`)."""
    from repro.experiment.executor import make_executor
    from repro.experiment.manifest import read_manifest
    from repro.experiment.runner import sweep_results
    from repro.experiment.spec import RunSpec, load_spec, spec_from_dict

    flags = {
        "backend": backend, "topology": topology, "profile": profile, "workload": workload, "rate": rate,
        "n_requests": n_requests, "cost_model": cost_model, "predictor": predictor, "predictor_noise": noise,
        "service": service, "backlog": backlog, "cluster": cluster, "time_scale": time_scale,
    }
    flags = {k: v for k, v in flags.items() if v is not None}
    if option:
        flags["policy_options"] = parse_options(option)
    base = load_spec(spec_file, **flags) if spec_file else spec_from_dict(flags)
    seeds = parse_seeds(seed) if seed else [base.seed]
    policies = split(policy) if policy else [base.policy]
    specs = [base.replace(seed=s, policy=p) for s, p in itertools.product(seeds, policies)]
    for s in specs:
        RunSpec.from_flat(**s.to_dict())  # validate every combination before running any
    with make_executor(executor, jobs, address) as ex:
        rows = sweep_results(specs, out, progress=SweepBar, on_invalid=on_invalid, executor=ex, resume=not fresh)
    table = Table(title=f"{base.workload} on {base.topology_parsed().shorthand} ({base.backend})")
    live = base.backend != "sim"
    columns = ("policy", "seed", "rate", "goodput", "P99 TTFT (s)", "P99 TPOT (s)", "token skew", "ok/failed/rejected",
               *(("valid (K used)",) if live else ()))
    for col in columns:
        table.add_column(col)
    for res in rows:
        sm = res.summary
        table.add_row(
            res.spec.policy, str(res.spec.seed), f"{res.spec.rate:g}", f"{sm['goodput']:.3f}",
            f"{sm['ttft_p99_s']:.3f}", f"{sm['tpot_p99_s']:.4f}", f"{sm['token_skew']:.3f}",
            f"{sm['completed']}/{sm['failed']}/{sm['rejected']}" + (" (cached)" if res.skipped else ""),
            *((validity_cell(sm),) if live else ()),
        )
    console.print(table)
    if live:
        for res in rows:
            v = (read_manifest(res.run_dir / "manifest.json") or {}).get("validity") or {}
            m = ", ".join(f"{k} {val:.3g}" for k, val in (v.get("measured") or {}).items() if val is not None)
            verdict = "valid" if v.get("valid") else "INVALID: " + "; ".join(v.get("reasons", []))
            console.print(f"{res.spec.run_id}: {verdict} ({m})", highlight=False)
    console.print(f"journals and manifests under {out}/<run_id>/")


def saturate(
    workload: str = typer.Option("mixed", help=one_of(WORKLOADS) + " (or a comma list)"),
    backend: str = typer.Option("sim", help=one_of(BACKENDS)),
    topology: str = typer.Option("2p4d", help="'2p4d' or a topology YAML"),
    n_requests: int = typer.Option(3000, "--n-requests", "-n", help="requests per probe"),
    seed: int = typer.Option(1, help="trace seed of the probes"),
    collapse_fraction: float | None = typer.Option(
        None,
        help="target: round-robin goodput / its light-load goodput (default: the paper's Fig. 5 ratio 0.833)",
    ),
    band: float = typer.Option(0.02, help="accept a rate whose goodput is within this of the target"),
    light_rate: float = typer.Option(1.0, help="the light-load probe rate (req/s)"),
    time_scale: float = typer.Option(1.0, "--time-scale", help="emulated: time compression"),
    cluster: str | None = typer.Option(None, help="cluster YAML (vllm backend)"),
    out: Path = typer.Option(Path("runs/saturation"), help="probe runs are journaled here (and reused)"),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, max=100_000,
                                    help="sim: probes simulated ahead at once (default: one per core); the "
                                         "search and its result are the same for any value"),
) -> None:
    """Find, per workload, the arrival rate at which round-robin is mid-collapse (probes + bisection)."""
    from repro.experiment.executor import make_executor
    from repro.experiment.runner import run as run_one
    from repro.experiment.saturation import PAPER_COLLAPSE_FRACTION, saturation_search
    from repro.experiment.spec import RunSpec

    table = Table(title=f"saturation rates ({backend}, {topology})")
    for col in ("workload", "rate (req/s)", "light-load goodput", "target", "probes (rate: goodput)"):
        table.add_column(col)
    for wl in split(workload):
        base = RunSpec.from_flat(backend=backend, workload=wl, topology=topology, n_requests=n_requests, seed=seed,
                       time_scale=time_scale, cluster=cluster)
        probe = None if backend == "sim" else (lambda spec: run_one(spec, out).summary["goodput"])
        with console.status(f"probing {wl}"), make_executor("local", jobs) as ex:
            res = saturation_search(base, light_rate=light_rate, band=band, probe=probe, executor=ex,
                                    collapse_fraction=collapse_fraction or PAPER_COLLAPSE_FRACTION)
        probes = ", ".join(f"{r:g}: {g:.3f}" for r, g in res.probes)
        table.add_row(wl, f"{res.rate:.2f}", f"{res.light_goodput:.3f}", f"{res.target_goodput:.3f}", probes)
    console.print(table)


def anchor(
    workload: str = typer.Option("mixed", help=one_of(WORKLOADS)),
    topology: str = typer.Option("2p4d", help="'2p4d' or a topology YAML"),
    policy: str = typer.Option("round_robin", help="the policy whose number was measured"),
    goodput: float | None = typer.Option(None, help="the measured goodput, a fraction in (0, 1]"),
    ttft_p99: float | None = typer.Option(None, "--ttft-p99", help="the measured P99 TTFT (seconds)"),
    band: float | None = typer.Option(
        None, help="accept a rate whose value is within this of the target: goodput absolute (default 0.01), "
                   "P99 TTFT relative (default 0.05 = 5%)"),
    rate: float | None = typer.Option(
        None, help="the search's start rate (req/s; default the workload's simulator saturation rate)"),
    policies: str = typer.Option(",".join(PAPER_POLICIES), help="the policies to predict, comma list"),
    seeds: str = typer.Option("1", help="trace seeds of the predictions, comma list (the search uses the first)"),
    n_requests: int = typer.Option(2000, "--n-requests", "-n", help="requests per run (probes and predictions)"),
    cost_model: str = typer.Option("calibrated", "--cost-model",
                                   help="calibrated | sim_derived | path to calibration JSON"),
    service: str | None = typer.Option(None, help="sim: " + one_of(SERVICES)),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object instead of the tables"),
    profile: str = typer.Option(DEFAULT_PROFILE, "--profile", help="the simulated testbed's hardware profile"),
) -> None:
    """§VI's anchoring: from one number measured on your hardware, the simulator's predictions for the rest.

    Finds the arrival rate at which POLICY's simulated goodput (or P99 TTFT) equals the measured
    value (stepping the rate up or down from --rate, then bisecting in log-rate), then simulates
    every policy of --policies at that rate. Prints the anchored rate with its interval (the rates
    whose value is within the band) and one row per policy with 95% intervals. The rows are the
    simulator's predictions, not measurements. No rate reaching the value: one line, exit code 2."""
    import json
    import math

    from repro.experiment.anchor import anchor_rate
    from repro.experiment.anchoring import predict
    from repro.experiment.spec import RunSpec
    from repro.paper.plans import SIM_SATURATION_RATES

    if (goodput is None) == (ttft_p99 is None):
        raise ConfigError("anchor: fields 'goodput' and 'ttft_p99_s': give exactly one measured value "
                          "(--goodput, a fraction in (0, 1], or --ttft-p99, seconds in (0, 3600])")
    metric, target = ("goodput", goodput) if goodput is not None else ("ttft_p99_s", ttft_p99)
    trace_seeds = parse_seeds(seeds)
    wanted = split(policies)
    if not trace_seeds or not wanted:
        raise ConfigError("anchor: fields 'seeds' and 'policies' need at least one entry each")
    flat: dict[str, Any] = {"backend": "sim", "workload": workload, "topology": topology, "seed": trace_seeds[0],
                            "n_requests": n_requests, "cost_model": cost_model, "policy": policy, "profile": profile}
    if service is not None:
        flat["service"] = service
    base = RunSpec.from_flat(**flat, **({"rate": rate} if rate is not None else {}))
    for p in wanted:  # validate every policy before running any
        base.replace(policy=p, policy_options={})
    start = rate if rate is not None else SIM_SATURATION_RATES.get(workload, base.rate)
    with console.status(f"anchoring {policy} on {workload} ({metric} {target:g})"):
        a = anchor_rate(base, target, metric=metric, policy=policy, start_rate=start, band=band)

    def clean(v: Any) -> Any:  # JSON has no NaN
        return None if isinstance(v, float) and math.isnan(v) else v

    anchor_json = {"workload": workload, "topology": base.topology_parsed().shorthand, "policy": a.policy,
                   "metric": a.metric, "target": a.target, "band": a.band, "found": a.found, "rate": clean(a.rate),
                   "rate_lo": clean(a.rate_lo), "rate_hi": clean(a.rate_hi), "value": clean(a.value),
                   "probes": [[r, clean(v)] for r, v in a.probes], "reason": a.reason}
    if not a.found:
        if json_out:
            typer.echo(json.dumps({"anchor": anchor_json, "predictions": []}))
        cr, cv = a.closest
        raise ConfigError(f"anchor: no rate found for {a.reason}; closest probe "
                          f"{cv:.4g} at {cr:.4g} req/s")
    with console.status(f"predicting {len(wanted)} policies at {a.rate:.4g} req/s"):
        pred = predict(base, a, wanted, trace_seeds, n_requests)
    if json_out:
        rows = [{k: clean(v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                for r in pred.to_dict(orient="records")]
        typer.echo(json.dumps({"anchor": anchor_json, "predictions": rows}))
        return
    unit = " s" if metric == "ttft_p99_s" else ""
    lo, hi = ("?" if math.isnan(x) else f"{x:.4g}" for x in a.rate_interval)  # ?: the probes cannot say
    interval = f"interval {lo} to {hi} req/s"
    console.print(f"anchored: {workload} on {base.topology_parsed().shorthand}, {a.describe()} at "
                  f"[bold]{a.rate:.4g} req/s[/bold] ({interval}; simulated {a.value:.4g}{unit}; "
                  f"{len(a.probes)} probes)", highlight=False)
    table = Table(title=f"simulator predictions at {a.rate:.4g} req/s ({len(trace_seeds)} trace(s) x "
                        f"{n_requests} requests; 95% intervals)")
    for col in ("policy", "goodput [95% CI]", "P99 TTFT s [95% CI]", ""):
        table.add_column(col)

    def cell(v: float, lo: float, hi: float, digits: int) -> str:
        if math.isnan(lo) or math.isnan(hi):
            return f"{v:.{digits}f}"
        return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"

    for r in pred.itertuples():
        table.add_row(r.policy, cell(r.goodput, r.goodput_lo, r.goodput_hi, 3),
                      cell(r.ttft_p99_s, r.ttft_p99_lo_s, r.ttft_p99_hi_s, 3),
                      "measured (anchor)" if r.measured else "")
    console.print(table)
    console.print("These are the simulator's predictions at the anchored rate, not measurements (§VI: the "
                  "paper's simulator matched measured goodput to 0.068 on average, but not the measured winner).",
                  highlight=False)
