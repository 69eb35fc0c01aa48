"""Notebook 03 (§IV): repro.paper.sections.methodology."""

import math

import pandas as pd
import pytest

from repro.experiment.saturation import rate_band
from repro.paper.sections import methodology as nb


def test_gates_are_live_only_and_saturation_headline(section):
    text, table = nb.check_gates(section())
    assert table is None and "live backends" in text
    rates = pd.DataFrame({"workload": ["chat", "mixed"], "saturation_rate": [64.0, 16.0], "rate_lo": [56.0, 12.5],
                          "rate_hi": [72.7, 16.8], "probes": [7, 5]})
    head = nb.saturation_headline(rates)
    assert [(r["key"], r["ours"].value, r["ours"].lo, r["ours"].hi, r["unit"]) for r in head] == [
        ("saturation_rate_chat", 64.0, 56.0, 72.7, "req/s"), ("saturation_rate_mixed", 16.0, 12.5, 16.8, "req/s")]
    assert all(r.get("kind", "value") == "value" for r in nb.saturation_headline(rates))
    assert {r["kind"] for r in nb.saturation_headline(rates, searched=False)} == {"input"}  # given, not measured
    assert nb.gates_table(type("R", (), {"reports": []})()).columns.tolist() == ["gate", "instance", "ok", "detail",
                                                                                "latency_s"]


def test_rate_band_reads_the_probe_curve_in_log_rate():
    # goodput 0.9 at 8, 0.7 at 16, 0.5 at 32 req/s: linear in log2(rate), 0.2 per doubling
    probes = [(16.0, 0.7), (8.0, 0.9), (32.0, 0.5)]
    lo, hi = rate_band(probes, target=0.7, band=0.05)
    assert lo == pytest.approx(16.0 / 2 ** 0.25) and hi == pytest.approx(16.0 * 2 ** 0.25)
    # past the last probe: along the end segment
    lo, hi = rate_band([(8.0, 0.9), (16.0, 0.7)], target=0.65, band=0.05)
    assert lo == pytest.approx(16.0) and hi == pytest.approx(16.0 * 2 ** 0.5)
    # a curve that never falls through the lower edge, and a single probe, say nothing there
    assert math.isnan(rate_band([(8.0, 0.9), (16.0, 0.9)], target=0.7, band=0.05)[1])
    assert all(math.isnan(x) for x in rate_band([(8.0, 0.7)], target=0.7))
