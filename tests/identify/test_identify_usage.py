"""repro identify as a user meets it: it never overwrites a testbed unasked, reads relative
paths from the working directory, lets a stated rate fill a training row, keeps the predicted policy out of the
training table, ships an example table, calls a parameter identified only when the numbers (not a prior bound)
pin it, says whether the fit is within the numbers' noise from its figures, and its --help says what it fits."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

import repro.paths
from repro.cli import app  # imported before any test moves the repository root (its --help counts the paper's rows)
from repro.errors import ConfigError
from repro.identify.fit import Identification, Problem, status_words, target_specs
from repro.identify.space import PAPER_SPACE, Parameter, space_by_name
from repro.identify.targets import Target, check_training, load_targets, predicted_policies, rows_about, to_frame
from repro.paths import DATA_DIR, REPO_ROOT, user_path

BASELINES = DATA_DIR / "identify" / "paper_baselines.csv"
PREDICTIONS = DATA_DIR / "identify" / "paper_predictions.csv"
EXAMPLE = REPO_ROOT / "examples" / "identify" / "my_baselines.csv"

DOCS_ROW = Target("docs_ttft_p50", "documents", "1p1d", ("round_robin",), "1.0", (1,), 60, "ttft_p50_s", "mean",
                  0.6, 0.1)
"""One cheap training row (60 requests on 1p1d): a fit of one parameter over it takes seconds."""
TINY = ["--params", "prefill_per_token_s", "--popsize", "2", "--generations", "0", "--executor", "serial",
        "--ensemble-size", "2", "--reference", ""]


def _identify(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["identify", *args])


def _table(path, rows) -> str:  # type: ignore[no-untyped-def]
    to_frame(rows).to_csv(path, index=False)
    return str(path)


def test_identify_refuses_to_overwrite_a_testbed_unless_told(tmp_path, monkeypatch):
    """Without --name, the default testbed's profile and report (here under a stand-in repository root) are
    never replaced: the error names the path and the two ways on; --overwrite replaces them; --report-only
    rewrites that same name's files from their own history without being told."""
    monkeypatch.setattr(repro.paths, "REPO_ROOT", tmp_path)
    table = _table(tmp_path / "targets.csv", [DOCS_ROW])
    profile = tmp_path / "data" / "hardware" / "a40-identified.json"
    report = tmp_path / "data" / "identify" / "a40-identified"
    profile.parent.mkdir(parents=True)
    profile.write_text("{}")
    res = _identify("--targets", table, "--predictions", "", *TINY)
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert str(profile) in said and "--name NEW" in said and "--overwrite" in said
    assert profile.read_text() == "{}" and not report.exists()
    profile.unlink()
    report.mkdir(parents=True)
    (report / "history.csv").write_text("old\n")
    res = _identify("--targets", table, "--predictions", "", *TINY)
    assert res.exit_code == 2 and f"{report}/ (not empty)" in " ".join(res.output.split()), res.output
    assert not profile.exists()
    res = _identify("--targets", table, "--predictions", "", "--overwrite", *TINY)
    assert res.exit_code == 0, res.output
    assert json.loads(profile.read_text())["name"] == "a40-identified"
    fit = json.loads((report / "fit.json").read_text())
    assert fit["fit_quality"].startswith("the best fit is")
    res = _identify("--targets", table, "--predictions", "", "--report-only", *TINY)
    assert res.exit_code == 0, res.output


def test_relative_paths_are_read_from_the_working_directory(tmp_path, monkeypatch):
    """A path the user types is the working directory's (the repository's only when nothing is here); a
    shipped default is the repository's from anywhere."""
    default = "data/identify/paper_baselines.csv"
    monkeypatch.chdir(tmp_path)
    assert user_path(default, default=default) == REPO_ROOT / default
    assert user_path(default) == REPO_ROOT / default  # not here: the repository's
    (tmp_path / "data" / "identify").mkdir(parents=True)
    (tmp_path / default).write_text("key\n")
    assert user_path(default) == tmp_path / default  # here: this directory's
    assert user_path(default, default=default) == REPO_ROOT / default  # the default stays the repository's
    assert user_path("new/folder") == tmp_path / "new" / "folder"  # an output yet to be written
    assert user_path(tmp_path / "x") == tmp_path / "x"

    _table(tmp_path / "mine.csv", [DOCS_ROW])
    _table(tmp_path / "pred.csv", [Target("docs_mc", "documents", "1p1d", ("marginal_cost",), "1.0", (1,), 60,
                                          "ttft_p50_s", "mean", 0.5, 0.2)])
    res = _identify("--targets", "mine.csv", "--predictions", "pred.csv", "--name", "mine", "--profile-dir", "out",
                    "--out-dir", "report", *TINY)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "mine.json").exists()
    assert list(pd.read_csv(tmp_path / "report" / "robustness.csv")["key"]) == ["docs_mc"]
    assert not (REPO_ROOT / "out").exists() and not (REPO_ROOT / "report").exists()


