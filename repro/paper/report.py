"""`repro report`: one self-contained HTML page of a `repro paper` run.

The page holds the run's context (backend, scale, commit; no clock time, so a rerun is
byte-identical), the written conclusion and the grouped tally (`repro.paper.claims`), the verdict
table of every headline row (``results/<backend>-<scale>/summary.csv``: ours with its 95 %
interval, the paper's value, the verdict and its reason, how it was measured) and every figure of
``figures/<backend>-<scale>/`` (PNG, embedded as data URIs), grouped by notebook. Nothing is
fetched: it opens offline, from a file, in any browser. A small inline script counts the figures
that decoded and writes ``figures loaded N of M`` into the element ``#figures-status`` (the test's
headless browser reads it).
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import pandas as pd

from repro.errors import ConfigError
from repro.paper.claims import GROUP_TITLES, conclusion_markdown, tally
from repro.paper.figures import num
from repro.paper.findings import VERDICT_MARK
from repro.paper.rules import VERDICTS
from repro.statistics.intervals import Estimate

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#222;
line-height:1.4;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85rem;width:100%}th,td{padding:.25rem .45rem;border-bottom:1px solid #eee;
vertical-align:top}th{text-align:left;background:#f6f6f6}td.num{text-align:right;font-variant-numeric:tabular-nums;
white-space:nowrap}.v-reproduced{color:#176a2c}.v-not-reproduced,.v-contradicted{color:#a61b1b;font-weight:600}
.v-within-noise{color:#8a6d00}.v-input,.v-context{color:#777}.same{color:#999}
figure{margin:1rem 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.8rem;color:#555}
.tally span{margin-right:1rem}.ctx{color:#555;font-size:.9rem}code{font-size:.85em}
#conclusion{background:#fafaf5;border:1px solid #e6e2cc;padding:.2rem 1rem 1rem;margin:.6rem 0}
#conclusion h2{margin-top:.6rem}h1{margin:.4rem 0}
.reason{color:#555}.v-better{color:#176a2c;font-weight:600}.v-worse{color:#a61b1b;font-weight:600}.v-tie{color:#555}
.v-not-run{color:#999}
"""

SCRIPT = """
window.addEventListener('load', function () {
  var figs = Array.prototype.slice.call(document.querySelectorAll('img.fig'));
  var ok = figs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.getElementById('figures-status').textContent = 'figures loaded ' + ok + ' of ' + figs.length;
});
"""


def _cls(verdict: str) -> str:
    return "v-" + verdict.replace(" ", "-")


def _text(v: object) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else html.escape(str(v))


