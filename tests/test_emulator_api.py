"""The emulated engine over HTTP: vLLM's bodies, SSE framing, P/D handoff, metrics, errors.

One small emulated cluster (started on 127.0.0.1, torn down by the fixture) serves most tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from repro.cluster.launchers import launch
from repro.cluster.launchers.base import wait_healthy
from repro.cluster.processes import free_ports, terminate_pids
from repro.cluster.topology import Instance
from repro.emulator.model import TOKENIZER, OutputFunction, prompt_seed
from repro.engine.profile import load_profile

MODEL = "Qwen/Qwen2.5-3B-Instruct"
K = 20.0
REPO = Path(__file__).resolve().parent.parent

# The exact request vLLM's reference P/D proxy (tests/v1/kv_connector/nixl_integration/
# toy_proxy_server.py) sends to the prefill engine.
PREFILL_KV = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
              "remote_block_ids": None, "remote_host": None, "remote_port": None}


@pytest.fixture(scope="module")
def cluster():
    topo = {"name": "test", "instances": [
        {"role": "prefill", "count": 1},
        {"role": "decode", "count": 1},
        {"role": "decode", "name": "diverge", "faults": ["diverge"]},
        {"role": "decode", "name": "small", "kv_budget_tokens": 800},
    ]}
    with launch(topo, "emulated", time_scale=K, stream_interval_tokens=1, stream_interval_ms=0) as inst:
        yield {i.name: i for i in inst}


def url(cluster, name):
    return cluster[name].url


def toy_proxy_prefill_body(client_body: dict) -> dict:
    """What toy_proxy_server.send_request_to_service makes of a client body."""
    req = dict(client_body)
    req["kv_transfer_params"] = dict(PREFILL_KV)
    req["stream"] = False
    req["max_tokens"] = 1
    if "max_completion_tokens" in req:
        req["max_completion_tokens"] = 1
    req.pop("stream_options", None)
    req.pop("min_tokens", None)
    req.pop("min_completion_tokens", None)
    return req


def parse_sse(raw: bytes) -> list:
    text = raw.decode()
    assert text.endswith("data: [DONE]\n\n")
    events = text.split("\n\n")
    assert events[-1] == ""
    out = []
    for ev in events[:-1]:
        assert ev.startswith("data: "), ev
        payload = ev[len("data: "):]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    assert out[-1] == "[DONE]"
    return out[:-1]


def state(u):
    return httpx.get(u + "/_emulator/state", trust_env=False).json()


def wait_idle(u, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = state(u)
        if s["running"] == 0 and s["waiting"] == 0 and not s["being_read"]:
            return s
        time.sleep(0.02)
    raise AssertionError(f"{u} not idle: {state(u)}")


# ---- the two-step P/D flow, as vLLM's reference proxy does it ------------------------------------
@pytest.mark.parametrize("api", ["/v1/completions", "/v1/chat/completions"])
def test_reference_proxy_flow_every_field(cluster, api):
    P, D = url(cluster, "prefill-0"), url(cluster, "decode-0")
    if api == "/v1/completions":
        client_body = {"model": MODEL, "prompt": "Tell me a story about a dragon " * 20, "max_tokens": 12,
                       "ignore_eos": True, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "min_tokens": 2}
    else:
        client_body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story " * 20}],
                       "max_completion_tokens": 12, "ignore_eos": True, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}
    rid = str(uuid.uuid4())
    headers = {"Authorization": "Bearer None", "X-Request-Id": rid}
    with httpx.Client(trust_env=False, timeout=30) as c:
        r = c.post(P + api, json=toy_proxy_prefill_body(client_body), headers=headers)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        pre = r.json()
        chat = api.endswith("chat/completions")
        prefix = "chatcmpl-" if chat else "cmpl-"
        assert pre["id"] == prefix + rid
        assert pre["object"] == ("chat.completion" if chat else "text_completion")
        assert isinstance(pre["created"], int) and pre["model"] == MODEL
        choice = pre["choices"][0]
        assert choice["index"] == 0 and choice["finish_reason"] == "length" and choice["stop_reason"] is None
        assert choice["logprobs"] is None
        n_prompt = pre["usage"]["prompt_tokens"]
        assert pre["usage"] == {"prompt_tokens": n_prompt, "total_tokens": n_prompt + 1, "completion_tokens": 1,
                                "prompt_tokens_details": None}
        kv = pre["kv_transfer_params"]
        p_state = state(P)
        assert set(kv) == {"do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
                           "remote_request_id", "remote_host", "remote_port", "tp_size"}
        assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False and kv["tp_size"] == 1
        assert kv["remote_engine_id"] == cluster["prefill-0"].engine_id == p_state["engine_id"]
        assert kv["remote_request_id"] == (prefix + rid if chat else f"cmpl-{rid}-0")
        assert kv["remote_host"] == "127.0.0.1" and kv["remote_port"] == int(P.rsplit(":", 1)[1])
        assert len(kv["remote_block_ids"]) == -(-n_prompt // 16)
        # the prefill engine holds exactly those blocks for the decode engine
        assert p_state["held_for_decode"][kv["remote_request_id"]] == kv["remote_block_ids"]
        # decode call: the original body plus the params, same X-Request-Id (toy proxy)
        dec_body = dict(client_body, kv_transfer_params=kv)
        r = c.post(D + api, json=dec_body, headers=headers)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(r.content)
    usage = events[-1]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": n_prompt, "total_tokens": n_prompt + 12,
                                                          "completion_tokens": 12}
    assert all(e["id"] == prefix + rid for e in events)
    body_events = events[:-1]
    if chat:
        assert body_events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert body_events[0]["object"] == "chat.completion.chunk"
        body_events = body_events[1:]
        text = "".join(e["choices"][0]["delta"]["content"] for e in body_events)
    else:
        text = "".join(e["choices"][0]["text"] for e in body_events)
    assert len(body_events) == 12  # stream interval 1: one chunk per token
    assert [e["choices"][0]["finish_reason"] for e in body_events] == [None] * 11 + ["length"]
    assert len(TOKENIZER.encode(text)) == 12
    # the decode engine's first token is the prefill engine's token (same greedy function)
    first = pre["choices"][0]["message"]["content"] if chat else pre["choices"][0]["text"]
    assert text.startswith(first)
    # blocks were pulled: released on the prefill engine, nothing left on the decode engine
    assert kv["remote_request_id"] not in wait_idle(P)["held_for_decode"]
    d_state = wait_idle(D)
    assert d_state["pulls_ok"] >= 1 and d_state["used_blocks"] == 0


def test_each_engine_reports_its_physics_times_per_request(cluster):
    """``GET /_emulator/requests`` on each engine: one record per request, in physics seconds. (That the
    decode's first token waits for the KV transfer is tested without HTTP, with a transfer long enough
    to see: `test_decode_first_token_waits_for_the_kv_transfer_timed_from_its_own_read`.)"""
    P, D = url(cluster, "prefill-0"), url(cluster, "decode-0")
    phys = load_profile().physics
    rid = f"times-{uuid.uuid4().hex[:8]}"
    prompt = f"{rid} " + "a long and unique prompt about rivers and stones " * 60  # no prefix-cache hit
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "ignore_eos": True, "temperature": 0}
    with httpx.Client(trust_env=False, timeout=30) as c:
        pre = c.post(P + "/v1/completions", json=toy_proxy_prefill_body(body), headers={"X-Request-Id": rid}).json()
        n = pre["usage"]["prompt_tokens"]
        c.post(D + "/v1/completions", json=dict(body, kv_transfer_params=pre["kv_transfer_params"]),
               headers={"X-Request-Id": rid}).raise_for_status()
        p_rec = [r for r in c.get(P + "/_emulator/requests").json()["requests"] if r["request_id"] == rid]
        d_rec = [r for r in c.get(D + "/_emulator/requests").json()["requests"] if r["request_id"] == rid]
    assert len(p_rec) == 1 and len(d_rec) == 1
    p_rec, d_rec = p_rec[0], d_rec[0]
    assert p_rec["prefill_only"] and p_rec["state"] == "finished" and not d_rec["prefill_only"]
    assert d_rec["state"] == "finished"
    # physics seconds on each engine's clock: the prefill took its compute time; the decode made its
    # first token after its arrival and its last one after that
    # (the engine's own time: the lone prefill less what the API server spends outside the engine core)
    outside = phys.serving_path_s + phys.api_queue_s + phys.api_queue_per_token_s * n
    assert p_rec["finish_s"] - p_rec["arrival_s"] >= (phys.prefill_request_time_s(n) - outside) * 0.999
    assert d_rec["arrival_s"] < d_rec["first_token_s"] < d_rec["finish_s"]


def test_decode_first_token_waits_for_the_kv_transfer_timed_from_its_own_read():
    """Two emulated engines in one process (the `LOCAL_ENGINES` read, no HTTP) on a slow KV link: the
    decode engine's first token comes no sooner than the physics transfer time of the prompt (plus
    the one decode step that makes the token) after its arrival, on the engine's own physics clock."""
    from repro.emulator.engine import LOCAL_ENGINES, AsyncEngine, EmulatorConfig
    from repro.emulator.seq import FINISHED, Seq

    # 0.3 s latency + 600 tokens x 36864 B at 0.1 GB/s = 0.52 s: far above a decode step (13 ms)
    phys = load_profile().physics.with_overrides(transfer_latency_s=0.3, transfer_bandwidth_bytes_per_s=1e8)
    n = 600
    transfer_s = 0.3 + n * 36864 / 1e8
    first_step_s = phys.decode_base_s + phys.decode_per_seq_s + n * 36864 / phys.hbm_bandwidth_bytes_per_s
    prompt = list(range(1000, 1000 + n))

    async def wait_finished(seq, ev):
        while seq.state != FINISHED:
            ev.clear()
            await asyncio.wait_for(ev.wait(), 10)

    async def main():
        pre = AsyncEngine(EmulatorConfig(time_scale=20.0, engine_id=f"pre-{uuid.uuid4().hex[:6]}"), physics=phys)
        dec = AsyncEngine(EmulatorConfig(time_scale=20.0, engine_id=f"dec-{uuid.uuid4().hex[:6]}"), physics=phys)
        await pre.start()
        await dec.start()
        try:
            ev = asyncio.Event()
            p_seq = Seq("r-0", prompt, target=1, prefill_only=True, notify=ev.set)
            pre.submit(p_seq)
            await wait_finished(p_seq, ev)
            assert "r-0" in pre.core.handoffs  # held for the decode engine
            remote = {"do_remote_prefill": True, "remote_engine_id": pre.engine_id, "remote_request_id": "r-0",
                      "remote_block_ids": p_seq.kv_params["remote_block_ids"], "remote_host": "127.0.0.1",
                      "remote_port": 9}  # nothing listens there: only the in-process read can succeed
            ev = asyncio.Event()
            d_seq = Seq("r-0", prompt, target=3, remote=remote, info={"remote": remote}, notify=ev.set)
            dec.submit(d_seq)
            await wait_finished(d_seq, ev)
            dec.log_request("r-0", d_seq)
            assert pre.engine_id in LOCAL_ENGINES and dec.pulls_ok == 1 and dec.pulls_failed == 0
            await asyncio.sleep(0.05)
            assert pre.core.pool.num_used == 0 and not pre.reading  # the read freed the prefill's blocks
            return d_seq, dec.requests[-1]
        finally:
            await dec.stop()
            await pre.stop()

    d_seq, record = asyncio.run(main())
    assert d_seq.pull_ok and d_seq.transfer_tokens == n
    assert record["first_token_s"] - record["arrival_s"] >= transfer_s + first_step_s - 1e-6
    assert d_seq.finish_t > d_seq.first_token_t


