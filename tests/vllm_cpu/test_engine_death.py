"""A real decode engine killed mid-run: its requests fail with 502s journaled with the reason, the
proxy stops using it, nothing is lost or hangs. Runs last in the tier (it kills one of the
session's engines; `conftest.pytest_collection_modifyitems` orders it)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest

from repro.cluster.topology import Instance
from repro.experiment.journal import read as read_journal
from repro.live.calibration_bench import parse_metrics
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import REAL_ENGINE_HEALTH, free_port, proxy_process

pytestmark = pytest.mark.kills_engine

ANSWER_TOKENS = 500
"""Each request's answer: long enough to be mid-answer when the victim is killed (it is killed as soon as its
own gauge shows its three requests decoding: a few tokens in, on any machine), short enough that the survivors
finish in seconds (~5 s at 3 sequences per decode engine on the EPYC's 2 cores)."""


async def running(c: httpx.AsyncClient, url: str) -> float:
    """The engine's own count of requests in its batch (``vllm:num_requests_running``)."""
    r = await c.get(url + "/metrics", timeout=10)
    return parse_metrics(r.text).get("vllm:num_requests_running", 0.0)


def test_decode_engine_killed_mid_run(real_instances: list[Instance], tmp_path) -> None:
    from tests.vllm_cpu.conftest import USING_YOURS

    if USING_YOURS:
        pytest.skip(f"the session uses your running cluster ({USING_YOURS[0]}): killing one of its engines would "
                    "break your work; run the tier with no cluster up (as CI does) to include this test")
    cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in real_instances], policy="round_robin",
                      journal=str(tmp_path / "proxy.jsonl"), port=free_port(),
                      **REAL_ENGINE_HEALTH)
    victim = next(i for i in real_instances if i.name == "decode-1")
    model = httpx.get(victim.url + "/v1/models", timeout=30).json()["data"][0]["id"]

    def body(n: int, k: int) -> dict:
        return {"model": model, "prompt": f"request {k}: tell me about routing " * 20, "max_tokens": n,
                "ignore_eos": True, "temperature": 0}

    with proxy_process(cfg, tmp_path) as url:

        async def go():
            async with httpx.AsyncClient(timeout=300) as c:
                async def one(k: int):
                    try:
                        r = await c.post(url + "/v1/completions", json=body(ANSWER_TOKENS, k),
                                         headers={"X-Request-Id": f"k{k}"})
                        return r.status_code
                    except httpx.HTTPError as exc:
                        return type(exc).__name__

                tasks = [asyncio.create_task(one(k)) for k in range(6)]
                # round robin sends three to the victim: killed once all three are in its batch (decoding, a
                # non-streamed answer: not done), whatever this machine's speed
                deadline = time.monotonic() + 120
                while await running(c, victim.url) < 3:
                    assert time.monotonic() < deadline, "decode-1 never had its three requests in its batch"
                    await asyncio.sleep(0.05)
                os.kill(victim.pid, signal.SIGKILL)
                codes = await asyncio.gather(*tasks)
                after = [await c.post(url + "/v1/completions", json=body(5, 100 + k)) for k in range(4)]
                health = (await c.get(url + "/health")).json()
                return codes, after, health

        t = time.monotonic()
        codes, after, health = asyncio.run(go())
        elapsed = time.monotonic() - t
    # nothing hangs: the survivors' answers (seconds), then 4 short ones
    assert elapsed < 240, f"took {elapsed:.0f} s"
    assert 502 in codes and 200 in codes, codes
    assert all(r.status_code == 200 and r.headers["x-decode-instance"] == "decode-0" for r in after)
    assert health["instances"]["decode-1"] is False
    j = read_journal(tmp_path / "proxy.jsonl")
    assert len(j) == 10 and j.request_id.is_unique  # nothing lost
    failed = j[j.status == "failed"]
    assert len(failed) == codes.count(502) and failed.reason.str.contains("decode-1").all(), failed.reason.tolist()
