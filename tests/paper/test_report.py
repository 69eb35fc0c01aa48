"""`repro report`: one self-contained page of a `repro paper` run (repro.paper.report)."""

from __future__ import annotations

import re
import subprocess

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from repro.errors import ConfigError  # noqa: E402
from repro.paper.headline import write_headline  # noqa: E402
from repro.paper.report import build_report, write_report  # noqa: E402
from repro.paper.summary import collect_headlines  # noqa: E402
from repro.statistics.intervals import Estimate  # noqa: E402
from tests.browser import HEADLESS, chromium  # noqa: E402


def _run_dirs(tmp_path, n_figures=2):
    res, fig = tmp_path / "results", tmp_path / "figures"
    write_headline([{"key": "table2_mc_mean", "ours": Estimate(0.81, 0.79, 0.83), "runs": ["r1", "r2"]},
                    {"key": "x_gap", "ours": Estimate(0.01, -0.01, 0.03), "paper": 0.3, "kind": "ordering"}],
                   "04_mixed_goodput", res, measured="sim")
    write_headline([{"key": "calib_calibrated_goodput", "ours": Estimate(0.81, 0.79, 0.83), "runs": ["r1", "r2"]}],
                   "05_calibration_value", res, measured="sim")
    collect_headlines(["04_mixed_goodput", "05_calibration_value"], res, backend="sim", scale="full",
                      commit="abc").to_csv(res / "summary.csv", index=False)
    fig.mkdir()
    for i in range(n_figures):
        f, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [i, 1])
        f.savefig(fig / f"0{4 + i}_figure.png")
        plt.close(f)
    return res, fig


def test_report_is_one_offline_page_with_every_row_and_figure(tmp_path):
    res, fig = _run_dirs(tmp_path)
    page = build_report(res, fig)
    # the two figures, and the conclusion's forest plot
    assert page.count("<img class=fig") == 3 and page.count("data:image/png;base64,") == 3
    assert "the claims, ours over the paper" in page
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page)  # nothing fetched
    assert "table2_mc_mean" in page and "0.810 [0.790, 0.830]" in page
    # the same measurement of the same sentence under another key is said to be one, and counted once in the tally
    assert "same measurement as <code>table2_mc_mean</code>" in page
    # the grouped tally counts it once: one not reproduced headline row, one not reproduced testbed row
    assert re.search(r"<td>headline: [^<]*</td><td class=num></td><td class=num>1</td>", page)
    assert re.search(r"<td>testbed: [^<]*</td><td class=num></td><td class=num>1</td>", page)
    assert re.search(r"<td>all</td><td class=num></td><td class=num>2</td>(<td class=num></td>){4}"
                     r"<td class=num>2</td>", page)
    # the written conclusion comes first: what the run can tell, the claims on one screen, then the details folded;
    # what the verdicts rest on (the validation, the certificate) after it
    assert page.index("<h1>") < page.index("id=conclusion") < page.index("id=basis") < page.index("id=tally") \
        < page.index("id='nb04'")
    assert page.index("What this run can tell you") < page.index("<table")
    assert page.index("<td>Table II: the learned router leads on mixed bursty traffic</td>") < page.index("<details>")
    assert "Its rows: <code>table2_mc_mean</code> 0.810 [0.790, 0.830] (paper 0.864)" in page
    assert "Fig. 9: robust to predictor error: not measured in this run" in page
    assert "size shown smaller" in page  # x_gap's reason
    assert "backend <b>sim</b>, scale <b>full</b>, commit <code>abc</code>" in page
    assert write_report(res, fig).read_text() == page  # deterministic: no clock time in it


