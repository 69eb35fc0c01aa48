"""The CPU flavour of the vLLM launcher, without starting engines: commands, core placement, errors."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repro.cluster.launchers import make_launcher
from repro.cluster.launchers.vllm_cpu import assign_cores, cpu_dtype, omp_threads
from repro.errors import ConfigError
from repro.paths import CLUSTERS_DIR


def test_one_core_per_engine_when_there_are_enough_else_none_pinned():
    assert assign_cores(["prefill", "decode", "decode"], available=[0, 1, 2, 3]) == ["0", "1", "2"]
    assert assign_cores(["prefill", "decode"], available=[4, 6]) == ["4", "6"]
    # fewer cores than engines: pinned engines would share a core and stall each other's KV pulls
    assert assign_cores(["prefill", "decode", "decode"], available=[0, 1]) == ["nobind"] * 3
    assert assign_cores(["prefill", "decode"], available=[3]) == ["nobind"] * 2
    assert assign_cores(["prefill", "decode"], "nobind", available=[0, 1]) == ["nobind"] * 2


def test_explicit_cores_shared_by_two_engines_are_refused():
    assert assign_cores(["prefill", "decode", "decode"], [2, 0, 1], available=[0, 1, 2]) == ["2", "0", "1"]
    with pytest.raises(ConfigError, match=r"vllm\.cores.*shared core.*nobind"):
        assign_cores(["prefill", "decode", "decode"], [0, 1, 1], available=[0, 1])
    with pytest.raises(ConfigError, match=r"vllm\.cores.*fewer cores"):
        assign_cores(["prefill", "decode", "decode"], [0, 1], available=[0, 1])
    with pytest.raises(ConfigError, match=r"vllm\.cores.*\[7\].*may not use"):
        assign_cores(["prefill", "decode"], [0, 7], available=[0, 1])
    with pytest.raises(ConfigError, match=r"vllm\.cores.*nobind"):
        assign_cores(["prefill", "decode"], "all", available=[0, 1])


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
    monkeypatch.setattr("repro.cluster.launchers.vllm_cpu.available_cores", lambda: [0, 1])


def test_cpu_engine_commands(tmp_path):
    launcher = make_launcher(_cpu_cluster(tmp_path), log_dir=tmp_path)  # default placement
    cmds = launcher.commands()
    assert [spec.role for spec, *_ in cmds] == ["prefill", "decode", "decode"]
    ports = [port for *_, port in cmds]
    assert len(set(ports)) == 3
    sides = set()
    for spec, env, argv, port in cmds:
        # no `nice -n` wrapper: the niceness goes on the process and its session at spawn (tier 2 checks it)
        assert argv[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert kv == {"kv_connector": "NixlConnector", "kv_buffer_device": "cpu",
                      "kv_role": "kv_producer" if spec.role == "prefill" else "kv_consumer"}
        assert argv[argv.index("--port") + 1] == str(port)
        assert argv[argv.index("--max-model-len") + 1] == "4096"
        assert "--load-format" in argv and argv[argv.index("--load-format") + 1] == "dummy"
        assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
        assert env["REPRO_NIXL_NO_PIN"] == "1" and int(env["REPRO_NIXL_PROGRESS_DELAY_US"]) > 0
        assert env["REPRO_REQUEST_AMX"] == "1"  # else vLLM's AMX attention dies of SIGILL on AMX CPUs
        sides.add(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
    assert len(sides) == 3 and not sides & {str(p) for p in ports}
    # 3 engines, 2 cores: none pinned (engines pinned to a shared core stall each other's KV pulls),
    # one OpenMP thread each (not one per core each), shared-memory queue readers that never spin
    assert [env["VLLM_CPU_OMP_THREADS_BIND"] for _, env, _, _ in cmds] == ["nobind"] * 3
    assert [env["OMP_NUM_THREADS"] for _, env, _, _ in cmds] == ["1"] * 3
    assert {env["REPRO_SHM_POLL_MS"] for _, env, _, _ in cmds} == {"1"}


def test_engines_run_bfloat16_only_where_onednn_has_it_else_float32(tmp_path):
    """On AVX2 alone, vLLM's bfloat16 linear layers fall back from oneDNN to torch (2.7x slower prefill here)."""
    avx2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
    assert cpu_dtype(avx2) == "float32"
    assert cpu_dtype(avx2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}) == "auto"
    assert cpu_dtype(avx2 | {"avx512f"}) == "float32"  # not avx512_core: no oneDNN bfloat16
    assert cpu_dtype(avx2 | {"amx_bf16", "amx_tile"}) == "auto"
    cmds = make_launcher(_cpu_cluster(tmp_path), log_dir=tmp_path).commands()
    assert {argv[argv.index("--dtype") + 1] for _, _, argv, _ in cmds} == {cpu_dtype()}
    stated = make_launcher(_cpu_cluster(tmp_path, dtype="bfloat16"), log_dir=tmp_path).commands()
    assert {argv[argv.index("--dtype") + 1] for _, _, argv, _ in stated} == {"bfloat16"}  # the file's word wins


