"""The scorecard (notebook 15, `repro paper --policy`): a user's policy against the paper's router and
the best baseline, claim by claim, on the same traces."""

import math

import pandas as pd
import pytest

from repro.errors import ConfigError
from repro.paper import runner as paper
from repro.paper.report import build_report
from repro.paper.rules import COMPARISON_VERDICTS, compare
from repro.paper.section import Section
from repro.paper.sections import scorecard as sc
from repro.statistics.intervals import Estimate

CLONE = "tests.contenders:RouterClone"
RR_CLONE = "tests.contenders:RoundRobinClone"


def _ctx(tmp_path):
    return Section.setup(notebook="15_scorecard", backend="sim", scale="quick", seeds=[1, 2], n_requests=300,
                         rates={"mixed": 24.0, "chat": 60.0, "reasoning": 30.0, "documents": 25.0},
                         results_dir=tmp_path / "r", figures_dir=tmp_path / "f")


def test_the_comparison_rule_table():
    assert compare(Estimate(0.05, 0.03, 0.07), "fraction").verdict == "better"
    assert compare(Estimate(-0.05, -0.07, -0.03), "fraction").verdict == "worse"
    assert compare(Estimate(0.0, -0.01, 0.015), "fraction").verdict == "tie"
    # a difference shown but reaching inside the tie band decides nothing (widened, it would read as a tie)
    assert compare(Estimate(0.006, 0.002, 0.01), "fraction").verdict == "tie"
    assert compare(Estimate(0.03, 0.01, 0.05), "fraction").verdict == "within noise"
    assert compare(Estimate(0.03, 0.01, 0.05, "t interval over 3 traces", 3), "fraction").verdict == "within noise"
    noisy = Estimate(0.01, -0.04, 0.06, "t interval over 3 traces", traces=3, spread=0.03)
    j = compare(noisy, "fraction")
    assert j.verdict == "within noise" and "traces would decide" in j.reason


def test_the_comparison_is_monotone():
    """A comparison decided one way is never decided another way with a wider interval about its point."""
    for centre in (-0.05, -0.02, -0.01, 0.0, 0.005, 0.01, 0.019, 0.021, 0.03, 0.1):
        for half in (0.001, 0.005, 0.01, 0.03):
            for widen in (1.5, 2, 4, 10):
                a = compare(Estimate(centre, centre - half, centre + half, "t interval over 10 traces", 10), "fraction")
                b = compare(Estimate(centre, centre - half * widen, centre + half * widen, "t interval over 10 traces",
                                     10), "fraction")
                assert b.verdict in ("within noise", a.verdict), (centre, half, widen, a, b)
    assert compare(Estimate(0.1), "fraction").verdict == "within noise"  # no interval: nothing decided
    assert set(COMPARISON_VERDICTS) == {"better", "worse", "tie", "within noise"}


def test_a_clone_of_the_router_ties_with_it_and_is_judged_like_it(tmp_path):
    ctx = _ctx(tmp_path)
    card = sc.score_section(ctx, [CLONE], ["Table II"])
    t = card.table
    vs = t[t.comparison == sc.VS_ROUTER]
    assert len(vs) == 1 and vs.ours.iloc[0] == 0.0 and vs.verdict.iloc[0] == "tie"
    # the same traces: the clone's runs have the router's seeds and rate
    runs = card.runs
    mine, router = runs[runs.policy == CLONE], runs[runs.policy == "marginal_cost"]
    assert sorted(mine.seed) == sorted(router.seed) == [1, 2] and set(mine.rate) == set(router.rate)
    assert (mine.sort_values("seed").goodput.to_numpy() == router.sort_values("seed").goodput.to_numpy()).all()
    # as the router: the section's own rows, the same numbers as for the paper's router
    from repro.paper.sections import mixed_goodput as mg

    paper_runs = runs[runs.policy != CLONE]
    own = {r["key"]: r["ours"] for r in mg.table_two_headline(mg.table_two(paper_runs), paper_runs, ctx)}
    asked = t[t.comparison == sc.AS_ROUTER].set_index("key")
    assert set(asked.index) == {f"{k}@{CLONE}" for k in sc.GROUPS["Table II"].keys}
    assert math.isclose(asked.loc[f"table2_mc_mean@{CLONE}", "ours"], own["table2_mc_mean"].value)
    assert asked.verdict.isin(["reproduced", "not reproduced", "contradicted", "within noise"]).all()
    best = t[t.comparison == sc.VS_BASELINE]
    assert len(best) == 1 and best.rival.iloc[0] in sc.BASELINES


def test_what_a_policy_does_not_read_is_not_run_for_it_and_says_why(tmp_path):
    rr, mc = sc.reads("round_robin", n_requests=200), sc.reads("marginal_cost", n_requests=200)
    assert (rr["predictions"], rr["cost_model"], mc["predictions"], mc["cost_model"]) == (False, False, True, True)
    assert rr["decision_time"]["n"] == 200 and rr["decision_time"]["p99_us"] > 0
    ctx = _ctx(tmp_path)
    card = sc.score_section(ctx, [RR_CLONE], ["Table II", "Fig. 9 noise", "§V-B calibration", "Fig. 8 length"])
    not_run = card.table[card.table.comparison == sc.NOT_RUN].set_index("claim")
    assert set(not_run.index) == {"Fig. 9 noise", "§V-B calibration", "Fig. 8 length"}
    assert "150 % predictor error" in not_run.loc["Fig. 9 noise", "reason"]
    assert "use_length" in not_run.loc["Fig. 8 length", "reason"]
    summary = card.summary().set_index("claim")
    assert summary.loc["Fig. 9 noise", sc.AS_ROUTER].startswith("not run: does not read the predicted length")
    # the contender's runs are only those of the groups run for it
    assert set(card.runs[card.runs.policy == RR_CLONE].claim) == {"Table II"}
    text = card.markdown()
    assert text.startswith(f"### Scorecard of `{RR_CLONE}`") and "vs the best baseline" in text
    assert "Decision time" in text and "the paper's router: p50" in text


