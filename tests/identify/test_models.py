"""`repro models --report-only`: the model table from the searches' folders as shipped, scored by the baselines
alone (`repro.identify.selection`), and the certificate from their gap searches (`repro.identify.certificate`)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from typer.testing import CliRunner

from repro.identify import certificate
from repro.paths import DATA_DIR

SHIPPED = DATA_DIR / "identify" / "models"
MODELS = ("base", "request_path+path_tail")


def test_the_model_table_and_the_certificate_from_the_shipped_searches(tmp_path):
    from repro.cli import app

    for m in MODELS:
        shutil.copytree(SHIPPED / m, tmp_path / m, ignore=shutil.ignore_patterns("*.jsonl"))
    res = CliRunner().invoke(app, ["models", "--report-only", "--models", ",".join(MODELS), "--out-dir",
                                   str(tmp_path)])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(tmp_path / "models.csv").set_index("model")
    shipped = pd.read_csv(SHIPPED / "models.csv").set_index("model")
    for m in MODELS:  # the same scores as the shipped table, from the histories alone
        for col in ("chi2", "dof", "aic", "bic", "cv_chi2", "docs_gap"):
            assert table.loc[m, col] == shipped.loc[m, col], (m, col)
    # best by cross-validation first; the weights sum to one
    assert table["cv_chi2"].is_monotonic_increasing and abs(table["cv_weight"].sum() - 1) < 1e-9
    sets = certificate.load(tmp_path / "certificate.json")
    assert [s.id for s in sets] == ["documents_gap"]  # no model opened the gap the paper states
    assert "fig3_worst_loadaware_minus_rr_documents" in sets[0].rows
    assert "round-robin" in certificate.note_for("fig3_worst_loadaware_minus_rr_documents", sets)
    assert certificate.note_for("table2_mc_mean", sets) == ""
    sel = json.loads((tmp_path / "selection.json").read_text())
    assert sel["chosen_by_cv"] == table.index[0]
    # model uncertainty: the router's numbers on every testbed of both models' ensembles (their shipped
    # predictions.csv, read back, not simulated again)
    robust = pd.read_csv(tmp_path / "robustness.csv").set_index("key")
    assert robust.loc["fig3_mc_minus_rr_documents", "verdict"] == "holds on no model"
    assert robust.loc["width3_mc_margin", "verdict"] == "holds on every model"
    assert set(robust["models"]) == {len(MODELS)}


def _row(key, value, claim=""):
    from repro.identify.targets import Target

    return Target(key=key, workload="mixed", topology="2p4d", policies=("marginal_cost",), rate="@rate_mixed",
                  seeds=(1,), n_requests=1000, metric="goodput", statistic="mean", value=value, sd=0.01,
                  source="test", claim=claim)


def test_across_models_counts_each_model_and_words_the_verdict():
    from repro.identify.selection import across_models

    row = _row("x", 0.80)

    def long(a, b):
        return pd.DataFrame([("a", "m0", "x", a[0]), ("a", "m1", "x", a[1]), ("b", "m0", "x", b[0]),
                             ("b", "m1", "x", b[1])], columns=["model", "member", "key", "value"])

    r = across_models([row], long((0.80, 0.81), (0.80, 0.60)), order=["b", "a"]).iloc[0]
    assert r["per_model"] == "b 1/2; a 2/2"
    assert r["models_holding_everywhere"] == 1 and r["models_holding_somewhere"] == 2
    assert r["verdict"] == "holds on some testbeds of every model"
    assert across_models([row], long((0.80, 0.81), (0.6, 0.6))).iloc[0]["verdict"] == "depends on the model"
    assert across_models([row], long((0.80, 0.81), (0.8, 0.8))).iloc[0]["verdict"] == "holds on every model"
    assert across_models([row], long((0.5, 0.5), (0.6, 0.6))).iloc[0]["verdict"] == "holds on no model"


def test_the_chosen_testbeds_robustness_reads_the_models():
    from repro.identify.testbed import robustness_of

    words = robustness_of("a40-identified", "fig3_mc_minus_rr_documents")
    assert "across models: holds on no model" in words, words
    assert robustness_of("a40-qwen2.5-3b", "fig3_mc_minus_rr_documents") == ""  # not identified: no ensemble


def test_a_rerun_of_repro_models_finds_the_shipped_journals():
    """Each shipped search's journal is named by its problem's fingerprint: `repro models` run again resumes it
    (simulates nothing it visited) instead of starting over."""
    from repro.engine.mechanisms import resolve
    from repro.identify.fit import Problem
    from repro.identify.space import PAPER_SPACE, mechanism_space
    from repro.identify.targets import load_targets

    rows = tuple(load_targets(DATA_DIR / "identify" / "paper_baselines.csv"))
    for folder in sorted(p for p in SHIPPED.iterdir() if p.is_dir()):
        mechs = resolve([] if folder.name == "base" else folder.name.split("+"))
        problem = Problem("a40-qwen2.5-3b", rows, (*PAPER_SPACE, *mechanism_space(mechs)), stated={"rate_mixed": 24.0},
                          mechanisms=tuple(m.name for m in mechs))
        assert (folder / f"search-{problem.fingerprint()}.jsonl").exists(), folder.name


def test_the_shipped_documents_search_holds_the_known_vector_and_no_certificate():
    """The richest model's shipped gap search carries the vector an independent queue found (re-checked on 30
    traces): round-robin at 0.588, the load-aware floor +0.070 above it, so no certificate is shipped; the two
    weaker models cannot express that vector (no step share), and confirm_known skips them."""
    from repro.engine.mechanisms import resolve
    from repro.identify import separation

    rich = "vllm_budget+request_path+path_tail+shared_link+document_tail"
    hist = pd.read_csv(SHIPPED / rich / "gap_search.csv")
    known = hist[hist["origin"] == "known"]
    assert len(known) == 1 and bool(known["feasible"].iloc[0])
    assert known["gap"].iloc[0] >= separation.PAPER_FLOOR - separation.PAPER_RR - 2 * separation.SD * 2 ** 0.5
    assert known["rr_ttft_p99_s"].iloc[0] > 2 * separation.PAPER_RR_TAIL_S  # the corner's cost: the tail fact
    assert separation.summary(hist)["reaches_paper"]
    assert certificate.load(SHIPPED / "certificate.json") == ()
    assert certificate.note_for("fig3_worst_loadaware_minus_rr_documents") == ""
    assert separation.confirm_known(separation.GapProblem(resolve(["request_path", "path_tail"]),
                                                          "a40-qwen2.5-3b")).empty


@pytest.mark.slow
def test_the_known_vector_opens_the_documents_gap_on_the_simulator():
    from repro.engine.mechanisms import resolve
    from repro.identify import separation

    gp = separation.GapProblem(resolve(["vllm_budget", "request_path", "path_tail", "shared_link", "document_tail"]),
                               "a40-qwen2.5-3b")
    row = separation.confirm_known(gp).iloc[0]
    assert abs(row["round_robin"] - separation.PAPER_RR) <= 2 * separation.SD
    assert row["gap"] >= 0.068 and row["rr_ttft_p99_s"] > 2.0


def _fake_goodput(problem, s, policy, rate):
    """Round-robin falls with the rate (0.585 at 16.25 req/s); the load-aware baselines lie above it by a gap that
    grows with the documents' spread."""
    rr = 1.0 - rate / 40.0
    if policy == "round_robin":
        return rr, 1.0
    return rr + 0.1 * (s["workloads"]["documents_sigma"] - 0.3), 1.0