def test_omp_threads_share_out_the_cores_of_unpinned_engines():
    assert omp_threads(["nobind"] * 3, [0, 1]) == 1
    assert omp_threads(["nobind"] * 2, [0, 1, 2, 3, 4]) == 2
    assert omp_threads(["0", "1"], [0, 1]) is None  # pinned: vLLM sets it from the core list


def test_plugin_makes_shm_readers_sleep_instead_of_spinning(monkeypatch):
    import types

    from repro.cluster import vllm_plugin

    class SpinCondition:  # the shape of vLLM 0.32's shm_broadcast.SpinCondition
        def __init__(self, is_reader):
            self.is_reader, self.busy_loop_s, self.calls = is_reader, 1, []

        def wait(self, timeout_ms=None):
            self.calls.append((self.busy_loop_s, timeout_ms))

    shm = types.ModuleType("fake_shm")
    shm.SpinCondition = SpinCondition
    reader, writer = SpinCondition(True), SpinCondition(False)  # built before the patch
    hook = vllm_plugin._patch_shm_wait(2)
    hook(shm)
    hook(shm)  # idempotent: not wrapped twice
    for timeout in (None, 5000, 1):
        reader.wait(timeout)
    writer.wait(None)
    assert reader.calls == [(0.0, 2), (0.0, 2), (0.0, 1)] and writer.calls == [(1, None)]
    monkeypatch.setenv(vllm_plugin.ENV_SHM_POLL_MS, "0")
    assert vllm_plugin._int_from_env(vllm_plugin.ENV_SHM_POLL_MS, 1, 1000) is None  # out of range: ignored
    monkeypatch.setenv(vllm_plugin.ENV_SHM_POLL_MS, "x")
    assert vllm_plugin._int_from_env(vllm_plugin.ENV_SHM_POLL_MS, 1, 1000) is None
    monkeypatch.setenv(vllm_plugin.ENV_SHM_POLL_MS, "3")
    assert vllm_plugin._int_from_env(vllm_plugin.ENV_SHM_POLL_MS, 1, 1000) == 3


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                    reason="AMX permission is a Linux x86-64 question")
def test_plugin_obtains_amx_permission_exactly_where_the_cpu_has_amx():
    # a fresh process: nothing has asked yet (oneDNN may ask later, vLLM never does)
    code = ("from repro.cluster import vllm_plugin as p; "
            "print(p.amx_permitted(), p.request_amx_permission(), p.request_amx_permission(), p.amx_permitted())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    has_amx = " amx_tile" in Path("/proc/cpuinfo").read_text()
    assert out == ["False", str(has_amx), str(has_amx), str(has_amx)]


def test_cpu_cluster_file_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"vllm\.cores"):
        make_launcher(_cpu_cluster(tmp_path, cores=[0, 1]), log_dir=tmp_path).commands()
    with pytest.raises(ConfigError, match=r"vllm\.cores.*list of core numbers"):
        make_launcher(_cpu_cluster(tmp_path, cores=[True]), log_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"vllm\.max_model_len.*positive integer"):
        make_launcher(_cpu_cluster(tmp_path, max_model_len=0), log_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"vllm\.nice.*\[0, 19\]"):
        make_launcher(_cpu_cluster(tmp_path, nice=20), log_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"vllm\.bogus.*unknown"):
        make_launcher(_cpu_cluster(tmp_path, bogus=1), log_dir=tmp_path)


def test_cpu_engines_carry_no_hardware_profile(tmp_path, capsys):
    """A CPU engine imitates no GPU profile: `repro calibrate` must not compare it with the A40's."""
    launcher = make_launcher(_cpu_cluster(tmp_path), log_dir=tmp_path, dry_run=True)
    instances = launcher.start()
    assert [i.role for i in instances] == ["prefill", "decode", "decode"]
    assert all(i.profile is None for i in instances)
    assert "vllm.entrypoints.openai.api_server" in capsys.readouterr().out