def test_null_kv_params_prefill_locally(cluster):
    D = url(cluster, "decode-0")
    before = state(D)["pulls_ok"]
    body = {"model": MODEL, "prompt": "hello " * 50, "max_tokens": 5, "ignore_eos": True, "temperature": 0,
            "kv_transfer_params": None}
    r = httpx.post(D + "/v1/completions", json=body, trust_env=False, timeout=30).json()
    assert r["usage"]["completion_tokens"] == 5 and r["kv_transfer_params"] is None
    assert state(D)["pulls_ok"] == before


def test_pull_of_unknown_request_falls_back_to_local_prefill(cluster):
    P, D = url(cluster, "prefill-0"), url(cluster, "decode-0")
    kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [1, 2],
          "remote_engine_id": cluster["prefill-0"].engine_id, "remote_request_id": "cmpl-nope-0",
          "remote_host": "127.0.0.1", "remote_port": int(P.rsplit(":", 1)[1]), "tp_size": 1}
    before = state(D)["pulls_failed"]
    body = {"model": MODEL, "prompt": "x " * 40, "max_tokens": 3, "ignore_eos": True, "temperature": 0,
            "kv_transfer_params": kv}
    r = httpx.post(D + "/v1/completions", json=body, trust_env=False, timeout=30).json()
    assert r["usage"]["completion_tokens"] == 3
    assert state(D)["pulls_failed"] == before + 1
    assert wait_idle(D)["used_blocks"] == 0


