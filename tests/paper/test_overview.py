"""The overview notebook's tables (repro.paper.overview): claim -> section -> verdict -> figure, runs side by side."""

from __future__ import annotations

import pytest

from repro.paper.headline import write_headline
from repro.paper.overview import compare, markdown, overview_table, read_summary
from repro.paper.summary import collect_headlines
from repro.statistics.intervals import Estimate


def _run(root, name, mc_mean, with_summary=True):
    res = root / name
    write_headline([{"key": "table2_mc_mean", "ours": Estimate(mc_mean, mc_mean - 0.005, mc_mean + 0.005),
                     "runs": ["r1"]},
                    {"key": "table2_mc_minus_best_baseline", "ours": Estimate(0.01, -0.01, 0.03), "claim": 1,
                     "kind": "ordering", "paper": float("nan"), "runs": ["r1", "r2"]}], "04_mixed_goodput", res)
    write_headline([{"key": "calib_calibrated_goodput", "ours": Estimate(mc_mean, mc_mean - 0.005, mc_mean + 0.005),
                     "runs": ["r1"]}], "05_calibration_value", res)
    if with_summary:
        collect_headlines(["04", "05"], res, backend=name.split("-")[0], scale=name.split("-")[1],
                          commit="c").to_csv(res / "summary.csv", index=False)
    return res


def test_overview_lists_each_measurement_once_with_its_figure(tmp_path):
    res = _run(tmp_path, "sim-full", 0.85)
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "04_table2_goodput.png").write_bytes(b"png")
    tab = overview_table(read_summary(res), figs)
    # calib_calibrated_goodput is the same runs and value as table2_mc_mean: one row, not two confirmations
    assert list(tab.claim.str.split(":").str[0]) == ["table2_mc_mean", "table2_mc_minus_best_baseline"]
    assert list(tab.verdict) == ["reproduced", "within noise"] and tab.figure.iloc[0] == "04_table2_goodput.png"
    assert "| 04_mixed_goodput |" in markdown(tab)


def test_notebooks_run_one_by_one_are_summarised_from_their_headline_files(tmp_path):
    res = _run(tmp_path, "sim-quick", 0.8, with_summary=False)
    s = read_summary(res, backend="sim", scale="quick")
    assert set(s.key) == {"table2_mc_mean", "table2_mc_minus_best_baseline", "calib_calibrated_goodput"}
    assert (s.backend == "sim").all()
    with pytest.raises(FileNotFoundError, match="repro paper"):
        read_summary(tmp_path / "nothing")


def test_compare_puts_every_run_beside_the_paper(tmp_path):
    _run(tmp_path, "sim-full", 0.85)
    _run(tmp_path, "emulated-quick", 0.70)
    side = compare(tmp_path).set_index("key")
    assert {"emulated-quick", "emulated-quick verdict", "sim-full", "sim-full verdict", "paper"} <= set(side.columns)
    row = side.loc["table2_mc_mean"]
    assert row["paper"] == pytest.approx(0.864)
    assert (row["sim-full verdict"], row["emulated-quick verdict"]) == ("reproduced", "not reproduced")
    assert "calib_calibrated_goodput" not in side.index  # repeats left out
    assert compare(tmp_path / "none").empty
