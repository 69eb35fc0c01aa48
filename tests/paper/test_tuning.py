"""Held-out tuning of marginal_cost_plus: repro.paper.tuning (the grid is not re-run here)."""

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from repro.errors import ConfigError
from repro.paper import plans, tuning
from repro.routing.policies import POLICIES, make_policy
from repro.routing.policies.batching import MarginalCostBatching, MarginalCostPlus

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_tuning_traces_are_disjoint_from_every_evaluation_trace():
    assert not set(tuning.TUNING_SEEDS) & set(tuning.EVALUATION_SEEDS)
    evaluated = set(plans.FULL_SEEDS) | set(plans.SIM_FULL_SEEDS) | set(plans.LIVE_QUICK_SEEDS)
    assert evaluated <= set(tuning.EVALUATION_SEEDS)
    # every notebook's own choice of traces (its quick plan) is an evaluation trace too
    quick = [m for p in NOTEBOOKS.glob("[0-9][0-9]_*.py")
             for m in re.findall(r"quick_seeds=\(([\d, ]+)\)", p.read_text())]
    assert quick  # the scan found them
    for m in quick:
        seeds = {int(s) for s in m.replace(" ", "").split(",") if s}
        assert seeds <= set(tuning.EVALUATION_SEEDS) and not seeds & set(tuning.TUNING_SEEDS)


def _table(rows):
    """A fake `tuning_table`: (base, sample_d, guard or None, worst_gap, mean_gap) per setting."""
    out = []
    for base, d, g, worst, mean in rows:
        s = tuning.Setting(base, d, g)
        out.append({**s.to_row(), "worst_gap": worst, "worst_cell": "mixed/1p2d", "mean_gap": mean,
                    "scarcity_gap": math.nan, "mixed_lead": math.nan, "seeds": "101", "n_requests": 10})
    return pd.DataFrame(out, columns=list(tuning.TABLE_COLUMNS))


def test_select_maximises_the_worst_gap_then_the_mean_then_simplicity():
    t = _table([("marginal_cost", 2, 1.5, -0.05, 0.30),  # best mean, but the worst gap is lower
                ("marginal_cost_batching", 2, 1.0, -0.01, 0.10),
                ("marginal_cost_batching", 0, 1.0, -0.01, 0.12)])  # same worst gap, better mean
    assert tuning.select(t) == tuning.Setting("marginal_cost_batching", 0, 1.0)
    t = _table([("marginal_cost", 2, 1.25, 0.0, 0.1), ("marginal_cost", 0, 1.25, 0.0, 0.1)])  # a tie: fewer additions
    assert tuning.select(t) == tuning.Setting("marginal_cost", 0, 1.25)
    assert tuning.select(t.iloc[::-1]) == tuning.Setting("marginal_cost", 0, 1.25)  # row order does not matter
    with pytest.raises(ConfigError, match="non-empty"):
        tuning.select(t.iloc[:0])


def test_tuning_table_gaps_by_hand():
    """Two cells, two baselines, one trace: the gap is the setting minus the best baseline in each cell."""
    a, b = tuning.Setting("marginal_cost", 2, 1.5), tuning.Setting("marginal_cost_batching", 0, None)
    good = {("mixed", "1p2d"): {"round_robin": 0.50, "marginal_cost": 0.30, a.label: 0.55, b.label: 0.40},
            ("mixed", "2p4d"): {"round_robin": 0.77, "marginal_cost": 0.80, a.label: 0.79, b.label: 0.83}}
    runs = pd.DataFrame([{"workload": wl, "topology": t, "variant": v, "seed": 101, "goodput": g,
                          "kind": "setting" if v in (a.label, b.label) else "baseline"}
                         for (wl, t), row in good.items() for v, g in row.items()])
    tab = tuning.tuning_table(runs, [a, b], n_requests=100).set_index("setting")
    assert tab.loc[a.label, "worst_gap"] == pytest.approx(-0.01) and tab.loc[a.label, "worst_cell"] == "mixed/2p4d"
    assert tab.loc[a.label, "mean_gap"] == pytest.approx((0.05 - 0.01) / 2)
    assert tab.loc[a.label, "scarcity_gap"] == pytest.approx(0.05)
    assert tab.loc[b.label, "worst_gap"] == pytest.approx(-0.10)
    assert tab.loc[b.label, "mixed_lead"] == pytest.approx(0.03)
    assert tuning.select(tab.reset_index()) == a


def test_settings_map_onto_the_base_policies_options():
    s = tuning.Setting("marginal_cost", 2, 1.25)
    assert s.options() == {"sample_d": 2, "admission_guard": True, "guard_margin": 1.25}
    assert tuning.Setting("marginal_cost_batching").options() == {}  # no addition: the base policy's own run
    assert tuning.Setting.from_row(s.to_row()) == s
    specs = tuning.tuning_specs((101,), 50, grid=[s], cells=[("mixed", "1p2d", 16.0)], baselines=("round_robin",))
    assert [(lab["variant"], sp.policy, sp.policy_options) for lab, sp in specs] == [
        ("round_robin", "round_robin", {}), (s.label, "marginal_cost", s.options())]
    assert len(tuning.GRID) == len(tuning.BASES) * len(tuning.SAMPLE_D) * len(tuning.GUARD_MARGINS)
    with pytest.raises(ConfigError, match="field 'base'"):
        tuning.Setting("round_robin")
    with pytest.raises(ConfigError, match="field 'guard_margin'"):
        tuning.Setting("marginal_cost", 0, 0.5)


def test_shipped_defaults_are_what_the_tuning_selects_on_the_shipped_table():
    table = tuning.load_table()
    assert set(table.setting) == {s.label for s in tuning.GRID}  # the whole grid
    assert set(table.seeds) == {" ".join(map(str, tuning.TUNING_SEEDS))}  # measured on the tuning traces only
    assert set(table.n_requests) == {tuning.TUNING_REQUESTS}
    chosen = tuning.select(table)
    assert tuning.shipped_setting() == chosen
    plus = make_policy("marginal_cost_plus", None)
    assert isinstance(plus, POLICIES[chosen.base]) and POLICIES["marginal_cost_plus"] is MarginalCostPlus
    assert plus.sample_d == chosen.sample_d
    assert plus.admission_guard == (chosen.guard_margin is not None) and plus.guard_margin == chosen.guard_margin
    # the docstring says what the defaults rest on
    doc = MarginalCostPlus.__doc__
    assert all(str(s) in doc for s in tuning.TUNING_SEEDS) and "worst gap" in doc
    assert issubclass(MarginalCostPlus, MarginalCostBatching) == (chosen.base == "marginal_cost_batching")
