"""A certificate: sets of the paper's stated facts that no model of the mechanism catalogue satisfies together.

`repro models` fits every model of the catalogue to the paper's baseline numbers and searches each for the widest
documents gap between the baselines it allows (`repro.identify.separation`). When no model opens the gap the
paper states (round-robin at 0.585 where every load-aware policy holds >= 0.695, §V-C) within its noise, those
facts form a set no model of ours can satisfy together, inside the A40's physical bounds: `write` records it in
``data/identify/models/certificate.json``; `load` reads it back, and `note_for` gives the sentence that a verdict
resting on one of its facts carries (the headline rows, the conclusion, report.html).

A search finds the widest gap it visited, a lower bound on what a model allows, never a proof: the certificate
says how many vectors each model's search visited and the widest gap each found.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from repro.paths import DATA_DIR

PATH = DATA_DIR / "identify" / "models" / "certificate.json"


@dataclass(frozen=True)
class Fact:
    """One stated fact of the paper: its key (a reference or training row), section and words."""

    key: str
    section: str
    text: str


@dataclass(frozen=True)
class ConflictSet:
    """Facts no model of the catalogue satisfied together, the evidence, and the headline rows resting on them."""

    id: str
    facts: tuple[Fact, ...]
    evidence: str
    rows: tuple[str, ...]
    """Headline keys whose verdicts rest on a fact of the set."""


DOCUMENTS_FACTS = (
    Fact("fig3_rr_documents", "§V-C, Fig. 3", "round-robin collapses to 0.585 on documents"),
    Fact("fig3_loadaware_documents_min", "§V-C, Fig. 3", "every load-aware policy holds >= 0.695 on documents"),
)
DOCUMENTS_ROWS = ("fig3_worst_loadaware_minus_rr_documents", "fig3_loadaware_documents_min", "fig3_rr_documents",
                  "fig3_rr_documents_tail", "fig3_mc_minus_rr_documents")


def documents_set(separation: Sequence[dict[str, Any]], paper_gap: float, sd: float) -> ConflictSet | None:
    """The documents set when no model's search found a feasible gap within 2 sd of the paper's (``paper_gap``;
    ``sd`` the noise of one goodput mean), else None. ``separation``: one summary per model
    (`repro.identify.separation.summary`)."""
    need = paper_gap - 2 * sd * math.sqrt(2)
    widest = [(s["model"], float(s["widest_gap"]), int(s["vectors"]), int(s["feasible"])) for s in separation]
    if not widest or any(math.isfinite(g) and g >= need for _, g, _, _ in widest):
        return None
    parts = "; ".join(f"{m}: {g:+.3f} ({f} of {n} vectors with round-robin within 2 sd of 0.585)"
                      for m, g, n, f in widest)
    return ConflictSet(
        "documents_gap", DOCUMENTS_FACTS,
        f"the widest gap min(least-loaded, length-threshold) - round-robin any model's search found with round-robin "
        f"at 0.585 +- 0.03 is below {need:.3f} (the paper's +{paper_gap:.2f} less 2 sd): {parts}. Inside the A40's "
        "physical bounds, on 2p4d, the same rate for every policy (repro models, repro.identify.separation).",
        DOCUMENTS_ROWS)


def write(sets: Sequence[ConflictSet], path: Path = PATH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(s) for s in sets], indent=2) + "\n")
    load.cache_clear()
    return path


@functools.lru_cache(maxsize=4)
def load(path: Path = PATH) -> tuple[ConflictSet, ...]:
    """The shipped certificate's sets (none when it is not written)."""
    if not path.exists():
        return ()
    raw = json.loads(path.read_text())
    return tuple(ConflictSet(r["id"], tuple(Fact(**f) for f in r["facts"]), r["evidence"], tuple(r["rows"]))
                 for r in raw)


def note_for(key: str, sets: Sequence[ConflictSet] | None = None) -> str:
    """The sentence a verdict resting on a fact of a set carries ("" for none)."""
    base = key.partition("@")[0]
    for s in load() if sets is None else sets:
        if base in s.rows:
            facts = "; ".join(f"{f.text} ({f.section})" for f in s.facts)
            return (f"it rests on facts no model of our mechanism catalogue satisfies together ({facts}): see "
                    "docs/IDENTIFY.md, 'The documents facts'")
    return ""
