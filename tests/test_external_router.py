"""Bring-your-own-router harness (repro.live.external_router) and vllm-router against the emulated cluster."""

import json
import sys

import pytest

from repro.errors import ConfigError
from repro.experiment.journal import read as read_journal
from repro.experiment.spec import RunSpec
from repro.live.external_router import (
    external_router,
    find_vllm_router,
    render_command,
    run_external,
    vllm_router_template,
)


def test_render_command_placeholders():
    argv = render_command("r --port {port} --host {host} {prefill_urls:--prefill} {decode_urls:--decode} "
                          "--all {decode_urls} --csv {prefill_urls_csv}",
                          port=123, prefill_urls=["http://a:1", "http://b:2"], decode_urls=["http://c:3"])
    assert argv == ["r", "--port", "123", "--host", "127.0.0.1", "--prefill", "http://a:1", "--prefill", "http://b:2",
                    "--decode", "http://c:3", "--all", "http://c:3", "--csv", "http://a:1,http://b:2"]
    with pytest.raises(ConfigError):
        render_command("r {nope}", port=1, prefill_urls=[], decode_urls=[])


def test_vllm_router_template_is_pd_mode():
    argv = render_command(vllm_router_template("power_of_two", decode_policy="round_robin", binary="/x/vllm-router"),
                          port=9, prefill_urls=["http://p:1"], decode_urls=["http://d:1", "http://d:2"], metrics_port=8)
    assert argv[0] == "/x/vllm-router" and "--vllm-pd-disaggregation" in argv
    assert argv[argv.index("--policy") + 1] == "power_of_two"
    assert argv[argv.index("--decode-policy") + 1] == "round_robin"
    assert argv.count("--decode") == 2 and argv.count("--prefill") == 1
    assert argv[argv.index("--port") + 1] == "9" and argv[argv.index("--prometheus-port") + 1] == "8"


def test_external_router_waits_for_health_and_always_stops(tmp_path):
    # a stand-in router: a tiny HTTP server that serves /health
    script = tmp_path / "fake_router.py"
    script.write_text(
        "import http.server, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
        "    def log_message(self, *a): pass\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
    )
    import httpx

    with external_router(f"{sys.executable} {script} {{port}}", [], [], log_path=tmp_path / "r.log") as url:
        assert httpx.get(url + "/health", trust_env=False).status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=1.0, trust_env=False)
    # a router that dies at once is reported, not waited for
    with pytest.raises(RuntimeError, match="exited"):
        with external_router(f"{sys.executable} -c 'raise SystemExit(3)' {{port}}", [], [], timeout_s=10):
            pass


def test_run_external_needs_live_backend(tmp_path):
    with pytest.raises(ConfigError):
        run_external(RunSpec(n_requests=10), "x {port}", tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(find_vllm_router() is None,
                    reason="vllm-router not installed (pip install vllm-router, or set REPRO_VLLM_ROUTER)")
@pytest.mark.slow
@pytest.mark.parametrize("policy", ["round_robin", "power_of_two"])
def test_vllm_router_pd_mode_on_emulated_cluster(tmp_path, policy):
    spec = RunSpec.from_flat(backend="emulated", topology="1p2d", workload="chat", rate=10.0, n_requests=40, seed=2,
                             time_scale=4.0)
    # the mechanics are tested here, not the machine: one attempt at K = 4, kept whatever its verdict
    journal = run_external(spec, vllm_router_template(policy), tmp_path, label=f"vllm-router:{policy}",
                           on_invalid="keep")
    assert len(journal) == 40
    assert (journal["status"] == "ok").all(), journal["reason"].dropna().unique()
    assert (journal["generated_tokens"] == journal["output_tokens"]).all()
    assert journal["decode_instance"].isna().all()  # client-side only: placement unknown
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["complete"] and manifest["summary"]["completed"] == 40
    assert manifest["router"]["label"] == f"vllm-router:{policy}"
    # judged as our own runs are: the client's lag and the engines' lateness measured, no proxy
    # measures (the router is not ours); vllm-router renames the requests, so the engines' times
    # cannot be matched with the client's: what K = 4 adds is unknown, and only K = 1 is valid
    assert manifest["time_scale_used"] == 4.0 and len(manifest["attempts"]) == 1
    measured = manifest["validity"]["measured"]
    assert measured["client_lag_p99_s"] is not None and measured["engine_late_p99_s"] is not None
    assert measured["proxy_loop_lag_p99_s"] is None and measured["harness_latency_p50_s"] is None
    assert not manifest["valid"]
    assert any(r.startswith("harness_latency_p50_s not measured") for r in manifest["validity"]["reasons"])
    assert len(read_journal(tmp_path / "journal.jsonl")) == 40
