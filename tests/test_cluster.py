"""Topology parsing, the three launchers, teardown, and `repro cluster up|down|status`."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from repro.cli.cluster import cluster_app
from repro.cluster.launchers import launch
from repro.cluster.launchers.vllm import KV_TRANSFER_CONFIG, VllmLauncher
from repro.cluster.topology import parse_topology
from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.vocab import DEFAULT_PROFILE
from tests.conftest import default_sigint

REPO = Path(__file__).resolve().parent.parent


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_dead(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


# ---- topology ------------------------------------------------------------------------------------
def test_shorthand():
    t = parse_topology("2p4d")
    assert [i.role for i in t.instances] == ["prefill"] * 2 + ["decode"] * 4
    assert [i.name for i in t.instances] == ["prefill-0", "prefill-1", "decode-0", "decode-1", "decode-2", "decode-3"]
    assert t.shorthand == "2p4d" and all(i.profile == DEFAULT_PROFILE for i in t.instances)


def test_yaml_files_shipped(tmp_path):
    for p in sorted((REPO / "data" / "clusters").glob("*.yaml")):
        t = parse_topology(p)
        assert t.prefill and t.decode
    t = parse_topology("2p4d-a40")  # by name in data/clusters/
    assert t.shorthand == "2p4d"
    assert all(i.kv_budget_tokens == 60000 for i in t.instances)


def test_yaml_roles_counts_budget(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text(textwrap.dedent("""
        name: hetero
        profile: a40-qwen2.5-3b
        kv_budget_tokens: 30000
        instances:
          - {role: prefill, count: 1}
          - {role: decode, count: 2, kv_budget_tokens: 12000, gpus: [4, 5]}
    """))
    t = parse_topology(y)
    assert t.name == "hetero" and t.shorthand == "1p2d"
    assert [i.kv_budget_tokens for i in t.instances] == [30000, 12000, 12000]
    assert [i.gpu for i in t.instances] == [None, "4", "5"]


@pytest.mark.parametrize("spec,fragment", [
    ("2x4", "allowed: NpMd"),
    ("0p4d", "at least one prefill"),
    ({"instances": [{"role": "prefil", "count": 1}]},
     "'instances[0].role' is 'prefil'; allowed: ['prefill', 'decode']"),
    ({"instances": [{"role": "prefill", "count": 0}, {"role": "decode"}]}, "'instances[0].count'"),
    ({"instances": [{"role": "prefill"}, {"role": "decode", "profile": "h100"}]}, "allowed"),
    ({"instances": [{"role": "prefill"}, {"role": "decode", "kv_budget_tokens": -5}]},
     "'instances[1].kv_budget_tokens'"),
    ({"instances": [{"role": "prefill"}, {"role": "decode", "colour": "red"}]}, "'instances[1].colour' is unknown"),
    ({"launcher": "k8s", "instances": [{"role": "prefill"}, {"role": "decode"}]}, "'launcher' is 'k8s'; allowed"),
    ({"instances": [{"role": "prefill"}]}, "at least one 'prefill' and one 'decode'"),
    ({"instances": [{"role": "prefill", "count": 2, "urls": ["http://a"]}, {"role": "decode"}]}, "'instances[0].urls'"),
])
def test_topology_errors_name_field_and_allowed_values(spec, fragment):
    with pytest.raises(ConfigError) as e:
        parse_topology(spec)
    assert fragment in str(e.value)


# ---- vllm command generation ------------------------------------------------------------------
def test_vllm_commands_2p4d_on_one_node():
    lau = VllmLauncher(parse_topology("2p4d"), dry_run=True)
    cmds = lau.commands()
    assert len(cmds) == 6
    side_ports = set()
    for i, (_spec, env, argv, port) in enumerate(cmds):
        assert env["CUDA_VISIBLE_DEVICES"] == str(i)
        assert env["UCX_NET_DEVICES"] == "all" and env["VLLM_SERVER_DEV_MODE"] == "1"
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
        side_ports.add(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
        assert argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-3B-Instruct"]
        a = dict(zip(argv[3::2], argv[4::2], strict=False))
        assert a["--port"] == str(8100 + i) and port == 8100 + i
        assert json.loads(a["--kv-transfer-config"]) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        assert a["--kv-transfer-config"] == KV_TRANSFER_CONFIG
        assert a["--num-gpu-blocks-override"] == "3751"  # 60,000 tokens / 16 + 1 reserved block
        # vLLM's own budget on an A40 (the profile's mechanism vllm_budget): the launch and the physics agree
        assert a["--max-num-batched-tokens"] == str(load_profile().physics.max_num_batched_tokens) == "2048"
        assert a["--max-num-seqs"] == "256"
        assert a["--dtype"] == "bfloat16" and a["--block-size"] == "16"
    assert len(side_ports) == 6
    line = lau.command_lines()[0]
    assert line.startswith("CUDA_VISIBLE_DEVICES=0 VLLM_NIXL_SIDE_CHANNEL_PORT=5600 ")
    assert "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'" in line
    argv = shlex.split(line)
    assert "vllm" in argv


def test_the_papers_cluster_file_launches_unmodified_vllm_with_the_chosen_models_settings():
    """§IV-A runs "unmodified vLLM 0.12 engines": data/clusters/2p4d-a40.yaml passes no scheduler budget, and what
    vLLM then picks on its 48 GB A40s (engine/arg_utils.py get_batch_defaults) is the chosen model's setting
    (the testbed the main job simulates, its vllm_budget mechanism)."""
    from repro.cluster.launchers.vllm import serve_defaults
    from repro.validation.plan import engine_settings
    from repro.vocab import DEFAULT_PROFILE

    topo = parse_topology(REPO / "data" / "clusters" / "2p4d-a40.yaml")
    for _spec, _env, argv, _port in VllmLauncher(topo, dry_run=True).commands():
        assert "--max-num-batched-tokens" not in argv and "--max-num-seqs" not in argv, argv
        assert argv[argv.index("--num-gpu-blocks-override") + 1] == "3751"
    chosen = load_profile(DEFAULT_PROFILE).physics
    settings = engine_settings(topo)
    assert (settings["max_num_batched_tokens"], settings["max_num_seqs"]) == \
        (chosen.max_num_batched_tokens, chosen.max_num_seqs) == serve_defaults(48, "A40") == (2048, 256)
    assert "get_batch_defaults" in settings["source"]
    assert all(i.profile == DEFAULT_PROFILE for i in topo.instances)


def test_vllm_serve_defaults_by_gpu_class_and_bad_unmodified_options():
    from repro.cluster.launchers.vllm import serve_defaults
    from repro.validation.plan import engine_settings

    assert serve_defaults(80, "NVIDIA H100 80GB HBM3") == (8192, 1024)
    assert serve_defaults(80, "NVIDIA A100-SXM4-80GB") == (2048, 256)  # vLLM keeps A100s on the small budget
    assert serve_defaults(69.9) == (2048, 256)
    doc = {"name": "h", "instances": [{"role": "prefill", "count": 1}, {"role": "decode", "count": 1}],
           "vllm": {"unmodified": True, "gpu_memory_gib": 80, "gpu_name": "H100"}}
    assert engine_settings(parse_topology(doc))["max_num_batched_tokens"] == 8192
    argv = VllmLauncher(parse_topology(doc), dry_run=True).commands()[0][2]
    assert "--max-num-batched-tokens" not in argv
    for bad, field in (({"unmodified": "yes"}, "vllm.unmodified"), ({"unmodified": True}, "vllm.gpu_memory_gib"),
                       ({"unmodified": True, "gpu_memory_gib": -1}, "vllm.gpu_memory_gib")):
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            VllmLauncher(parse_topology({**doc, "vllm": bad}), dry_run=True)


def test_vllm_commands_options_and_dry_run(capsys):
    lau = VllmLauncher(parse_topology({"instances": [
        {"role": "prefill"}, {"role": "decode", "kv_budget_tokens": 16000, "gpu": 7}]}),
        model="m/x", dtype="float16", gpus=["2", "3"], side_channel_host="10.0.0.5", base_port=9000, dry_run=True)
    cmds = lau.commands()
    assert cmds[0][1]["CUDA_VISIBLE_DEVICES"] == "2" and cmds[1][1]["CUDA_VISIBLE_DEVICES"] == "7"
    assert cmds[1][2][cmds[1][2].index("--num-gpu-blocks-override") + 1] == "1001"
    assert cmds[0][2][2] == "m/x" and "float16" in cmds[0][2]
    assert all(c[1]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.5" for c in cmds)
    inst = lau.start()  # dry run: prints, starts nothing
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and all("vllm serve m/x" in line for line in out)
    assert [i.url for i in inst] == ["http://127.0.0.1:9000", "http://127.0.0.1:9001"] and inst[0].pid is None


def test_cli_dry_run_prints_commands():
    r = CliRunner().invoke(cluster_app, ["up", "2p4d", "--launcher", "vllm", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.output.count("vllm serve Qwen/Qwen2.5-3B-Instruct") == 6


def test_cli_config_error_exit_code():
    r = CliRunner().invoke(cluster_app, ["up", "2p4x"])
    assert r.exit_code == 2 and "allowed" in r.output


# ---- emulated launcher -----------------------------------------------------------------------------
def test_emulated_launcher_serves_and_tears_down():
    with launch("1p1d", "emulated", time_scale=50) as inst:
        assert [i.role for i in inst] == ["prefill", "decode"]
        pids = [i.pid for i in inst]
        for i in inst:
            assert i.url.startswith("http://127.0.0.1:")
            info = httpx.get(i.url + "/_emulator/info", trust_env=False).json()
            assert info["engine_id"] == i.engine_id and info["time_scale"] == 50
            assert httpx.get(i.url + "/health", trust_env=False).status_code == 200
    assert wait_dead(pids) == []


def test_emulated_launcher_tears_down_on_exception():
    pids = []
    with pytest.raises(RuntimeError, match="boom"):
        with launch("1p1d", "emulated", time_scale=50) as inst:
            pids = [i.pid for i in inst]
            raise RuntimeError("boom")
    assert pids and wait_dead(pids) == []


def _holding_a_cluster(tmp_path) -> tuple[subprocess.Popen, list[int]]:
    """A Python process that launches an emulated 1p1d and holds it for a minute; it and its engines' pids."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time, json
        sys.path.insert(0, {str(REPO)!r})
        from repro.cluster.launchers import launch
        with launch("1p1d", "emulated", time_scale=50) as inst:
            print(json.dumps([i.pid for i in inst]), flush=True)
            time.sleep(60)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    return proc, json.loads(proc.stdout.readline())


