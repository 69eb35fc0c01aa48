"""The pieces several sections share (repro.paper.grids)."""

import pytest

from repro.errors import ConfigError
from repro.paper import grids
from repro.paper.plans import SIM_SATURATION_RATES


def test_shape_cluster_and_gpus(tmp_path):
    assert grids.shape_cluster(None, "2p4d") is None
    with pytest.raises(ConfigError, match="topology"):
        grids.shape_cluster("cluster.yaml", "2p4d")
    (tmp_path / "c-2p4d.yaml").write_text("x")
    assert grids.shape_cluster(str(tmp_path / "c-{topology}.yaml"), "2p4d").endswith("c-2p4d.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        grids.shape_cluster(str(tmp_path / "c-{topology}.yaml"), "1p2d")
    assert [grids.gpus(t) for t in ("1p2d", "4p4d")] == [3, 8]


def test_check_rates():
    with pytest.raises(ConfigError, match="rates"):
        grids.check_rates({"chat": 1.0})
    with pytest.raises(ConfigError, match="mixed"):
        grids.check_rates({**SIM_SATURATION_RATES, "mixed": 0})
    assert grids.check_rates({**SIM_SATURATION_RATES, "chat": 64}) == {**SIM_SATURATION_RATES, "chat": 64.0}


def test_specs_grid_crosses_its_axes(section):
    ctx = section(seeds=(1, 2), n_requests=50)
    specs = grids.specs_grid(ctx, workloads=("chat", "mixed"), rates={"chat": 64.0, "mixed": 16.0},
                             policies=("round_robin",), cost_models=("calibrated", "sim_derived"))
    assert [(s.workload, s.cost_model, s.seed) for s in specs] == [
        (w, c, s) for w in ("chat", "mixed") for c in ("calibrated", "sim_derived") for s in (1, 2)]
    assert {s.rate for s in specs if s.workload == "chat"} == {64.0} and {s.n_requests for s in specs} == {50}
    with pytest.raises(ConfigError, match="topology"):  # a sweep over shapes on one fixed cluster file
        grids.specs_grid(section(pool_cluster="cluster.yaml"), topologies=("1p2d", "2p4d"))
