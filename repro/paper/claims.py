"""The paper's claims: which summary rows measure each one, how rows are grouped in the tally, and the
conclusion that `repro paper` writes from ``summary.csv``.

`HEADLINE_CLAIMS` is the written-out registry of the paper's router's claims (Table II's lead,
calibration §V-B, predicted length Fig. 8, tails Figs. 6-7, predictor error Fig. 9, pool width
and scarcity Figs. 4-5 and §V-D, the workloads Fig. 3): for each, what the paper says, the rows
that measure it (the first is its verdict), the modelling choices of ours it rests on, and the rows
that vary those choices. `group_of` puts every row in one of `GROUPS`; `tally` counts each
measurement once (rows with ``same_as`` are the same measurement as an earlier row) per group and
verdict; `conclusion_markdown` is the written conclusion at the top of report.html and notebook 00
(and, through `docs_block`, in README.md and REPRODUCE.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from repro.paper import rules
from repro.paper.rules import VERDICTS
from repro.routing.policies import READINGS
from repro.statistics.intervals import Estimate

GROUPS = ("headline", "testbed", "variants", "robustness", "inputs", "context")
GROUP_TITLES = {
    "headline": "the paper's router: its claims",
    "testbed": "the testbed and the baselines' own values",
    "variants": "our variants of the router, not the paper's",
    "robustness": "robustness sweeps over our estimated constants and our readings of the router",
    "inputs": "given or aimed at, never reproduced",
    "context": "the paper states no number",
}


@dataclass(frozen=True)
class Claim:
    """One claim of the paper about its router. ``keys``: the summary rows that measure it, the first
    the one whose verdict is the claim's; ``rests_on``: our modelling choices behind the numbers;
    ``varied_by``: rows that vary those choices (their verdicts say how fragile the claim's is)."""

    id: str
    title: str
    paper: str
    keys: tuple[str, ...]
    rests_on: str
    varied_by: tuple[str, ...] = ()


_HARDWARE = ("the A40 profile's estimated constants (prefill per token, KV transfer bandwidth and latency, the "
             "per-sequence decode cost: the paper states none of them), our reading of the router where §III-A's "
             "formula is lost (the ledger counts decode work down from the decode start; TPOT is the per-token time "
             "of the batch a request joins) and the operating point found by round-robin's saturation search")
_CONSTANTS = _HARDWARE + ", and our workload generators (Table I does not survive in the paper's text)"
# Whether the runs behind a claim filled a decode engine's KV budget (the paper's never does, §V-G) is not
# written here: the conclusion computes it from the rows' kv_budget column (`kv_sentence`).

HEADLINE_CLAIMS: tuple[Claim, ...] = (
    Claim("lead", "Table II: the learned router leads on mixed bursty traffic",
          "the learned router has the highest mean goodput over three traces (0.864; JSQ 0.835 at the same width, "
          "a 0.029 lead), the smallest spread, and beats round-robin and the heuristic on every trace",
          ("table2_mc_minus_best_baseline", "table2_mc_mean", "table2_mc_spread", "width4_mc_margin",
           "fig3_mc_minus_best_other_mixed"),
          _CONSTANTS, ("sensitivity_table2_lead_min", "table2_mc_minus_best_baseline@marginal_cost_batching")),
    Claim("calibration", "§V-B: calibration matters",
          "with simulator-derived constants the same router scores 0.819 instead of 0.864: calibration alone is "
          "worth 4.5 goodput points and about 40 % of the tail advantage",
          ("calib_goodput_gain", "calib_calibrated_goodput", "calib_simderived_goodput", "calib_tail_share",
           "calib_simderived_token_skew_minus_jsq", "calib_calibrated_ttft_p99_lo", "calib_calibrated_ttft_p99_hi",
           "calib_simderived_ttft_p99_lo", "calib_simderived_ttft_p99_hi"),
          "the simulator-derived cost model shipped in data/calibration/ and " + _CONSTANTS,
          ("sensitivity_calibration_gain_min", "calib_goodput_gain@marginal_cost_batching",
           "sim_calib_goodput_gain_oracle")),
    Claim("length", "Fig. 8: predicted length matters most",
          "removing the predicted output length costs the most of any term: 3.2 goodput points at steady load and "
          "4.7 at saturation; the SLO term helps at moderate load (-1.7) and reached -12 points uncalibrated",
          ("fig8_no_length_sat", "fig8_no_length_steady", "fig8_length_loss_minus_next_saturation",
           "fig8_length_loss_minus_next_steady", "fig8_slo_moderate", "fig8_slo_sat", "fig8_slo_uncalibrated",
           "fig8_cache_pressure"),
          "our output-length predictor (trained on the ShareGPT table) and " + _CONSTANTS,
          ("sensitivity_length_gain_min", "fig8_no_length_sat@marginal_cost_batching",
           "fig8_no_length_steady@marginal_cost_batching")),
    Claim("tails", "Figs. 6-7: shorter tails",
          "at the operating point the learned router has the lowest P99 TTFT (0.321 s vs 0.337 and 0.346 s) and "
          "through a burst train a rolling P95 TTFT about 20 % below the baselines'",
          ("fig6_best_other_minus_mc_ttft_p99", "fig6_mc_ttft_p99", "fig7_tail_reduction", "fig7_mc_ttft_p95_rolling",
           "fig7_mc_windows_at_or_above_rr"),
          "our burst-train arrival process and " + _CONSTANTS),
    Claim("noise", "Fig. 9: robust to predictor error",
          "goodput moves only from 0.838 to 0.880 as the predictor's relative error grows to 150 %, and the router "
          "still beats the length-threshold heuristic at 150 %",
          ("fig9_mc_minus_lt_worst_noise", "fig9_goodput_lo", "fig9_goodput_hi", "fig9_range_points"),
          "our noise injection (multiplicative lognormal error on the predicted length) and " + _CONSTANTS,
          ("fig9_mc_minus_lt_worst_noise@marginal_cost_batching",)),
    Claim("pool", "Figs. 4-5, §V-D/E: pool width and scarcity",
          "the router ties JSQ at decode width 3, leads at 4 and reconverges at 6; it serves with 6 GPUs what "
          "round-robin needs 7 for (14 % fewer); under extreme scarcity (1p2d) it collapses to 0.292 while "
          "round-robin survives at 0.680",
          ("fig4_rr_minus_mc_1p2d", "width3_mc_margin", "width6_mc_margin", "fig4_gpu_saving",
           "fig4_rr_gpus_for_mc_6gpu", "fig4_mc_5gpu", "fig4_mc_1p2d", "width3_mc", "width6_mc"),
          "the operating point (the same arrival rate on every pool) and " + _CONSTANTS,
          ("sensitivity_scarcity_inversion_min", "fig4_rr_minus_mc_1p2d@marginal_cost_batching",
           "width3_mc_margin@marginal_cost_batching")),
    Claim("workloads", "Fig. 3: which policy suits which workload",
          "the learned router wins on mixed (0.864) and reasoning (0.955), loses to the heuristic on homogeneous "
          "chat (0.855 vs 0.760), and round-robin collapses on documents (0.585) where every load-aware policy "
          "holds >= 0.695",
          ("fig3_mc_minus_best_other_reasoning", "fig3_lt_minus_mc_chat", "fig3_worst_loadaware_minus_rr_documents",
           "fig3_mc_reasoning", "fig3_mc_chat"),
          "our workload generators (Table I does not survive: chat's length caps, documents' prompt lengths, "
          "reasoning's output multiplier) and " + _HARDWARE,
          ("fig3_mc_minus_best_other_reasoning@marginal_cost_batching",
           "fig3_lt_minus_mc_chat@marginal_cost_batching")),
)

HEADLINE_KEYS = frozenset(k for c in HEADLINE_CLAIMS for k in c.keys)

ALIASES: dict[str, str] = {}
"""Rows that measure again what an earlier row measures for the same sentence of the paper (none today: §VI's
calibration gain, +0.1, and its calibrated P99, 0.899 s, are other sentences than §V-B's and Fig. 6's, and Fig.
9's 0.880 another than Table II's 0.864, though some share runs): the tally counts the claim once, under the
row named here (`same_claim`)."""

PAPER_SCORER = "marginal_cost"
PRIOR_READINGS = READINGS[1:]
"""The paper's router under its prior readings (`repro.routing.policies.READINGS`): robustness rows."""


def same_claim(key: str, keys: set[str]) -> str:
    """The key whose claim ``key`` measures again (`ALIASES`; notebook 14's ``X@marginal_cost``, the paper's
    scorer, is ``X``), when that key is among ``keys``; else ``""``."""
    target = ALIASES.get(key, "")
    if not target and key.endswith("@" + PAPER_SCORER):
        target = key[: -len(PAPER_SCORER) - 1]
    return target if target in keys and target != key else ""


def group_of(key: str, kind: str, paper: float) -> str:
    """The tally group of a row (`GROUPS`): an input; a row of a headline claim; our variants (a
    formula's rows ``key@formula``, ``beyond_*``); robustness sweeps (``sensitivity_*``); the
    testbed and baselines (any other row the paper states a number for); else context. The paper's
    router under a prior reading (``key@marginal_cost_prior`` ...) is a robustness row."""
    if kind == "input":
        return "inputs"
    if key in HEADLINE_KEYS:
        return "headline"
    if "@" in key and key.rsplit("@", 1)[1] in PRIOR_READINGS:
        return "robustness"
    if "@" in key or key.startswith("beyond_"):
        return "variants"
    if key.startswith("sensitivity_"):
        return "robustness"
    if paper is not None and not (isinstance(paper, float) and math.isnan(paper)):
        return "testbed"
    return "context"


def own_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows that are their own measurement (``same_as`` empty or absent)."""
    if "same_as" not in summary.columns:
        return summary
    return summary[summary["same_as"].astype(object).fillna("").astype(str) == ""]


def tally(summary: pd.DataFrame) -> pd.DataFrame:
    """Measurements per group (rows) and verdict (columns), each measurement once (`own_rows`), with a
    total row and column; groups with no row are left out."""
    own = own_rows(summary)
    groups = own["group"] if "group" in own.columns else pd.Series(
        [group_of(str(r.key), str(r.kind), float(r.paper)) for r in own.itertuples()], index=own.index)
    t = pd.crosstab(groups, own["verdict"]).reindex(index=[g for g in GROUPS if g in set(groups)],
                                                    columns=list(VERDICTS), fill_value=0)
    t["total"] = t.sum(axis=1)
    t.loc["total"] = t.sum(axis=0)
    return t.astype(int)


def tally_text(summary: pd.DataFrame) -> list[str]:
    """One line per group: ``headline (the paper's router: its claims): 2 reproduced, 5 not reproduced``."""
    t = tally(summary)
    lines = []
    for g in t.index:
        parts = ", ".join(f"{int(t.loc[g, v])} {v}" for v in VERDICTS if t.loc[g, v])
        title = "all" if g == "total" else f"{g} ({GROUP_TITLES[g]})"
        lines.append(f"{title}: {parts or 'none'}")
    return lines


def _row_text(r: pd.Series) -> str:
    est = Estimate(float(r["ours"]), float(r["ours_lo"]), float(r["ours_hi"]))
    unit = "" if pd.isna(r.get("unit")) or r.get("unit") in ("", "fraction") else f" {r['unit']}"
    paper = "" if pd.isna(r["paper"]) else f" (paper {float(r['paper']):.4g})"
    traces = int(r["traces"]) if "traces" in r and not pd.isna(r["traces"]) else 0
    how = f", {traces} traces" if traces > 1 else (", 1 trace" if traces == 1 else "")
    return f"`{r['key']}` {est.text(3)}{unit}{paper}{how}: {r['verdict']}"


WEAKNESS = {"contradicted": 0, "not reproduced": 1, "within noise": 2, "reproduced": 3}
"""The aggregation rule's order (weakest first)."""

AGGREGATION = ("a claim is reproduced when every row it rests on is reproduced (each at 95 %: an intersection-union "
               "test needs no correction); it is decided against the paper only when some row is not reproduced or "
               "contradicted at 1 - 0.05/k, k the claim's judged rows (Bonferroni: a claim with more rows has more "
               "chances of a spurious difference); otherwise within noise. A row counts only where its rule could "
               "have said the opposite: a row whose size the paper's own noise lets no number of ours reproduce "
               "counts by its direction alone. Inputs and rows the paper states no number for are not judged")
"""The written aggregation rule (shown under the conclusion's table)."""

LEVEL = 0.95


def row_estimate(r: pd.Series) -> Estimate:
    """A summary row's estimate, its method without the coverage note (the rules read the method)."""
    method = "" if pd.isna(r.get("interval", "")) else str(r.get("interval", ""))
    method = method.split(" [coverage:", 1)[0]

    def num(c: str) -> int:
        v = r.get(c, 0)
        return 0 if v is None or pd.isna(v) else int(v)

    return Estimate(float(r["ours"]), float(r["ours_lo"]), float(r["ours_hi"]), method or "none", num("traces"),
                    num("requests"))


def _rule_inputs(r: pd.Series) -> dict:
    """The rule's inputs of a summary row beside its estimate and paper number (`repro.paper.headline`'s
    ``claim``, ``tolerance``, ``paper_traces``; absent in older summaries: the defaults)."""
    def opt(c: str) -> float | None:
        v = r.get(c, math.nan)
        return None if v is None or pd.isna(v) else float(v)

    unit = "" if pd.isna(r.get("unit", "")) else str(r.get("unit", ""))
    traces = opt("paper_traces")
    claim = opt("claim")
    if claim is None and str(r.get("kind", "")) == "ordering" and pd.isna(r.get("paper", math.nan)):
        claim = 1.0  # an older summary without the column: a judged ordering with no gap is on the positive side
    return {"unit": unit, "tolerance": opt("tolerance"), "claim": claim,
            "paper_traces": rules.PAPER_TRACES if traces is None else int(traces)}


def row_reach(r: pd.Series) -> dict[str, bool]:
    """Which decided verdicts a summary row can reach (`repro.paper.rules.reachability`)."""
    kw = _rule_inputs(r)
    return rules.reachability(str(r["kind"]), float(r["paper"]), **kw)


def row_verdict_at(r: pd.Series, level: float) -> str:
    """A summary row judged again at confidence ``level`` (a claim's corrected level)."""
    if level == LEVEL:
        return str(r["verdict"])
    return rules.judge(str(r["kind"]), row_estimate(r), float(r["paper"]), level=level, **_rule_inputs(r)).verdict


def claim_verdicts(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per headline claim by `AGGREGATION`: id, title, verdict, the deciding row (``key``) with that
    row's reason, the count of its judged rows per verdict (``rows``), the rows that cannot count (``no_evidence``:
    their rule could not have said the opposite, `repro.paper.rules.evidence`), and ``level``, the corrected
    confidence its rows were judged at against the paper; ``missing`` when the run has none of its rows judged."""
    by_key = summary.drop_duplicates("key").set_index("key", drop=False)
    out = []
    for c in HEADLINE_CLAIMS:
        judged = [k for k in c.keys if k in by_key.index and str(by_key.loc[k, "verdict"]) in WEAKNESS]
        if not judged:
            out.append({"claim": c.id, "title": c.title, "verdict": "missing", "key": "", "reason": "", "rows": "",
                        "no_evidence": "", "level": math.nan})
            continue
        k_rows = len(judged)
        level = 1 - (1 - LEVEL) / k_rows
        reach = {k: row_reach(by_key.loc[k]) for k in judged}
        counts = pd.Series([str(by_key.loc[k, "verdict"]) for k in judged]).value_counts()
        evidence = [k for k in judged if rules.evidence(str(by_key.loc[k, "verdict"]), reach[k])]
        against = []
        for k in evidence:
            v = str(by_key.loc[k, "verdict"])
            if v in ("not reproduced", "contradicted"):
                now = row_verdict_at(by_key.loc[k], level)
                if now in ("not reproduced", "contradicted"):
                    against.append((WEAKNESS[now], c.keys.index(k), k, now))
        if against:
            _, _, key, verdict = min(against)
        elif evidence and all(str(by_key.loc[k, "verdict"]) == "reproduced" for k in evidence):
            key, verdict = evidence[0], "reproduced"
        elif evidence:
            key = min((k for k in evidence if str(by_key.loc[k, "verdict"]) != "reproduced"),
                      key=lambda k: (WEAKNESS[str(by_key.loc[k, "verdict"])], c.keys.index(k)))
            verdict = "within noise"
        else:
            key, verdict = judged[0], "within noise"
        r = by_key.loc[key]
        reason = "" if pd.isna(r.get("reason", "")) else str(r.get("reason", ""))
        if verdict == "within noise" and str(r["verdict"]) in ("not reproduced", "contradicted"):
            reason = (f"{r['verdict']} at 95 %, but not at the claim's corrected {100 * level:.3g} % (Bonferroni over "
                      f"its {k_rows} rows): {reason}")
        if not evidence:
            reason = f"none of its rows can decide it: {reason}"
        out.append({"claim": c.id, "title": c.title, "verdict": verdict, "key": key, "reason": reason,
                    "rows": ", ".join(f"{int(counts[v])} {v}" for v in WEAKNESS if v in counts),
                    "no_evidence": " ".join(k for k in judged if k not in evidence), "level": level})
    return pd.DataFrame(out)


def kv_sentence(summary: pd.DataFrame, keys: tuple[str, ...]) -> str:
    """Whether the runs behind these rows filled a decode engine's KV budget, from their ``kv_budget`` column
    (the paper's never does, §V-G); "" when the summary cannot tell."""
    if "kv_budget" not in summary.columns:
        return ""
    rows = summary[summary["key"].isin(keys)]
    if rows.empty:
        return ""
    full = rows[rows["kv_budget"].astype(object).fillna("").astype(str) != ""]
    if full.empty:
        return "its runs never filled a decode engine's KV budget, as the paper's never did (§V-G)"
    return (f"the runs of {len(full)} of its {len(rows)} rows filled a decode engine's KV budget (requests preempted), "
            f"which the paper's never did (§V-G): {', '.join(f'`{k}`' for k in full['key'])}")


def _deciding(r: pd.Series) -> str:
    """The deciding row's number against the paper's: ``0.808 [0.804, 0.812] vs 0.864``."""
    est = Estimate(float(r["ours"]), float(r["ours_lo"]), float(r["ours_hi"]))
    unit = "" if pd.isna(r.get("unit")) or r.get("unit") in ("", "fraction") else f" {r['unit']}"
    if pd.isna(r["paper"]):
        return f"{est.text(3)}{unit} (the paper states the ordering, no gap)"
    return f"{est.text(3)}{unit} vs {float(r['paper']):.4g}"


def _why(v: str, reason: str) -> str:
    """One sentence why, from the deciding row's reason (its first clause)."""
    plain = re.sub(r" \((se|with the paper's noise|the paper states)[^)]*\)", "", reason or "")
    head = plain.split("; ", 1)[0]
    return head[:1].upper() + head[1:] if head else {"missing": "Not measured in this run."}.get(v, "")


SCOPES = {"sim": "in simulation", "emulated": "on emulated engines", "vllm": "on real vLLM engines"}
"""Where a verdict holds, by backend: every verdict word of the conclusion carries it."""


def backend_of(summary: pd.DataFrame) -> str:
    """The run's backend (``sim`` when the summary does not say)."""
    if "backend" in summary.columns and len(summary) and not pd.isna(summary["backend"].iloc[0]):
        return str(summary["backend"].iloc[0])
    return "sim"


def scoped(verdict: str, backend: str) -> str:
    """A claim's verdict with where it holds: ``not reproduced in simulation``."""
    return verdict if verdict == "missing" else f"{verdict} {SCOPES.get(backend, f'on {backend}')}"


def testbed_fit(profile: str | None = None) -> tuple[float, int] | None:
    """The identified testbed's best fit to the paper's baseline numbers: ``(chi-square, degrees of freedom)``
    from its ``fit.json`` (data/identify/<profile>/), None when the profile has none."""
    import json

    from repro.paths import DATA_DIR
    from repro.vocab import DEFAULT_PROFILE

    path = DATA_DIR / "identify" / (profile or DEFAULT_PROFILE) / "fit.json"
    if not path.exists():
        return None
    fit = json.loads(path.read_text(encoding="utf-8"))
    return float(fit["chi2"]), int(fit["dof"])


def scope_sentence(summary: pd.DataFrame) -> str:
    """The conclusion's first words: in plain words what this run can and cannot tell a reader about the paper."""
    backend = backend_of(summary)
    if backend == "vllm":
        return ("**What this run can tell you:** whether the paper's claims about its router hold on these real vLLM "
                "engines, with this cluster's hardware and model. Unless that is the paper's 2p4d A40 node with its "
                "model, it tests the mechanics the claims rest on, not the paper's numbers: a verdict here is about "
                "this cluster.")
    fit = testbed_fit()
    how = (f" (which it fits {fit[0] / fit[1]:.0f} times worse than their noise allows: chi-square {fit[0]:.0f} on "
           f"{fit[1]} degrees of freedom)") if fit else ""
    where = "in simulation" if backend == "sim" else "on emulated engines timed by the simulator"
    return (f"**What this run can tell you:** whether the paper's claims about its router hold {where}, on a testbed "
            f"identified from the paper's own baseline numbers{how}; not whether they hold on the paper's A40 "
            "hardware, which the paper itself (§VI) says simulation does not recover (\"a hardware result\"). A "
            f"verdict \"not reproduced {SCOPES.get(backend, '')}\" means this testbed does not show the claim, not "
            "that the paper is wrong; the evidence column says what a hardware run would need.")


def evidence_label(summary: pd.DataFrame, claim: Claim, *, short: bool = False) -> str:
    """What a claim's verdict is about and how strong it is: the kind of evidence (the backend), whether it rests
    on the certificate, and what a run on the paper's hardware would need (`repro.paper.rules.hardware_traces`,
    from the claim's first row: our per-trace spread, the paper's noise). ``short``: the few words of the
    conclusion's table (``simulation · rests on the certificate · hardware: ~4 traces for its direction``)."""
    from repro.identify.certificate import note_for

    backend = backend_of(summary)
    by_key = summary.drop_duplicates("key").set_index("key", drop=False)
    kinds = {"sim": ("simulation, identified testbed (the paper, §VI: not recoverable in simulation)",
                     "simulation"),
             "emulated": ("emulated engines timed by the identified testbed (as simulation: §VI)",
                          "emulated engines"),
             "vllm": ("mechanics on real vLLM engines (this cluster, not the paper's A40s)", "real vLLM, this cluster")}
    full, brief = kinds.get(backend, (backend, backend))
    parts, words = [full], [brief]
    if any(note_for(k) for k in claim.keys):
        parts.append("rests on the certificate (docs/IDENTIFY.md: no model of the catalogue satisfies its facts "
                     "together)")
        words.append("rests on the certificate")
    key = next((k for k in claim.keys if k in by_key.index and str(by_key.loc[k, "kind"]) != "input"), "")
    if key:
        r = by_key.loc[key]
        kw = _rule_inputs(r)
        sd = rules.per_trace_sd(row_estimate(r))
        n, what = rules.hardware_traces(str(r["kind"]), float(r["paper"]), sd, assumed=float(r["ours"]), **kw)
        if n:
            parts.append(f"needs hardware: about {n} traces on the paper's 2p4d A40 node would {what} if the paper "
                         f"is right (`{key}`, {int(100 * rules.POWER)} % power)")
            words.append(f"hardware: ~{n} traces" + (" for its direction" if "direction" in what else ""))
        else:
            parts.append(f"needs hardware, but no number of traces decides `{key}`: {what}")
            words.append("hardware: no number of traces decides it")
    return " · ".join(words) if short else "; ".join(parts)


def conclusion_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The conclusion on one screen: per claim, its verdict with where it holds, the deciding row and its number
    against the paper's, one sentence why, and the kind and strength of its evidence (`evidence_label`, in full and
    briefly)."""
    from repro.identify.certificate import bound_note, note_for

    backend = backend_of(summary)
    by_key = summary.drop_duplicates("key").set_index("key", drop=False)
    rows = []
    for c, v in zip(HEADLINE_CLAIMS, claim_verdicts(summary).itertuples(), strict=True):
        deciding = _deciding(by_key.loc[v.key]) if v.key else ""
        why = _why(v.verdict, v.reason)
        cert = next((n for k in c.keys if k in by_key.index and (n := note_for(k) or bound_note(k))), "")
        if cert:
            why += f". {cert[:1].upper()}{cert[1:]}"
        rows.append({"claim": v.title, "verdict": scoped(v.verdict, backend), "row": v.key,
                     "ours vs paper": deciding, "why": why, "rows": v.rows,
                     "evidence": evidence_label(summary, c) if v.verdict != "missing" else "",
                     "evidence, briefly": evidence_label(summary, c, short=True) if v.verdict != "missing" else ""})
    return pd.DataFrame(rows)


def conclusion_markdown(summary: pd.DataFrame, *, heading: str = "## Conclusion", with_tally: bool = True,
                        figure: str = "") -> str:
    """The written conclusion of a run, from its ``summary.csv`` alone: what the run can and cannot tell a reader
    (`scope_sentence`), the claims on one screen (`conclusion_table`: the verdict with where it holds, the deciding
    number with its interval against the paper's, one sentence why, the evidence and what hardware would need),
    the aggregation rule, ``figure`` (markdown or HTML of the forest plot, when given), then the details folded:
    the grouped tally and one paragraph per headline claim (what the paper says, every row with its interval and
    verdict, what it rests on, whether its runs filled the KV budget, the rows that vary those choices)."""
    by_key = summary.drop_duplicates("key").set_index("key", drop=False)
    ctx = summary.iloc[0] if len(summary) else pd.Series(dtype=object)
    cond = ", ".join(f"{c} {ctx[c]}" for c in ("backend", "scale", "commit") if c in ctx and not pd.isna(ctx[c]))
    backend = backend_of(summary)
    verdicts = claim_verdicts(summary)
    counts = verdicts.verdict.value_counts()
    order = [v for v in (*VERDICTS, "missing") if v in counts.index]
    head = [heading, "", scope_sentence(summary), "",
            f"**In sum, {SCOPES.get(backend, '')}:** of the paper's {len(verdicts)} headline claims about its router, "
            + ", ".join(f"{int(counts[v])} {'not measured' if v == 'missing' else v}" for v in order) + ".", ""]
    tab = conclusion_table(summary)
    head += ["| claim | verdict | deciding row: ours vs the paper's | evidence |", "|---|---|---|---|"]
    for r in tab.to_dict("records"):
        cell = f"`{r['row']}` {r['ours vs paper']}" if r["row"] else "not measured"
        head.append(f"| {r['claim']} | **{r['verdict']}** | {cell} | {r['evidence, briefly']} |")
    head += ["", f"*Why each verdict, and the evidence in full, are in the details below. Aggregation: {AGGREGATION}. "
             f"Each number is ours with its interval (the summary's interval column says how it was made and what it "
             f"covers; {cond}); docs/VERDICTS.md has the rules.*", ""]
    if figure:
        head += [figure, ""]
    head += ["<details><summary>Details: every row of each claim, what it rests on, the readings, the tally"
             "</summary>", ""]
    if with_tally:
        head += ["**The tally, each measurement once:**", ""] + [f"- {line}" for line in tally_text(summary)] + [""]
    for c, v in zip(HEADLINE_CLAIMS, verdicts.itertuples(), strict=True):
        have = [k for k in c.keys if k in by_key.index]
        if v.verdict == "missing":
            some = "; ".join(_row_text(by_key.loc[k]) for k in have)
            head += [f"**{c.title}: not measured in this run.** The paper: {c.paper}."
                     + (f" Rows of it that were: {some}." if some else ""), ""]
            continue
        rows_text = "; ".join(_row_text(by_key.loc[k]) for k in have)
        varied = [k for k in c.varied_by if k in by_key.index]
        vary = "; ".join(_row_text(by_key.loc[k]) for k in varied)
        text = (f"**{c.title}: {scoped(v.verdict, backend)}** ({v.rows}; decided by `{v.key}`: {v.reason}). "
                f"Evidence: {evidence_label(summary, c)}. The paper: {c.paper}. Its rows: {rows_text}.")
        if v.no_evidence:
            text += (" Rows that cannot decide it (their rule could not have said the opposite): "
                     + ", ".join(f"`{k}`" for k in v.no_evidence.split()) + ".")
        text += f" It rests on {c.rests_on}"
        kv = kv_sentence(summary, tuple(have))
        text += f"; {kv}." if kv else "."
        if vary:
            text += f" Rows that vary them: {vary}."
        readings = reading_changes(summary, c)
        if readings:
            text += f" Under the router's prior readings (notebook 14): {readings}."
        head += [text, ""]
    head += ["</details>"]
    return "\n".join(head).rstrip() + "\n"


def reading_changes(summary: pd.DataFrame, claim: Claim) -> str:
    """How the claim's rows measured under each prior reading of the paper's router (``key@reading``,
    `repro.routing.policies.READINGS`) compare with the default reading on the same traces
    (``key@marginal_cost``): each with its verdict and whether that verdict changes; "" when notebook 14
    measured none of them."""
    by_key = summary.drop_duplicates("key").set_index("key", drop=False)
    parts = []
    for key in claim.keys:
        base = f"{key}@{PAPER_SCORER}"
        if base not in by_key.index:
            continue
        was = str(by_key.loc[base, "verdict"])
        for reading in PRIOR_READINGS:
            k = f"{key}@{reading}"
            if k not in by_key.index:
                continue
            now = str(by_key.loc[k, "verdict"])
            change = "the same verdict" if now == was else f"**changes** from {was}"
            parts.append(f"{_row_text(by_key.loc[k])} ({change})")
    return "; ".join(parts)


DOCS_BEGIN = ("<!-- conclusion: written by `repro conclusion --docs` from the main job's summary.csv (kept as "
              "docs/main_job_summary.csv); do not edit -->")
SNAPSHOT = "docs/main_job_summary.csv"
"""The main job's summary.csv as the docs quote it (relative to the repository root)."""
DOCS_END = "<!-- /conclusion -->"


def docs_stale(summary: pd.DataFrame, root: Path) -> list[str]:
    """The documents under ``root`` (README.md, REPRODUCE.md) whose verdicts block is not ``summary``'s."""
    block = docs_block(summary)
    return [name for name in DOCS if docs_block_of((root / name).read_text(encoding="utf-8")) != block]


DOCS = ("README.md", "REPRODUCE.md")
"""The documents that carry the main job's verdicts (`docs_block`)."""


def docs_block(summary: pd.DataFrame) -> str:
    """What README.md and REPRODUCE.md carry between `DOCS_BEGIN` and `DOCS_END`: the grouped tally and
    one line per headline claim, pointing to report.html for the paragraphs."""
    ctx = summary.iloc[0] if len(summary) else pd.Series(dtype=object)
    cond = ", ".join(f"{c} {ctx[c]}" for c in ("backend", "scale") if c in ctx and not pd.isna(ctx[c]))
    lines = [DOCS_BEGIN, f"The main job's verdicts ({cond}; the paragraphs are at the top of "
             "results/sim-full/report.html), each measurement once:", ""]
    lines += [f"- {line}" for line in tally_text(summary)]
    lines += ["", scope_sentence(summary), "",
              "| headline claim | verdict | the row it rests on | evidence |", "|---|---|---|---|"]
    by_key = summary.drop_duplicates("key").set_index("key", drop=False)
    backend = backend_of(summary)
    for c, v in zip(HEADLINE_CLAIMS, claim_verdicts(summary).itertuples(), strict=True):
        row = _row_text(by_key.loc[v.key]) if v.key else "(not measured)"
        label = evidence_label(summary, c) if v.key else ""
        lines.append(f"| {v.title} | {scoped(v.verdict, backend)} | {row} | {label} |")
    lines.append(DOCS_END)
    return "\n".join(lines)


def replace_docs_block(text: str, block: str) -> str:
    """``text`` with its block between the markers replaced (ValueError when the markers are missing)."""
    i, j = text.find(DOCS_BEGIN), text.find(DOCS_END)
    if i < 0 or j < i:
        raise ValueError("no conclusion block (its begin and end markers) in the document")
    return text[:i] + block + text[j + len(DOCS_END):]


def docs_block_of(text: str) -> str | None:
    """The conclusion block a document carries (None without one)."""
    i, j = text.find(DOCS_BEGIN), text.find(DOCS_END)
    return None if i < 0 or j < i else text[i:j + len(DOCS_END)]