def test_every_group_runs_for_a_policy_that_reads_everything(tmp_path):
    ctx = _ctx(tmp_path)
    card = sc.score_section(ctx, [CLONE], ["Fig. 9 noise", "§V-B calibration"])
    t = card.table
    noise = t[(t.claim == "Fig. 9 noise") & (t.comparison == sc.VS_ROUTER)]
    assert sorted(noise.setting) == ["predictor_noise=0", "predictor_noise=1.5"]
    assert (noise.ours == 0.0).all()  # a clone: the same decisions at every noise level
    calib = t[(t.claim == "§V-B calibration") & (t.comparison == sc.VS_ROUTER)]
    assert sorted(calib.setting) == ["cost_model=calibrated", "cost_model=sim_derived"]
    assert set(t[t.comparison == sc.AS_ROUTER].key) >= {f"calib_goodput_gain@{CLONE}",
                                                         f"fig9_mc_minus_lt_worst_noise@{CLONE}"}
    fig = card.figure()
    compared = t[t.comparison.isin([sc.VS_ROUTER, sc.VS_BASELINE])]
    assert len(fig.axes[0].get_yticklabels()) == len(set(zip(compared.claim, compared.setting, strict=True)))
    assert len(fig.axes) == 1  # goodput only: one panel


def test_bad_policies_are_refused_before_anything_runs():
    with pytest.raises(ConfigError, match="paper's router"):
        sc.check_policies(["marginal_cost"])
    with pytest.raises(ConfigError, match="no_such_pkg"):
        sc.check_policies(["no_such_pkg.mod:Router"])
    with pytest.raises(ConfigError, match="no_such_pkg"):
        paper.run_paper(only="04", policies=["no_such_pkg.mod:Router"], out="build/test-notebooks")
    with pytest.raises(ConfigError, match="allowed"):
        sc.check_claims(["Table 9"])


def test_repro_paper_adds_the_scorecard_only_with_policies(monkeypatch, tmp_path):
    calls = {}

    def fake(path, out_dir, params, cwd=None):
        calls[path.stem] = params
        return paper.NotebookResult(path.stem, out_dir / path.name, True, 0.0)

    monkeypatch.setattr(paper, "run_notebook", fake)
    monkeypatch.setattr(paper, "ensure_kernel", lambda: None)
    kw = dict(out=tmp_path / "b", results_dir=tmp_path / "r", figures_dir=tmp_path / "f", jobs=1)
    paper.run_paper(only="04", **kw)
    assert set(calls) == {"04_mixed_goodput"}
    calls.clear()
    paper.run_paper(only="04", policies=[RR_CLONE], **kw)
    assert set(calls) == {"04_mixed_goodput", "15_scorecard"}
    assert calls["15_scorecard"]["policies"] == [RR_CLONE] and "policies" not in calls["04_mixed_goodput"]
    calls.clear()
    paper.run_paper(only="01,02", **kw)
    assert "15_scorecard" not in calls


def test_the_report_shows_the_scorecard(tmp_path):
    ctx = _ctx(tmp_path)
    card = sc.score_section(ctx, [RR_CLONE], ["Table II", "Fig. 9 noise"])
    res, figs = tmp_path / "res", tmp_path / "figs"
    res.mkdir()
    card.table.to_csv(res / "scorecard.csv", index=False)
    page = build_report(res, figs)  # no summary.csv: the scorecard alone
    assert "Your policies: the scorecard" in page and RR_CLONE in page and "not run: does not read" in page
    back = sc.summarize(pd.read_csv(res / "scorecard.csv"))
    assert back.equals(card.summary())


@pytest.mark.slow
def test_a_baseline_beside_the_router_on_the_main_jobs_testbed_is_judged_by_the_tie_band(tmp_path):
    """On the identified testbed (the main job's), at Table II's operating point, round-robin under another name
    scores a little below the paper's router (the main job's `table2_mc_minus_best_baseline` is within noise of
    the paper's lead). The scorecard calls it a tie only when the whole interval lies inside the 2-point tie band
    (the two one-sided tests), and otherwise says the loss is shown when the interval excludes zero."""
    ctx = Section.setup(notebook="15_scorecard", backend="sim", scale="quick", seeds=[1, 2, 3, 4, 5],
                        n_requests=3000, rates={"mixed": 24.0, "chat": 60.0, "reasoning": 30.0, "documents": 25.0},
                        results_dir=tmp_path / "r",
                        figures_dir=tmp_path / "f")
    from repro.vocab import DEFAULT_PROFILE

    assert DEFAULT_PROFILE == "a40-identified"
    card = sc.score_section(ctx, ["tests.contenders:RoundRobinClone"], ["Table II"])
    vs = card.table[card.table.comparison == sc.VS_ROUTER]
    assert len(vs) == 1
    v = vs.iloc[0]
    assert v.ours_lo <= v.ours <= v.ours_hi and v.ours < 0  # round-robin below the router
    if v.verdict == "tie":
        assert -0.02 < v.ours_lo and v.ours_hi < 0.02, v
    else:
        assert v.verdict in ("worse", "within noise") and v.ours_lo <= -0.02, v
        assert v.ours_hi < 0 and (v.verdict == "worse" or "A worse" in v.reason)
