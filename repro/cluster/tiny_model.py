"""A tiny Qwen2 model directory that real vLLM serves on a CPU with ``--load-format dummy``.

No weights are downloaded anywhere: the directory holds only a config and a tokenizer, and vLLM
fills the weights with its dummy initializer (``--load-format dummy``, seeded, so two processes
build the same weights). What makes it useful to the harness is the tokenizer: the engine's
token count of any text equals `repro.workload.tokenizer.ApproxTokenizer().count(text)`, so the
prompt lengths of a trace are the lengths the engine sees (``usage.prompt_tokens``), and the cost
model, the router's ledger and the engine agree on what a token is.

How the tokenizer does it (a ``tokenizers`` JSON, loaded by ``transformers`` as a fast tokenizer):

- pre-tokenizer: ``Split`` on the ApproxTokenizer's own regex ``\\s?\\w{1,6}|\\s?[^\\w\\s]|\\s+``,
  behaviour ``Isolated``, so each piece is one pre-token. Python's ``re`` and the Oniguruma engine
  of ``tokenizers`` disagree on Unicode ``\\w`` (Oniguruma counts combining marks, U+0300 and
  up, ~12,900 code points) and ``\\s`` (Python counts U+001C..U+001F), so the classes are
  written out as explicit code-point ranges taken from Python's ``re`` (`piece_regex`): the two
  engines then split every text identically (surrogates aside, which no engine request carries);
- model: ``WordLevel`` with the 1,020 most useful pieces (every piece of the workload filler and
  the family prefixes, then the most frequent pieces of the ShareGPT prompt heads) and ``<unk>``:
  a piece out of the vocabulary is ``<unk>``, still one token;
- decoder: ``Fuse`` (concatenation), so ``decode(encode(text)) == text`` for in-vocabulary text;
- no normalizer and no post-processor (no BOS/EOS added); ``<|endoftext|>``, ``<|im_start|>``,
  ``<|im_end|>`` are special added tokens (EOS ``<|im_end|>``, pad ``<|endoftext|>``, as Qwen2.5)
  with a ChatML chat template. ``<unk>`` is deliberately *not* an added token, so the literal
  text ``<unk>`` is still three pieces. Only a literal special-token string inside a prompt
  (``<|im_end|>``...) counts differently (one token instead of several).

Layout, and why the tokenizer is there twice: transformers 5 (``AutoTokenizer``, which vLLM
calls) sends model type ``qwen2`` to ``Qwen2Tokenizer``, whatever ``tokenizer_class`` says, and
that class keeps the vocabulary of ``tokenizer.json`` but rebuilds everything else as Qwen's
byte-level BPE (NFC normalizer, Qwen's split regex, ByteLevel): counts and decoding would be
wrong. Two ways around it, both written:

- the root (a complete model directory: ``--model DIR`` alone works): its
  ``tokenizer_config.json`` carries an ``auto_map`` (`ROOT_AUTO_MAP`). For a model type on
  transformers' list of "incorrect hub tokenizer classes" (``qwen2`` is on it) and
  ``trust_remote_code`` off, transformers drops that map, and with it the forced class, and
  loads ``tokenizer_class`` (``PreTrainedTokenizerFast``, i.e. the generic ``TokenizersBackend``)
  with ``tokenizer.json`` as written. No remote code exists or runs; with
  ``--trust-remote-code`` loading fails (loudly). This rests on one branch of transformers
  5.19's ``AutoTokenizer``;
- ``tokenizer/`` (`tokenizer_dir`; pass ``--tokenizer DIR/tokenizer``): the same files plus a
  ``config.json`` that only names a config type which transformers maps to no tokenizer class
  (``qwen2_vl_text``), so ``tokenizer_class`` is used as it is. Without any config.json there,
  vLLM logs two config-parse errors and sleeps 2 s per process before falling back to the same
  tokenizer.

Either way, check the engine's count once it runs (``POST /tokenize``) if the transformers
version changes.

The model: Qwen2ForCausalLM, 2 layers, hidden 128, 2 heads of 64, 1 KV head, intermediate 256,
vocabulary 1,024, 4,096 positions, tied embeddings, bfloat16 (the CPU backend runs it; see
`MODEL_CONFIG`).

`build_tiny_model` is deterministic and cached: the files are rendered in memory (the tokenizer
JSON is written directly, so the ``tokenizers`` package is not needed to build it, and the
output is byte-identical in every environment; when ``tokenizers`` is importable the JSON is
also loaded back with it as a check), their content hash names the default directory
``build/models/tiny-qwen2-<hash>``, and an existing directory with the same content is reused.
Building needs the ShareGPT table (pandas/pyarrow): build in the project's environment, serve
from the vLLM environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from repro.paths import REPO_ROOT

MODELS_DIR = REPO_ROOT / "build" / "models"
NAME_PREFIX = "tiny-qwen2-"

APPROX_PIECE_REGEX = r"\s?\w{1,6}|\s?[^\w\s]|\s+"
"""The regex of `repro.workload.tokenizer.ApproxTokenizer` (checked against it in `vocabulary`)."""

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
UNK_TOKEN = "<unk>"
TOKENIZER_SUBDIR = "tokenizer"
"""The tokenizer's own folder inside the model directory (see the module docstring: why not the root)."""
ROOT_AUTO_MAP = {"AutoTokenizer": [None, "PreTrainedTokenizerFast"]}
"""In the root ``tokenizer_config.json`` only: see the module docstring (never used as remote code)."""
TOKENIZER_DIR_CONFIG = {
    "model_type": "qwen2_vl_text",
    "repro_note": ("Only read to choose the tokenizer class: a Qwen2 text config type that transformers maps "
                   "to no tokenizer class, so tokenizer_config.json's class (the generic fast tokenizer) "
                   "loads tokenizer.json as written. model_type qwen2 would rebuild it as byte-level BPE."),
}
VOCAB_SIZE = 1024
N_PIECES = VOCAB_SIZE - len(SPECIAL_TOKENS) - 1  # 1,020 pieces + <unk> + 3 specials

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