def test_the_aimed_search_finds_each_vectors_rate_and_the_widest_gap(monkeypatch, tmp_path):
    from repro.engine.mechanisms import resolve
    from repro.experiment.executor import make_executor
    from repro.identify import separation

    monkeypatch.setattr(separation, "_policy_goodput", _fake_goodput)
    gp = separation.GapProblem(resolve(["document_tail"]), "a40-qwen2.5-3b")
    space = separation.aimed_space(gp)
    assert "rate_documents" not in [p.name for p in space]
    vals = separation.evaluate_at_paper_rr(gp, [sum(p.internal_bounds) / 2 for p in space])
    assert vals["feasible"] == 1.0 and abs(vals["round_robin"] - separation.PAPER_RR) <= separation.SD
    assert vals["rr_evals"] <= separation.RATE_TRIES
    ex = make_executor("serial", 1, "")
    journal = tmp_path / "aimed.jsonl"
    hist = separation.aimed_search(gp, executor=ex, popsize=4, feasible_target=60, journal=journal,
                                   seeds=[{"documents_sigma": 1.4}])
    assert int(hist["feasible"].sum()) >= 60 and (hist["origin"] == "aimed").all()
    best = hist.loc[hist["gap"].idxmax()]
    assert best["documents_sigma"] > 1.3 and best["gap"] == pytest.approx(0.1 * (best["documents_sigma"] - 0.3))
    lines = len(journal.read_text().splitlines())
    again = separation.aimed_search(gp, executor=ex, popsize=4, feasible_target=60, journal=journal,
                                    seeds=[{"documents_sigma": 1.4}])  # resumes: nothing simulated again
    assert len(journal.read_text().splitlines()) == lines
    assert again["gap"].max() == hist["gap"].max()


