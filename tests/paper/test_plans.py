"""The scale plans (repro.paper.plans): what each notebook runs at (backend, scale), and the live-quick cuts."""

import re
from pathlib import Path

import pytest

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import plans as scale
from repro.paper.grids import specs_grid
from repro.paper.sections import beyond, frontier, mixed_goodput, pool_width, sim_vs_hardware

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_pick_given_wins_then_live_quick_cut_then_default():
    assert scale.pick("widths", [5], "emulated", "quick", (3, 4, 6)) == [5]
    assert scale.pick("widths", [], "emulated", "quick", (3, 4, 6)) == [3, 4]
    assert scale.pick("widths", [], "vllm", "quick", (3, 4, 6)) == [3, 4]
    assert scale.pick("widths", [], "sim", "quick", (3, 4, 6)) == [3, 4, 6]
    assert scale.pick("widths", [], "emulated", "full", (3, 4, 6)) == [3, 4, 6]
    with pytest.raises(KeyError, match="no grid named"):
        scale.pick("widthz", [], "sim", "quick", (3,))
    with pytest.raises(ConfigError, match="'backend'"):
        scale.pick("widths", [], "gpu", "quick", (3,))
    with pytest.raises(ConfigError, match="'scale'"):
        scale.pick("widths", [], "sim", "medium", (3,))


def test_emulated_time_scale_keeps_the_wall_rate_within_the_cpus():
    assert scale.emulated_time_scale(16.0, 2.0) == 2.0  # mixed: 32 wall req/s
    assert scale.emulated_time_scale(64.0, 2.0) == 1.0  # chat: 128 would be the CPU's measurement
    assert scale.emulated_time_scale(40.0, 2.0) == pytest.approx(1.2)
    assert scale.emulated_time_scale(200.0, 2.0) == 1.0  # never slower than real time
    assert scale.emulated_time_scale(200.0, 0.5) == 0.5  # nor faster than asked
    spec = RunSpec.from_flat(backend="emulated", workload="chat", rate=64.0, time_scale=2.0, n_requests=10)
    assert scale.for_this_machine(spec).live.time_scale == 1.0
    sim = spec.replace(backend="sim", time_scale=1.0, rate=500.0)
    assert scale.for_this_machine(sim) is sim


def test_value():
    assert scale.value("burst_period_s", 0.0, "emulated", "quick", 30.0) == 10.0
    assert scale.value("burst_period_s", 0.0, "sim", "quick", 30.0) == 30.0
    assert scale.value("burst_period_s", 7.0, "emulated", "quick", 30.0) == 7.0


def test_seeds_and_requests_per_plan():
    assert scale.seeds_and_requests("sim", "quick", [], 0) == ([1, 2, 3], 2000)
    assert scale.seeds_and_requests("sim", "quick", [], 0, quick_seeds=(1,)) == ([1], 2000)
    assert scale.seeds_and_requests("sim", "full", [], 0) == ([1, 2, 3], 10000)
    assert scale.seeds_and_requests("emulated", "quick", [], 0) == ([1], 200)
    assert scale.seeds_and_requests("vllm", "full", [], 0) == ([1, 2, 3], 1000)
    assert scale.seeds_and_requests("emulated", "quick", [4, 5], 50) == ([4, 5], 50)
    with pytest.raises(ConfigError, match="n_requests"):
        scale.seeds_and_requests("sim", "quick", [], -3)
    with pytest.raises(ConfigError, match="seeds"):
        scale.seeds_and_requests("sim", "quick", [-1], 0)


def test_default_n():
    assert scale.default_n("sim", "quick") == 2000 and scale.default_n("vllm", "full") == 1000
    assert scale.default_n("sim", "full", 77) == 77
    with pytest.raises(ConfigError, match="n_requests"):
        scale.default_n("sim", "quick", -1)


