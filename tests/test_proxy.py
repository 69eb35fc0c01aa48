"""The router proxy against a small emulated cluster on 127.0.0.1 (started and stopped here)."""

import asyncio
import os
import signal
import time

import httpx
import pytest

from repro.cluster.launchers import launch
from repro.experiment.journal import FIELD_NAMES
from repro.experiment.journal import read as read_journal
from repro.live.pd_protocol import SSEParser
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import free_port, proxy_process

MODEL = "Qwen/Qwen2.5-3B-Instruct"
SCALE = 5.0


@pytest.fixture(scope="module")
def cluster():
    with launch("1p2d", launcher="emulated", time_scale=SCALE) as instances:
        yield instances


def make_proxy(cluster, tmp_path, **kw):
    cfg = ProxyConfig(
        endpoints=[Endpoint(i.name, i.role, i.url) for i in cluster],
        journal=str(tmp_path / "proxy.jsonl"), time_scale=SCALE, port=free_port(), **kw,
    )
    return cfg, proxy_process(cfg, tmp_path)


def body(n=20, stream=False, prompt="tell me about routing " * 20):
    b = {"model": MODEL, "prompt": prompt, "max_tokens": n, "ignore_eos": True, "temperature": 0}
    if stream:
        b.update(stream=True, stream_options={"include_usage": True})
    return b


def test_pd_flow_streaming_and_not_and_the_journal(cluster, tmp_path):
    cfg, proc = make_proxy(cluster, tmp_path, policy="round_robin")
    with proc as url, httpx.Client(timeout=30) as c:
        r = c.post(url + "/v1/completions", json=body(12), headers={"X-Request-Id": "req-a", "X-SLO-Class": "tight"})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 12
        assert r.headers["x-request-id"] == "req-a" and r.json()["id"].endswith("req-a")
        assert r.headers["x-prefill-instance"] == "prefill-0"
        first_decode = r.headers["x-decode-instance"]
        with c.stream("POST", url + "/v1/completions", json=body(25, stream=True),
                      headers={"X-Request-Id": "req-b"}) as s:
            assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
            parser = SSEParser()
            for chunk in s.iter_raw():
                parser.feed(chunk)
            assert s.headers["x-decode-instance"] != first_decode  # round robin over decode
        assert parser.usage.done and parser.usage.completion_tokens == 25
        chat = c.post(url + "/v1/chat/completions",
                      json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                            "ignore_eos": True})
        assert chat.status_code == 200 and chat.json()["object"] == "chat.completion"
        assert c.get(url + "/health").json()["status"] == "ok"
        metrics = c.get(url + "/metrics").text
        assert 'repro_proxy_decisions_total{instance="prefill-0",role="prefill"} 3.0' in metrics
    j = read_journal(tmp_path / "proxy.jsonl")
    assert list(j.columns) == list(FIELD_NAMES)
    assert len(j) == 3 and set(j.status) == {"ok"}
    a = j.set_index("request_id").loc["req-a"]
    assert a.slo_class == "tight" and a.generated_tokens == 12 and a.output_tokens == 12
    assert a.arrival_s <= a.prefill_start_s <= a.prefill_end_s <= a.decode_start_s <= a.first_token_s <= a.finish_s
    b = j.set_index("request_id").loc["req-b"]
    assert b.tpot_s > 0 and b.ttft_s > 0 and b.generated_tokens == 25


def test_a_client_that_leaves_a_stream_is_journaled_and_settled_and_the_others_finish(cluster, tmp_path):
    """The relay notices a client's disconnect mid-stream: that row is failed "client disconnected"
    with the tokens relayed so far, the ledger is settled (nothing left in flight), and a stream
    read to its end at the same time is journaled ok."""
    cfg, proc = make_proxy(cluster, tmp_path, policy="round_robin")
    with proc as url, httpx.Client(timeout=30) as c:
        with c.stream("POST", url + "/v1/completions", json=body(400, stream=True),
                      headers={"X-Request-Id": "leaves"}) as s, \
                c.stream("POST", url + "/v1/completions", json=body(30, stream=True),
                         headers={"X-Request-Id": "stays"}) as t:
            assert s.status_code == 200 and t.status_code == 200
            next(s.iter_raw())  # one chunk, then the client goes away (the context closes it)
            parser = SSEParser()
            for chunk in t.iter_raw():
                parser.feed(chunk)
            assert parser.usage.done and parser.usage.completion_tokens == 30
        deadline = time.monotonic() + 20
        while c.get(url + "/health").json()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.get(url + "/health").json()["in_flight"] == 0
    j = read_journal(tmp_path / "proxy.jsonl").set_index("request_id")
    assert j.loc["stays", "status"] == "ok" and j.loc["stays", "generated_tokens"] == 30
    left = j.loc["leaves"]
    assert left.status == "failed" and left.reason == "client disconnected"
    assert 0 < left.generated_tokens < 400


