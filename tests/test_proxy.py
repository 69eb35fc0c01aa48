"""The router proxy against a small emulated cluster on 127.0.0.1 (started and stopped here)."""

import asyncio
import os
import signal
import time

import httpx
import pandas as pd
import pytest

from repro.cluster.launchers import launch
from repro.experiment.journal import read as read_journal
from repro.journal_schema import FIELD_NAMES
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


@pytest.mark.slow
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


CHAT = {"model": MODEL, "max_tokens": 9, "ignore_eos": True, "temperature": 0,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "route me " * 25}]}


def _without_volatile(answer):
    """An answer without what differs from one call to the next (``created``, unix seconds)."""
    return {k: v for k, v in answer.items() if k not in ("created",)}


@pytest.mark.parametrize("path, payload", [("/v1/completions", body(14)), ("/v1/chat/completions", CHAT)],
                         ids=["completions", "chat"])
def test_a_non_streamed_client_gets_the_engines_own_non_streamed_answer(cluster, tmp_path, path, payload):
    """The proxy streams from the decode engine (to see its first token) and rebuilds the client's
    non-streamed answer: the same keys, text, usage and finish reason as the engines' own."""
    from repro.live.pd_protocol import pd_request

    p = next(i for i in cluster if i.role == "prefill")
    d = next(i for i in cluster if i.role == "decode")

    async def direct():
        async with httpx.AsyncClient() as c:
            return await pd_request(c, p.url, d.url, path, payload, "same-answer")

    expected = asyncio.run(direct())
    cfg, proc = make_proxy(cluster, tmp_path, policy="round_robin")
    with proc as url, httpx.Client(timeout=30) as c:
        r = c.post(url + path, json=payload, headers={"X-Request-Id": "same-answer"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        got = r.json()
    assert _without_volatile(got) == _without_volatile(expected)
    assert list(got) == list(expected) and list(got["choices"][0]) == list(expected["choices"][0])
    assert got["usage"]["completion_tokens"] == payload["max_tokens"]
    row = read_journal(tmp_path / "proxy.jsonl").iloc[0]
    assert row.status == "ok" and row.generated_tokens == payload["max_tokens"]
    assert row.prefill_end_s <= row.decode_started_s < row.first_token_s <= row.finish_s  # the answer came whole


def test_the_journal_says_when_each_decode_started(cluster, tmp_path):
    """``decode_started_s``: the decode engine's first streamed token, for streamed clients (their
    first token) and non-streamed ones (before their whole answer) alike."""
    cfg, proc = make_proxy(cluster, tmp_path, policy="round_robin")
    with proc as url, httpx.Client(timeout=30) as c:
        for k, stream in enumerate((False, True, False, True)):
            chat = k >= 2
            payload = {**CHAT, "max_tokens": 30} if chat else body(30)
            if stream:
                payload = {**payload, "stream": True}
            path = "/v1/chat/completions" if chat else "/v1/completions"
            with c.stream("POST", url + path, json=payload, headers={"X-Request-Id": f"ds-{k}"}) as s:
                assert s.status_code == 200
                s.read()
    j = read_journal(tmp_path / "proxy.jsonl").set_index("request_id")
    assert len(j) == 4 and (j.status == "ok").all() and j.decode_started_s.notna().all()
    assert (j.prefill_end_s <= j.decode_started_s).all() and (j.decode_started_s <= j.first_token_s).all()
    assert (j.first_token_s <= j.finish_s).all()
    for k in (1, 3):  # streamed: the first token the client saw is the decode's first
        assert j.loc[f"ds-{k}", "decode_started_s"] == j.loc[f"ds-{k}", "first_token_s"]
    for k in (0, 2):  # not streamed: 30 tokens later the whole answer came
        assert j.loc[f"ds-{k}", "decode_started_s"] < j.loc[f"ds-{k}", "first_token_s"]


def test_a_non_streamed_request_the_stream_cannot_rebuild_is_still_served(cluster, tmp_path):
    """A request whose answer a stream cannot rebuild (here ``echo``; the emulator refuses
    logprobs and n > 1) keeps the non-streamed decode call: the engine's answer byte for byte,
    and the decode counted as started when it came."""
    cfg, proc = make_proxy(cluster, tmp_path, policy="round_robin")
    prompt = "tell me about routing " * 20
    with proc as url, httpx.Client(timeout=30) as c:
        r = c.post(url + "/v1/completions", json={**body(6, prompt=prompt), "echo": True},
                   headers={"X-Request-Id": "echo"})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"].startswith(prompt) and r.json()["usage"]["completion_tokens"] == 6
        # logprobs: the engine's own 400 passes through (prefill refuses it already)
        r = c.post(url + "/v1/completions", json={**body(6), "logprobs": 1}, headers={"X-Request-Id": "lp"})
        assert r.status_code == 400 and "logprobs" in r.json()["error"]["message"]
    j = read_journal(tmp_path / "proxy.jsonl").set_index("request_id")
    e = j.loc["echo"]
    assert e.status == "ok" and e.prefill_end_s <= e.decode_started_s == e.first_token_s <= e.finish_s
    assert j.loc["lp", "status"] == "failed" and pd.isna(j.loc["lp", "decode_started_s"])


def test_a_non_streamed_client_whose_decode_stream_is_cut_gets_a_502_json(tmp_path):
    """The cut fault on the decode engine: the non-streamed client gets a 502 JSON error (not an
    SSE event), the row is failed once with the tokens seen, and the ledger is settled."""
    with launch("1p1d", launcher="emulated", time_scale=SCALE) as instances:
        d = next(i for i in instances if i.role == "decode")
        httpx.post(d.url + "/_emulator/faults", json={"faults": ["cut:3"]}, timeout=10).raise_for_status()
        cfg, proc = make_proxy(instances, tmp_path, policy="round_robin")
        with proc as url, httpx.Client(timeout=30) as c:
            r = c.post(url + "/v1/completions", json=body(20), headers={"X-Request-Id": "cut"})
            assert r.status_code == 502 and r.headers["content-type"].startswith("application/json")
            assert "stream cut" in r.json()["error"]["message"]
            assert c.get(url + "/health").json()["in_flight"] == 0
    j = read_journal(tmp_path / "proxy.jsonl")
    assert len(j) == 1 and j.status.iloc[0] == "failed" and j.generated_tokens.iloc[0] >= 1
    assert j.decode_started_s.notna().all() and j.first_token_s.isna().all()


def test_which_non_streamed_answers_a_stream_can_rebuild():
    from repro.live.pd_protocol import rebuildable_from_stream, streamed_body

    comp, chat = "/v1/completions", "/v1/chat/completions"
    assert rebuildable_from_stream(comp, body()) and rebuildable_from_stream(chat, CHAT)
    assert rebuildable_from_stream(comp, {**body(), "n": 1, "best_of": 1, "logprobs": None, "prompt": ["one"]})
    assert rebuildable_from_stream(comp, {**body(), "prompt": [1, 2, 3]})
    for extra in ({"n": 2}, {"best_of": 3}, {"logprobs": 0}, {"prompt_logprobs": 1}, {"echo": True},
                  {"prompt": ["one", "two"]}, {"prompt": [[1, 2], [3]]}, {"stream_options": {"include_usage": True}},
                  {"use_beam_search": True}, {"return_token_ids": True}):
        assert not rebuildable_from_stream(comp, {**body(), **extra}), extra
    for extra in ({"logprobs": True}, {"top_logprobs": 2}, {"tools": []}, {"tool_choice": "none"},
                  {"response_format": {"type": "json_object"}}, {"n": 2}):
        assert not rebuildable_from_stream(chat, {**CHAT, **extra}), extra
    b = body()
    s = streamed_body(b)
    assert s["stream"] is True and s["stream_options"] == {"include_usage": True} and "stream" not in b
