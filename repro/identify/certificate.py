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


QUEUE_DIR = DATA_DIR / "identify" / "queue_bound"
"""The shipped independent queue bound (`repro.identify.queue_bound --out`): ``bound.json``, ``edges.csv``."""
MODELS_DIR = DATA_DIR / "identify" / "models"

HOLD = "the facts hold together"
ONLY_PRIORS = "conflict only inside these models"
CONFLICT = "facts conflict under every model and the queue bound"


@dataclass(frozen=True)
class DocumentsBound:
    """The documents facts as a bound, in three parts: each model's widest feasible gap over its searches (the
    fit's search, the known vectors and the aimed search, `repro.identify.separation`), the independent queue's
    widest confirmed gap (`repro.identify.queue_bound`), and how the queue's gap moves as each prior's edge moves
    inward (its edge table); ``verdict`` one of `HOLD`, `ONLY_PRIORS`, `CONFLICT`."""

    need: float
    models: tuple[dict[str, Any], ...]
    queue: dict[str, Any] | None
    edges: tuple[dict[str, Any], ...]
    verdict: str
    sim_edges: tuple[dict[str, Any], ...] = ()
    """The widest simulator gap's edge table (`repro.identify.separation.edge_table`, ``edges.csv`` in that
    model's folder: ``repro models --edges``), none when not computed."""

    @property
    def widest(self) -> dict[str, Any] | None:
        """The model whose searches found the widest feasible gap."""
        ok = [m for m in self.models if math.isfinite(float(m.get("widest_gap", math.nan)))]
        return max(ok, key=lambda m: float(m["widest_gap"])) if ok else None


def documents_bound(models_dir: Path = MODELS_DIR, queue_dir: Path = QUEUE_DIR) -> DocumentsBound:
    """The shipped bound (`DocumentsBound`) from ``separation.csv`` (one row per model), ``bound.json`` and
    ``edges.csv``; the verdict: `HOLD` when a simulator model's widest feasible gap reaches the paper's +0.11 less
    2 sd, `ONLY_PRIORS` when only the queue model's does, `CONFLICT` when neither does."""
    import pandas as pd

    from repro.identify.separation import PAPER_FLOOR, PAPER_RR, SD

    need = (PAPER_FLOOR - PAPER_RR) - 2 * SD * math.sqrt(2)
    sep = models_dir / "separation.csv"
    models = tuple(pd.read_csv(sep).to_dict("records")) if sep.exists() else ()
    queue = json.loads((queue_dir / "bound.json").read_text()) if (queue_dir / "bound.json").exists() else None
    edges = tuple(pd.read_csv(queue_dir / "edges.csv").to_dict("records")) if (queue_dir / "edges.csv").exists() \
        else ()
    sim_opens = any(math.isfinite(float(m["widest_gap"])) and float(m["widest_gap"]) >= need for m in models)
    queue_opens = bool(queue and queue.get("opens"))
    verdict = HOLD if sim_opens else (ONLY_PRIORS if queue_opens else CONFLICT)
    found = [m for m in models if math.isfinite(float(m.get("widest_gap", math.nan)))]
    widest = max(found, key=lambda m: float(m["widest_gap"])) if found else None
    sim_edges_csv = models_dir / str(widest["model"]) / "edges.csv" if widest is not None else None
    sim_edges = tuple(pd.read_csv(sim_edges_csv).to_dict("records")) if sim_edges_csv and sim_edges_csv.exists() \
        else ()
    return DocumentsBound(need, models, queue, edges, verdict, sim_edges)


def resting_edges(b: DocumentsBound) -> list[tuple[str, float, float]]:
    """The parameters the widest simulator gap rests on: ``(parameter, value, gap)`` for each one whose first step
    inward from the widest vector (`repro.identify.separation.EDGE_STEPS`) leaves a gap below the need or no
    feasible vector, the smallest gap first."""
    first = min((float(e["step"]) for e in b.sim_edges if float(e["step"]) > 0), default=None)
    out = []
    for e in b.sim_edges:
        if first is None or float(e["step"]) != first:
            continue
        gap = float(e["gap"]) if bool(e["feasible"]) else math.nan
        if not gap >= b.need:  # below the need, or infeasible (NaN)
            out.append((str(e["parameter"]), float(e["value"]), gap))
    return sorted(out, key=lambda t: (math.isfinite(t[2]), t[2]))


