"""The tiny model for real CPU engines: deterministic files, and a tokenizer that counts as the harness does."""

import json
import re

import pytest

from repro.cluster.tiny_model import build_tiny_model, piece_regex, render_files
from repro.workload.sharegpt import load_table
from repro.workload.tokenizer import ApproxTokenizer


@pytest.mark.slow
def test_files_are_deterministic_and_the_build_is_cached(tmp_path):
    first, second = render_files(), render_files()
    assert first == second
    out = build_tiny_model(tmp_path / "m")
    assert {p.name for p in out.iterdir()} >= {"config.json", "tokenizer.json", "tokenizer_config.json"}
    stamp = (out / "config.json").stat().st_mtime_ns
    assert build_tiny_model(tmp_path / "m") == out and (out / "config.json").stat().st_mtime_ns == stamp
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == 1024 and config["num_hidden_layers"] == 2


def test_the_engine_tokenizer_splits_text_into_the_harness_pieces():
    # the tokenizer's pre-tokenizer regex (explicit code-point ranges, for the Rust engine) must cut
    # every text into exactly ApproxTokenizer's pieces, so that prompt lengths agree token for token
    # Oniguruma's \\x{HHHH} escapes, as Python's re writes them
    def as_python(m: re.Match[str]) -> str:
        return f"\\U{int(m.group(1), 16):08X}"

    pieces = re.compile(re.sub(r"\\x\{([0-9A-F]+)\}", as_python, piece_regex()))
    tok = ApproxTokenizer()
    texts = load_table()["prompt_head"].head(3000).tolist() + ["naïve café — 東京 ok?!  \t\n", "a\u0301b\u001c c"]
    bad = [t for t in texts if pieces.findall(t) != tok.pieces(t)]
    assert bad == []
    spec = json.loads(render_files()["tokenizer.json"])
    assert spec["model"]["type"] == "WordLevel" and len(spec["model"]["vocab"]) <= 1024
