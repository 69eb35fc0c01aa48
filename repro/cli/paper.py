"""`repro paper`: rerun the paper's notebooks (`repro.paper.runner.run_paper`) and show how it went:
each notebook's status while they run, then the headline claims, the grouped tally, where
summary.csv and report.html went, and any failing notebook's traceback."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from repro.cli.common import RUNNING
from repro.errors import ConfigError, check_choice, parse_assignments
from repro.paper.runner import PaperRun, run_paper


def _status_table(status: dict[str, tuple[str, float | None]], backend: str, scale: str) -> Table:
    t = Table(title=f"repro paper --backend {backend} --scale {scale}", expand=False)
    t.add_column("notebook")
    t.add_column("status")
    t.add_column("wall s", justify="right")
    for name, (st, wall) in status.items():
        colour = {"done": "green", "FAILED": "red", "running": "yellow"}.get(st, "dim")
        t.add_row(name, f"[{colour}]{st}[/{colour}]", "" if wall is None else f"{wall:.1f}")
    return t


def claims_table(summary: pd.DataFrame) -> Table:
    """The paper's headline claims (`repro.paper.claims.HEADLINE_CLAIMS`) as a Rich table, the conclusion on one
    screen (`repro.paper.claims.conclusion_table`): each claim's verdict (`repro.paper.claims.AGGREGATION`) with where
    it holds, the deciding row with ours [interval] vs the paper's, one sentence why, and its evidence briefly."""
    from repro.paper.claims import conclusion_table

    colours = {"reproduced": "green", "not reproduced": "red", "contradicted": "bold red", "within noise": "yellow"}
    t = Table(title="the paper's headline claims")
    for c in ("claim", "verdict", "deciding row", "ours vs the paper's", "why", "evidence"):
        t.add_column(c, overflow="fold")
    for r in conclusion_table(summary).to_dict("records"):
        word = r["verdict"].split(" in ")[0].split(" on ")[0]
        t.add_row(r["claim"], f"[{colours.get(word, 'default')}]{r['verdict']}[/]", r["row"],
                  r["ours vs paper"], r["why"], r["evidence, briefly"])
    return t


def summary_table(summary: pd.DataFrame) -> Table:
    """The headline numbers as a Rich table: ours with its 95 % interval beside the paper's, and the verdict."""
    from repro.statistics.intervals import Estimate

    def text(v: Any) -> str:
        return "" if pd.isna(v) else str(v)

    def fmt(v: float) -> str:
        return "" if pd.isna(v) else f"{v:.4g}"

    colours = {"reproduced": "green", "not reproduced": "red", "contradicted": "bold red", "within noise": "yellow",
               "input": "dim", "context": "dim"}
    t = Table(title="headline numbers: ours [95% interval] vs the paper")
    for c in ("notebook", "key", "ours [95% CI]", "paper", "verdict", "unit", "meaning", "measured"):
        t.add_column(c, justify="right" if c in ("ours [95% CI]", "paper") else "left", overflow="fold")
    for r in summary.itertuples():
        ours = Estimate(float(r.ours), float(getattr(r, "ours_lo", float("nan"))),
                        float(getattr(r, "ours_hi", float("nan")))).text(4)
        v = text(getattr(r, "verdict", ""))
        same = text(getattr(r, "same_as", ""))
        t.add_row(str(r.notebook), str(r.key), ours, fmt(r.paper),
                  f"[{colours.get(v, 'default')}]{v}[/]" + (f" (= {same})" if same else ""), text(r.unit),
                  text(getattr(r, "meaning", "")), text(getattr(r, "measured", "")))
    return t


def scorecard_table(table: pd.DataFrame) -> Table:
    """The scorecard's summary (`repro.paper.sections.scorecard.summarize`) as a Rich table: per policy and
    claim group, the paper's claims asked of the policy and its comparisons with the paper's router and
    the best baseline."""
    from repro.paper.sections.scorecard import summarize

    t = Table(title="your policies: the scorecard (positive differences: yours better)")
    s = summarize(table)
    for c in s.columns:
        t.add_column(c, overflow="fold")
    for r in s.itertuples(index=False, name=None):
        t.add_row(*[str(x) for x in r])
    return t