def test_non_streaming_ignore_eos_exact_count_and_x_request_id(cluster):
    D = url(cluster, "decode-0")
    r = httpx.post(D + "/v1/completions", headers={"X-Request-Id": "abc-1"}, trust_env=False, timeout=30,
                   json={"model": MODEL, "prompt": "count", "max_tokens": 40, "ignore_eos": True, "temperature": 0})
    j = r.json()
    assert j["id"] == "cmpl-abc-1" and j["usage"]["completion_tokens"] == 40
    assert j["choices"][0]["finish_reason"] == "length"
    assert len(TOKENIZER.encode(j["choices"][0]["text"])) == 40
    no_header = httpx.post(D + "/v1/completions", trust_env=False, timeout=30,
                           json={"prompt": "x", "max_tokens": 1, "temperature": 0}).json()
    assert re.fullmatch(r"cmpl-[0-9a-f]{32}", no_header["id"])


def test_eos_stop_without_ignore_eos(cluster):
    D = url(cluster, "decode-0")
    prompt = "Find a prompt whose natural length is short"
    natural = OutputFunction(prompt_seed(TOKENIZER.encode(prompt))).natural_length(256)
    j = httpx.post(D + "/v1/completions", trust_env=False, timeout=60,
                   json={"prompt": prompt, "max_tokens": 600, "temperature": 0}).json()
    assert j["choices"][0]["finish_reason"] == "stop"
    assert j["usage"]["completion_tokens"] == natural  # EOS counted, not rendered
    assert len(TOKENIZER.encode(j["choices"][0]["text"])) == natural - 1


