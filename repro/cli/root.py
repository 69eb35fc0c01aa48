"""The ``repro`` command line (typer): the commands of each group live in their own module of this
package; this module assembles them, each behind the error boundary (`repro.cli.common.boundary`:
bad input is one line naming the field, exit code 2), their docstrings reflowed for the terminal
(`repro.cli.common.reflow_all`)."""

from __future__ import annotations

import sys

import typer

from repro.cli.calibrate import calibrate_cli
from repro.cli.cluster import cluster_app
from repro.cli.common import ReproGroup, command, reflow_all
from repro.cli.compare import compare_cli
from repro.cli.conclusion import conclusion_cmd
from repro.cli.data import data_app
from repro.cli.emulator import emulator
from repro.cli.experiment import anchor, run, saturate
from repro.cli.gates import gates_cli
from repro.cli.identify import identify_cli
from repro.cli.info import native, policies
from repro.cli.loadgen import loadgen_cli
from repro.cli.models import models_cli
from repro.cli.paper import paper_cli
from repro.cli.proxy import proxy
from repro.cli.report import report_cli
from repro.cli.validate import validate_cli

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Calibrate, Then Route: reproduction harness.",
                  cls=ReproGroup)

for _name, _fn in (("run", run), ("saturate", saturate), ("anchor", anchor), ("policies", policies),
                   ("native", native)):
    command(app, _fn, _name)
app.add_typer(data_app(), name="data")
for _name, _fn in (("proxy", proxy), ("loadgen", loadgen_cli), ("gates", gates_cli), ("calibrate", calibrate_cli),
                   ("paper", paper_cli), ("report", report_cli), ("conclusion", conclusion_cmd),
                   ("compare", compare_cli), ("validate", validate_cli), ("identify", identify_cli),
                   ("models", models_cli)):
    command(app, _fn, _name)
app.add_typer(cluster_app, name="cluster", help="Bring a cluster up or down, or show it.")
app.command("emulator", help="Run one emulated vLLM engine (options as python -m repro.emulator --help).",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
            add_help_option=False)(emulator)
reflow_all(app)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
