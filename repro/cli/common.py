"""What every command module shares: the error boundary (bad input: one line naming the field, exit code
2), the consoles, the sweep's progress bar, the parsers of comma lists and KEY=VALUE options, and the
help text's reflow (`reflow_help`: a docstring's paragraphs as one line each, so the terminal wraps them)."""

from __future__ import annotations

import functools
import inspect
import re
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.progress import Progress
from typer.core import TyperCommand, TyperGroup, TyperOption

from repro.errors import ConfigError, RunFailed, RunInvalid, parse_assignments

console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True)


def boundary(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ConfigError into one clear line and exit code 2; RunInvalid (a live run the machine could
    not keep up with, at any time scale tried) into its message and exit code 3; RunFailed (a run of a
    sweep raised) into its message, naming the spec, and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except RunInvalid as exc:
            err_console.print(f"[red]invalid run:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(3) from None
        except RunFailed as exc:
            err_console.print(f"[red]run failed:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper


class SweepBar:
    """A sweep's progress (`repro.experiment.runner.SweepBar`) as a transient rich bar over its runs."""

    def __init__(self, total: int, label: str) -> None:
        self._progress = Progress(transient=True)
        self._progress.start()
        self._task = self._progress.add_task(label, total=total)

    def advance(self, n: int) -> None:
        if n:
            self._progress.advance(self._task, n)

    def close(self) -> None:
        self._progress.stop()


def one_of(values: tuple[str, ...]) -> str:
    """``a | b | c``: a choice's values for a help text."""
    return " | ".join(values)


def validity_cell(summary: dict[str, Any]) -> str:
    """``yes (K=4)`` / ``NO (K=1)``: a live run's validity and the time scale it ran at."""
    return f"{'yes' if summary.get('valid') else 'NO'} (K={summary.get('time_scale_used', float('nan')):g})"


def split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_seeds(value: str) -> list[int]:
    out = []
    for part in split(value):
        try:
            out.append(int(part))
        except ValueError:
            raise ConfigError(f"spec: field 'seed' = {part!r} must be an integer (or a comma list)") from None
    return out


def parse_options(pairs: list[str]) -> dict[str, Any]:
    return parse_assignments(pairs, "spec: field 'policy_options'")


_KEEP_BREAK = re.compile(r"^\s*([-*] |\d+[.)] |\x08|::|>)")  # \x08: click's "\b" (keep this block)


def reflow_help(text: str | None) -> str | None:
    """A docstring as help text for a terminal: dedented, each paragraph's lines joined into one (the
    terminal wraps it at its width; typer keeps a docstring's own line breaks, which break sentences
    mid-line). Lines that start a list item (``- ``, ``* ``, ``1. ``) or a ``\\b`` block keep their break;
    paragraphs stay separated by a blank line."""
    if not text:
        return text
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        merged: list[str] = []
        for line in para.splitlines():
            if merged and not _KEEP_BREAK.match(line) and not merged[-1].startswith("\b"):
                merged[-1] = f"{merged[-1]} {line.strip()}"
            else:
                merged.append(line.rstrip())
        out.append("\n".join(merged))
    return "\n\n".join(out)


def command(app: typer.Typer, fn: Callable[..., Any], name: str | None = None, **settings: Any) -> None:
    """Register ``fn`` on ``app`` behind the error boundary (`reflow_all` reflows its help)."""
    app.command(name, **settings)(boundary(fn))


class _ShowsWhatOptionsTake:
    """``--help`` that says what each option takes: nothing for a flag (typer shows ``<bool>``, as if it took a
    value), and for a repeatable option its element's type, marked repeatable (not ``<list[str]>``)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)  # type: ignore[misc]
        for p in params:
            if isinstance(p, TyperOption) and p.metavar is None:
                if p.is_flag:
                    p.metavar = ""
                elif p.multiple:
                    label = p.display_type(ctx) or ""
                    element = label[len("<list["):-len("]>")] if label.startswith("<list[") else label.strip("<>")
                    p.metavar = f"<{element}> (repeatable)"
        return params


class ReproCommand(_ShowsWhatOptionsTake, TyperCommand):
    """A command of ``repro`` (`_ShowsWhatOptionsTake`)."""


class ReproGroup(_ShowsWhatOptionsTake, TyperGroup):
    """A command group of ``repro`` (`_ShowsWhatOptionsTake`)."""


def reflow_all(app: typer.Typer) -> None:
    """Every command's and group's help under ``app`` reflowed (`reflow_help`), its square brackets
    escaped (typer renders help as rich markup: ``pip install '.[data]'`` would lose ``[data]``); each command a
    `ReproCommand` (its options' types shown as they are given)."""
    from rich.markup import escape

    def fix(text: str | None) -> str | None:
        flowed = reflow_help(text)
        return escape(flowed) if flowed else flowed

    for info in app.registered_commands:
        info.help = fix(info.help or inspect.getdoc(info.callback))
        if info.cls in (None, TyperCommand):
            info.cls = ReproCommand
    for group in app.registered_groups:
        group.help = fix(group.help if isinstance(group.help, str) else None)
        if group.typer_instance is not None:
            reflow_all(group.typer_instance)


RUNNING = "; or `repro cluster up`'s state file (runs/cluster.json): its running engines, used as they are"
"""The sentence every live command's ``--cluster`` help ends with: the engines `repro cluster up` started are
used as they run, never a second cluster."""
