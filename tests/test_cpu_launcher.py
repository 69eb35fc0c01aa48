"""The CPU flavour of the vLLM launcher, without starting engines: commands, core placement, errors."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from repro.cluster.launchers import assign_cores, make_launcher
from repro.errors import ConfigError
from repro.paths import CLUSTERS_DIR


def test_default_placement_keeps_prefill_and_decode_on_separate_cores():
    assert assign_cores(["prefill", "decode", "decode"], available=[0, 1]) == [0, 1, 1]
    assert assign_cores(["prefill", "decode"], available=[0, 1]) == [0, 1]
    # in proportion to the counts, prefill first; every role at least one core
    assert assign_cores(["prefill", "decode", "decode", "decode"], available=[0, 1, 2, 3]) == [0, 1, 2, 3]
    assert assign_cores(["prefill", "prefill", "decode", "decode"], available=[4, 5, 6, 7]) == [4, 5, 6, 7]
    assert assign_cores(["prefill", "decode", "decode", "decode", "decode", "decode"], available=[0, 1, 2]) == \
        [0, 1, 2, 1, 2, 1]


def test_one_core_cannot_host_both_roles():
    with pytest.raises(ConfigError, match=r"vllm\.cores.*separate cores"):
        assign_cores(["prefill", "decode"], available=[3])


def test_explicit_cores_sharing_a_prefill_core_with_a_decode_engine_are_refused():
    assert assign_cores(["prefill", "decode", "decode"], [0, 1, 1], available=[0, 1]) == [0, 1, 1]
    with pytest.raises(ConfigError, match=r"vllm\.cores.*same core\(s\) \[0\].*prefill#0.*decode#2"):
        assign_cores(["prefill", "decode", "decode"], [0, 1], available=[0, 1])  # wraps: decode-1 on core 0
    with pytest.raises(ConfigError, match=r"vllm\.cores.*\[7\].*may not use"):
        assign_cores(["prefill", "decode"], [0, 7], available=[0, 1])


def _cpu_cluster(tmp_path, **vllm):
    doc = yaml.safe_load((CLUSTERS_DIR / "1p2d-cpu.yaml").read_text())
    doc["vllm"].update({"python": sys.executable, **vllm})
    doc["calibration"] = str(CLUSTERS_DIR / doc["calibration"])
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    """Commands as on the 2-core reference machine, whatever this one has."""
    monkeypatch.setattr("repro.cluster.launchers.available_cores", lambda: [0, 1])


def test_cpu_engine_commands(tmp_path):
    launcher = make_launcher(_cpu_cluster(tmp_path), log_dir=tmp_path)  # default placement
    cmds = launcher.commands()
    assert [spec.role for spec, *_ in cmds] == ["prefill", "decode", "decode"]
    ports = [port for *_, port in cmds]
    assert len(set(ports)) == 3
    sides = set()
    for spec, env, argv, port in cmds:
        assert argv[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert kv == {"kv_connector": "NixlConnector", "kv_buffer_device": "cpu",
                      "kv_role": "kv_producer" if spec.role == "prefill" else "kv_consumer"}
        assert argv[argv.index("--port") + 1] == str(port)
        assert argv[argv.index("--max-model-len") + 1] == "4096"
        assert "--load-format" in argv and argv[argv.index("--load-format") + 1] == "dummy"
        assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
        assert env["REPRO_NIXL_NO_PIN"] == "1" and int(env["REPRO_NIXL_PROGRESS_DELAY_US"]) > 0
        sides.add(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
    assert len(sides) == 3 and not sides & {str(p) for p in ports}
    assert [env["VLLM_CPU_OMP_THREADS_BIND"] for _, env, _, _ in cmds] == ["0", "1", "1"]


def test_cpu_cluster_file_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"vllm\.cores"):
        make_launcher(_cpu_cluster(tmp_path, cores=[0, 1]), log_dir=tmp_path).commands()
    with pytest.raises(ConfigError, match=r"vllm\.max_model_len.*positive integer"):
        make_launcher(_cpu_cluster(tmp_path, max_model_len=0), log_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"vllm\.bogus.*unknown"):
        make_launcher(_cpu_cluster(tmp_path, bogus=1), log_dir=tmp_path)