def verdict_table(summary: pd.DataFrame) -> str:
    """The verdict table as HTML rows (every headline row; a repeated measurement says which key it repeats)."""
    head = ("<tr><th>notebook</th><th>claim</th><th>ours [95% CI]</th><th>paper</th><th>verdict</th>"
            "<th>measured</th></tr>")
    rows = []
    for r in summary.itertuples():
        est = Estimate(float(r.ours), float(r.ours_lo), float(r.ours_hi))
        unit = _text(r.unit)
        meaning = _text(getattr(r, "meaning", ""))
        same = _text(getattr(r, "same_as", ""))
        verdict = str(r.verdict)
        rows.append(
            f"<tr><td>{_text(r.notebook)}</td><td><code>{_text(r.key)}</code><br>{meaning}</td>"
            f"<td class=num>{html.escape(est.text(3))} {unit}<br><small>{_text(r.interval)}</small></td>"
            f"<td class=num>{num(float(r.paper), '.4g')}</td>"
            f"<td class='{_cls(verdict)}'>{html.escape(VERDICT_MARK.get(verdict, verdict))}"
            + (f"<br><small class=reason>{_text(getattr(r, 'reason', ''))}</small>" if _text(getattr(r, "reason", ""))
               else "")
            + (f"<br><span class=same>same measurement as <code>{same}</code></span>" if same else "")
            + (f"<br><small>across plausible testbeds: {_text(getattr(r, 'robustness', ''))}</small>"
               if _text(getattr(r, "robustness", "")) else "")
            + f"</td><td>{_text(getattr(r, 'measured', ''))}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def tally_table(summary: pd.DataFrame) -> str:
    """The grouped tally (`repro.paper.claims.tally`) as an HTML table: groups by verdicts."""
    t = tally(summary)
    head = "<tr><th>group</th>" + "".join(f"<th class='{_cls(v)}'>{v}</th>" for v in VERDICTS) + "<th>total</th></tr>"
    rows = []
    for g in t.index:
        name = "all" if g == "total" else f"{g}: {GROUP_TITLES[g]}"
        rows.append(f"<tr><td>{html.escape(name)}</td>" + "".join(f"<td class=num>{int(t.loc[g, c]) or ''}</td>"
                                                                    for c in [*VERDICTS, "total"]) + "</tr>")
    return f"<table class=tally>{head}{''.join(rows)}</table>"


def certificate_html() -> str:
    """The certificate's sets of the paper's facts no model of the mechanism catalogue satisfies together
    (`repro.identify.certificate`), one line each with the rows resting on it, its evidence folded; "" when
    there is none."""
    from repro.identify.certificate import load

    sets = load()
    if not sets:
        return bound_html()
    items = "".join(
        f"<li><b>{html.escape('; '.join(f'{f.text} ({f.section})' for f in s.facts))}</b>: rows resting on it "
        f"{html.escape(', '.join(s.rows))}. <details><summary>its evidence</summary>{html.escape(s.evidence)}"
        "</details></li>" for s in sets)
    return (f"<div id=certificate><p><b>The certificate.</b> No model of our mechanism catalogue, inside the A40's "
            f"physical bounds, satisfies these sets of the paper's facts together (docs/IDENTIFY.md); a verdict "
            f"resting on one says so.</p><ul>{items}</ul></div>")


def bound_html() -> str:
    """The documents facts as a bound (`repro.identify.certificate.documents_bound`): its sentence, then its three
    parts folded (each model's widest feasible gap, the independent queue's, the queue's prior-edge table)."""
    from repro.identify.certificate import bound_sentence, documents_bound

    b = documents_bound()
    if not b.models and b.queue is None:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(str(m['model']))}</td><td>{float(m['widest_gap']):+.3f}</td>"
        f"<td>{int(m['feasible'])} of {int(m['vectors'])}</td><td>{float(m['rr']):.3f}</td>"
        f"<td>{float(m['load_aware_min']):.3f}</td><td>{float(m['rr_ttft_p99_s']):.2f}</td></tr>"
        for m in b.models if math.isfinite(float(m["widest_gap"])))
    edges = "".join(
        f"<tr><td>{html.escape(str(e['parameter']))}</td><td>{float(e['value']):.4g}</td>"
        f"<td>{float(e['round_robin']):.3f}</td><td>{float(e['gap']):+.3f}"
        f"{'' if bool(e['feasible']) else ' (infeasible)'}</td></tr>" for e in b.edges)
    return (f"<div id=documents-bound><p><b>The documents facts as a bound.</b> {html.escape(bound_sentence(b))}</p>"
            "<details><summary>each model's widest feasible gap, the queue's edge table</summary>"
            "<table><tr><th>model</th><th>widest feasible gap</th><th>feasible vectors</th><th>round-robin</th>"
            f"<th>load-aware min</th><th>RR P99 TTFT (s)</th></tr>{rows}</table>"
            + (f"<table><tr><th>prior moved inward</th><th>to</th><th>round-robin</th><th>queue gap</th></tr>{edges}"
               "</table>" if edges else "") + "</details></div>")


def validation_short(results_dir: Path, testbed: str) -> str:
    """One sentence per real cluster the simulator was validated against (saturation, the worst policy's median
    TTFT and TPOT errors over the loads), and whether one is this testbed; the whole account folded after it
    (`repro.validation.report.rests_on`)."""
    from repro.validation.report import find_validations, headline, rests_on

    full = rests_on(results_dir, testbed)
    real = [h for h in (headline(f) for f in find_validations(results_dir)) if h["backend"] == "vllm"]
    if not real:
        return f"<p id=rests-on>{html.escape(full)}</p>"
    parts = []
    for h in real:
        errs = [v for v in (h.get("levels") or {}).values() if not math.isnan(v["ttft_err"])]
        sim, live = h.get("simulator_rate"), h.get("saturation_rate")
        sat = f"saturation {100 * (sim / live - 1):+.0f} %" if sim and live else ""
        err = ", ".join(f"{name} {100 * min(v[k] for v in errs):.0f}-{100 * max(v[k] for v in errs):.0f} %"
                        for name, k in (("TTFT", "ttft_err"), ("TPOT", "tpot_err"))) if errs else ""
        name = Path(str(h["cluster"])).stem
        parts.append(f"{name}: " + ", ".join(x for x in (sat, err) if x))
    on = any(testbed and testbed in str(h["cluster"]) for h in real)
    short = ("The simulator against real vLLM engines on CPU (simulated vs live; the worst policy's median errors "
             f"over the loads): {'; '.join(parts)}. "
             + ("" if on else f"None of them is the testbed these verdicts simulate ({testbed}): they test the engine "
                              "and scheduler model, not its constants."))
    return (f"<p id=rests-on>{html.escape(short)}</p><details><summary>the validations in full</summary>"
            f"<p>{html.escape(full)}</p></details>")