def test_the_documents_bound_in_the_docs_is_the_shipped_data():
    from repro.identify.certificate import BOUND_DOC, bound_block, bound_sentence
    from repro.paths import REPO_ROOT

    assert bound_block((REPO_ROOT / BOUND_DOC).read_text()) == bound_sentence()


def test_the_documents_bound_verdict_weighs_the_simulator_and_the_queue(tmp_path):
    from repro.identify import certificate as c

    models, queue = tmp_path / "m", tmp_path / "q"
    models.mkdir()
    queue.mkdir()
    row = {"model": "m1", "vectors": 100, "feasible": 10, "widest_gap": 0.05, "rr": 0.58, "load_aware_min": 0.63,
           "rr_ttft_p99_s": 2.0}
    pd.DataFrame([row]).to_csv(models / "separation.csv", index=False)
    assert c.documents_bound(models, queue).verdict == c.CONFLICT
    (queue / "bound.json").write_text(json.dumps({"opens": True, "confirmed_gap": 0.07, "vectors": 8000}))
    assert c.documents_bound(models, queue).verdict == c.ONLY_PRIORS
    pd.DataFrame([{**row, "widest_gap": 0.07}]).to_csv(models / "separation.csv", index=False)
    b = c.documents_bound(models, queue)
    words = c.bound_sentence(b)
    assert b.verdict == c.HOLD and "+0.0700" in words and "queue model opens +0.070" in words


def test_the_bound_block_is_replaced_and_nothing_around_it_is_lost():
    from repro.identify.certificate import BEGIN, END, bound_block, replace_bound_block

    for inner in ("", "old words\n"):
        text = f"head\n{BEGIN}\n{inner}{END}\n\ntail line\n"
        new = replace_bound_block(text, "the sentence")
        assert new == f"head\n{BEGIN}\nthe sentence\n{END}\n\ntail line\n"
        assert bound_block(new) == "the sentence"
    assert replace_bound_block("no markers", "x") == "no markers"


def test_the_model_table_in_the_docs_is_the_shipped_data():
    from repro.identify.certificate import BOUND_DOC, doc_block
    from repro.identify.selection import markdown_table
    from repro.paths import REPO_ROOT

    assert doc_block((REPO_ROOT / BOUND_DOC).read_text(), "models") == markdown_table()


def test_the_aimed_searchs_own_rows_count_only_through_their_fresh_trace_checks():
    from repro.identify import separation

    rows = [{"model": "m", "gap": 0.09, "round_robin": 0.58, "least_loaded": 0.67, "length_threshold": 0.67,
             "rr_ttft_p99_s": 1.0, "feasible": True, "origin": "aimed", "x": 1.0},
            {"model": "m", "gap": 0.06, "round_robin": 0.58, "least_loaded": 0.64, "length_threshold": 0.64,
             "rr_ttft_p99_s": 1.0, "feasible": True, "origin": "confirmed", "x": 1.0},
            {"model": "m", "gap": 0.03, "round_robin": 0.59, "least_loaded": 0.62, "length_threshold": 0.62,
             "rr_ttft_p99_s": 1.0, "feasible": True, "origin": "search", "x": 2.0}]
    summ = separation.summary(pd.DataFrame(rows))
    assert summ["widest_gap"] == pytest.approx(0.06) and not summ["reaches_paper"]