def test_emulated_launcher_tears_down_on_ctrl_c(tmp_path):
    proc, pids = _holding_a_cluster(tmp_path)
    assert all(alive(p) for p in pids)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    assert wait_dead(pids) == []


def test_engines_die_with_a_killed_parent(tmp_path):
    proc, pids = _holding_a_cluster(tmp_path)
    proc.kill()  # no chance to clean up: the engines notice their parent is gone
    proc.wait(timeout=10)
    assert wait_dead(pids, timeout=10) == []


def test_remote_launcher_health_checks(tmp_path):
    with launch("1p1d", "emulated", time_scale=50) as inst:
        topo = {"instances": [{"role": i.role, "url": i.url} for i in inst]}
        with launch(topo, "remote") as remote:
            assert [r.url for r in remote] == [i.url for i in inst]
        bad = {"instances": [{"role": "prefill", "url": inst[0].url}, {"role": "decode", "url": "http://127.0.0.1:9"}]}
        with pytest.raises(RuntimeError, match="not healthy"):
            with launch(bad, "remote", timeout=1.0):
                pass
        assert httpx.get(inst[0].url + "/health", trust_env=False).status_code == 200  # remote never stops engines
    with pytest.raises(ConfigError, match="url"):
        with launch("1p1d", "remote"):
            pass