DTYPE = "bfloat16"

MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "vocab_size": VOCAB_SIZE,
    "max_position_embeddings": 4096,
    "max_window_layers": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "sliding_window": None,
    "use_sliding_window": False,
    "use_cache": True,
    "tie_word_embeddings": True,
    "initializer_range": 0.02,
    "torch_dtype": DTYPE,
}
"""config.json less the special token ids (`render_files` adds them from the tokenizer)."""


# --------------------------------------------------------------------------- the pre-tokenizer


def _ranges(pred) -> list[tuple[int, int]]:
    """Maximal code-point ranges (surrogates excluded) where ``pred(char)`` holds."""
    out: list[tuple[int, int]] = []
    start = None
    for cp in range(0x110000 + 1):
        ok = cp < 0x110000 and not (0xD800 <= cp <= 0xDFFF) and pred(chr(cp))
        if ok and start is None:
            start = cp
        elif not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    return out


def _class(ranges: list[tuple[int, int]]) -> str:
    def one(cp: int) -> str:
        return f"\\x{{{cp:X}}}"

    return "[" + "".join(one(a) if a == b else f"{one(a)}-{one(b)}" for a, b in ranges) + "]"


def piece_regex() -> str:
    """`APPROX_PIECE_REGEX` with ``\\w``, ``\\s`` and ``[^\\w\\s]`` spelled out as the code points
    Python's ``re`` gives them, in Oniguruma syntax (what ``tokenizers`` runs)."""
    word, space = re.compile(r"\w"), re.compile(r"\s")
    w = _class(_ranges(lambda c: word.match(c) is not None))
    s = _class(_ranges(lambda c: space.match(c) is not None))
    other = _class(_ranges(lambda c: word.match(c) is None and space.match(c) is None))
    return f"{s}?{w}{{1,6}}|{s}?{other}|{s}+"


# --------------------------------------------------------------------------- the vocabulary


def vocabulary() -> list[str]:
    """The `N_PIECES` pieces, in id order: workload pieces first, then ShareGPT by frequency."""
    try:
        from repro.workload.sharegpt import load_table
        from repro.workload.traces import DOCUMENT_PREFIX, DOCUMENT_SUFFIX, REASONING_PREFIX, filler_text
    except ImportError as exc:  # e.g. the vLLM venv, where the project is installed with --no-deps
        raise RuntimeError(
            f"building the tiny model reads the ShareGPT table and needs the project's own dependencies "
            f"({exc}); build it with the project's Python (the `tokenizers` package is not needed), then "
            f"serve the directory from the vLLM environment"
        ) from exc
    from repro.workload.tokenizer import ApproxTokenizer

    tok = ApproxTokenizer()
    pattern = re.compile(APPROX_PIECE_REGEX)
    probe = DOCUMENT_PREFIX + "naïve façade — 12345678 x\x1c\u0301é\t\t end."
    if pattern.findall(probe) != tok.pieces(probe):  # pragma: no cover - the tokenizer changed
        raise AssertionError("APPROX_PIECE_REGEX no longer matches repro.workload.tokenizer")

    pinned: list[str] = []
    for text in (REASONING_PREFIX, DOCUMENT_PREFIX, DOCUMENT_SUFFIX, filler_text(65_536)):
        pinned.extend(tok.pieces(text))
    pinned_counts = Counter(pinned)
    counts: Counter[str] = Counter()
    for head in load_table()["prompt_head"].tolist():
        counts.update(tok.pieces(head))
    reserved = set(SPECIAL_TOKENS) | {UNK_TOKEN}
    first = sorted((p for p in pinned_counts if p not in reserved), key=lambda p: (-pinned_counts[p], p))
    if len(first) > N_PIECES:  # pragma: no cover - the filler grew
        raise AssertionError(f"{len(first)} workload pieces do not fit a {VOCAB_SIZE} vocabulary")
    taken = set(first)
    rest = sorted((p for p in counts if p not in taken and p not in reserved), key=lambda p: (-counts[p], p))
    return first + rest[: N_PIECES - len(first)]


