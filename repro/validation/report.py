"""The validation in the paper's report: which cluster's validation the simulated verdicts rest on, and each
validation's table and figures (`repro.paper.report` embeds `validation_section`).

A validation is found as a folder written by `repro validate` (``validation.json`` + ``validation.md``):
beside the report's results folder (``results/validation-*``), and the ones shipped with the package
(``data/validation/<name>/``: measured on this project's machine, with their commit).
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

from repro.paths import DATA_DIR

SHIPPED_DIR = DATA_DIR / "validation"
"""Validations shipped with the package (each a folder as `repro validate` writes it, without the runs)."""


def find_validations(results_dir: str | Path | None = None) -> list[Path]:
    """Validation folders: ``<results_dir>/../validation-*`` (and ``<results_dir>/validation-*``), then the
    shipped ones; each has a ``validation.json``."""
    found: list[Path] = []
    if results_dir is not None:
        base = Path(results_dir)
        for parent in (base, base.parent):
            found += sorted(p.parent for p in parent.glob("validation-*/validation.json"))
    found += sorted(p.parent for p in SHIPPED_DIR.glob("*/validation.json"))
    out, seen = [], set()
    for folder in dict.fromkeys(found):  # a shipped copy of a validation found beside the results: once
        rec = json.loads((folder / "validation.json").read_text())
        key = (rec.get("cluster"), rec.get("backend"), rec.get("started_unix"), rec.get("wall_s"))
        if key not in seen:
            seen.add(key)
            out.append(folder)
    return out


def headline(folder: Path) -> dict[str, Any]:
    """One validation in a sentence's parts: cluster, backend, commit, saturation, the load trusted up to,
    the median TTFT / TPOT errors and noise per load (the worse policy's), and how far the machine moved over the
    judged runs (the training trace's runs: ``drift``, when there were two)."""
    rec = json.loads((folder / "validation.json").read_text())
    out: dict[str, Any] = {"folder": str(folder), "cluster": rec["cluster"], "backend": rec["backend"],
                           "commit": rec.get("commit", "?"), "saturation_rate": rec["saturation_rate"],
                           "trusted_up_to": rec["trusted_up_to"], "shipped": SHIPPED_DIR in folder.parents,
                           "variant": rec.get("variant", "calibration"),
                           "simulator_rate": (rec.get("saturation") or {}).get("simulator_rate")}
    moved = rec.get("drift") or {}
    if moved.get("spread") and len(moved.get("runs", [])) >= 2:
        runs = moved["runs"]
        out["drift"] = {"minutes": (runs[-1]["started_unix"] - runs[0]["started_unix"]) / 60,
                        "runs": len(runs), **{f"{m}_spread": float(moved["spread"][m]) for m in ("ttft_s", "tpot_s")}}
    table_path = folder / "validation.csv"
    if table_path.exists() and table_path.stat().st_size > 1:
        import pandas as pd

        t = pd.read_csv(table_path)
        if "variant" in t.columns and rec.get("variant"):  # the validation's verdict: its primary physics
            t = t[t["variant"] == rec["variant"]]
        if len(t):
            cols = [c for c in ("ttft_err", "tpot_err", "ttft_noise", "tpot_noise") if c in t.columns]
            by = t.groupby("fraction")[cols].max().sort_index()
            out["levels"] = {f"{k:g}": {c: float(v[c]) for c in cols} for k, v in by.iterrows()}
    return out


def rests_on(results_dir: str | Path | None, testbed: str = "") -> str:
    """The sentence a report of simulated verdicts carries: which validations of the simulator against a real
    cluster exist and what they found; that none was made on ``testbed`` (the profile the verdicts simulate)
    unless one was."""
    found = [headline(f) for f in find_validations(results_dir)]
    real = [h for h in found if h["backend"] == "vllm"]
    if not real:
        return ("The simulator behind these verdicts has not been validated against a real cluster here: "
                "`repro validate --cluster FILE` measures how far it is from one.")
    parts = []
    for h in real:
        trusted = h["trusted_up_to"]
        within = (f"within its error budget up to {trusted:g} x saturation" if trusted and trusted > 0
                  else "outside its error budget at every load measured")
        errs = h.get("levels") or {}
        err = "; ".join(f"{k} x: TTFT {100 * v['ttft_err']:.0f} %, TPOT {100 * v['tpot_err']:.0f} %"
                        + (f" (the machine's own noise {100 * v['ttft_noise']:.0f} % / {100 * v['tpot_noise']:.0f} %)"
                           if not math.isnan(v.get("ttft_noise", math.nan)) else "")
                        for k, v in errs.items() if not math.isnan(v["ttft_err"]))
        sim_rate = h.get("simulator_rate")
        sat = (f"; saturation {h['saturation_rate']:.3g} req/s live, {sim_rate:.3g} simulated "
               f"({100 * (sim_rate / h['saturation_rate'] - 1):+.0f} %)" if sim_rate and h["saturation_rate"] else "")
        d = h.get("drift")
        moved = (f"; the machine itself moved up to x {d['ttft_s_spread']:.2f} in TTFT and x {d['tpot_s_spread']:.2f} "
                 f"in TPOT over its {d['minutes']:.0f} minutes (one trace run {d['runs']} times)" if d else "")
        parts.append(f"{h['cluster']} (real vLLM, commit {h['commit']}{', shipped' if h['shipped'] else ''}, "
                     f"physics {h.get('variant', 'calibration')}): "
                     f"{within}" + (f" (worst policy's median errors: {err})" if err else "") + sat + moved)
    on = "" if any(testbed and testbed in str(h["cluster"]) for h in real) else (
        f" None of them is the testbed these verdicts simulate{f' ({testbed})' if testbed else ''}: they say how "
        f"far the simulator's engine and scheduler model is from real vLLM engines, not that its constants are "
        f"this testbed's.")
    return "The simulator was validated against: " + " | ".join(parts) + "." + on


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f"<figure><img class=fig alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(path.name)}</figcaption></figure>")


def validation_section(results_dir: str | Path | None) -> str:
    """The report's "Simulator validation" section: every validation found (`find_validations`), its
    Markdown table and its two figures; a line saying how to make one when there is none."""
    from markdown_it import MarkdownIt

    folders = find_validations(results_dir)
    parts = ["<h2 id=validation>Simulator validation</h2>"]
    if not folders:
        parts.append("<p>No validation of the simulator against a cluster: run <code>repro validate --cluster "
                     "FILE</code>.</p>")
        return "".join(parts)
    md = MarkdownIt("commonmark").enable("table")
    for folder in folders:
        text = (folder / "validation.md").read_text() if (folder / "validation.md").exists() else ""
        parts.append(md.render(text))
        if SHIPPED_DIR in folder.parents:  # shipped: its figures stay in the package (the page stays small)
            where = html.escape(str(folder.relative_to(DATA_DIR.parent)))
            parts.append(f"<p class=ctx>Shipped with the package; its figures: <code>{where}/*.png</code>.</p>")
            continue
        for name in ("error_vs_load.png", "predicted_vs_measured.png"):
            if (folder / name).exists():
                parts.append(_figure(folder / name))
    return "".join(parts)