def forest_html(summary: pd.DataFrame) -> str:
    """The conclusion's forest plot (`repro.paper.figures.claims_forest`), embedded as a PNG data URI."""
    import io

    import matplotlib.pyplot as plt

    from repro.paper.figures import claims_forest

    fig = claims_forest(summary)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (f"<figure><img class=fig alt='the claims, ours over the paper' src='data:image/png;base64,{data}'>"
            "<figcaption>Each claim's rows: ours / the paper's number with its interval, coloured by verdict; "
            "the deciding row in bold.</figcaption></figure>")


def conclusion_html(summary: pd.DataFrame) -> str:
    """The written conclusion (`repro.paper.claims.conclusion_markdown`: the claims on one screen, the forest
    plot, the details folded) rendered to HTML."""
    from markdown_it import MarkdownIt

    text = conclusion_markdown(summary, heading="## Conclusion", with_tally=False, figure=forest_html(summary))
    return f"<section id=conclusion>{MarkdownIt('commonmark').enable('table').render(text)}</section>"


def misses_html(results_dir: Path) -> str:
    """Notebook 06's misses by cause (``06_misses.csv``, `repro.paper.sections.heterogeneity.misses_table`) as a
    compact table with its one-line reading per workload; "" when the run did not write it."""
    from repro.paper.sections.heterogeneity import MISSES_SHOWN, misses_reading

    path = results_dir / "06_misses.csv"
    if not path.exists():
        return ""
    tab = pd.read_csv(path, keep_default_na=True)
    cols = [c for c in MISSES_SHOWN if c in tab.columns]
    head = "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td class=num>{num(float(v), '.3f')}</td>" if pd.api.types.is_number(v)
                                    else f"<td>{_text(v)}</td>" for v in r) + "</tr>"
                   for r in tab[cols].itertuples(index=False, name=None))
    reading = "".join(f"<li>{html.escape(line)}</li>" for line in misses_reading(tab).splitlines())
    return ("<h3 id=misses>Why policies tie or separate: misses by cause</h3><p class=ctx>Fractions of the requests "
            "sent, mean over the first three traces; P90 times in seconds; the bottleneck is the pool that held up "
            "most TTFT misses "
            f"(<code>repro.experiment.misses</code>).</p><ul>{reading}</ul><table class=misses>{head}{body}</table>")


