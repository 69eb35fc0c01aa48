"""``repro cluster up|down|status``: bring a P/D cluster of engines up, down, or ask its status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from repro.cluster.launchers import make_launcher
from repro.cluster.launchers.state import (
    DEFAULT_STATE_FILE,
    cluster_down,
    cluster_status,
    is_our_engine,
    load_state,
    save_state,
)
from repro.cluster.topology import parse_topology
from repro.errors import ConfigError
from repro.vocab import LAUNCHERS

if TYPE_CHECKING:
    import typer


# ---- typer sub-app ---------------------------------------------------------------------------
def _make_cluster_app() -> typer.Typer:
    import typer

    from repro.cli.common import ReproGroup

    app = typer.Typer(help="Bring a P/D cluster of engines up, down, or ask its status.", no_args_is_help=True,
                      cls=ReproGroup)

    def _fail(exc: Exception) -> None:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)

    @app.command("up")
    def up(
        topology: str = typer.Argument("2p4d", help="shorthand like 2p4d, a YAML path, or a name in data/clusters/"),
        launcher: str | None = typer.Option(None, help=" | ".join(LAUNCHERS) + " (default: the YAML's, else emulated)"),
        profile: str | None = typer.Option(None, help="hardware profile for every instance"),
        kv_budget_tokens: int | None = typer.Option(None, help="KV budget per instance (tokens)"),
        time_scale: float = typer.Option(1.0, help="emulated: physics runs K times faster"),
        state_file: Path = typer.Option(DEFAULT_STATE_FILE, help="where the instances are recorded"),
        dry_run: bool = typer.Option(False, help="vllm: print the commands, start nothing"),
        model: str | None = typer.Option(None, help="vllm: model (default: the profile's)"),
        dtype: str | None = typer.Option(None, help="vllm: --dtype (default bfloat16)"),
        gpus: str | None = typer.Option(None, help="vllm: comma-separated CUDA_VISIBLE_DEVICES per instance"),
        side_channel_host: str | None = typer.Option(None, help="vllm: VLLM_NIXL_SIDE_CHANNEL_HOST"),
        base_port: int = typer.Option(8100, help="vllm: first HTTP port"),
        log_dir: Path | None = typer.Option(None, help="where engine logs go (default runs/cluster-logs)"),
        timeout: float | None = typer.Option(None, help="seconds to wait for /health"),
    ) -> None:
        """Start the engines and record them in the state file."""
        try:
            topo = parse_topology(topology, profile=profile, kv_budget_tokens=kv_budget_tokens)
            kind = launcher or topo.launcher or "emulated"
            if kind not in LAUNCHERS:
                raise ConfigError(f"--launcher: {kind!r} is unknown; allowed: {list(LAUNCHERS)}")
            if dry_run and kind != "vllm":
                raise ConfigError("--dry-run: only the vllm launcher has commands to print")
            if not dry_run and Path(state_file).exists():
                st = load_state(state_file)
                if any(is_our_engine(i.pid) for i in st["instances"]) or st.get("launcher") == "remote":
                    raise ConfigError(
                        f"a cluster is already up (state file {state_file}); run `repro cluster down` first"
                    )
            if not dry_run:
                from repro.cluster.launchers.state import refuse_beside_running

                refuse_beside_running(f"repro cluster up {topology}")
            logs = log_dir or Path(state_file).parent / "cluster-logs"
            opts: dict[str, Any] = {}
            if kind == "emulated":
                opts = dict(time_scale=time_scale, log_dir=logs, detach=True)
            elif kind == "vllm":
                opts = dict(model=model, dtype=dtype, dry_run=dry_run, side_channel_host=side_channel_host,
                            base_port=base_port, log_dir=logs, detach=True,
                            gpus=[g.strip() for g in gpus.split(",")] if gpus else None)
            if timeout is not None and kind != "remote":
                opts["startup_timeout"] = timeout
            elif timeout is not None:
                opts["timeout"] = timeout
            lau = make_launcher(topo, kind, **opts)
        except ConfigError as exc:
            _fail(exc)
            return
        if not dry_run and hasattr(lau, "cluster_state"):
            lau.cluster_state = str(Path(state_file).resolve())
        try:
            instances = lau.start()
        except Exception as exc:
            lau.detach = False
            lau.stop()
            _fail(exc)
            return
        if dry_run:
            return
        save_state(state_file, kind, topo, instances, source=topology)
        for i in instances:
            typer.echo(f"{i.name:<10} {i.role:<8} {i.url:<28} engine_id={i.engine_id} pid={i.pid}")
        typer.echo(f"cluster {topo.shorthand} up ({kind}); state in {state_file}")

    @app.command("down")
    def down(state_file: Path = typer.Option(DEFAULT_STATE_FILE, help="the state file written by `up`")) -> None:
        """Stop the engines recorded in the state file."""
        try:
            stopped = cluster_down(state_file)
        except ConfigError as exc:
            _fail(exc)
            return
        typer.echo(f"stopped {len(stopped)} engine(s): {', '.join(stopped) if stopped else '-'}")

    @app.command("status")
    def status(state_file: Path = typer.Option(DEFAULT_STATE_FILE, help="the state file written by `up`"),
               as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
        """Health of every recorded engine (exit code 1 if any is unhealthy)."""
        try:
            rows = cluster_status(state_file)
        except ConfigError as exc:
            _fail(exc)
            return
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
        else:
            for r in rows:
                typer.echo(f"{r['name']:<10} {r['role']:<8} {r['url']:<28} "
                           f"{'healthy' if r['healthy'] else 'DOWN':<8} pid={r['pid']}")
        if not all(r["healthy"] for r in rows):
            raise typer.Exit(1)

    return app


cluster_app = _make_cluster_app()