def test_streaming_framing_and_usage_options(cluster):
    D = url(cluster, "decode-0")
    base = {"model": MODEL, "prompt": "stream me", "max_tokens": 4, "ignore_eos": True, "temperature": 0,
            "stream": True}
    with httpx.Client(trust_env=False, timeout=30) as c:
        ev = parse_sse(c.post(D + "/v1/completions", json=base).content)
        assert len(ev) == 4 and all(e["usage"] is None for e in ev)  # no usage chunk without include_usage
        assert set(ev[0]["choices"][0]) == {"index", "text", "logprobs", "finish_reason", "stop_reason",
                                            "prompt_token_ids", "token_ids"}
        ev = parse_sse(c.post(D + "/v1/completions",
                              json=dict(base, stream_options={"include_usage": True,
                                                              "continuous_usage_stats": True})).content)
        assert [e["usage"]["completion_tokens"] for e in ev] == [1, 2, 3, 4, 4]
        r = c.post(D + "/v1/completions", json=dict(base, stream=False, stream_options={"include_usage": True}))
        assert (r.status_code == 400 and "stream_options" in r.json()["error"]["message"].lower()
                or "Stream options" in r.text)


def test_greedy_equivalence_across_instances_and_diverge_fault(cluster):
    body = {"model": MODEL, "prompt": "Equivalence gate prompt " * 10, "max_tokens": 30, "ignore_eos": True,
            "temperature": 0}
    outs = {}
    for name in ("prefill-0", "decode-0", "small", "diverge"):
        outs[name] = httpx.post(url(cluster, name) + "/v1/completions", json=body, trust_env=False,
                                timeout=30).json()["choices"][0]["text"]
    assert outs["prefill-0"] == outs["decode-0"] == outs["small"]
    assert outs["diverge"] != outs["decode-0"]
    assert outs["diverge"].split()[0] == outs["decode-0"].split()[0]