def test_the_edge_table_moves_each_parameter_alone_toward_its_priors_middle(monkeypatch):
    """The fake testbed's gap is 0.1 x (documents_sigma - 0.3): the table finds it resting on that edge alone."""
    from repro.engine.mechanisms import resolve
    from repro.experiment.executor import make_executor
    from repro.identify import separation

    monkeypatch.setattr(separation, "_policy_goodput", _fake_goodput)
    gp = separation.GapProblem(resolve(["document_tail"]), "a40-qwen2.5-3b")
    space = separation.aimed_space(gp)
    vector = {p.name: p.lo for p in space} | {"documents_sigma": 1.5}
    table = separation.edge_table(gp, vector, executor=make_executor("serial", 1, ""))
    assert len(table) == 1 + len(separation.EDGE_STEPS) * len(space)
    own = table[table["parameter"] == "(the vector)"].iloc[0]
    assert own["gap"] == pytest.approx(0.12)
    sigma = table[table["parameter"] == "documents_sigma"].set_index("step")
    assert sigma["at_edge"].all() and list(sigma["value"]) == pytest.approx([1.5 - 0.25 * 0.6, 1.5 - 0.5 * 0.6])
    assert list(sigma["gap"]) == pytest.approx([0.1 * (v - 0.3) for v in sigma["value"]])
    others = table[~table["parameter"].isin(["documents_sigma", "(the vector)"])]
    assert others["gap"].to_numpy() == pytest.approx(0.12)  # nothing else moves the fake gap


def test_the_bound_names_the_edges_its_widest_gap_rests_on():
    from repro.identify.certificate import HOLD, DocumentsBound, bound_sentence, resting_edges

    edges = ({"parameter": "(the vector)", "step": 0.0, "value": float("nan"), "gap": 0.08, "feasible": 1.0},
             {"parameter": "a", "step": 0.25, "value": 2.0, "gap": 0.05, "feasible": 1.0},
             {"parameter": "a", "step": 0.5, "value": 3.0, "gap": 0.04, "feasible": 1.0},
             {"parameter": "b", "step": 0.25, "value": 5.0, "gap": 0.075, "feasible": 1.0},
             {"parameter": "c", "step": 0.25, "value": 7.0, "gap": float("nan"), "feasible": 0.0})
    model = {"model": "m", "widest_gap": 0.08, "feasible": 3, "vectors": 9, "rr_ttft_p99_s": 1.2}
    b = DocumentsBound(0.0676, (model,), None, (), HOLD, edges)
    assert [name for name, _, _ in resting_edges(b)] == ["c", "a"]  # out of reach first, then the smallest gap
    said = bound_sentence(b)
    assert "a (to 2: +0.050)" in said and "c (to 7: round-robin's 0.585 out of reach)" in said and "b (" not in said
    calm = DocumentsBound(0.0676, (model,), None, (), HOLD, edges[:1] + edges[3:4])
    assert "no parameter moved 25% of the way" in bound_sentence(calm)


def test_a_confirmation_moves_each_vector_to_the_rate_where_round_robin_holds_on_the_fresh_traces(monkeypatch):
    from repro.engine.mechanisms import resolve
    from repro.experiment.executor import make_executor
    from repro.identify import separation

    monkeypatch.setattr(separation, "_policy_goodput", _fake_goodput)
    gp = separation.GapProblem(resolve(["document_tail"]), "a40-qwen2.5-3b")
    vector = {p.name: p.lo for p in separation.aimed_space(gp)} | {"documents_sigma": 1.3, "rate_documents": 30.0}
    hist = separation.confirm_at_paper_rr(gp, [vector], executor=make_executor("serial", 1, ""), seeds=(7, 8))
    row = hist.iloc[0]
    assert row["origin"] == "confirmed" and bool(row["feasible"])
    assert abs(row["round_robin"] - separation.PAPER_RR) <= separation.SD  # re-tuned: 30 req/s gave 0.25
    assert row["rate_documents"] < 30.0 and row["gap"] == pytest.approx(0.1)