def figure_html(path: Path) -> str:
    """One figure, embedded (PNG as a data URI), captioned with its file name."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f"<figure><img class=fig alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(path.name)}</figcaption></figure>")


def scorecard_html(table: pd.DataFrame, figure: Path | None = None) -> str:
    """The scorecard of a run with ``--policy`` (``scorecard.csv``, `repro.paper.sections.scorecard`): per
    policy the summary by claim group, then every row (ours with its 95 % interval, the paper's number where
    the row is one of its claims, the verdict and its reason), then the forest plot."""
    from repro.paper.sections.scorecard import summarize

    parts = ["<p>Your policies against the paper's router and the best of its baselines, on the same traces, "
             "each claim group made by its own section's code. Positive differences: yours is better. "
             "<i>as the router</i>: the paper's claims about its router asked of yours (the same rule table).</p>"]
    summary = summarize(table)
    for p in dict.fromkeys(table.policy.astype(str)):
        s = summary[summary.policy == p]
        head = ("<tr><th>claim</th><th>as the router</th><th>vs the paper's router</th>"
                "<th>vs the best baseline</th></tr>")
        body = "".join(f"<tr><td>{_text(r[1])}</td><td>{_text(r[2])}</td><td>{_text(r[3])}</td><td>{_text(r[4])}</td>"
                       "</tr>" for r in s.itertuples(index=False, name=None))
        rows = []
        for r in table[(table.policy.astype(str) == p) & (table.comparison != "not run")].itertuples():
            est = Estimate(float(r.ours), float(r.ours_lo), float(r.ours_hi))
            rows.append(f"<tr><td>{_text(r.claim)}</td><td>{_text(r.comparison)}<br><code>{_text(r.key)}</code> "
                        f"{_text(r.setting)}</td><td class=num>{html.escape(est.text(3))} {_text(r.unit)}<br>"
                        f"<small>{_text(r.interval)}</small></td><td class=num>{num(float(r.paper), '.4g')}</td>"
                        f"<td class='{_cls(str(r.verdict))}'>{_text(r.verdict)}<br><small class=reason>"
                        f"{_text(r.reason)}</small></td></tr>")
        parts.append(f"<h3>{html.escape(p)}</h3><table class=scorecard>{head}{body}</table>"
                     "<table><tr><th>claim</th><th>row</th><th>ours [95% CI]</th><th>paper</th><th>verdict</th></tr>"
                     f"{''.join(rows)}</table>")
    if figure is not None and figure.exists():
        parts.append(figure_html(figure))
    return "<h2 id=scorecard>Your policies: the scorecard</h2>" + "".join(parts)


def build_report(results_dir: str | Path, figures_dir: str | Path, *, title: str = "") -> str:
    """The report's HTML from a `repro paper` run's ``summary.csv`` and figures."""
    results_dir, figures_dir = Path(results_dir), Path(figures_dir)
    path = results_dir / "summary.csv"
    card = results_dir / "scorecard.csv"
    if not path.exists() and card.exists():  # the scorecard alone (repro paper --only 15 --policy ...)
        return _scorecard_page(results_dir, figures_dir, title)
    if not path.exists():
        raise ConfigError(f"report: {path} not found: run `repro paper` first (or pass --results-dir)")
    summary = pd.read_csv(path, keep_default_na=True)
    missing = {"verdict", "ours_lo", "ours_hi", "interval"} - set(summary.columns)
    if missing:
        raise ConfigError(f"report: {path} has no {sorted(missing)} (written by an older version): rerun `repro paper`")
    if "group" not in summary.columns:
        raise ConfigError(f"report: {path} has no 'group' (written by an older version): rerun `repro paper`")

    def first(col: str) -> str:
        return _text(summary[col].iloc[0]) if col in summary.columns and len(summary) else "?"

    backend, scale, commit = first("backend"), first("scale"), first("commit")
    figs = sorted(figures_dir.glob("*.png")) if figures_dir.is_dir() else []
    by_nb: dict[str, list[Path]] = {}
    for f in figs:
        by_nb.setdefault(f.name.split("_", 1)[0], []).append(f)
    names = dict(zip(summary.notebook.astype(str).str.split("_", n=1).str[0], summary.notebook.astype(str),
                     strict=False))
    scorecard = ""
    if card.exists():  # a run with --policy: the scorecard notebook's rows and figure, in their own section
        scorecard = scorecard_html(pd.read_csv(card, keep_default_na=True), figures_dir / "15_scorecard.png")
        by_nb.pop("15", None)
    sections = []
    for nn in sorted(set(by_nb) | set(names)):
        rows = summary[summary.notebook.astype(str).str.startswith(nn + "_")]
        body = verdict_table(rows) if len(rows) else "<p>(no headline numbers)</p>"
        body += "".join(figure_html(f) for f in by_nb.get(nn, []))
        body += misses_html(results_dir) if nn == "06" else ""
        sections.append(f"<h2 id='nb{html.escape(nn)}'>{html.escape(names.get(nn, nn))}</h2>{body}")
    title = title or f"Calibrate, Then Route: reproduction report ({backend}, {scale})"
    from repro.validation.report import validation_section
    from repro.vocab import DEFAULT_PROFILE

    basis = validation_short(results_dir, DEFAULT_PROFILE) if backend == "sim" else ""
    basis = (f"<section id=basis><h2>What the verdicts rest on</h2><p class=ctx>backend <b>{backend}</b>, scale "
             f"<b>{scale}</b>, commit <code>{commit}</code>, {len(summary)} headline rows, {len(figs)} figures. Each "
             f"measurement counted once in the tally (rows that repeat another say so). Intervals: each row's "
             f"interval column says its method and what it covers.</p>{basis}{certificate_html()}</section>")
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"{conclusion_html(summary)}{basis}<h2 id=tally>The tally</h2>{tally_table(summary)}{scorecard}"
            f"<p id=figures-status>figures not checked (no script)</p>"
            f"{''.join(sections)}{validation_section(results_dir)}<script>{SCRIPT}</script></body></html>")


def _scorecard_page(results_dir: Path, figures_dir: Path, title: str) -> str:
    """The report of a run that made the scorecard and no headline rows."""
    table = pd.read_csv(results_dir / "scorecard.csv", keep_default_na=True)
    title = title or "Calibrate, Then Route: the scorecard of your policies"
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p id=figures-status>figures not checked (no script)</p>"
            f"{scorecard_html(table, figures_dir / '15_scorecard.png')}<script>{SCRIPT}</script></body></html>")


def write_report(results_dir: str | Path, figures_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the report (default ``<results_dir>/report.html``) and return its path."""
    out = Path(out) if out else Path(results_dir) / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_report(results_dir, figures_dir), encoding="utf-8")
    return out
