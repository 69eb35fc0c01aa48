"""The claims registry, the grouped tally and the written conclusion (repro.paper.claims), and the docs' copy
of the main job's verdicts (README.md, REPRODUCE.md) against docs/main_job_summary.csv, itself checked
against a fresh run of notebooks 04-07."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from repro.paper import claims
from repro.paper.headline import write_headline
from repro.paper.summary import collect_headlines
from repro.paper.verdicts import Estimate
from repro.paths import REPO_ROOT

SNAPSHOT = REPO_ROOT / "docs" / "main_job_summary.csv"


def _summary(tmp_path):
    write_headline([{"key": "table2_mc_mean", "ours": Estimate(0.80, 0.78, 0.82), "runs": ["a"]},
                    {"key": "table2_mc_minus_best_baseline", "ours": Estimate(0.02, 0.01, 0.03), "kind": "ordering",
                     "paper": 0.029, "claim": 1, "runs": ["a", "b"]},
                    {"key": "fig5_rr_goodput_sat", "ours": Estimate(0.74, 0.72, 0.76), "kind": "input"},
                    {"key": "table2_ll_worst", "ours": Estimate(0.70, 0.69, 0.71)},
                    {"key": "sensitivity_table2_lead_min", "ours": Estimate(-0.1, -0.2, 0.0), "kind": "ordering",
                     "claim": 1, "paper": math.nan}], "04_mixed_goodput", tmp_path, measured="sim")
    write_headline([{"key": "fig9_goodput_hi", "ours": Estimate(0.80, 0.78, 0.82), "runs": ["z"]},
                    {"key": "table2_mc_mean@marginal_cost", "ours": Estimate(0.79, 0.7, 0.88), "runs": ["q"]},
                    {"key": "table2_mc_mean@marginal_cost_batching", "ours": Estimate(0.76, 0.7, 0.82)}],
                   "11_predictor_noise", tmp_path, measured="sim")
    return collect_headlines(["04_mixed_goodput", "11_predictor_noise"], tmp_path, backend="sim", scale="full",
                             commit="abc")


def test_groups_and_the_tally_count_each_claim_once(tmp_path):
    s = _summary(tmp_path).set_index("key")
    assert s.loc["table2_mc_mean", "group"] == "headline" and s.loc["fig5_rr_goodput_sat", "group"] == "inputs"
    assert s.loc["table2_ll_worst", "group"] == "testbed"
    assert s.loc["sensitivity_table2_lead_min", "group"] == "robustness"
    assert s.loc["table2_mc_mean@marginal_cost_batching", "group"] == "variants"
    # the same value and interval, and the paper's scorer measured again in notebook 14: one measurement each
    assert s.loc["fig9_goodput_hi", "same_as"] == "table2_mc_mean"
    assert s.loc["table2_mc_mean@marginal_cost", "same_as"] == "table2_mc_mean"
    t = claims.tally(s.reset_index())
    assert t.loc["headline", "total"] == 2 and t.loc["total", "total"] == 6
    assert t.loc["headline", "reproduced"] == 2  # the lead 0.02 [0.01, 0.03] reaches the paper's 0.029
    assert t.loc["inputs", "input"] == 1 and t.loc["robustness", "within noise"] == 1


def test_the_conclusion_has_a_paragraph_per_headline_claim_from_the_summary_alone(tmp_path):
    text = claims.conclusion_markdown(_summary(tmp_path))
    for c in claims.HEADLINE_CLAIMS:
        assert f"**{c.title}:" in text
    assert "**Table II: the learned router leads on mixed bursty traffic: reproduced.**" in text
    assert "`table2_mc_minus_best_baseline` 0.020 [0.010, 0.030] (paper 0.029)" in text
    assert "Rows that vary them: `sensitivity_table2_lead_min`" in text  # what the claim rests on, and its test
    assert "**Fig. 9: robust to predictor error: not measured in this run.**" in text
    assert "headline (the paper's router: its claims): 2 reproduced" in text
    assert "**In sum:** of the paper's 7 headline claims about its router, 1 reproduced, 6 not measured" in text
    assert "Rows of it that were: `fig9_goodput_hi`" in text  # its main row (vs the heuristic) is missing


def test_docs_blocks_are_replaced_between_their_markers(tmp_path):
    s = _summary(tmp_path)
    block = claims.docs_block(s)
    doc = f"intro\n{claims.DOCS_BEGIN}\nold\n{claims.DOCS_END}\noutro\n"
    new = claims.replace_docs_block(doc, block)
    assert new.startswith("intro\n") and new.endswith("\noutro\n") and claims.docs_block_of(new) == block
    assert "abc" not in block  # no commit in the docs' block: it changes only when the verdicts do
    with pytest.raises(ValueError, match="markers"):
        claims.replace_docs_block("no block", block)


def test_readme_and_reproduce_carry_the_main_jobs_verdicts():
    summary = pd.read_csv(SNAPSHOT, keep_default_na=True)
    assert (summary.backend == "sim").all() and (summary.scale == "full").all()
    block = claims.docs_block(summary)
    for name in ("README.md", "REPRODUCE.md"):
        assert claims.docs_block_of((REPO_ROOT / name).read_text()) == block, (
            f"{name}'s verdicts block differs from {SNAPSHOT.name}: run `repro paper` then `repro conclusion --docs`")


@pytest.mark.slow
def test_the_main_jobs_summary_is_this_codes(tmp_path, monkeypatch):
    # the summary the docs are written from must be what the code gives today: the notebooks of Table II, the
    # calibration study, the workloads and the pool widths (04-07) rerun at full scale with `repro paper`, every
    # row compared with docs/main_job_summary.csv (the whole main job takes ~7 min: too long for the suite)
    from repro.paper.golden import CHECK_ENV
    from repro.paper.runner import run_paper

    monkeypatch.setenv(CHECK_ENV, "")  # the notebooks' golden files are of their quick defaults, not of full scale
    run = run_paper(backend="sim", scale="full", only="04,05,06,07", out=tmp_path / "nb",
                    results_dir=tmp_path / "res", figures_dir=tmp_path / "fig")
    assert run.ok, [r.error for r in run.results if not r.ok]
    fresh = run.summary
    snap = pd.read_csv(SNAPSHOT).set_index("key")
    fresh = fresh.set_index("key")
    assert len(fresh) >= 30 and set(fresh.index) <= set(snap.index)
    for key in fresh.index:
        got, want = fresh.loc[key], snap.loc[key]
        assert (got.verdict, got.group) == (want.verdict, want.group), (key, got.verdict, want.verdict)
        assert np.allclose([got.ours, got.ours_lo, got.ours_hi], [want.ours, want.ours_lo, want.ours_hi],
                           rtol=1e-6, equal_nan=True), (key, got.ours, want.ours)
