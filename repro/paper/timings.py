"""The documents' wall-clock timings, written from the benchmark that measures them: ``benchmarks/bench_tiers.py``
keeps each timed command (the README's two commands, the slow test tier) in ``data/benchmarks/tiers.json`` with
its rounds, median, outcome, machine and commit; `readme_block` and `guide_block` are the text between the
``<!-- timings:begin -->`` / ``<!-- timings:end -->`` markers of README.md and docs/GUIDE.md (written by
``repro conclusion --docs``, checked by ``repro conclusion --check`` and the tests). Times are seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repro.paths import REPO_ROOT

TIMINGS = Path("data") / "benchmarks" / "tiers.json"
"""The benchmark's record, relative to the repository root."""
DOCS = {"README.md": "readme", "docs/GUIDE.md": "guide"}
"""The documents with a timings block, and which rendering each carries."""
BLOCK = "timings"
WHAT = {
    ("main", True): "the main job with the install from a clean clone",
    ("tests", True): "the tests with the install from a clean clone",
    ("tests", False): "the tests in an installed checkout",
    ("slow", False): "the slow tier (`python3 -m pytest -m slow`)",
    ("slow", True): "the slow tier from a clean clone",
    ("main", False): "the main job",
}


def load(root: Path = REPO_ROOT) -> list[dict[str, Any]]:
    """The recorded tiers (none when the record is missing)."""
    path = root / TIMINGS
    return list(json.loads(path.read_text(encoding="utf-8"))["tiers"]) if path.exists() else []


def duration(seconds: float) -> str:
    """``317.4`` -> ``5 min 17 s``; under a minute ``42 s``."""
    s = int(round(seconds))
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def _where(e: dict[str, Any]) -> str:
    m = e["machine"]
    busy = ", machine busy" if e.get("busy_allowed") else ""
    return f"{m['cores']} cores of an {m['cpu']}, commit {e['commit']}{busy}"


def _find(entries: list[dict[str, Any]], tier: str, clean: bool) -> dict[str, Any] | None:
    return next((e for e in entries if e["tier"] == tier and bool(e["clean_clone"]) == clean), None)


def phrase(e: dict[str, Any]) -> str:
    """One tier as a phrase: what, its median wall time over its rounds, and what pytest printed."""
    what = WHAT.get((e["tier"], bool(e["clean_clone"])), e["tier"])
    n = len(e["rounds"])
    said = f"; {e['outcome']}" if e["tier"] != "main" else ""
    ok = "" if e.get("ok", True) else " (a round failed)"
    return f"{what} {duration(e['median_s'])} (median of {n}{said}){ok}"


def readme_block(root: Path = REPO_ROOT) -> str:
    """The README's timings line: the two commands from a clean clone."""
    entries = load(root)
    got = [e for e in (_find(entries, "main", True), _find(entries, "tests", True)) if e]
    if not got:
        return (f"Not measured yet: `python3 benchmarks/bench_tiers.py main tests --clean-clone` writes {TIMINGS}.")
    where = "; ".join(sorted({_where(e) for e in got}))
    return (f"Measured by `python3 benchmarks/bench_tiers.py main tests --clean-clone` ({TIMINGS}): "
            + ", ".join(phrase(e) for e in got) + f"; {where}.")


def guide_block(root: Path = REPO_ROOT) -> str:
    """The guide's timings table: every recorded tier, its command, median, rounds, outcome, machine and commit."""
    entries = load(root)
    if not entries:
        return f"Not measured yet: `python3 benchmarks/bench_tiers.py TIER` writes {TIMINGS}."
    rows = ["| command | from | wall time (median) | rounds (s) | outcome | machine | commit | measured by |",
            "|---|---|---|---|---|---|---|---|"]
    for e in sorted(entries, key=lambda e: (["main", "tests", "slow"].index(e["tier"])
                                              if e["tier"] in ("main", "tests", "slow") else 9, not e["clean_clone"])):
        m = e["machine"]
        rounds = ", ".join(f"{r['wall_s']:.0f}" for r in e["rounds"])
        busy = " (busy)" if e.get("busy_allowed") else ""
        rows.append(f"| `{e['command']}` | {'a clean clone' if e['clean_clone'] else 'this checkout'} | "
                    f"{duration(e['median_s'])} | {rounds} | {e['outcome']} | {m['cores']} cores, {m['cpu']}{busy} | "
                    f"{e['commit']} | `{e['measured_by']}` |")
    return "\n".join(rows)


def blocks(root: Path = REPO_ROOT) -> dict[str, str]:
    """Each document's timings block (document path relative to the root -> its text)."""
    render = {"readme": readme_block, "guide": guide_block}
    return {doc: render[kind](root) for doc, kind in DOCS.items()}
