"""`repro conclusion`: the written conclusion of a `repro paper` run, and the docs' copy of its verdicts."""

from __future__ import annotations

from pathlib import Path

import typer

from repro.errors import ConfigError
from repro.paths import REPO_ROOT


def conclusion_cmd(
    backend: str = typer.Option("sim", "--backend", help="the run's backend: sim | emulated | vllm"),
    scale: str | None = typer.Option(None, "--scale", help="quick | full (default: full on sim, quick live)"),
    results_dir: Path | None = typer.Option(None, "--results-dir",
                                            help="the run's results (default results/<backend>-<scale>)"),
    docs: bool = typer.Option(False, "--docs", help="keep this summary (the main job's: sim, full) as "
                                                    "docs/main_job_summary.csv and write the verdicts block of "
                                                    "README.md and REPRODUCE.md from it (and the blocks written from "
                                                    "data/identify and data/benchmarks)"),
    check: bool = typer.Option(False, "--check", help="exit 1 when README.md's or REPRODUCE.md's verdicts block "
                                                      "differs from this summary's"),
) -> None:
    """Print the conclusion of a `repro paper` run, written from its summary.csv: the grouped tally and
    one paragraph per headline claim of the paper (what it says, what we measure with its interval,
    the verdict and why, what it rests on). With --docs or --check, the README's and REPRODUCE's copy."""
    import pandas as pd

    from repro.paper.claims import DOCS, SNAPSHOT, conclusion_markdown, docs_block, docs_stale, replace_docs_block
    from repro.paper.summary import default_dirs
    from repro.paths import resolve_dir

    scale = scale or ("full" if backend == "sim" else "quick")
    res = resolve_dir(results_dir) if results_dir else default_dirs(backend, scale)[0]
    path = res / "summary.csv"
    if not path.exists():
        raise ConfigError(f"conclusion: {path} not found: run `repro paper` first (or pass --results-dir)")
    summary = pd.read_csv(path, keep_default_na=True)
    if "group" not in summary.columns:
        raise ConfigError(f"conclusion: {path} has no 'group' (written by an older version): rerun `repro paper`")
    if not (docs or check):
        typer.echo(conclusion_markdown(summary))
        return
    if docs and not ((summary.backend == "sim").all() and (summary.scale == "full").all()):
        raise ConfigError(f"conclusion: --docs quotes the main job (sim, full); {path} is another run's")
    if docs:
        snap = REPO_ROOT / SNAPSHOT
        if not snap.exists() or snap.read_bytes() != path.read_bytes():
            snap.write_bytes(path.read_bytes())
            typer.echo(f"conclusion: {SNAPSHOT} is now {path}")
    block = docs_block(summary)
    stale = docs_stale(summary, REPO_ROOT)
    for name in stale if docs else ():
        doc = REPO_ROOT / name
        doc.write_text(replace_docs_block(doc.read_text(encoding="utf-8"), block), encoding="utf-8")
        typer.echo(f"conclusion: {name} updated from {path}")
    from repro.identify.certificate import BOUND_DOC, bound_sentence, doc_block, replace_doc_block
    from repro.identify.selection import markdown_table

    bound_doc = REPO_ROOT / BOUND_DOC  # the blocks written from data/identify: the models' table, the bound
    for name, body, what in (("models", markdown_table(), "the model table"),
                             ("bound", bound_sentence(), "the documents bound")):
        if doc_block(bound_doc.read_text(encoding="utf-8"), name) != body:
            if docs:
                bound_doc.write_text(replace_doc_block(bound_doc.read_text(encoding="utf-8"), name, body),
                                     encoding="utf-8")
                typer.echo(f"conclusion: {BOUND_DOC} ({what}) updated from data/identify")
            elif BOUND_DOC not in stale:
                stale = [*stale, BOUND_DOC]
    from repro.paper import timings

    for name, body in timings.blocks(REPO_ROOT).items():  # the documents' wall-clock times, from the benchmark's record
        doc = REPO_ROOT / name
        if doc_block(doc.read_text(encoding="utf-8"), timings.BLOCK) != body:
            if docs:
                text = replace_doc_block(doc.read_text(encoding="utf-8"), timings.BLOCK, body)
                doc.write_text(text, encoding="utf-8")
                typer.echo(f"conclusion: {name} (its timings) updated from {timings.TIMINGS}")
            elif name not in stale:
                stale = [*stale, name]
    if check and stale:
        typer.echo(f"conclusion: the verdicts block of {', '.join(stale)} differs from {path}; "
                   "run `repro conclusion --docs`", err=True)
        raise typer.Exit(1)
    if check:
        typer.echo(f"conclusion: {', '.join(DOCS)} agree with {path}")
