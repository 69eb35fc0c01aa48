"""A cluster file's `calibration:`, and notebooks stopping at once on a cluster they cannot use."""

import time

import pytest

from repro.cluster.topology import parse_topology
from repro.errors import ConfigError
from repro.experiment.inputs import router_cost_model, truth_cost_model
from repro.experiment.spec import RunSpec
from repro.paper import section as S
from repro.routing.cost_model import CostModel

REMOTE = """name: mine
launcher: remote
{extra}instances:
  - {{role: prefill, urls: ["{url}"]}}
  - {{role: decode, urls: ["{url}"]}}
"""


def _write(tmp_path, extra="", url="http://127.0.0.1:9"):
    p = tmp_path / "cluster.yaml"
    p.write_text(REMOTE.format(extra=extra, url=url))
    return p


def test_calibration_file_is_resolved_next_to_the_cluster_file(tmp_path):
    fitted = CostModel.load("calibrated").with_overrides(tau_dec_s=0.02, name="mine")
    fitted.save(tmp_path / "cal.json")
    topo = parse_topology(str(_write(tmp_path, "calibration: cal.json\n")))
    assert topo.options["calibration"] == str((tmp_path / "cal.json").resolve())
    assert parse_topology(str(_write(tmp_path, "calibration: sim_derived\n"))).options["calibration"] == "sim_derived"


def test_missing_calibration_file_says_how_to_make_it(tmp_path):
    with pytest.raises(ConfigError, match=r"calibration.*does not exist.*repro calibrate --cluster"):
        parse_topology(str(_write(tmp_path, "calibration: nowhere.json\n")))
    with pytest.raises(ConfigError, match="calibration"):
        parse_topology(str(_write(tmp_path, "calibration: 3\n")))
    # `repro calibrate` parses the file it is about to complete: the missing file is then the output
    topo = parse_topology(str(_write(tmp_path, "calibration: nowhere.json\n")), calibration_must_exist=False)
    assert topo.options["calibration"] == str((tmp_path / "nowhere.json").resolve())


def test_router_and_slo_use_the_cluster_calibration(tmp_path):
    fitted = CostModel.load("calibrated").with_overrides(tau_dec_s=0.02, name="mine")
    fitted.save(tmp_path / "cal.json")
    cluster = str(_write(tmp_path, "calibration: cal.json\n"))
    spec = RunSpec(backend="vllm", cluster=cluster, n_requests=10)
    assert router_cost_model(spec).tau_dec_s == pytest.approx(0.02)
    assert truth_cost_model(spec).slo.tpot_tight_s == pytest.approx(fitted.slo.tpot_tight_s)
    # an explicitly chosen cost model is still what the router believes (the §V-B comparison)
    explicit = router_cost_model(spec.replace(cost_model="sim_derived"))
    assert explicit.tau_dec_s == CostModel.load("sim_derived").tau_dec_s
    # no calibration in the file: the shipped A40 constants, SLOs from the profile's physics
    plain = RunSpec(backend="vllm", cluster=str(_write(tmp_path)), n_requests=10)
    assert router_cost_model(plain).tau_dec_s == CostModel.load("calibrated").tau_dec_s


def test_vllm_notebook_without_calibration_stops_with_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match=r"no 'calibration'.*repro paper --only 01"):
        S.check_cluster("vllm", str(_write(tmp_path)))


def test_unreachable_engines_stop_a_notebook_at_once(tmp_path):
    cluster = str(_write(tmp_path, "calibration: calibrated\n", url="http://127.0.0.1:9"))
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"no answer from GET /health.*127\.0\.0\.1:9"):
        S.check_cluster("vllm", cluster)
    assert time.monotonic() - t0 < 5.0  # a quick probe, not the launcher's 10 s health wait
    # notebook 01 (which makes the calibration) still refuses an unreachable cluster
    with pytest.raises(ConfigError, match="no answer"):
        S.check_cluster("vllm", str(_write(tmp_path)), need_calibration=False)


def test_reachable_remote_cluster_passes(tmp_path):
    from repro.cluster.launchers import launch

    with launch("1p1d", launcher="emulated") as instances:
        cluster = str(_write(tmp_path, "calibration: calibrated\n", url=instances[0].url))
        assert S.check_cluster("vllm", cluster) == cluster


@pytest.mark.slow
def test_live_run_routes_with_the_cluster_calibration_and_poll_period(tmp_path):
    """The proxy of a live run prices with the cluster file's calibration (read back from its /health)
    and polls at the cluster file's period; a bare "calibrated" would have loaded the A40 constants."""
    import json

    from repro.experiment.runner import run

    fitted = CostModel.load("calibrated").with_overrides(tau_dec_s=0.02, tau_pre_per_token_s=1e-4, name="mine")
    fitted.save(tmp_path / "cal.json")
    cluster = tmp_path / "emu.yaml"
    cluster.write_text("name: emu\nlauncher: emulated\ncalibration: cal.json\nkv_poll_interval_s: 0.2\n"
                       "instances:\n  - {role: prefill, count: 1}\n  - {role: decode, count: 1}\n")
    spec = RunSpec.from_flat(backend="emulated", cluster=str(cluster), workload="chat", rate=10.0, n_requests=8,
                             seed=3, time_scale=4.0)
    assert spec.poll_interval_s() == 0.2 and spec.kv_poll_interval_s == 0.05
    res = run(spec, tmp_path / "runs", on_invalid="keep")
    seen = json.loads((res.run_dir / "proxy_constants.json").read_text())
    assert seen["cost_model"] == fitted.to_dict() != CostModel.load("calibrated").to_dict()
    assert seen["poll_interval_s"] == 0.2
    with pytest.raises(ConfigError, match="kv_poll_interval_s"):
        parse_topology({"instances": [{"role": "prefill"}, {"role": "decode"}], "kv_poll_interval_s": 0})
