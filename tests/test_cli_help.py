"""Every command's ``--help`` reads well in a terminal: its docstring's paragraphs are wrapped by the
terminal, not broken where the source file broke them, and nothing of them is lost (rich markup such as
``[data]`` included)."""

from __future__ import annotations

import inspect
import re

import pytest
import typer
from typer.testing import CliRunner

from repro.cli.common import reflow_help
from repro.cli.root import app

WIDTH = 100


def _commands() -> list[tuple[tuple[str, ...], object]]:
    root = typer.main.get_command(app)
    out: list[tuple[tuple[str, ...], object]] = []

    def walk(cmd, path: tuple[str, ...]) -> None:
        out.append((path, cmd))
        if hasattr(cmd, "commands"):  # a group (typer's own click types)
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))

    walk(root, ())
    return out


COMMANDS = _commands()


def _description(text: str) -> list[str]:
    """The help's prose: the lines between the usage line and the first panel, without the frame."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:")) + 1
    end = next((i for i, line in enumerate(lines) if line.lstrip().startswith("╭")), len(lines))
    return [line.rstrip() for line in lines[start:end]]


def test_every_command_is_checked():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"paper", "run", "validate", "cluster up", "data sharegpt", "identify"} <= names


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) or "repro" for p, _ in COMMANDS])
def test_help_has_no_mid_sentence_breaks_and_loses_nothing(path, cmd):
    if not cmd.add_help_option:  # `repro emulator` hands --help to the emulator's own parser
        pytest.skip("passes --help through")
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH), "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    prose = _description(res.output)
    # a line that ends although the next line's first word would have fitted is a break from the source
    for line, nxt in zip(prose, prose[1:], strict=False):
        if line.strip() and nxt.strip():
            first_word = nxt.split()[0]
            assert len(line) + 1 + len(first_word) > WIDTH - 2, (
                f"repro {' '.join(path)} --help breaks a sentence:\n{line}\n{nxt}")
    # every word of the docstring is shown, in order (the markup of square brackets kept)
    doc = inspect.cleandoc(cmd.help or "")
    shown = " ".join(" ".join(prose).split())
    for para in reflow_help(doc.replace("\\[", "[")).split("\n\n"):
        words = " ".join(para.split())
        assert words in shown, f"repro {' '.join(path)} --help lost: {words!r}"


def test_reflow_joins_paragraph_lines_and_keeps_lists():
    text = """First line.

    A paragraph broken
    in the source.

    - one item
    - another
      continued"""
    assert reflow_help(text) == "First line.\n\nA paragraph broken in the source.\n\n- one item\n- another continued"
    assert re.search(r"\n", reflow_help("a\nb")) is None


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) or "repro" for p, _ in COMMANDS])
def test_option_panels_say_what_each_option_takes(path, cmd):
    """A flag takes no value: no ``<bool>`` beside it; a repeatable option shows its element's type and says it
    repeats (typer's own display says ``<list[str]>``); a command with more than 20 options groups them."""
    if not cmd.add_help_option:
        pytest.skip("passes --help through")
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    assert "<bool>" not in res.output and "<list[" not in res.output, res.output
    repeatable = [p for p in getattr(cmd, "params", []) if getattr(p, "multiple", False)]
    assert res.output.count("(repeatable)") >= len(repeatable)
    if len(getattr(cmd, "params", [])) > 20:
        assert res.output.count("╭─") >= 3, f"repro {' '.join(path)}: {len(cmd.params)} options in one panel"
