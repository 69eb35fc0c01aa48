"""`repro report`: one self-contained HTML page of a `repro paper` run (`repro.paper.report`)."""

from __future__ import annotations

from pathlib import Path

import typer

from repro.errors import ConfigError


def report_cli(
    backend: str = typer.Option("sim", "--backend", help="the run's backend: sim | emulated | vllm"),
    scale: str | None = typer.Option(None, "--scale",
                                     help="the run's scale: quick | full (default: full on sim, quick live, "
                                          "as repro paper)"),
    results_dir: Path | None = typer.Option(None, "--results-dir",
                                            help="the run's results (default results/<backend>-<scale>)"),
    figures_dir: Path | None = typer.Option(None, "--figures-dir",
                                            help="the run's figures (default figures/<backend>-<scale>)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="the HTML file (default <results-dir>/report.html)"),
) -> None:
    """Write one self-contained HTML page (verdict table, every figure, the run's context) of a
    `repro paper` run; it opens offline. `repro paper` writes it at its end."""
    from repro.paper.summary import default_dirs
    from repro.paths import resolve_dir
    from repro.vocab import BACKENDS, SCALES

    if backend not in BACKENDS:
        raise ConfigError(f"report: --backend {backend!r}; allowed: {list(BACKENDS)}")
    scale = scale or ("full" if backend == "sim" else "quick")
    if scale not in SCALES:
        raise ConfigError(f"report: --scale {scale!r}; allowed: {list(SCALES)}")
    res, fig = default_dirs(backend, scale)
    from repro.paper.report import write_report  # matplotlib: loaded by this command alone
    path = write_report(resolve_dir(results_dir) if results_dir else res,
                        resolve_dir(figures_dir) if figures_dir else fig, out)
    typer.echo(f"report: {path}")
