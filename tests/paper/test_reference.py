import pytest

from repro.errors import ConfigError
from repro.paper import reference as paper_reference


def test_load_has_columns_and_unique_keys():
    df = paper_reference.load()
    assert list(df.columns) == paper_reference.COLUMNS
    assert df["key"].is_unique
    assert len(df) > 60


@pytest.mark.parametrize("key,value", [
    ("sim_tau_dec_underestimate", 7.4), ("table2_mc_trace2", 0.877), ("table2_ll_worst", 0.795),
    ("calib_simderived_goodput", 0.819), ("fig3_rr_documents", 0.585), ("width4_ll", 0.835),
    ("fig4_mc_1p2d", 0.292), ("fig6_ll_ttft_p99", 0.346), ("fig8_slo_uncalibrated", -12),
    ("fig9_goodput_lo", 0.838), ("sim_rate_gap_serial", 1700), ("slo_tpot_tight", 0.0397),
    ("kv_budget_tokens", 60000), ("sim_miscal_ttft_p99_miscalibrated", 3.461),
])
def test_lookup_values(key, value):
    assert paper_reference.lookup(key) == pytest.approx(value)


def test_table2_mean_is_mean_of_traces():
    vals = [paper_reference.lookup(f"table2_mc_trace{i}") for i in (1, 2, 3)]
    assert sum(vals) / 3 == pytest.approx(paper_reference.lookup("table2_mc_mean"), abs=5e-4)


def test_unknown_key_names_it():
    with pytest.raises(ConfigError, match="no_such_key"):
        paper_reference.lookup("no_such_key")


def test_select_by_section():
    df = paper_reference.select("V-A")
    assert set(df["figure_or_table"]) == {"Table II"}
