"""``repro policies`` and ``repro native``: what is registered, and what runs compiled."""

from __future__ import annotations

from rich.table import Table

from repro.cli.common import console


def policies() -> None:
    """List the registered routing policies, each with its options (``-o KEY=VALUE``) and their defaults; the
    scorers' options also with their types and meaning."""
    import dataclasses
    import inspect

    from repro.routing.policies import POLICIES, available_policies

    for name in available_policies():
        cls = POLICIES[name]
        summary = " ".join(inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].split())  # first paragraph
        console.print(f"[bold]{name}[/bold]: {summary}")
        record = getattr(cls, "Options", None)
        if dataclasses.is_dataclass(record):  # typed options: each with its type, default and meaning
            for key, kind, default, help_text in record.describe():
                console.print(f"    -o {key}=<{kind}> (default {default!r}): {help_text}", highlight=False)
            continue
        params = inspect.signature(cls).parameters
        options = ", ".join(f"{key}={params[key].default!r}" for key in cls.param_names())
        if options:
            console.print(f"    options: {options}", highlight=False)


def native() -> None:
    """Which hot modules run compiled (mypyc, built by the install) and which from their Python sources."""
    from repro import native as nat

    table = Table("module", "in use", "why")
    for name, state, why in nat.describe():
        table.add_row(name, state, why)
    console.print(table)
    console.print(f"Same results either way; the compiled ones are faster. ${nat.PURE_ENV}=1 uses the sources.",
                  highlight=False)
