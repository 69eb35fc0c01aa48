"""Notebook 03 (§IV): repro.paper.sections.methodology."""

import pandas as pd

from repro.paper.sections import methodology as nb


def test_gates_are_live_only_and_saturation_headline(section):
    text, table = nb.check_gates(section())
    assert table is None and "live backends" in text
    rates = pd.DataFrame({"workload": ["chat", "mixed"], "saturation_rate": [64.0, 16.0]})
    assert [(r["key"], r["ours"], r["unit"]) for r in nb.saturation_headline(rates)] == [
        ("saturation_rate_chat", 64.0, "req/s"), ("saturation_rate_mixed", 16.0, "req/s")]
    assert all(r.get("kind", "value") == "value" for r in nb.saturation_headline(rates))
    assert {r["kind"] for r in nb.saturation_headline(rates, searched=False)} == {"input"}  # given, not measured
    assert nb.gates_table(type("R", (), {"reports": []})()).columns.tolist() == ["gate", "instance", "ok", "detail",
                                                                                "latency_s"]