@pytest.mark.slow
def test_cli_up_status_down(tmp_path):
    state = tmp_path / "cluster.json"
    runner = CliRunner()
    r = runner.invoke(cluster_app, ["up", "1p1d", "--time-scale", "50", "--state-file", str(state)])
    assert r.exit_code == 0, r.output
    data = json.loads(state.read_text())
    pids = [i["pid"] for i in data["instances"]]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    try:
        r = runner.invoke(cluster_app, ["status", "--state-file", str(state), "--json"])
        assert r.exit_code == 0, r.output
        rows = json.loads(r.output)
        assert all(row["healthy"] for row in rows)
        r = runner.invoke(cluster_app, ["up", "1p1d", "--state-file", str(state)])
        assert r.exit_code == 2 and "already up" in r.output
    finally:
        r = runner.invoke(cluster_app, ["down", "--state-file", str(state)])
    assert r.exit_code == 0 and "stopped 2" in r.output
    assert wait_dead(pids) == [] and not state.exists()
    r = runner.invoke(cluster_app, ["status", "--state-file", str(state)])
    assert r.exit_code == 2 and "no cluster is up" in r.output


def test_emulated_engines_in_one_shared_process_serve_pd_with_local_kv_reads():
    from repro.live.pd_protocol import decode_body, prefill_body

    with launch("1p2d", "emulated", time_scale=50, shared_process=True) as inst:
        assert len({i.pid for i in inst}) == 1  # one process serves the cluster
        p, d = inst[0], inst[1]
        body = {"model": httpx.get(p.url + "/v1/models").json()["data"][0]["id"], "prompt": "hello " * 40,
                "max_tokens": 4, "ignore_eos": True}
        kv = httpx.post(p.url + "/v1/completions", json=prefill_body(body), headers={"X-Request-Id": "s1"}).json()
        r = httpx.post(d.url + "/v1/completions", json=decode_body(body, kv["kv_transfer_params"]),
                       headers={"X-Request-Id": "s1"})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        state = httpx.get(d.url + "/_emulator/state").json()
        assert state["pulls_ok"] == 1 and state["pulls_failed"] == 0  # read from the prefill engine in-process
        assert httpx.get(p.url + "/_emulator/state").json()["held_for_decode"] == {}  # and released there
        pids = [i.pid for i in inst]
    assert wait_dead(pids) == []
