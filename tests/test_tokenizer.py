"""ApproxTokenizer: exact-length prompts and lossless pieces."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from repro.workload.tokenizer import DEFAULT_TOKENIZER, FILLER_PIECE, ApproxTokenizer, Tokenizer

TOK = DEFAULT_TOKENIZER

# Text with the characters that make tokenization interesting: words of all lengths,
# punctuation, runs of mixed whitespace, non-ASCII letters, digits and underscores.
texts = st.text(
    alphabet=st.sampled_from(list("abcdefgXYZ_019 .,;!?'\"\n\t\r-()ÄéßЖ中文🙂")) | st.characters(),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(text=texts, n=st.integers(min_value=0, max_value=250))
def test_fit_gives_exact_count(text, n):
    out = TOK.fit(text, n)
    assert TOK.count(out) == n


@settings(max_examples=200, deadline=None)
@given(text=texts)
@example(text="\ud800")  # a lone surrogate: encode once raised UnicodeEncodeError (found by CI)
@example(text="a\udfff b")
def test_pieces_concatenate_to_text(text):
    pieces = TOK.pieces(text)
    assert "".join(pieces) == text
    assert len(pieces) == TOK.count(text) == len(TOK.encode(text))


@settings(max_examples=200, deadline=None)
@given(text=texts, n=st.integers(min_value=0, max_value=60))
def test_fit_is_a_prefix_plus_filler(text, n):
    """fit never invents text: a prefix of the input, then (maybe) filler pieces."""
    out = TOK.fit(text, n)
    if n >= TOK.count(text):
        assert out.startswith(text)
    stem = out
    while not text.startswith(stem) and stem.endswith(FILLER_PIECE):
        stem = stem[: -len(FILLER_PIECE)]
    assert text.startswith(stem)


@settings(max_examples=100, deadline=None)
@given(text=texts, k=st.integers(min_value=0, max_value=120))
def test_count_of_prefix_pieces(text, k):
    pieces = TOK.pieces(text)
    k = min(k, len(pieces))
    assert TOK.count(TOK.fit(text, k)) == k


def test_examples():
    assert TOK.count("") == 0
    assert TOK.pieces("Hello, world!") == ["Hello", ",", " world", "!"]
    assert TOK.pieces("internationalization") == ["intern", "ationa", "lizati", "on"]
    assert TOK.fit("", 3) == FILLER_PIECE * 3
    assert TOK.fit("one two three", 2) == "one two"
    assert TOK.encode("a b") == TOK.encode("a b")  # deterministic ids
    assert all(0 <= i < 151_936 for i in TOK.encode("some text, with ids"))


def test_fit_rejects_negative():
    with pytest.raises(ValueError):
        TOK.fit("x", -1)


def test_protocol():
    assert isinstance(ApproxTokenizer(), Tokenizer)