def test_sampling_is_not_greedy(cluster):
    D = url(cluster, "decode-0")
    body = {"prompt": "sample", "max_tokens": 10, "ignore_eos": True, "temperature": 0.8}
    a = httpx.post(D + "/v1/completions", json=body, trust_env=False).json()["choices"][0]["text"]
    b = httpx.post(D + "/v1/completions", json=body, trust_env=False).json()["choices"][0]["text"]
    c1 = httpx.post(D + "/v1/completions", json=dict(body, seed=7), trust_env=False).json()["choices"][0]["text"]
    c2 = httpx.post(D + "/v1/completions", json=dict(body, seed=7), trust_env=False).json()["choices"][0]["text"]
    assert a != b and c1 == c2


def test_kv_budget_overload_queues_and_returns_to_zero(cluster):
    S = url(cluster, "small")  # 800-token budget = 50 blocks
    bodies = [{"prompt": f"req {k} " + "pad " * 150, "max_tokens": 60, "ignore_eos": True, "temperature": 0}
              for k in range(8)]  # 8 x ~210 tokens, far more than 800

    async def go():
        async with httpx.AsyncClient(trust_env=False, timeout=60) as c:
            async def one(b):
                return (await c.post(S + "/v1/completions", json=b)).json()
            async def watch():
                peak = 0.0
                for _ in range(200):
                    m = (await c.get(S + "/_emulator/state")).json()
                    peak = max(peak, m["kv_cache_usage_perc"])
                    await asyncio.sleep(0.005)
                return peak
            w = asyncio.create_task(watch())
            res = await asyncio.gather(*(one(b) for b in bodies))
            return res, await w

    res, peak = asyncio.run(go())
    assert all(r["usage"]["completion_tokens"] == 60 for r in res)
    assert 0.5 < peak <= 1.0
    s = wait_idle(S)
    assert s["used_blocks"] == 0 and s["kv_cache_usage_perc"] == 0.0
    metrics = httpx.get(S + "/metrics", trust_env=False).text
    assert re.search(r'vllm:kv_cache_usage_perc\{engine="0",model_name="[^"]+"\} 0\.0', metrics)


def test_metrics_names_and_labels(cluster):
    D = url(cluster, "decode-0")
    httpx.post(D + "/v1/completions", json={"prompt": "m", "max_tokens": 3, "ignore_eos": True, "temperature": 0},
               trust_env=False)
    text = httpx.get(D + "/metrics", trust_env=False).text
    labels = f'engine="0",model_name="{MODEL}"'
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count"):
        assert re.search(re.escape(name) + r"\{" + re.escape(labels) + r"\} [0-9.e+-]+", text), name
    assert f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="{MODEL}"}}' in text
    assert "# TYPE vllm:time_to_first_token_seconds histogram" in text
    assert "# TYPE vllm:num_requests_running gauge" in text
    assert "# TYPE vllm:prefix_cache_queries_total counter" in text