def test_bad_requests_get_4xx_and_the_proxy_stays_healthy(cluster, tmp_path):
    cfg, proc = make_proxy(cluster, tmp_path)
    with proc as url, httpx.Client(timeout=30) as c:
        cases = [
            (b"{not json", "malformed JSON"),
            (b"[1, 2]", "JSON object"),
            (b'{"model": "m", "max_tokens": 3}', "prompt"),
            (b'{"model": "m", "prompt": "x", "max_tokens": -2}', "max_tokens"),
            (b'{"model": "m", "prompt": "x", "stream": "yes"}', "stream"),
        ]
        for raw, word in cases:
            r = c.post(url + "/v1/completions", content=raw, headers={"content-type": "application/json"})
            assert r.status_code == 400 and word in r.json()["error"]["message"]
        r = c.post(url + "/v1/completions", json=body(), headers={"X-SLO-Class": "urgent"})
        assert r.status_code == 400 and "X-SLO-Class" in r.json()["error"]["message"]
        r = c.post(url + "/v1/completions", content=b'{"prompt": "' + b"a" * (5 * 1024 * 1024) + b'"}')
        assert r.status_code == 413
        # an error the engine raises (prompt longer than the model) is passed through as vLLM's 400
        r = c.post(url + "/v1/completions", json=body(prompt="word " * 40000))
        assert r.status_code == 400
        assert c.post(url + "/v1/completions", json=body(3)).status_code == 200
        assert c.get(url + "/health").status_code == 200


def test_bearer_token_is_required_and_forwarded(cluster, tmp_path):
    cfg, proc = make_proxy(cluster, tmp_path, api_key="s3cret")
    with proc as url, httpx.Client(timeout=30) as c:
        assert c.post(url + "/v1/completions", json=body(3)).status_code == 401
        ok = c.post(url + "/v1/completions", json=body(3), headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
    assert "s3cret" not in (tmp_path / "proxy.jsonl").read_text()


def test_engine_killed_mid_run_fails_requests_clearly_and_is_skipped(tmp_path):
    with launch("1p2d", launcher="emulated", time_scale=SCALE, shared_process=False) as instances:
        cfg, proc = make_proxy(instances, tmp_path, policy="round_robin")
        victim = next(i for i in instances if i.name == "decode-1")
        with proc as url:

            async def go():
                async with httpx.AsyncClient(timeout=30) as c:
                    async def one(k):
                        try:
                            r = await c.post(url + "/v1/completions", json=body(400), headers={"X-Request-Id": f"k{k}"})
                            return r.status_code
                        except httpx.HTTPError as exc:
                            return type(exc).__name__

                    tasks = [asyncio.create_task(one(k)) for k in range(6)]
                    await asyncio.sleep(0.3)
                    os.kill(victim.pid, signal.SIGKILL)
                    codes = await asyncio.gather(*tasks)
                    await asyncio.sleep(0.5)  # the poller notices
                    after = [(await c.post(url + "/v1/completions", json=body(5))) for _ in range(4)]
                    health = (await c.get(url + "/health")).json()
                    return codes, after, health

            t = time.monotonic()
            codes, after, health = asyncio.run(go())
            assert time.monotonic() - t < 25  # nothing hangs
        assert 502 in codes and 200 in codes
        assert all(r.status_code == 200 and r.headers["x-decode-instance"] == "decode-0" for r in after)
        assert health["instances"]["decode-1"] is False
    j = read_journal(tmp_path / "proxy.jsonl")
    assert len(j) == 10 and j.request_id.is_unique
    failed = j[j.status == "failed"]
    assert len(failed) == codes.count(502) and failed.reason.str.contains("decode-1").all()


def _state(inst):
    return httpx.get(inst.url + "/_emulator/state", timeout=10).json()


def test_a_decode_prompt_that_differs_from_the_prefilled_one_is_caught(cluster):
    """The emulator's guard (real vLLM has none: a longer prompt kills its decode engine)."""
    from repro.live.pd_protocol import decode_body, prefill_body

    p = next(i for i in cluster if i.role == "prefill")
    d = next(i for i in cluster if i.role == "decode")
    before = _state(p)["prompt_mismatches"]
    with httpx.Client(timeout=30) as c:
        pr = c.post(p.url + "/v1/completions", json=prefill_body(body(4)), headers={"X-Request-Id": "mm-1"})
        kv = pr.json()["kv_transfer_params"]
        other = body(4, prompt="tell me about routing " * 19 + "tell me about queueing ")  # same length
        r = c.post(d.url + "/v1/completions", json=decode_body(other, kv), headers={"X-Request-Id": "mm-1"})
        assert r.status_code == 200  # the pull failed; the decode engine recomputed the prompt
    assert _state(p)["prompt_mismatches"] == before + 1


def test_the_proxy_never_sends_a_decode_prompt_other_than_the_prefilled_one(cluster, tmp_path):
    before = {i.name: _state(i)["prompt_mismatches"] for i in cluster}
    pulls_before = sum(_state(i)["pulls_ok"] for i in cluster)
    cfg, proc = make_proxy(cluster, tmp_path, policy="round_robin")
    chat = {"model": MODEL, "max_tokens": 6, "ignore_eos": True,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "héllo — 路由 " * 30}]}
    with proc as url, httpx.Client(timeout=30) as c:
        for k in range(4):
            assert c.post(url + "/v1/completions", json=body(5, stream=k % 2 == 1, prompt=f"case {k} " * (50 * k + 3)),
                          headers={"X-Request-Id": f"same-{k}"}).status_code == 200
            assert c.post(url + "/v1/chat/completions", json={**chat, "stream": k % 2 == 1},
                          headers={"X-Request-Id": f"same-chat-{k}"}).status_code == 200
    after = {i.name: _state(i) for i in cluster}
    assert {n: s["prompt_mismatches"] for n, s in after.items()} == before
    assert sum(s["pulls_ok"] for s in after.values()) - pulls_before == 8  # every request's KV was pulled