def bound_sentence(b: DocumentsBound | None = None) -> str:
    """The bound in one sentence, for the conclusion and report.html."""
    b = documents_bound() if b is None else b
    best = b.widest
    parts = [f"The documents facts (round-robin 0.585, every load-aware policy >= 0.695; §V-C): {b.verdict}"]
    if best is not None:
        searched = (f"{int(best['vectors'])} vectors evaluated, {int(best['feasible'])} of them feasible and counted: "
                    "an aimed search's vectors count through their fresh-trace checks")
        parts.append(f"the simulator's widest feasible gap is {float(best['widest_gap']):+.4f} against the "
                     f"{b.need:.4f} needed, on {best['model']} ({searched}; round-robin's P99 TTFT there "
                     f"{float(best['rr_ttft_p99_s']):.1f} s against the paper's 1.1 s)")
    for m in b.models:
        aimed = m.get("aimed_feasible")
        if aimed is not None and math.isfinite(float(aimed)) and float(aimed) > 0:
            conf = float(m.get("aimed_confirmed_gap", math.nan))
            fresh = (f"{conf:+.4f} on 60 fresh traces at the rate where round-robin holds 0.585 on them"
                     if math.isfinite(conf) else "none of its widest three holds round-robin at 0.585 on 60 fresh "
                                                 "traces")
            parts.append(f"the search aimed at the gap on {m['model']} evaluated {int(aimed)} feasible vectors: "
                         f"widest {float(m['aimed_widest_gap']):+.3f}, {fresh}")
    if b.sim_edges:
        rests = resting_edges(b)
        step = min(float(e["step"]) for e in b.sim_edges if float(e["step"]) > 0)
        moved = (f"moved {step:.0%} of the way from the widest vector toward its prior's middle (each evaluated on "
                 "the search's 3 traces)")
        if rests:
            said = ", ".join(f"{name} (to {value:.3g}: " + (f"{gap:+.3f})" if math.isfinite(gap) else
                                                             "round-robin's 0.585 out of reach)")
                             for name, value, gap in rests)
            parts.append(f"that gap rests on the edges of its priors: each of these {moved} alone leaves less than "
                         f"the need: {said}")
        else:
            parts.append(f"no parameter {moved} alone closes that gap")
    if b.queue is not None and b.queue.get("confirmed_gap") is not None:
        parts.append(f"an independent queue model opens {float(b.queue['confirmed_gap']):+.3f} "
                     f"({int(b.queue['vectors'])} vectors, confirmed on fresh traces)")
    if b.edges:
        worst = [e for e in b.edges if not bool(e["feasible"])]
        parts.append("its gap hinges on the documents' length tail, which the paper does not state"
                     + (f" (a lognormal spread of {max(float(e['value']) for e in worst):.1f} or less leaves "
                        "round-robin's 0.585 out of reach)" if worst else ""))
    return "; ".join(parts) + " (docs/IDENTIFY.md, 'The documents facts')."


def bound_note(key: str, b: DocumentsBound | None = None) -> str:
    """The short sentence a headline row resting on the documents facts carries in the conclusion ("" for other
    rows, or when nothing is shipped)."""
    if key.partition("@")[0] not in DOCUMENTS_ROWS:
        return ""
    b = documents_bound() if b is None else b
    best = b.widest
    if best is None:
        return ""
    queue = (f", an independent queue {float(b.queue['confirmed_gap']):+.3f}"
             if b.queue is not None and b.queue.get("confirmed_gap") is not None else "")
    return (f"the documents facts as a bound: {b.verdict} (widest feasible gap {float(best['widest_gap']):+.3f} "
            f"against {b.need:.3f} needed in simulation{queue}; docs/IDENTIFY.md)")


BOUND_DOC = "docs/IDENTIFY.md"
"""The document whose bound block (between ``<!-- bound:begin -->`` and ``<!-- bound:end -->``) is `bound_sentence`
(`repro conclusion --docs` writes it; a test compares)."""


BEGIN, END = "<!-- bound:begin -->", "<!-- bound:end -->"


def doc_block(text: str, name: str) -> str:
    """The lines of a document's ``text`` between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` ("" without
    both markers)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        return ""
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def replace_doc_block(text: str, name: str, body: str) -> str:
    """``text`` with its ``name`` block replaced by ``body`` (everything outside the markers kept); a document
    without both markers is returned unchanged."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        return text
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def bound_block(text: str) -> str:
    """The bound block of a document's ``text`` ("" without one, or empty)."""
    return doc_block(text, "bound")


def replace_bound_block(text: str, sentence: str) -> str:
    """``text`` with its bound block replaced by ``sentence`` (`replace_doc_block`)."""
    return replace_doc_block(text, "bound", sentence)
