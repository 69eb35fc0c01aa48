"""`repro models --report-only`: the model table from the searches' folders as shipped, scored by the baselines
alone (`repro.identify.selection`), and the certificate from their gap searches (`repro.identify.certificate`)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
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
