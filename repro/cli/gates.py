"""``repro gates``: the correctness gates (`repro.live.gates`) on a cluster, their report on the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from repro.cli.common import RUNNING
from repro.cluster.topology import Instance
from repro.errors import ConfigError
from repro.live.gates import GateFailure, GateResult, GatesReport, render_text, run_gates


def render_rich(report: GatesReport | GateResult):
    """A rich Table of the report (print it with a rich Console)."""
    reports = report.reports if isinstance(report, GatesReport) else [report]
    table = Table(title="correctness gates")
    for col in ("gate", "instance", "result", "wall ms", "detail"):
        table.add_column(col)
    for r in reports:
        if not r.checks:
            table.add_row(r.gate, "-", "[green]pass[/green]" if r.passed else "[red]FAIL[/red]", "", r.message)
        for c in r.checks:
            table.add_row(r.gate, c.instance, "[green]ok[/green]" if c.ok else "[red]FAIL[/red]",
                          "" if c.latency_s is None else f"{c.latency_s * 1e3:.0f}", c.detail)
    return table


def _make_cli():
    def gates(
        cluster: str | None = typer.Option(None, "--cluster",
                                           help="bring up this topology ('1p2d', a YAML) and gate it" + RUNNING),
        state_file: Path | None = typer.Option(None, "--state-file",
                                               help="gate the cluster recorded by `repro cluster up`"),
        launcher: str | None = typer.Option(None, "--launcher", help="with --cluster: emulated | vllm | remote"),
        time_scale: float = typer.Option(1.0, "--time-scale",
                                         help="with --cluster (emulated): time-compression factor K"),
        n_tokens: int = typer.Option(64, "--n-tokens", help="token-contract length"),
        json_out: Path | None = typer.Option(None, "--json", help="also write the report as JSON"),
    ) -> None:
        """Run the correctness gates (reset, warm-up, token contract, greedy equivalence) on a cluster."""
        from repro.cluster.launchers import launch
        from repro.cluster.launchers.state import load_state

        if (cluster is None) == (state_file is None):
            raise ConfigError("gates: give exactly one of --cluster TOPOLOGY or --state-file FILE")
        console = Console()

        def go(instances: list[Instance]) -> None:
            try:
                rep = run_gates(instances, n_tokens=n_tokens,
                                on_report=lambda r: console.print(render_text(r), highlight=False))
            except GateFailure as exc:
                if json_out is not None:
                    gs = getattr(exc, "gates", None)
                    if gs is not None:
                        json_out.write_text(json.dumps(gs.to_dict(), indent=2) + "\n")
                raise
            if json_out is not None:
                json_out.write_text(json.dumps(rep.to_dict(), indent=2) + "\n")
            console.print("[green]all gates passed[/green]")

        if state_file is not None:
            go(load_state(state_file)["instances"])
        else:
            from repro.cluster.launchers import use_running
            from repro.cluster.topology import parse_topology

            cluster = str(use_running(cluster))
            kind = launcher or parse_topology(cluster).launcher or "emulated"
            opts = {"time_scale": time_scale} if kind == "emulated" else {}
            with launch(cluster, kind, **opts) as instances:
                go(instances)

    return gates


gates_cli = _make_cli()
