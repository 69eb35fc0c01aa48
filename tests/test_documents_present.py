"""The documents, comments and docstrings say what is true of the code now, not when or in which piece of work
it was found: history lives in CHANGELOG.md and the git log (docs/ARCHITECTURE.md; ../shared/DOCS-STYLE.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_WORK = ("iss" + "ue", "sess" + "ion", "stre" + "tch")  # spelled apart: this file is scanned too
HISTORY = re.compile(r"\b(?:" + "|".join(f"[{w[0].upper()}{w[0]}]{w[1:]}" for w in _WORK) + r")s? #?\d+"
                     + rf"|\b(?:before|at) {_WORK[0]}\b")
"""A reference to a numbered piece of work (the tracker's word followed by its number)."""
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
"""A calendar date: in a document's prose, the date of a piece of work (a record's date is data, kept in a
generated block or in the record itself)."""
GENERATED = re.compile(r"<!-- (\w+):begin -->.*?<!-- \1:end -->", re.S)
DOCUMENTS = [ROOT / "README.md", ROOT / "REPRODUCE.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = sorted(p for d in ("repro", "benchmarks", "tests", "notebooks", ".ci") for p in (ROOT / d).rglob("*")
                 if p.is_file() and p.suffix in (".py", ".md", ".sh", ".yaml", ".yml", ".toml", "")
                 and "__pycache__" not in p.parts and p.name != Path(__file__).name)


def history_in(text: str) -> list[str]:
    """Each numbered piece of work ``text`` names, with a little context."""
    return [text[max(0, m.start() - 30):m.end() + 10].replace("\n", " ") for m in HISTORY.finditer(text)]


def dates_in_prose(text: str) -> list[str]:
    """Each calendar date outside ``text``'s generated blocks."""
    prose = GENERATED.sub("", text)
    return [prose[max(0, m.start() - 40):m.end()].replace("\n", " ") for m in DATE.finditer(prose)]


def test_the_rules_catch_what_they_are_for():
    words = _WORK
    assert all(history_in(f"the fit of {w} 30 (kept)") for w in words)
    assert history_in(f"as before {words[0]} 15")
    assert not history_in(f"an aiohttp Client{words[1].title()} per engine; each in a {words[1]} of its own")
    assert dates_in_prose("measured on 2026-12-01, quiet") == ["measured on 2026-12-01"]
    assert dates_in_prose("<!-- t:begin -->\nrecorded 2026-12-01\n<!-- t:end -->") == []


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_documents_tell_no_history(doc):
    text = doc.read_text(encoding="utf-8")
    assert history_in(text) == []
    assert dates_in_prose(text) == []


def test_comments_and_docstrings_tell_no_history():
    assert SOURCES  # scanned
    found = [f"{p.relative_to(ROOT)}: {h}" for p in SOURCES for h in history_in(p.read_text(encoding="utf-8",
                                                                                            errors="replace"))]
    assert found == []
