"""Fault injection: each emulator switch on its own, then each fault driven through the proxy.

One small emulated 1p2d cluster (127.0.0.1, time scale 5) and one proxy with short time-outs serve
the module; faults are switched at run time through the dev-mode ``POST /_emulator/faults`` and
lifted after each test. The crash test comes last (it leaves an engine dead).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from repro.cluster.launchers import launch
from repro.cluster.processes import free_ports
from repro.emulator.engine import EmulatorConfig
from repro.emulator.faults import Faults, error_due
from repro.errors import ConfigError
from repro.experiment.journal import read as read_journal
from repro.experiment.metrics import check_accounting
from repro.live.pd_protocol import SSEParser
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import free_port, proxy_process

MODEL = "Qwen/Qwen2.5-3B-Instruct"
SCALE = 5.0
REPO = Path(__file__).resolve().parent.parent
WINDOW = 1.0  # wall s: the proxy's health window here
FAST = dict(connect_timeout_s=1.0, health_window_s=WINDOW, policy="round_robin", predictor="constant")


# ---- the switches ---------------------------------------------------------------------------
def test_parse_every_switch_and_reject_bad_ones():
    f = Faults.parse(["crash:3", "hang", "errors:0.25", "cut:7", "dead-metrics:hang", "kv-hold", "slow:2", "diverge",
                      "kv-drop"])
    assert (f.crash_after, f.hang_after, f.error_fraction, f.cut_after, f.dead_metrics, f.kv_hold) == (
        3, 0, 0.25, 7, "hang", True)
    assert Faults.parse(f.names()) == f and f.any() and not Faults().any()
    assert Faults.parse(["dead-metrics"]).dead_metrics == "500" and Faults.parse(["crash"]).crash_after == 0
    for bad in ("errors:0", "errors:1.5", "errors:x", "cut", "cut:-1", "crash:x", "hang:-2", "dead-metrics:404",
                "slow:nan", "boom", 7):
        with pytest.raises(ConfigError):
            Faults.parse([bad])
    assert [n for n in range(1, 9) if error_due(n, 0.25)] == [4, 8]
    assert all(error_due(n, 1.0) for n in range(1, 5)) and not error_due(1, 0.0)


def test_dev_endpoint_is_404_without_dev_mode_and_api_key_is_enforced(monkeypatch):
    from repro.emulator.app import create_app

    async def go(dev: bool, key: str | None):
        if dev:
            monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
        else:
            monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
        monkeypatch.delenv("VLLM_API_KEY", raising=False)
        app = create_app(EmulatorConfig(api_key=key))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e") as c:
            return ((await c.post("/_emulator/faults", json={"faults": ["slow:2"]})).status_code,
                    (await c.post("/reset_prefix_cache")).status_code,
                    (await c.post("/v1/completions", json={"prompt": "x"})).status_code,
                    (await c.post("/v1/completions", json={"prompt": "x"},
                                  headers={"Authorization": "Bearer no"})).status_code,
                    (await c.get("/health")).status_code)

    assert asyncio.run(go(False, "k1"))[:4] == (404, 404, 401, 401)
    faults, _, _, _, health = asyncio.run(go(True, "k1"))
    assert faults == 200 and health == 200  # the switch answers; /v1 without the key is 401 (above)


def test_command_line_crash_after_n_requests(tmp_path):
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "repro.emulator", "--port", str(port), "--time-scale", "20",
                             "--fault", "crash:1"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        r = httpx.post(base + "/v1/completions", json={"prompt": "hi there", "max_tokens": 2}, timeout=10)
        assert r.status_code == 200  # the first request is served
        with pytest.raises(httpx.HTTPError):
            httpx.post(base + "/v1/completions", json={"prompt": "hi there", "max_tokens": 2}, timeout=10)
        assert proc.wait(timeout=10) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- through the proxy ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    topo = {"name": "faults", "instances": [{"role": "prefill", "count": 1, "kv_budget_tokens": 3000},
                                            {"role": "decode", "count": 2}]}
    with launch(topo, "emulated", time_scale=SCALE, stream_interval_tokens=2, stream_interval_ms=0,
                shared_process=False) as inst:  # the crash test kills one engine (the default, said here)
        cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in inst], journal=str(tmp / "proxy.jsonl"),
                          time_scale=SCALE, port=free_port(), **FAST)
        with proxy_process(cfg, tmp) as url, httpx.Client(timeout=20) as c:
            yield {"url": url, "engines": {i.name: i.url for i in inst}, "client": c, "journal": tmp / "proxy.jsonl"}


def set_fault(rig, name, faults):
    r = rig["client"].post(rig["engines"][name] + "/_emulator/faults", json={"faults": faults})
    assert r.status_code == 200, r.text
    return r.json()["faults"]


def wait_health(rig, want: dict[str, bool], timeout=8.0):
    deadline = time.monotonic() + timeout
    while True:
        h = rig["client"].get(rig["url"] + "/health").json()["instances"]
        if all(h[k] == v for k, v in want.items()):
            return h
        assert time.monotonic() < deadline, f"proxy health {h}, wanted {want}"
        time.sleep(0.05)


@pytest.fixture
def clean(rig):
    yield rig
    alive = {}
    for name in rig["engines"]:
        try:
            set_fault(rig, name, [])
            alive[name] = True
        except httpx.HTTPError:  # a crashed engine
            pass
    wait_health(rig, alive)


def req(n=8, stream=False, prompt="tell me about routing " * 10):
    b = {"model": MODEL, "prompt": prompt, "max_tokens": n, "ignore_eos": True, "temperature": 0}
    if stream:
        b.update(stream=True, stream_options={"include_usage": True})
    return b


def post(rig, rid, n=8, stream=False, **kw):
    """One request through the proxy: (status, decode instance, parser or JSON error)."""
    c = rig["client"]
    if not stream:
        r = c.post(rig["url"] + "/v1/completions", json=req(n, **kw), headers={"X-Request-Id": rid})
        return r.status_code, r.headers.get("x-decode-instance"), r.json()
    with c.stream("POST", rig["url"] + "/v1/completions", json=req(n, stream=True, **kw),
                  headers={"X-Request-Id": rid}) as s:
        p = SSEParser()
        for chunk in s.iter_raw():
            p.feed(chunk)
        return s.status_code, s.headers.get("x-decode-instance"), p


def rows(rig, prefix):
    j = read_journal(rig["journal"])
    j = j[j.request_id.str.startswith(prefix)]
    check_accounting(j)  # unique ids, every row ok | failed | rejected
    return j.set_index("request_id")


def test_emulator_switches_directly(clean):
    rig = clean
    c, d0 = rig["client"], rig["engines"]["decode-0"]
    assert set_fault(rig, "decode-0", ["dead-metrics"]) == ["dead-metrics:500"]
    assert c.get(d0 + "/metrics").status_code == 500 and c.get(d0 + "/health").status_code == 200
    set_fault(rig, "decode-0", ["dead-metrics:hang"])
    with pytest.raises(httpx.TimeoutException):
        c.get(d0 + "/metrics", timeout=0.5)
    set_fault(rig, "decode-0", ["errors:0.5"])
    codes = [c.post(d0 + "/v1/completions", json=req(2)).status_code for _ in range(4)]
    assert codes == [200, 500, 200, 500]
    set_fault(rig, "decode-0", ["cut:3"])
    with c.stream("POST", d0 + "/v1/completions", json=req(10, stream=True)) as s:
        p = SSEParser()
        with pytest.raises(httpx.HTTPError):
            for chunk in s.iter_raw():
                p.feed(chunk)
    assert not p.usage.done and 1 <= p.usage.content_chunks <= 3
    with pytest.raises(httpx.HTTPError):
        c.post(d0 + "/v1/completions", json=req(10))
    set_fault(rig, "decode-0", ["hang"])
    for path in ("/health", "/metrics"):
        with pytest.raises(httpx.TimeoutException):
            c.get(d0 + path, timeout=0.5)
    assert c.get(d0 + "/_emulator/faults").json() == {"faults": ["hang:0"]}
    set_fault(rig, "decode-0", ["slow:3"])
    t = time.monotonic()
    assert c.post(d0 + "/v1/completions", json=req(40)).status_code == 200
    slow = time.monotonic() - t
    set_fault(rig, "decode-0", [])
    t = time.monotonic()
    assert c.post(d0 + "/v1/completions", json=req(40)).status_code == 200  # lifting hang released the engine
    assert slow > 2 * (time.monotonic() - t)
    r = c.post(d0 + "/_emulator/faults", json={"faults": ["nope"]})
    assert r.status_code == 400 and "unknown fault" in r.json()["error"]["message"]


def test_errors_fault_fails_requests_but_keeps_the_engine(clean):
    rig = clean
    set_fault(rig, "prefill-0", ["errors:0.5"])
    out = [post(rig, f"err-{k}") for k in range(4)]
    assert sorted(o[0] for o in out) == [200, 200, 502, 502]
    j = rows(rig, "err-")
    assert list(j.status.value_counts().sort_index().items()) == [("failed", 2), ("ok", 2)]
    assert j[j.status == "failed"].reason.str.contains("prefill-0: HTTP 500: .*injected fault").all()
    assert wait_health(rig, {"prefill-0": True})  # an engine answering 5xx is alive: not marked


def two_streams_then_fault(rig, prefix: str, fault: str) -> dict:
    """Two long streams (``<prefix>-0``, ``-1``); 0.4 s in, ``fault`` is switched on at decode-1.
    Returns {decode instance: (status, decode instance, SSEParser)}."""
    out = {}

    async def go():
        async with httpx.AsyncClient(timeout=20) as ac:
            async def one(k):
                async with ac.stream("POST", rig["url"] + "/v1/completions", json=req(800, stream=True),
                                     headers={"X-Request-Id": f"{prefix}-{k}"}) as s:
                    p = SSEParser()
                    async for chunk in s.aiter_raw():
                        p.feed(chunk)
                    out[k] = (s.status_code, s.headers.get("x-decode-instance"), p)
            tasks = [asyncio.create_task(one(k)) for k in range(2)]
            await asyncio.sleep(0.4)
            set_fault(rig, "decode-1", [fault])
            await asyncio.gather(*tasks)

    asyncio.run(go())
    return {v[1]: v for v in out.values()}


def test_hung_decode_is_declared_dead_after_the_window_its_stream_fails_and_it_comes_back(clean):
    rig = clean
    c = rig["client"]
    t = time.monotonic()
    by = two_streams_then_fault(rig, "hang", "hang")
    assert time.monotonic() - t < 4 * WINDOW + 4  # the health window ends it, not a time-out; nothing hangs
    assert by["decode-0"][2].usage.done and by["decode-0"][2].usage.completion_tokens == 800
    p1 = by["decode-1"][2]
    assert by["decode-1"][0] == 200 and not p1.usage.done and "decode-1 dead: /metrics silent" in p1.usage.errors[0]
    h = wait_health(rig, {"decode-1": False})
    assert h["decode-1"] is False
    assert "silent" in c.get(rig["url"] + "/health").json()["dead"]["decode-1"]
    after = [post(rig, f"hang-after-{k}") for k in range(3)]
    assert all(s == 200 and d == "decode-0" for s, d, _ in after)
    j = rows(rig, "hang-")
    failed = j[j.status == "failed"]
    assert len(failed) == 1 and "decode-1 dead" in failed.reason.iloc[0] and (j.status == "ok").sum() == 4
    set_fault(rig, "decode-1", [])
    wait_health(rig, {"decode-1": True})
    assert c.get(rig["url"] + "/health").status_code == 200


def test_hung_prefill_fails_its_request_then_requests_fail_with_the_reason_never_rejected(clean):
    rig = clean
    set_fault(rig, "prefill-0", ["hang"])
    t = time.monotonic()
    first = post(rig, "phang-0")
    waited = time.monotonic() - t
    assert first[0] == 502 and "prefill-0 dead" in first[2]["error"]["message"] and waited < 2 * WINDOW + 2
    wait_health(rig, {"prefill-0": False})
    second = post(rig, "phang-1")
    assert second[0] == 503 and "no live prefill engine" in second[2]["error"]["message"]  # at once, not hung
    j = rows(rig, "phang-")
    assert j.loc["phang-0"].status == "failed" and "/metrics silent" in j.loc["phang-0"].reason
    assert j.loc["phang-1"].status == "failed" and "prefill-0 dead" in j.loc["phang-1"].reason


def test_stream_cut_and_half_body(clean):
    rig = clean
    set_fault(rig, "decode-0", ["cut:4"])
    set_fault(rig, "decode-1", ["cut:4"])
    s, d, p = post(rig, "cut-0", n=20, stream=True)
    assert s == 200 and not p.usage.done and "stream cut" in p.usage.errors[0]
    s2, d2, body = post(rig, "cut-1", n=20)
    assert s2 == 502 and "decode" in body["error"]["message"]
    j = rows(rig, "cut-")
    assert (j.status == "failed").all() and j.reason.str.contains("decode-").all()
    assert j.loc["cut-0"].generated_tokens >= 1


def test_dead_metrics_marks_the_engine_unhealthy_and_it_is_skipped(clean):
    rig = clean
    set_fault(rig, "decode-1", ["dead-metrics"])
    wait_health(rig, {"decode-1": False, "decode-0": True}, timeout=WINDOW + 2)
    assert all(post(rig, f"dm-{k}")[1] == "decode-0" for k in range(3))
    set_fault(rig, "decode-1", ["dead-metrics:hang"])
    wait_health(rig, {"decode-1": False}, timeout=WINDOW + 2)
    assert rig["client"].get(rig["url"] + "/health").elapsed.total_seconds() < 0.5  # the proxy is not held up
    set_fault(rig, "decode-1", [])
    wait_health(rig, {"decode-1": True})
    assert (rows(rig, "dm-").status == "ok").all()


def test_a_full_prefill_engine_queues_requests_it_is_busy_not_dead(clean):
    """kv-hold leaks every prefilled request's blocks: the engine fills and queues what comes next.
    It answers /metrics (usage ~1), so the proxy keeps it, fails nothing and rejects nothing;
    the queued requests complete once the blocks come back."""
    rig = clean
    set_fault(rig, "prefill-0", ["kv-hold"])
    prompt = "tell me about routing " * 120  # ~600 tokens: the 3000-token prefill fills after a few
    out = [post(rig, f"hold-{k}", n=2, prompt=f"request {k}: {prompt}")[0] for k in range(4)]
    assert out == [200] * 4

    async def queued():
        async with httpx.AsyncClient(timeout=30) as ac:
            async def one(k):
                r = await ac.post(rig["url"] + "/v1/completions", json=req(2, prompt=f"queued {k}: {prompt}"),
                                  headers={"X-Request-Id": f"hold-q{k}"})
                return r.status_code
            tasks = [asyncio.create_task(one(k)) for k in range(4)]
            await asyncio.sleep(3 * WINDOW)  # longer than the health window: still waiting, not failed
            state = (await ac.get(rig["engines"]["prefill-0"] + "/_emulator/state")).json()
            health = (await ac.get(rig["url"] + "/health")).json()["instances"]
            assert not any(t.done() for t in tasks), "a queued request ended while the engine was busy"
            set_fault(rig, "prefill-0", [])  # lifting the fault frees the leaked blocks
            return state, health, await asyncio.gather(*tasks)

    state, health, codes = asyncio.run(queued())
    assert state["kv_cache_usage_perc"] > 0.6 and state["waiting"] >= 1
    assert health["prefill-0"] is True
    assert codes == [200] * 4
    j = rows(rig, "hold-")
    assert (j.status == "ok").all() and len(j) == 8


def test_slow_diverge_and_kv_drop_still_answer(clean):
    rig = clean
    set_fault(rig, "decode-0", ["slow:2", "diverge"])
    set_fault(rig, "prefill-0", ["kv-drop"])
    out = [post(rig, f"misc-{k}", n=6) for k in range(2)]
    assert all(s == 200 and b["usage"]["completion_tokens"] == 6 for s, _, b in out)
    assert (rows(rig, "misc-").status == "ok").all()


def test_crash_mid_stream_is_journaled_and_the_engine_skipped(clean):
    rig = clean
    by = two_streams_then_fault(rig, "crash", "crash")
    assert by["decode-0"][2].usage.done
    assert not by["decode-1"][2].usage.done and "decode-1" in by["decode-1"][2].usage.errors[0]
    wait_health(rig, {"decode-1": False})
    assert all(post(rig, f"crash-after-{k}")[1] == "decode-0" for k in range(3))
    j = rows(rig, "crash-")
    assert (j.status == "failed").sum() == 1 and (j.status == "ok").sum() == 4
