"""``repro calibrate``: the paper's calibration benchmark (`repro.live.calibration_bench`) on a cluster,
its progress and the fitted constants beside the profile's on the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from repro.cli.common import RUNNING
from repro.errors import ConfigError
from repro.live.calibration_bench import (
    COMPARED,
    DEFAULT_CONCURRENCIES,
    calibrate,
    compare,
    profile_cost_model,
    samples_path,
)


def _make_cli():
    def calibrate_cmd(
        cluster: str = typer.Option("1p1d", "--cluster",
                                    help="topology: '1p1d', a YAML path or a name in data/clusters/" + RUNNING),
        launcher: str | None = typer.Option(None, "--launcher", help="emulated (default) | vllm | remote"),
        time_scale: float = typer.Option(1.0, "--time-scale", help="emulated engines run K times faster than physics"),
        budget_s: float = typer.Option(300.0, "--budget", help="physics seconds the benchmark may take"),
        out: Path = typer.Option(Path("runs/calibration.json"), "--out",
                                 help="calibration JSON to write (samples go beside it)"),
        profile: str | None = typer.Option(None, "--profile", help="hardware profile for every instance"),
        name: str = typer.Option("calibrated", "--name", help="name stored in the cost model"),
        transfer: bool = typer.Option(True, "--transfer/--no-transfer", help="also time KV transfers"),
        concurrency: str = typer.Option(",".join(map(str, DEFAULT_CONCURRENCIES)), "--concurrency",
                                        help="decode concurrency levels"),
        decode_tokens: int = typer.Option(576, "--decode-tokens", help="output tokens of each decode request"),
    ) -> None:
        """Measure a cluster (prefill curve, decode rate vs concurrency, KV transfer), fit the cost model."""
        from repro.cluster.launchers import launch, use_running
        from repro.cluster.topology import parse_topology

        console = Console()
        cluster = str(use_running(cluster))  # a cluster that `repro cluster up` started: its engines
        try:
            levels = [int(x) for x in concurrency.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"calibrate: --concurrency must be a comma list of integers, "
                              f"got {concurrency!r}") from None
        # the cluster's own calibration file may not exist yet: this command is what writes it
        topo = parse_topology(cluster, profile=profile, calibration_must_exist=False)
        kind = launcher or topo.launcher or "emulated"
        opts: dict[str, Any] = {"time_scale": time_scale} if kind == "emulated" else {}
        K = time_scale if kind == "emulated" else 1.0
        with launch(topo, kind, **opts) as instances:
            with console.status(f"calibrating {topo.shorthand} ({kind}); budget {budget_s:g} s physics = "
                                f"{budget_s / K:.0f} s wall") as st:
                fitted, samples = calibrate(instances, time_scale=K, budget_s=budget_s, out=out, name=name,
                                            transfer=transfer, concurrencies=levels, decode_tokens=decode_tokens,
                                            log=lambda s: st.update(s))
            ref = profile_cost_model(instances)
        table = Table(title=f"calibration of {topo.shorthand} ({kind}, time scale {K:g})")
        for col in ("constant", "fitted", "profile", "error"):
            table.add_column(col, justify="right" if col != "constant" else "left")
        if ref is not None:
            for _, r in compare(fitted, ref).iterrows():
                table.add_row(r.constant, f"{r.fitted:.6g}", f"{r.profile:.6g}", f"{100 * r.rel_error:+.1f}%")
        else:
            for f in COMPARED:
                table.add_row(f, f"{getattr(fitted, f):.6g}", "-", "-")
        console.print(table)
        n_src = samples["source"].value_counts().to_dict() if len(samples) else {}
        console.print(f"{len(samples)} samples ({n_src}); {samples.attrs.get('physics_s', float('nan')):.0f} s physics")
        console.print(f"wrote {out} and {samples_path(out)}")

    return calibrate_cmd


calibrate_cli = _make_cli()
