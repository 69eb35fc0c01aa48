"""The mechanisms on the emulated engines (`repro.engine.mechanisms`): the engines run the same physics as the
simulator, so a prefill engine whose step is a fifth of the stated base serves a burst of short prompts in
steps of a fifth, each answer then waiting its own serving path; with the whole base a step's, the burst
queues behind whole steps."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from repro.cluster.launchers import launch
from repro.engine.profile import load_profile

MODEL = "Qwen/Qwen2.5-3B-Instruct"
PREFILL_KV = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
              "remote_block_ids": None, "remote_host": None, "remote_port": None}


def burst(url: str, n: int) -> list[float]:
    """``n`` prefill-only requests sent at once; each one's latency (wall s)."""
    body = {"model": MODEL, "prompt": "hello there " * 5, "max_tokens": 1, "temperature": 0, "stream": False,
            "kv_transfer_params": PREFILL_KV}

    async def go() -> list[float]:
        async with httpx.AsyncClient(trust_env=False, timeout=60) as c:
            async def one() -> float:
                t0 = time.monotonic()
                r = await c.post(url + "/v1/completions", json=body)
                r.raise_for_status()
                return time.monotonic() - t0
            return list(await asyncio.gather(*(one() for _ in range(n))))

    return asyncio.run(go())


@pytest.mark.slow
def test_request_path_on_emulated_engines_matches_the_physics(tmp_path):
    raw = load_profile("a40-identified").as_dict()
    raw["name"] = "split"
    raw["params"]["prefill_step_share"] = {"value": 0.2, "source": "test: mechanism request_path"}
    path = tmp_path / "split.json"
    path.write_text(json.dumps(raw))
    split = load_profile(path).physics
    topo = {"name": "mech", "instances": [
        {"role": "prefill", "name": "whole"}, {"role": "prefill", "name": "split", "profile": str(path)},
        {"role": "decode", "count": 1}]}
    with launch(topo, "emulated", time_scale=1.0) as inst:
        by = {i.name: i.url for i in inst}
        burst(by["whole"], 1), burst(by["split"], 1)  # warm up
        lone_whole = min(burst(by["whole"], 1)[0] for _ in range(3))
        lone_split = min(burst(by["split"], 1)[0] for _ in range(3))
        many_whole, many_split = max(burst(by["whole"], 6)), max(burst(by["split"], 6))
    step_whole = load_profile("a40-identified").physics.prefill_time_s(12)
    # a lone short prompt: the same time either way (a calibration cannot tell the split), ~ the stated base
    assert abs(lone_whole - lone_split) < 0.02 and lone_split >= split.prefill_time_s(12) + split.serving_path_s - 0.005
    # a burst: the first waits its own step, the rest a second whole step behind it (~2 steps); split, ~2 short
    # steps plus the path: the difference is about one whole step less one short one
    gain = step_whole - split.prefill_time_s(6 * 12)
    assert many_whole - many_split > 0.6 * gain, (many_whole, many_split, gain)
