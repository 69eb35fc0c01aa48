"""Physical bounds of the paper's testbed (NVIDIA A40, Qwen2.5-3B-Instruct BF16, TP=1, one node).

An identified constant beyond its bound is not a property of that hardware but of a fit that moved a
loose parameter to absorb something else: `check` refuses it (a `ConfigError`), and the fit's prior
ranges (`repro.identify.space`) lie inside these bounds (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.engine.mechanisms import STEP_SHARE_FLOOR
from repro.errors import ConfigError

A40_BF16_DENSE_FLOPS = 149.7e12
"""NVIDIA A40 datasheet: peak dense BF16 tensor throughput (FLOP/s)."""
A40_MEMORY_BANDWIDTH = 696e9
"""NVIDIA A40 datasheet: GDDR6 bandwidth (bytes/s)."""
PCIE_GEN4_X16 = 32e9
"""PCIe Gen4 x16, one direction (bytes/s): the A40's host link and the path between two A40s of a node
(NVLink bridges join only pairs; a 2p4d pool's transfers cross pairs)."""
QWEN25_3B_NONEMBEDDING_PARAMS = 2.77e9
"""Qwen2.5-3B: non-embedding parameters (the model card: 3.09 B in all, 2.77 B non-embedding)."""
PAPER_DECODE_S = 0.013237
"""§VI: measured decode time per token at batch 1 (s)."""
PAPER_BATCH8_PENALTY = 0.029
"""§VI: a batch of eight costs each request 2.9 % more per token."""


@dataclass(frozen=True)
class Bound:
    """A physical limit of one constant: ``lo <= value <= hi``, with the reason in words."""

    name: str
    lo: float
    hi: float
    unit: str
    reason: str


BOUNDS: dict[str, Bound] = {b.name: b for b in (
    Bound("prefill_per_token_s", 2 * QWEN25_3B_NONEMBEDDING_PARAMS / A40_BF16_DENSE_FLOPS, 1e-2, "s/token",
          "at least 2 x 2.77e9 FLOP per prompt token at the A40's 149.7 TFLOP/s dense BF16 peak (100 % MFU) "
          "= 3.70e-5 s"),
    Bound("decode_per_seq_s", 0.0, PAPER_BATCH8_PENALTY * PAPER_DECODE_S / 7,
          "s per sequence-step",
          "the paper's measured batch-8 penalty (2.9 % of 0.013237 s over 7 extra sequences) bounds the per-sequence "
          "cost with no context term: at most 5.48e-5 s"),
    Bound("transfer_bandwidth_bytes_per_s", 1e8, PCIE_GEN4_X16, "bytes/s",
          "at most PCIe Gen4 x16 one way, 32 GB/s (the A40s' path within a node)"),
    Bound("transfer_latency_s", 0.0, 1.0, "s", "non-negative; a second of setup would be a broken link"),
    Bound("documents_median_tokens", 512.0, 8192.0, "tokens", "the generator's clip range of a document"),
    Bound("reasoning_mult_median", 0.5, 16.0, "x", "a reasoning answer's multiplier; outputs are clipped to 8,192 "
          "tokens"),
    Bound("mixed_burstiness", 0.05, 4.0, "gamma shape", "the arrival process' accepted range"),
    Bound("prefill_step_share", STEP_SHARE_FLOOR, 1.0, "share of 0.0667 s",
          "a prefill step reads the weights once (6.17 GB at 696 GB/s = 8.9 ms, 13 % of the stated base) and is "
          "at most the whole base"),
    Bound("serving_path_sigma", 0.0, 2.0, "lognormal shape", "non-negative; the accepted range"),
    Bound("documents_sigma", 0.0, 2.0, "lognormal shape", "the generator's accepted range"),
)}
"""Each fittable constant's physical bound (`check`)."""


def check(name: str, value: float) -> None:
    """A `ConfigError` when ``value`` lies outside ``name``'s physical bound (names without one pass)."""
    b = BOUNDS.get(name)
    if b is not None and not b.lo <= value <= b.hi:
        raise ConfigError(f"identify: {name} = {value:g} {b.unit} is outside its physical bound "
                          f"[{b.lo:g}, {b.hi:g}] ({b.reason})")
