"""The ``repro`` command line (typer): one module per command group, assembled in `repro.cli.app`."""

from repro.cli.app import app, main

__all__ = ["app", "main"]