def test_a_stated_rate_fills_a_training_rows_rate(tmp_path):
    """A training row at ``@rate_mixed`` runs at the --stated-rate; without it the row is an error, and a rate
    both stated and fitted is one too."""
    row = Target("docs_ttft_p50", "documents", "1p1d", ("round_robin",), "0.5*@rate_mixed", (1,), 60, "ttft_p50_s",
                 "mean", 0.6, 0.1)
    space = space_by_name(["prefill_per_token_s"])
    with pytest.raises(ConfigError, match=r"rate\(s\) \['rate_mixed'\].*--stated-rate"):
        Problem("a40-qwen2.5-3b", (row,), space)
    problem = Problem("a40-qwen2.5-3b", (row,), space, stated={"rate_mixed": 2.0})
    assert problem.stated_rates == {"rate_mixed": 2.0}
    assert {spec.rate for spec in target_specs(problem, {}).values()} == {1.0}
    fitted = Parameter("rate_mixed", "rate", 1.0, 30.0, "req/s", "test")
    with pytest.raises(ConfigError, match=r"\['rate_mixed'\] are both stated .* and fitted"):
        Problem("a40-qwen2.5-3b", (row,), (fitted,), stated={"rate_mixed": 2.0})

    table = _table(tmp_path / "t.csv", [row])
    res = _identify("--targets", table, "--predictions", "", "--stated-rate", "rate_mixed=2", "--name", "s",
                    "--profile-dir", str(tmp_path), "--out-dir", str(tmp_path / "r"), *TINY)
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "s.json").read_text())["identified"]["stated_rates"] == {"rate_mixed": 2.0}
    hist = pd.read_csv(tmp_path / "r" / "history.csv")
    assert hist["sim:docs_ttft_p50"].map(math.isfinite).all()
    both = _identify("--targets", table, "--predictions", "", "--stated-rate", "rate_chat=5")
    assert both.exit_code == 2 and "both stated" in both.output


def test_a_training_row_about_the_predicted_policy_is_refused_or_warned(tmp_path):
    """In the shipped paper table a row about the router is an error; in a user's table, a warning naming it."""
    paper, pred = load_targets(BASELINES), load_targets(PREDICTIONS)
    assert predicted_policies(pred) == {"marginal_cost"}
    assert check_training(paper, pred, origin="paper", shipped=True) == []
    mc = Target("table2_mc_mean", "mixed", "2p4d", ("marginal_cost",), "24.0", (1, 2, 3), 2000, "goodput", "mean",
                0.864, 0.015)
    with pytest.raises(ConfigError, match=r"\['table2_mc_mean'\] measure \['marginal_cost'\]"):
        check_training([*paper, mc], pred, origin="paper", shipped=True)
    # a user's router, predicted as an ordering against a baseline: the baseline may be trained on, it may not
    mine = Target("mine_minus_rr", "mixed", "2p4d", ("my_router", "round_robin"), "24.0", (1,), 100, "goodput",
                  "mean", 0.02, 0.015)
    assert predicted_policies([mine]) == {"marginal_cost", "my_router"}
    about_mine = Target("mine_alone", "mixed", "2p4d", ("my_router",), "24.0", (1,), 100, "goodput", "mean", 0.8, 0.02)
    assert [t.key for t in rows_about([*paper, about_mine], predicted_policies([mine]))] == ["mine_alone"]
    (warning,) = check_training([DOCS_ROW, about_mine], [mine], origin="mine.csv")
    assert "['mine_alone']" in warning and "my_router" in warning

    mc_docs = Target("docs_mc", "documents", "1p1d", ("marginal_cost",), "1.0", (1,), 60, "ttft_p50_s", "mean",
                     0.5, 0.2)
    table = _table(tmp_path / "t.csv", [DOCS_ROW, mc_docs])
    res = _identify("--targets", table, "--predictions", "", "--name", "w", "--profile-dir", str(tmp_path),
                    "--out-dir", str(tmp_path / "r"), *TINY)
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "warning:" in said and "['docs_mc'] measure ['marginal_cost']" in said


