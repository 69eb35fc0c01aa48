"""The emulated engine's deterministic "model": prompts in, token ids and text out.

What a real greedy model guarantees, and what the harness relies on, is reproduced exactly:

- Greedy output token ids are a pure function of (prompt token ids, position). Every instance
  computes the same ids for the same prompt, so the cross-instance greedy-equivalence gate passes;
  the ``diverge`` fault changes the function on one instance (from position 1 on), so the gate can
  be shown to fail. Sampling (temperature > 0) mixes in a per-request salt (the body's ``seed``
  when given, else random).
- Text is a rendering of those ids over a fixed vocabulary of single-piece words, so that
  ``ApproxTokenizer`` re-tokenizes an output to exactly the same ids (``/tokenize`` agrees with
  ``usage.completion_tokens``).
- Without ``ignore_eos`` the model stops by itself: the end-of-sequence token appears at a
  position drawn (deterministically, from the prompt) uniformly in ``1 .. 2 * eos_mean_tokens``.
  As in vLLM the EOS token is counted in ``completion_tokens`` but is not rendered in the text.

Prompt handling: completion prompts are tokenized with `repro.workload.tokenizer.ApproxTokenizer`;
chat messages are first rendered with a ChatML template (Qwen2.5's, including its default
system prompt for Qwen2.5 models).
"""

from __future__ import annotations

import hashlib
import zlib
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from repro.workload.tokenizer import VOCAB_SIZE, ApproxTokenizer

TOKENIZER = ApproxTokenizer()
EOS_TOKEN_ID = 151645  # Qwen2.5's <|im_end|>
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
DIVERGE_SALT = 0xD1B54A32D192ED03
QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def _build_vocab() -> tuple[list[str], list[int]]:
    consonants = "bcdfghjklmnprstvz"
    vowels = "aeiou"
    syll = [c + v for c in consonants for v in vowels]
    words: list[str] = []
    for a in syll:
        for b in syll:
            words.append(" " + a + b)
            if len(words) >= 4094:
                break
        if len(words) >= 4094:
            break
    words += [",", "."]
    ids = [zlib.crc32(w.encode("utf-8")) % VOCAB_SIZE for w in words]
    return words, ids


VOCAB_TEXT, VOCAB_IDS = _build_vocab()
_NV = len(VOCAB_TEXT)
_ID_TO_TEXT = {i: t for t, i in zip(VOCAB_TEXT, VOCAB_IDS, strict=True)}


def _mix(x: int) -> int:
    """splitmix64 finaliser."""
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _mix_array(x: np.ndarray) -> np.ndarray:
    """`_mix` of every element of a uint64 array (numpy's uint64 arithmetic wraps modulo 2**64)."""
    x = x + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


_BLOCK = 256  # positions whose tokens are computed at once
_FEW = 8  # up to this many positions from the start are computed one by one (and not kept)


def prompt_seed(token_ids: Sequence[int]) -> int:
    """A stable 64-bit digest of the prompt token ids (same on every process and machine)."""
    buf = array("q", token_ids).tobytes()
    return int.from_bytes(hashlib.blake2b(buf, digest_size=8).digest(), "little")


class OutputFunction:
    """Token at each position for one request (see module docstring)."""

    __slots__ = ("seed", "alt_seed", "_idx")

    def __init__(self, seed: int, *, salt: int = 0, diverge: bool = False):
        self.seed = (seed ^ salt) & _MASK
        self.alt_seed = (self.seed ^ DIVERGE_SALT) if diverge else self.seed
        self._idx: list[int] = []  # vocabulary index of positions 0.. computed so far (in blocks)

    def index(self, pos: int) -> int:
        s = self.seed if pos == 0 else self.alt_seed
        return _mix(s ^ ((pos * _GOLDEN) & _MASK)) % _NV

    def indices(self, start: int, stop: int) -> list[int]:
        """``[index(p) for p in range(start, stop)]``, computed `_BLOCK` positions at a time and kept
        (a streamed answer asks for its tokens a few at a time)."""
        idx = self._idx
        if not idx and stop <= _FEW:  # a prefill's one token, a short answer: no block needed
            return [self.index(p) for p in range(start, stop)]
        while len(idx) < stop:
            a = len(idx)
            pos = np.arange(a, a + _BLOCK, dtype=np.uint64)
            keys = np.uint64(self.alt_seed) ^ (pos * np.uint64(_GOLDEN))
            block = (_mix_array(keys) % np.uint64(_NV)).tolist()
            if a == 0:
                block[0] = self.index(0)
            idx.extend(block)
        return idx[start:stop]

    def token_ids(self, start: int, stop: int) -> list[int]:
        ids = VOCAB_IDS
        return [ids[i] for i in self.indices(start, stop)]

    def text(self, start: int, stop: int) -> str:
        vt = VOCAB_TEXT
        return "".join([vt[i] for i in self.indices(start, stop)])

    def natural_length(self, mean_tokens: int) -> int:
        """Number of output tokens (EOS included) the model produces when EOS is honoured."""
        span = max(1, 2 * int(mean_tokens))
        return 1 + _mix(self.seed ^ 0x5851F42D4C957F2D) % span


def render_chat(messages: list[dict[str, Any]], model_name: str, add_generation_prompt: bool = True) -> str:
    """ChatML rendering of OpenAI chat messages (Qwen2.5's template)."""
    parts: list[str] = []
    if "qwen2.5" in model_name.lower() and (not messages or messages[0].get("role") != "system"):
        parts.append(f"<|im_start|>system\n{QWEN_DEFAULT_SYSTEM}<|im_end|>\n")
    for m in messages:
        parts.append(f"<|im_start|>{m['role']}\n{message_text(m.get('content'))}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def message_text(content: Any) -> str:
    """Text of a chat message ``content`` (a string or a list of ``{"type": "text"}`` parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append(str(part.get("text", "")))
            elif isinstance(part, str):
                out.append(part)
            else:
                raise ValueError("only text content parts are supported")
        return "\n".join(out)
    raise ValueError("message content must be a string or a list of content parts")


def detokenize(token_ids: Sequence[int]) -> str:
    """Inverse of the output rendering for ids of the output vocabulary (others render as '')."""
    return "".join(_ID_TO_TEXT.get(int(t), "") for t in token_ids)