def paper_cli(
    backend: str = typer.Option("sim", "--backend",
                                help="sim (default: the deterministic simulator) | emulated (local emulated vLLM "
                                     "engines over real HTTP) | vllm"),
    scale: str | None = typer.Option(None, "--scale", help="quick | full (default: full on sim, quick live)"),
    only: str | None = typer.Option(None, "--only", help="notebooks to run, e.g. 01,04 (default: all)"),
    cluster: str | None = typer.Option(None, "--cluster", help="cluster YAML for emulated/vllm" + RUNNING),
    out: Path = typer.Option(Path("build/notebooks"), "--out", help="folder for the executed notebooks"),
    results_dir: Path | None = typer.Option(None, "--results-dir",
                                            help="tidy CSVs (relative: to the repo root; default "
                                                 "results/<backend>-<scale>)"),
    figures_dir: Path | None = typer.Option(None, "--figures-dir",
                                            help="PNG + PDF figures (relative: to the repo root; default "
                                                 "figures/<backend>-<scale>)"),
    param: list[str] = typer.Option([], "--param", "-p", help="extra notebook parameter NAME=VALUE (repeatable)"),
    policy: list[str] = typer.Option([], "--policy",
                                     help="a policy of yours to score against the paper's router on every claim "
                                          "that compares policies: an import path pkg.module:Class or a registered "
                                          "name (repeatable); adds the scorecard (notebook 15) to the run and to "
                                          "report.html"),
    jobs: int = typer.Option(0, "--jobs", "-j", min=0, max=1024,
                             help="cores to use: notebooks at once, and their simulations on worker "
                                  "processes (0: every core on sim, 1 on live backends); any value "
                                  "gives the same results"),
    executor: str = typer.Option("local", "--executor",
                                 help="where the notebooks' simulations run: local (worker processes) | "
                                      "ray (a Ray cluster, --address) | serial"),
    address: str | None = typer.Option(None, "--address",
                                       help="ray: the head's HOST:PORT (or 'auto'; default $REPRO_RAY_ADDRESS)"),
    table: bool = typer.Option(False, "--table", help="also print every row of summary.csv (default: the "
                                                      "headline claims and the grouped tally)"),
) -> None:
    """Rerun the paper: execute the section notebooks and print ours vs the paper's numbers.

    Default: the deterministic simulator at full scale (10 traces x the paper's 10,000 requests;
    the same numbers on every machine; notebooks in parallel, one per core). --backend emulated runs
    the real proxy and load generator over HTTP against local emulated vLLM engines (quick scale
    by default, tens of minutes on 2 cores; see repro.paper.plans for what quick cuts). Every number gets
    a 95% interval and a verdict judged against the paper's stated size; the run ends with the
    headline claims and the grouped tally here, summary.csv and report.html (its conclusion first).
    """
    scale = scale or ("full" if backend == "sim" else "quick")
    from repro.experiment.executor import EXECUTORS

    check_choice("paper", "executor", executor, EXECUTORS)
    if address and executor != "ray":
        raise ConfigError(f"paper: --address is for --executor ray (got --executor {executor})")
    if jobs > 1 and backend != "sim":
        raise ConfigError(f"paper: --jobs {jobs} with --backend {backend}: live runs need the machine to "
                          "themselves (their validity depends on it); --jobs runs sim notebooks in parallel")
    # a log file or pipe gets a wide table (Rich would fold it to 80 columns and cut the keys)
    console = Console(width=None if sys.stdout.isatty() else 160)
    status: dict[str, tuple[str, float | None]] = {}
    with Live(_status_table(status, backend, scale), console=console, refresh_per_second=4, transient=False) as live:

        def on_status(now: dict[str, tuple[str, float | None]]) -> None:
            status.clear()
            status.update(now)
            live.update(_status_table(status, backend, scale))

        run = run_paper(backend=backend, scale=scale, only=only, cluster=cluster, out=out, results_dir=results_dir,
                        figures_dir=figures_dir, extra=parse_assignments(list(param), "paper: -p"),
                        policies=list(policy), jobs=jobs,
                        executor=executor, address=address, on_status=on_status, on_message=console.print)
    _print_end(console, run, backend=backend, scale=scale, only=only, table=table)
    if not run.ok:
        raise typer.Exit(1)


def _print_end(console: Console, run: PaperRun, *, backend: str, scale: str, only: str | None, table: bool) -> None:
    """The end of a run in the terminal: the headline claims, the grouped tally, the files, a stale-docs
    warning on the main job, then each failing notebook with its traceback."""
    from repro.paper.claims import docs_stale, scope_sentence, tally_text
    from repro.paths import REPO_ROOT

    summary = run.summary
    if run.summary_path is not None:
        if table:
            console.print(summary_table(summary))
        console.print("\n" + re.sub(r"\*\*|\\", "", scope_sentence(summary)), markup=False, highlight=False,
                      soft_wrap=True)
        console.print(claims_table(summary))
        console.print("the tally, each measurement once:")
        for line in tally_text(summary):
            console.print(f"  {line}", markup=False, highlight=False)
        console.print(f"{len(summary)} rows written to {run.summary_path}"
                      + ("" if table else " (--table prints them all here)"))
        if backend == "sim":  # which validation of the simulator against a real cluster the verdicts rest on
            from repro.validation.report import rests_on
            from repro.vocab import DEFAULT_PROFILE

            console.print(rests_on(run.summary_path.parent, DEFAULT_PROFILE), markup=False, highlight=False,
                          soft_wrap=True)
        if backend == "sim" and scale == "full" and not only:
            stale = docs_stale(summary, REPO_ROOT)
            if stale:
                console.print(f"[yellow]the verdicts quoted in {', '.join(stale)} differ from this run's[/yellow] "
                              "(`repro conclusion --docs` writes them from it)")
    if run.report is not None:
        card = run.report.parent / "scorecard.csv"
        if any(r.name == "15_scorecard" and r.ok for r in run.results) and card.exists():
            console.print(scorecard_table(pd.read_csv(card, keep_default_na=True)))
            console.print(f"every scorecard row: {card}")
        console.print(f"report (one page, opens offline): {run.report}")
    for r in run.results:
        if not r.ok:
            console.print(f"[red]{r.name} failed[/red]; executed notebook: {r.output}")
            console.print(r.error, markup=False, highlight=False)
