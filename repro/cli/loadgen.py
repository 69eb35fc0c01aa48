"""``repro loadgen``: replay a trace open-loop against a URL (`repro.live.loadgen.replay`), its progress
bar and its report on the terminal; also ``python -m repro.cli.loadgen``, the process
`repro.live.loadgen.replay_process` starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from repro.errors import ConfigError
from repro.live.loadgen import DEFAULT_LAG_THRESHOLD_S, DEFAULT_TIMEOUT_S, replay_sync


class ReplayBar:
    """A rich progress bar over requests ended (ok / failed / rejected)."""

    def __init__(self, total: int):
        self.counts = {"ok": 0, "failed": 0, "rejected": 0}
        self.p = Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                          TimeElapsedColumn(), transient=False)
        self.p.start()
        self.task = self.p.add_task(self._desc(), total=total)

    def _desc(self) -> str:
        c = self.counts
        return f"ok {c['ok']} failed {c['failed']} rejected {c['rejected']}"

    def advance(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        self.p.update(self.task, advance=1, description=self._desc())

    def close(self) -> None:
        self.p.stop()


def _make_cli():
    def loadgen(
        url: str = typer.Option(..., "--url",
                                help="base URL of an OpenAI-compatible server (our proxy, one engine, another router)"),
        trace_file: Path | None = typer.Option(None, "--trace", help="trace Parquet file (Trace.save)"),
        workload: str | None = typer.Option(None, "--workload",
                                            help="chat | reasoning | documents | mixed (instead of --trace)"),
        rate: float | None = typer.Option(None, "--rate",
                                          help="arrival rate, requests/s of physics time (with --workload)"),
        n_requests: int = typer.Option(100, "--n-requests", "-n", help="requests (with --workload)"),
        seed: int = typer.Option(0, "--seed", help="trace seed (with --workload)"),
        time_scale: float = typer.Option(1.0, "--time-scale",
                                         help="the engines' time-compression factor K (1 for real engines)"),
        journal: Path = typer.Option(..., "--journal", help="journal JSONL to append to"),
        path: str = typer.Option("/v1/completions", "--path", help="endpoint path"),
        model: str | None = typer.Option(None, "--model", help="model name (default: first of GET /v1/models)"),
        api_key: str | None = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", help="bearer token"),
        timeout_s: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", help="per-request timeout, wall seconds"),
        lag_threshold_ms: float = typer.Option(DEFAULT_LAG_THRESHOLD_S * 1e3, "--lag-threshold-ms",
                                               help="p99 schedule lag (ms) above which the run did not keep up"),
        no_slo_header: bool = typer.Option(False, "--no-slo-header", help="do not send X-SLO-Class"),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="show a progress bar"),
        report_json: Path | None = typer.Option(None, "--report-json", help="also write the report as JSON"),
        parent_pid: int | None = typer.Option(None, "--parent-pid", hidden=True,
                                              help="exit when this process is no longer our parent"),
    ) -> None:
        """Replay a trace open-loop against URL; journal every request; print the schedule-lag report."""
        from repro.workload.traces import Trace, make_trace

        if parent_pid is not None:
            from repro.cluster.processes import orphaned

            if orphaned(parent_pid):
                raise typer.Exit(1)
        if (trace_file is None) == (workload is None):
            raise ConfigError("loadgen: give exactly one of --trace FILE or --workload W (with --rate and -n)")
        if trace_file is not None:
            if not Path(trace_file).exists():
                raise ConfigError(f"loadgen: --trace {trace_file} does not exist")
            trace = Trace.load(trace_file)
        else:
            if rate is None:
                raise ConfigError("loadgen: --workload needs --rate (requests/s)")
            trace = make_trace(workload, seed, rate, n_requests)
        try:
            rep = replay_sync(trace, url, journal_path=journal, path=path, time_scale=time_scale, model=model,
                              api_key=api_key, timeout_s=timeout_s, slo_header=not no_slo_header,
                              progress=ReplayBar if progress else None, lag_threshold_s=lag_threshold_ms / 1e3,
                              live_process=True)
        except KeyboardInterrupt:
            typer.echo(f"interrupted: requests in flight were journaled as failed (cancelled) in {journal}", err=True)
            raise typer.Exit(130) from None
        for line in rep.lines():
            typer.echo(line)
        if report_json is not None:
            report_json.parent.mkdir(parents=True, exist_ok=True)
            report_json.write_text(json.dumps(rep.to_dict(), indent=2) + "\n")

    return loadgen


loadgen_cli = _make_cli()


if __name__ == "__main__":  # ``python -m repro.cli.loadgen``: what `replay_process` starts
    try:
        typer.run(loadgen_cli)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