# --------------------------------------------------------------------------- the files


def tokenizer_json(pieces: list[str]) -> dict[str, Any]:
    """The ``tokenizer.json`` (format 1.0 of ``tokenizers``) for ``pieces``."""
    vocab = {p: i for i, p in enumerate(pieces)}
    vocab[UNK_TOKEN] = len(pieces)
    added = []
    for tok in SPECIAL_TOKENS:
        vocab[tok] = len(vocab)
        added.append({"id": vocab[tok], "content": tok, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    if len(vocab) != VOCAB_SIZE:  # pragma: no cover
        raise AssertionError(f"vocabulary has {len(vocab)} entries, not {VOCAB_SIZE}")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": piece_regex()}, "behavior": "Isolated",
                          "invert": False},
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": UNK_TOKEN},
    }


def _dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def render_files() -> dict[str, bytes]:
    """Every file of the model directory, by name (deterministic)."""
    tj = tokenizer_json(vocabulary())
    ids = tj["model"]["vocab"]
    added_decoder = {str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                   "single_word": False, "special": True} for t in SPECIAL_TOKENS}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added_decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": MODEL_CONFIG["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    special_tokens_map = {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
                          "eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}
    generation_config = {
        "bos_token_id": ids[PAD_TOKEN],
        "pad_token_id": ids[PAD_TOKEN],
        "eos_token_id": [ids[EOS_TOKEN], ids[PAD_TOKEN]],
        "do_sample": False,
    }
    config = dict(MODEL_CONFIG, bos_token_id=ids[PAD_TOKEN], eos_token_id=ids[EOS_TOKEN])
    return {
        "config.json": _dump(config),
        "generation_config.json": _dump(generation_config),
        "tokenizer.json": _dump(tj),
        "tokenizer_config.json": _dump(dict(tokenizer_config, auto_map=ROOT_AUTO_MAP)),
        "special_tokens_map.json": _dump(special_tokens_map),
        f"{TOKENIZER_SUBDIR}/tokenizer.json": _dump(tj),
        f"{TOKENIZER_SUBDIR}/tokenizer_config.json": _dump(tokenizer_config),
        f"{TOKENIZER_SUBDIR}/special_tokens_map.json": _dump(special_tokens_map),
        f"{TOKENIZER_SUBDIR}/config.json": _dump(TOKENIZER_DIR_CONFIG),
    }


def content_hash(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()[:12]


def _same_content(directory: Path, files: dict[str, bytes]) -> bool:
    try:
        return all((directory / name).read_bytes() == data for name, data in files.items())
    except OSError:
        return False


def _check_with_tokenizers(data: bytes) -> None:
    """Load the JSON back with ``tokenizers`` when it is installed (not needed to build)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return
    tok = Tokenizer.from_str(data.decode("utf-8"))
    if tok.get_vocab_size() != VOCAB_SIZE:  # pragma: no cover
        raise AssertionError(f"tokenizers reads {tok.get_vocab_size()} tokens, not {VOCAB_SIZE}")


def build_tiny_model(out_dir: Path | None = None) -> Path:
    """Write (or reuse) the tiny Qwen2 model directory; returns its path.

    ``out_dir`` defaults to ``build/models/tiny-qwen2-<content hash>`` under the repository root.
    A directory that already holds exactly these files is reused untouched; otherwise the files
    are written (the default directory atomically, by renaming a finished temporary directory).
    """
    files = render_files()
    digest = content_hash(files)
    target = Path(out_dir) if out_dir is not None else MODELS_DIR / f"{NAME_PREFIX}{digest}"
    if _same_content(target, files):
        return target
    _check_with_tokenizers(files[f"{TOKENIZER_SUBDIR}/tokenizer.json"])
    target.parent.mkdir(parents=True, exist_ok=True)
    if out_dir is not None:
        for name, data in files.items():
            path = target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return target
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tmp_dir.chmod(0o755)
        for name, data in files.items():
            (tmp_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_dir / name).write_bytes(data)
        if target.exists():  # a torn or edited copy: replace it
            shutil.rmtree(target)
        try:
            os.replace(tmp_dir, target)
        except OSError:  # another process finished first
            if not _same_content(target, files):
                raise
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return target


def tokenizer_dir(model_dir: Path) -> Path:
    """Where the tokenizer of a model directory lies: pass it to vLLM as ``--tokenizer``."""
    return Path(model_dir) / TOKENIZER_SUBDIR


def main(argv: list[str] | None = None) -> int:
    """``python -m repro.cluster.tiny_model [OUT_DIR]``: build and print the directory."""
    args = sys.argv[1:] if argv is None else argv
    print(build_tiny_model(Path(args[0]) if args else None))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