def test_the_example_targets_file_loads_and_holds_baselines_only():
    text = EXAMPLE.read_text()
    assert text.startswith("#") and "sd" in text
    rows = load_targets(EXAMPLE)
    assert 3 <= len(rows) <= 5
    assert check_training(rows, load_targets(PREDICTIONS), origin=str(EXAMPLE), shipped=True) == []
    assert all(t.sd >= 0.01 for t in rows if t.metric == "goodput")  # at least the simulator's own trace noise
    Problem("a40-qwen2.5-3b", tuple(rows), space_by_name(["prefill_per_token_s"]), stated={"rate_mixed": 12.0})
    assert "examples/identify/my_baselines.csv" in (REPO_ROOT / "docs" / "IDENTIFY.md").read_text()


def _synthetic(history: pd.DataFrame, space: tuple[Parameter, ...], n_targets: int = 0) -> Identification:
    rows = tuple(Target(f"t{i}", "mixed", "2p4d", ("round_robin",), "1.0", (1,), 10, "goodput", "mean", 0.5, 0.01)
                 for i in range(n_targets))
    return Identification(Problem("a40-qwen2.5-3b", rows, space, physical_bounds=False), history)


def test_identified_means_narrow_and_not_cut_by_a_prior_bound():
    """b's best is inside the prior, but its ensemble runs into the lower bound: the prior, not the numbers,
    stops it, so it is at a bound, not identified. d is wide and cut: loose, flagged."""
    space = tuple(Parameter(n, "rate", 0.0, 1.0, "x", "test", log=False) for n in "abcd")
    hist = pd.DataFrame([
        {"a": 0.50, "b": 0.10, "c": 0.50, "d": 0.50, "chi2": 0.0},  # the best
        {"a": 0.45, "b": 0.01, "c": 0.10, "d": 0.30, "chi2": 1.0},
        {"a": 0.55, "b": 0.20, "c": 0.90, "d": 0.995, "chi2": 2.0},
        {"a": 0.00, "b": 0.90, "c": 0.00, "d": 0.00, "chi2": 500.0},  # outside the ensemble
    ])
    pars = _synthetic(hist, space).parameters(size=24).set_index("parameter")
    assert list(pars["status"]) == ["identified", "at a bound", "loose", "loose"]
    assert list(pars["cut"]) == ["", "low", "", "high"]
    assert list(pars["at_bound"]) == [False, True, False, True]
    assert pars.loc["b", "prior_share"] == pytest.approx(0.19)
    assert status_words("loose", "high") == "loose, cut at the prior's high end"
    assert status_words("at a bound", "low") == "at a bound"


def test_whether_the_fit_is_within_noise_is_said_from_its_figures():
    space = (Parameter("a", "rate", 0.0, 1.0, "x", "test", log=False),)
    good = _synthetic(pd.DataFrame([{"a": 0.5, "chi2": 4.0}]), space, n_targets=5)  # 4 degrees of freedom
    assert good.fit_quality().startswith("the best fit is within the numbers' noise (chi-square 4.0 on 4 degrees")
    bad = _synthetic(pd.DataFrame([{"a": 0.5, "chi2": 88.9}]), space, n_targets=9)  # 8 degrees of freedom
    assert bad.fit_quality() == ("the best fit is not within the numbers' noise: chi-square 88.9 on 8 degrees of "
                                 "freedom is 11.1x what the noise allows (each number about 3.3 sd off on average)")
    # no sentence in the package or the docs claims the ensemble fits within the numbers' noise
    claim = re.compile(r"fits? (the paper's baseline numbers )?within (the numbers'|their) noise")
    for rel in ("repro/identify/__init__.py", "repro/paper/findings.py", "docs/VERDICTS.md", "docs/IDENTIFY.md",
                "REPRODUCE.md", "README.md"):
        text = " ".join(re.sub(r'"\s*\n\s*"', "", (REPO_ROOT / rel).read_text()).split())  # literals joined
        assert not claim.search(text), rel


def test_identify_help_says_what_the_default_fit_frees_and_holds():
    res = CliRunner().invoke(app, ["identify", "--help"], env={"COLUMNS": "120", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    shown = " ".join(res.output.replace("│", " ").split())
    assert ", ".join(p.name for p in PAPER_SPACE) in shown
    assert f"{len(load_targets(BASELINES))} rows in data/identify/paper_baselines.csv" in shown
    for panel in ("What to fit", "Search", "Measuring on a cluster", "Output", "Execution"):
        assert f"─ {panel} ─" in res.output, panel
    assert "read from the current directory" in shown and "--overwrite" in shown