def test_metrics_name_filter_serves_only_the_named_samples(cluster):
    """``/metrics?name[]=...`` (prometheus-client's exposition filter): the proxy's
    poller asks for its three gauges only; the answer is those lines, the same values as the full text."""
    from repro.live.proxy.core import POLLED_METRICS
    from repro.live.proxy.scrape import metrics_query

    D = url(cluster, "decode-0")
    part = httpx.get(D + "/metrics?" + metrics_query(POLLED_METRICS), trust_env=False).text
    full = httpx.get(D + "/metrics", trust_env=False).text
    samples = [ln for ln in part.splitlines() if not ln.startswith("#")]
    assert sorted(ln.split("{")[0] for ln in samples) == sorted(POLLED_METRICS)
    assert all(ln in full for ln in samples)
    assert len(part) < len(full) / 20
    only = httpx.get(D + "/metrics", params=[("name[]", "vllm:time_to_first_token_seconds_count")],
                     trust_env=False).text
    assert only.startswith("# HELP vllm:time_to_first_token_seconds ")
    assert "_bucket" not in only and only.count("_count{") == 1


def test_prefix_cache_counters_and_reset(cluster):
    D = url(cluster, "decode-0")
    body = {"prompt": "shared prefix " * 100, "max_tokens": 1, "temperature": 0}

    def hits():
        t = httpx.get(D + "/metrics", trust_env=False).text
        return float(re.search(r"vllm:prefix_cache_hits_total\{[^}]*\} ([0-9.e+]+)", t).group(1))

    httpx.post(D + "/v1/completions", json=body, trust_env=False)
    h0 = hits()
    httpx.post(D + "/v1/completions", json=body, trust_env=False)
    h1 = hits()
    assert h1 - h0 >= 160
    assert httpx.post(D + "/reset_prefix_cache", trust_env=False).status_code == 200  # dev mode (launcher)
    httpx.post(D + "/v1/completions", json=body, trust_env=False)
    assert hits() == h1


def test_tokenize_models_health_version(cluster):
    D = url(cluster, "decode-0")
    with httpx.Client(trust_env=False) as c:
        assert c.get(D + "/health").status_code == 200
        tok = c.post(D + "/tokenize", json={"model": MODEL, "prompt": "Hello, world!"}).json()
        assert (tok["count"] == 4 and tok["tokens"] == TOKENIZER.encode("Hello, world!")
                and tok["max_model_len"] == 32768)
        chat = c.post(D + "/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
        full = c.post(D + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 1, "temperature": 0}).json()
        assert chat["count"] == full["usage"]["prompt_tokens"]
        models = c.get(D + "/v1/models").json()
        assert models["object"] == "list" and models["data"][0]["id"] == MODEL
        assert models["data"][0]["max_model_len"] == 32768 and models["data"][0]["owned_by"] == "vllm"
        assert c.get(D + "/version").json()["version"].startswith("0.12")


