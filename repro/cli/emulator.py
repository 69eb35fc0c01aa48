"""``repro emulator ...``: the emulated engine as a typer sub-app (same options as ``python -m repro.emulator``).

Mounted in the main CLI (`repro.cli.root`); then
``repro emulator --port 8100 --profile a40-qwen2.5-3b --time-scale 4`` starts one engine.
The options are parsed by `repro.emulator.server.build_parser` (``repro emulator --help``).
"""

from __future__ import annotations

import typer

from repro.emulator.server import build_parser, main

emulator_app = typer.Typer(
    help="Run one emulated vLLM engine (OpenAI API + P/D NixlConnector protocol, timing from a hardware profile).",
    add_help_option=False,
)


@emulator_app.callback(invoke_without_command=True,
                       context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                         "help_option_names": []})
def emulator(ctx: typer.Context) -> None:
    """Options as `python -m repro.emulator --help`."""
    args = list(ctx.args)
    if "--help" in args or "-h" in args:
        typer.echo(build_parser().format_help())
        raise typer.Exit(0)
    raise typer.Exit(main(args))
