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


def burst(url: str, n: int, time_scale: float = 1.0, stagger_s: float = 0.0) -> list[float]:
    """``n`` prefill-only requests: one, then the other ``n - 1`` at once ``stagger_s`` physics seconds later;
    each one's latency from its own send (physics s: wall s x ``time_scale``)."""
    body = {"model": MODEL, "prompt": "hello there " * 5, "max_tokens": 1, "temperature": 0, "stream": False,
            "kv_transfer_params": PREFILL_KV}

    async def go() -> list[float]:
        async with httpx.AsyncClient(trust_env=False, timeout=60) as c:
            async def one(delay_s: float) -> float:
                await asyncio.sleep(delay_s / time_scale)
                t0 = time.monotonic()
                r = await c.post(url + "/v1/completions", json=body)
                r.raise_for_status()
                return (time.monotonic() - t0) * time_scale
            return list(await asyncio.gather(*(one(stagger_s if i else 0.0) for i in range(n))))

    return asyncio.run(go())


@pytest.mark.slow
def test_request_path_on_emulated_engines_matches_the_physics(tmp_path):
    from repro.engine.mechanisms import mechanisms_off

    # the identified testbed with the catalogue's mechanisms off ("whole"), and the same with the step a fifth
    # of the base ("split")
    raw = mechanisms_off(load_profile("a40-identified").physics).to_dict(slo=True)
    raw["name"] = "whole"
    whole_path = tmp_path / "whole.json"
    whole_path.write_text(json.dumps(raw))
    raw["name"] = "split"
    raw["params"]["prefill_step_share"] = {"value": 0.2, "source": "test: mechanism request_path"}
    path = tmp_path / "split.json"
    path.write_text(json.dumps(raw))
    split = load_profile(path).physics
    topo = {"name": "mech", "instances": [
        {"role": "prefill", "name": "whole", "profile": str(whole_path)},
        {"role": "prefill", "name": "split", "profile": str(path)},
        {"role": "decode", "count": 1, "profile": str(whole_path)}]}
    # K = 1/4: every physics second lasts four wall seconds, so the machine's own jitter (other tests beside
    # this one) weighs a quarter as much. A burst is one request, then five 20 ms (physics) later: they arrive
    # while the first one's step runs, whole (67 ms) or split (14 ms), so they make a second step of their own
    # whichever the engine; sent all at once instead, they may or may not catch the first step, as the machine
    # decides (CI's load once made one whole step of all six). The median of three interleaved tries.
    K = 0.25
    with launch(topo, "emulated", time_scale=K) as inst:
        by = {i.name: i.url for i in inst}
        burst(by["whole"], 1, K), burst(by["split"], 1, K)  # warm up
        lone_whole = min(burst(by["whole"], 1, K)[0] for _ in range(3))
        lone_split = min(burst(by["split"], 1, K)[0] for _ in range(3))
        tries = [(max(burst(by["whole"], 6, K, 0.02)), max(burst(by["split"], 6, K, 0.02))) for _ in range(3)]
        many_whole, many_split = sorted(w for w, _ in tries)[1], sorted(s for _, s in tries)[1]
    # a lone short prompt: the same time either way (a calibration cannot tell the split), ~ the stated base
    assert abs(lone_whole - lone_split) < 0.02 and lone_split >= split.prefill_time_s(12) + split.serving_path_s - 0.005
    # the five behind: whole, the rest of the first step and a step of their own; split, at worst a short step
    # of the first to arrive, one of the other four and the path (at best one short step and the path)
    whole = load_profile(whole_path).physics
    behind_whole = whole.prefill_time_s(12) - 0.02 + whole.prefill_time_s(5 * 12)
    behind_split = split.prefill_time_s(12) + split.prefill_time_s(4 * 12) + split.serving_path_s
    assert behind_whole - behind_split > 0.025  # the claim is worth testing: ~33 ms apart in the physics
    assert many_whole - many_split > behind_whole - behind_split - 0.01, (many_whole, many_split)
    assert abs(many_whole - behind_whole) < 0.02, (many_whole, behind_whole)