@pytest.mark.parametrize("body,status,fragment", [
    (b"{not json", 400, "JSON"),
    ({"max_tokens": 5}, 400, "prompt"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens must be at least 1"),
    ({"prompt": "x", "max_tokens": "five"}, 400, "integer"),
    ({"prompt": "x " * 40000, "max_tokens": 5}, 400, "maximum context length is 32768"),
    ({"prompt": "x " * 100, "max_tokens": 32700}, 400, "maximum context length"),
    ({"prompt": "x", "model": "gpt-4"}, 404, "does not exist"),
    ({"prompt": "x", "temperature": -1}, 400, "temperature"),
])
def test_error_shapes(cluster, body, status, fragment):
    D = url(cluster, "decode-0")
    if isinstance(body, bytes):
        r = httpx.post(D + "/v1/completions", content=body, headers={"content-type": "application/json"},
                       trust_env=False)
    else:
        r = httpx.post(D + "/v1/completions", json=body, trust_env=False)
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    assert fragment.lower() in err["message"].lower()
    assert err["type"] in ("BadRequestError", "Bad Request", "NotFoundError")


def test_queues_rather_than_rejects_when_busy(cluster):
    D = url(cluster, "decode-0")

    async def go():
        async with httpx.AsyncClient(trust_env=False, timeout=60) as c:
            rs = await asyncio.gather(*(c.post(D + "/v1/completions",
                                               json={"prompt": f"busy {k} " * 200, "max_tokens": 5,
                                                     "ignore_eos": True, "temperature": 0})
                                        for k in range(24)))
            return [r.status_code for r in rs]

    assert asyncio.run(go()) == [200] * 24


# ---- engines started by hand ---------------------------------------------------------------------
def spawn(args: list[str], env_extra: dict | None = None, env_drop=("VLLM_SERVER_DEV_MODE",)):
    port = free_ports(1)[0]
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "repro.emulator", "--port", str(port), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    inst = Instance(name="x", role="decode", url=f"http://127.0.0.1:{port}", pid=proc.pid)
    wait_healthy([inst], 30, {"x": proc})
    return proc, inst.url


def test_dev_mode_gating_and_side_channel_port():
    side = free_ports(1)[0]
    proc, u = spawn(["--time-scale", "50", "--side-channel-port", str(side)])
    try:
        assert httpx.post(u + "/reset_prefix_cache", trust_env=False).status_code == 404
        r = httpx.post(u + "/v1/completions", trust_env=False,
                       json={"prompt": "p " * 40, "max_tokens": 1, "temperature": 0,
                             "kv_transfer_params": dict(PREFILL_KV)}).json()
        kv = r["kv_transfer_params"]
        assert kv["remote_port"] == side
        # the side channel answers on its own port
        assert httpx.get(f"http://127.0.0.1:{side}/health", trust_env=False).status_code == 200
    finally:
        terminate_pids([proc.pid], procs={proc.pid: proc})
    assert proc.poll() is not None


def test_tpot_grows_with_batch_size_over_http(tmp_path):
    raw = json.loads((REPO / "data/hardware/a40-qwen2.5-3b.json").read_text())
    raw["name"] = "steep"
    raw["params"]["decode_base_s"]["value"] = 0.010
    raw["params"]["decode_per_seq_s"]["value"] = 0.004
    prof = tmp_path / "steep.json"
    prof.write_text(json.dumps(raw))
    phys = load_profile(prof).physics
    proc, u = spawn(["--profile", str(prof), "--time-scale", "2"])
    out = 30
    try:
        async def tpot(n):
            async with httpx.AsyncClient(trust_env=False, timeout=60) as c:
                async def one(k):
                    t = []
                    body = {"prompt": f"r{k} " * 100, "max_tokens": out, "ignore_eos": True, "temperature": 0,
                            "stream": True}
                    async with c.stream("POST", u + "/v1/completions", json=body) as r:
                        async for line in r.aiter_lines():
                            if line.startswith("data: {"):
                                t.append(time.monotonic())
                    # the median gap between streamed tokens (physics seconds): one chunk a loaded client reads
                    # late moves a single gap, where (last - first) / (n - 1) would take all of it
                    return float(np.median(np.diff(t))) * 2.0
                return sum(await asyncio.gather(*(one(k) for k in range(n)))) / n

        t1 = asyncio.run(tpot(1))
        t8 = asyncio.run(tpot(8))
    finally:
        terminate_pids([proc.pid], procs={proc.pid: proc})
    ctx = 200 + out // 2
    assert t1 == pytest.approx(phys.decode_step_s(1, ctx), rel=0.15)
    assert t8 == pytest.approx(phys.decode_step_s(8, 8 * ctx), rel=0.15)
    assert t8 / t1 > 2.0
