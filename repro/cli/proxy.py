"""``repro proxy``: the router proxy in front of a P/D cluster (OpenAI-compatible, streaming)."""

from __future__ import annotations

from pathlib import Path

import typer

from repro.cli.common import console, parse_options


def proxy(
    cluster: Path = typer.Option(
        ..., help="`repro cluster up` state file (runs/cluster.json) or a cluster YAML with URLs"
    ),
    policy: str = typer.Option("marginal_cost", help="policy name or pkg.module:Class"),
    option: list[str] = typer.Option([], "--option", "-o",
                                     help="policy option KEY=VALUE (repeatable; `repro policies`: each one's type)"),
    cost_model: str = typer.Option("calibrated", "--cost-model", help="calibrated | sim_derived | calibration JSON"),
    predictor: str = typer.Option("default", help="default | constant"),
    noise: float = typer.Option(0.0, help="predictor relative error"),
    host: str = typer.Option("127.0.0.1", help="bind address (127.0.0.1 unless you mean to expose it)"),
    port: int = typer.Option(8000, help="port"),
    time_scale: float = typer.Option(1.0, "--time-scale", help="the engines' time compression (1 for real vLLM)"),
    journal: Path | None = typer.Option(None, help="append one JSON line per request here"),
    poll_interval: float = typer.Option(0.05, "--poll-interval", help="engine /metrics poll period (physics s)"),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="REPRO_PROXY_API_KEY", help="require this bearer token; forwarded to engines"
    ),
) -> None:
    """Run the router proxy in front of a P/D cluster (OpenAI-compatible, streaming)."""
    from repro.live.proxy.app import serve
    from repro.live.proxy.config import ProxyConfig, endpoints_from_cluster

    cfg = ProxyConfig(
        endpoints=endpoints_from_cluster(cluster), policy=policy, policy_options=parse_options(option),
        cost_model=cost_model, predictor=predictor, predictor_noise=noise, host=host, port=port,
        time_scale=time_scale, journal=str(journal) if journal else None, poll_interval_s=poll_interval,
        api_key=api_key,
    )
    from repro.routing.cost_model import CostModel
    from repro.routing.policies import make_policy

    make_policy(policy, CostModel.load(cost_model), **cfg.policy_options)  # fail fast on bad names/options
    console.print(f"proxy on http://{host}:{port} -> {len(cfg.endpoints)} engines, policy {policy}")
    serve(cfg)
