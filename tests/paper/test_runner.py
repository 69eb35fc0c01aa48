"""The notebook runner: parameter checking, and byte-identical reruns in sim."""

import hashlib

import nbformat
import pandas as pd
import pytest

from repro.errors import ConfigError
from repro.paper import runner as paper
from repro.paper.golden import EXPECTED_DIR


def test_parse_parameters_cell():
    src = 'backend: str = "sim"  # sim | emulated\nseeds: list = [1, 2]  # traces\n'
    params = paper.parse_parameters(src)
    assert params["backend"].default == "sim" and params["backend"].help == "sim | emulated"
    assert params["seeds"].type == "list" and params["seeds"].default == [1, 2]


def test_parse_parameters_needs_annotation():
    with pytest.raises(ConfigError, match="type annotation"):
        paper.parse_parameters("x = 1\n")


@pytest.mark.parametrize("nb", paper.discover(), ids=lambda p: p.stem)
def test_notebooks_declare_common_parameters_and_are_stripped(nb):
    params = paper.notebook_parameters(nb)
    assert {"backend", "scale", "seeds", "cluster", "results_dir", "figures_dir"} <= set(params)
    assert params["backend"].default == "sim" and params["scale"].default == "quick"
    assert all(p.help for p in params.values())
    book = nbformat.read(str(nb), as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "outputs must be stripped"
    checked = [c for c in code if paper.is_checked(c)]
    # each section pins a few deterministic values (expected_output); the overview only reads their results
    assert checked or nb.stem == paper.OVERVIEW, "each notebook pins a few deterministic values (expected_output)"
    # golden-file checks are tagged: a renderer hides their code (the printed table is the reader's)
    assert all({"golden", "hide-input"} <= set(c.metadata.get("tags", [])) for c in checked)
    for k in range(1, len(checked) + 1):
        assert (EXPECTED_DIR / f"{nb.stem}-{k}.txt").exists(), f"golden file {nb.stem}-{k}.txt missing"
    assert nb.with_suffix(".py").exists(), "jupytext py:percent twin missing"
    # papermill's own parser warns ("Unable to parse line") on a line with two '=': keep them out of the help
    src = paper.parameters_cell(book)
    two = [line for line in src.splitlines() if line.count("=") > 1]
    assert all(line.count("=") <= 1 for line in src.splitlines()), two
    import jupytext

    twin = jupytext.read(nb.with_suffix(".py"))
    assert paper.parameters_cell(twin) == src, "the .py twin and the .ipynb disagree: run jupytext --sync"


def test_unknown_parameter_is_an_error_naming_it():
    nb = paper.select("04")[0]
    with pytest.raises(ConfigError, match="'backnd'"):
        paper.check_parameters(nb, {"backnd": "sim"})
    with pytest.raises(ConfigError, match="'typo_param'"):
        paper.run_paper(only="04", extra={"typo_param": 1}, out="build/test-notebooks")


def test_only_selector():
    assert [p.stem[:2] for p in paper.select("01,04")] == ["01", "04"]
    with pytest.raises(ConfigError, match="99"):
        paper.select("99")


def _digests(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_repro_paper_twice_is_byte_identical(tmp_path):
    import typer
    from typer.testing import CliRunner

    app = typer.Typer()
    from repro.cli.paper import paper_cli

    app.command()(paper_cli)
    args = ["--backend", "sim", "--scale", "quick", "--only", "01,04", "--out", str(tmp_path / "build"),
            "--results-dir", str(tmp_path / "results"), "--figures-dir", str(tmp_path / "figures")]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    before = _digests(tmp_path / "results"), _digests(tmp_path / "figures")
    assert {"summary.csv", "report.html"} <= set(before[0]) and "04_table2_goodput.pdf" in before[1]
    summary = pd.read_csv(tmp_path / "results" / "summary.csv")
    assert summary.verdict.notna().all() and set(summary.backend) == {"sim"} and set(summary.scale) == {"quick"}
    # the second run one notebook at a time: the same bytes as the first, two at a time (sim's default here)
    second = CliRunner().invoke(app, [*args, "--jobs", "1"])
    assert second.exit_code == 0, second.output
    assert (_digests(tmp_path / "results"), _digests(tmp_path / "figures")) == before
    live = CliRunner().invoke(app, ["--backend", "emulated", "--jobs", "2", "--only", "04"])
    assert live.exit_code != 0 and "machine to" in str(live.exception or live.output)


def test_a_section_written_as_py_without_its_ipynb_twin_is_an_error(tmp_path):
    """`discover` runs the ``.ipynb``: a section written only as jupytext's ``.py`` would be silently left out."""
    (tmp_path / "01_a.py").write_text("# %%\n")
    (tmp_path / "01_a.ipynb").write_text("{}")
    assert paper.discover(tmp_path) == [tmp_path / "01_a.ipynb"]
    (tmp_path / "02_new.py").write_text("# %%\n")
    with pytest.raises(ConfigError, match=r"02_new\.py.*jupytext --to ipynb"):
        paper.discover(tmp_path)