def test_report_shows_notebook_06s_misses_by_cause_when_written(tmp_path):
    res, fig = _run_dirs(tmp_path, n_figures=3)  # a figure of 06 gives the page its section
    assert "misses by cause" not in build_report(res, fig)  # no 06_misses.csv: no table
    row = {"workload": "documents", "goodput": 0.83, "ttft_miss_tight": 0.17, "ttft_miss_loose": 0.0, "tpot_miss": 0.0,
           "both_miss": 0.0, "failed": 0.0, "prefill_time_p90_s": 0.2, "prefill_delay_p90_s": 0.0875,
           "decode_wait_p90_s": 0.026, "preempted": 0.0, "bottleneck": "prefill", "seeds": 2, "requests": 2000}
    pd.DataFrame([{**row, "policy": p} for p in ("round_robin", "least_loaded")]).to_csv(res / "06_misses.csv",
                                                                                         index=False)
    page = build_report(res, fig)
    start = page.index("id='nb06'")
    section = page[start:page.find("<h2", start)]
    assert "Why policies tie or separate: misses by cause" in section
    assert "<th>ttft_miss_tight</th>" in section and "<td class=num>0.170</td>" in section
    assert "<td>prefill</td>" in section and "<th>requests</th>" not in section  # the compact columns only
    assert ("documents: 17.0 % of requests missed, all tight-class TTFT misses; bottleneck prefill under every "
            "policy; nothing preempted; round_robin and least_loaded give identical numbers") in section


def test_report_refuses_a_missing_or_old_summary(tmp_path):
    with pytest.raises(ConfigError, match="repro paper"):
        build_report(tmp_path, tmp_path)
    (tmp_path / "summary.csv").write_text("notebook,key,ours,paper\n04,x,1,1\n")
    with pytest.raises(ConfigError, match="older version"):
        build_report(tmp_path, tmp_path)


@pytest.mark.browser
def test_every_figure_loads_in_a_real_headless_browser(tmp_path):
    browser = chromium()
    res, fig = _run_dirs(tmp_path, n_figures=3)
    (fig / "07_broken.png").write_bytes(b"not a png")  # a figure that cannot load must be counted as such
    path = write_report(res, fig)
    dom = subprocess.run([browser, *HEADLESS, "--virtual-time-budget=5000", "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    # the three figures and the conclusion's forest plot load; the broken one does not
    assert re.search(r"id=\"figures-status\">figures loaded 4 of 5<", dom), dom[-500:]
    (fig / "07_broken.png").unlink()
    dom = subprocess.run([browser, *HEADLESS, "--virtual-time-budget=5000", "--dump-dom",
                          write_report(res, fig).as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "figures loaded 4 of 4" in dom


FIRST_SCREEN = """<script>window.addEventListener('load', () => {
  const t = document.querySelector('#conclusion table').getBoundingClientRect();
  const p = document.querySelector('#conclusion p').getBoundingClientRect();
  document.body.setAttribute('data-screen', [Math.round(p.top), Math.round(t.bottom), Math.round(t.right),
                                             window.innerHeight, window.innerWidth].join(','));
});</script>"""


@pytest.mark.browser
def test_the_conclusion_is_on_the_first_screen_at_1280_px(tmp_path):
    """The main job's own summary: its plain-words sentence and the whole claims table within a 1,280 x 800 window
    (the table's bottom edge above the fold, nothing wider than the window)."""
    browser = chromium()
    from repro.paths import REPO_ROOT

    res = tmp_path / "res"
    res.mkdir()
    (res / "summary.csv").write_bytes((REPO_ROOT / "docs" / "main_job_summary.csv").read_bytes())
    page = build_report(res, tmp_path / "none").replace("</body>", FIRST_SCREEN + "</body>")
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    dom = subprocess.run([browser, *HEADLESS, "--window-size=1280,800", "--virtual-time-budget=5000", "--dump-dom",
                          path.as_uri()], capture_output=True, text=True, timeout=120).stdout
    m = re.search(r'data-screen="(\d+),(\d+),(\d+),(\d+),(\d+)"', dom)
    assert m, dom[-500:]
    top, bottom, right, height, width = map(int, m.groups())
    assert width == 1280 and top < 150 and bottom <= height and right <= width, m.groups()


def test_repro_report_finds_a_run_by_backend_and_scale(tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    from repro.cli.report import report_cli

    res, fig = _run_dirs(tmp_path)
    seen = []
    monkeypatch.setattr("repro.paper.summary.default_dirs", lambda b, s: seen.append((b, s)) or (res, fig))
    app = typer.Typer()
    app.command()(report_cli)
    for args, want in ((["--backend", "emulated"], ("emulated", "quick")), ([], ("sim", "full"))):
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, out.output
        assert seen[-1] == want and (res / "report.html").exists()
    bad = CliRunner().invoke(app, ["--backend", "gpu"])
    assert bad.exit_code != 0 and "allowed" in str(bad.exception)