def test_every_grid_a_notebook_picks_exists_and_live_quick_cuts_are_valid():
    used = set()
    for nb in NOTEBOOKS.glob("[0-9][0-9]_*.py"):
        used |= set(re.findall(r'pick\("([a-z_]+)"', nb.read_text()))
    assert used, "the notebooks pick their grids through repro.paper.plans"
    assert used <= set(scale.LIVE_QUICK_GRIDS), used - set(scale.LIVE_QUICK_GRIDS)
    assert set(scale.LIVE_QUICK_GRIDS) <= used, "a live-quick cut no notebook uses"
    values = set()
    for nb in NOTEBOOKS.glob("[0-9][0-9]_*.py"):
        values |= set(re.findall(r'value\("([a-z_]+)"', nb.read_text()))
    assert values == set(scale.LIVE_QUICK_VALUES)
    from repro.routing.policies import POLICIES

    known = set(POLICIES)
    for name, values in scale.LIVE_QUICK_GRIDS.items():
        if name.endswith("_policies") and name != "vllm_router_policies":
            assert set(values) <= known | set(beyond.SWITCH_VARIANTS), (name, values)
    assert set(scale.LIVE_QUICK_GRIDS["shapes"]) <= set(frontier.SHAPES)
    assert set(scale.LIVE_QUICK_GRIDS["frontier_shapes"]) <= set(beyond.FRONTIER_SHAPES)
    assert set(scale.LIVE_QUICK_GRIDS["widths"]) <= set(pool_width.WIDTHS)
    assert set(scale.LIVE_QUICK_GRIDS["vllm_router_policies"]) <= set(beyond.VLLM_ROUTER_POLICIES)


def test_live_quick_runs_are_shared_between_notebooks(section):
    """Notebook 04's round-robin run is notebook 03's operating-point probe and 06's mixed cell:
    identical specs, so one run (resumed by its hash) serves all three."""
    n = scale.LIVE_QUICK_REQUESTS
    ctx = section(backend="emulated", seeds=(1,), n_requests=n, time_scale=2.0)
    probe = RunSpec.from_flat(backend="emulated", workload="mixed", seed=1, n_requests=n, topology="2p4d",
                              time_scale=2.0).replace(policy="round_robin", policy_options={}, rate=16.0)
    t2 = mixed_goodput.table_two_specs(ctx, 16.0)
    het = specs_grid(ctx, workloads=["mixed"], rates={"mixed": 16.0}, policies=["round_robin"])
    ref = sim_vs_hardware.grid_specs(ctx, {"mixed": 16.0}, policies=["round_robin"])[0][1]
    rr = [s for s in t2 if s.policy == "round_robin"][0]
    assert probe.run_id == rr.run_id == het[0].run_id == ref.run_id


def test_vllm_searches_its_own_rates_with_probes_sized_by_duration():
    assert scale.searches_rates("vllm", "quick") and scale.searches_rates("vllm", "full")
    assert not scale.searches_rates("emulated", "quick")  # the simulator's rates: same physics
    assert scale.seeds_and_requests("vllm", "quick", [], 0)[1] == scale.VLLM_QUICK_REQUESTS
    assert scale.seeds_and_requests("vllm", "quick", [], 150)[1] == 150  # given values win
    assert scale.seeds_and_requests("vllm", "full", [], 0)[1] == scale.LIVE_REQUESTS[1]
    # ~120 s of arrivals per probe at quick scale, at least 20 requests, never above the cap
    assert scale.probe_size("vllm", "quick", 60, 0.25) == 30
    assert scale.probe_size("vllm", "quick", 60, 0.05) == 20
    assert scale.probe_size("vllm", "quick", 60, 4.0) == 60
    assert scale.probe_size("emulated", "quick", 200, 0.25) == 200
    assert scale.probe_size("sim", "full", 4000, 1.0) == 4000  # sim: the rows' own requests
    assert scale.probe_size("emulated", "full", 4000, 1.0) == scale.SEARCH_MAX_REQUESTS


def test_light_rate_of_a_search_comes_from_the_cluster_calibration(tmp_path):
    from repro.experiment.saturation import estimated_capacity, light_rate_for
    from repro.paths import CLUSTERS_DIR

    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "name: t\nlauncher: remote\n"
        f"calibration: {CLUSTERS_DIR / 'cpu-tiny-calibration.json'}\n"
        "instances:\n- {role: prefill, url: 'http://127.0.0.1:1'}\n"
        "- {role: decode, url: 'http://127.0.0.1:2'}\n- {role: decode, url: 'http://127.0.0.1:3'}\n")
    cpu = RunSpec.from_flat(backend="vllm", cluster=str(cluster), workload="mixed", seed=1, n_requests=60)
    a40 = RunSpec.from_flat(backend="vllm", topology="2p4d", workload="mixed", seed=1, n_requests=60)
    # the tiny CPU engines are far slower than the paper's A40 pool
    assert estimated_capacity(cpu) < estimated_capacity(a40) / 4
    rate = light_rate_for(cpu)
    assert rate < 1.0 and rate == 2.0 ** round(__import__("math").log2(rate))  # a power of two below 1 req/s
    assert light_rate_for(a40) == 1.0  # the paper's start where the cluster is fast
