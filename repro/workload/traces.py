"""Workload families (the paper's Table I) and the `Trace` they produce.

A trace is a table of requests, one row each, fully determined by
``(workload, seed, rate, n_requests[, arrival])``:

=============== ======= =====================================================================
column          dtype   meaning
=============== ======= =====================================================================
request_id      str     ``"<workload>-s<seed>-<i:06d>"`` (also the key of per-request noise)
arrival_s       float64 seconds from the start of the run, sorted, first one > 0
family          str     ``chat`` | ``reasoning`` | ``documents`` (per request, also in mixed)
source_index    int64   row of the ShareGPT table (`repro.workload.sharegpt.load_table`)
prompt_tokens   int64   exact prompt length (`prompt_text` renders a prompt of exactly this many)
output_tokens   int64   exact output length: sent as ``max_tokens`` with ``ignore_eos``
slo_class       str     ``tight`` | ``loose`` (50/50)
=============== ======= =====================================================================

Families (lengths in `ApproxTokenizer` tokens; ShareGPT = the derived first-turn table):

``chat`` - homogeneous short turns. A ShareGPT pair drawn uniformly from the pairs with
    prompt <= 1024 and output <= 512 tokens; prompt and output lengths are the pair's own.
    Poisson arrivals. Stresses: request count; the homogeneous baseline.
``reasoning`` - long outputs. A ShareGPT pair with prompt <= 512 tokens, the reasoning
    instruction `REASONING_PREFIX` prepended to its text; output =
    clip(round(sharegpt_output * m), 512, 8192) with m ~ lognormal(log 4, 0.3), so output length
    still follows the prompt (and the predictor can learn it). Poisson arrivals. Stresses: decode
    time and KV growth on decode instances.
``documents`` - long prompts. A ShareGPT pair with prompt <= 1024 tokens; the prompt is
    `DOCUMENT_PREFIX` + the ShareGPT request + `DOCUMENT_SUFFIX` + deterministic filler document
    text, total length L = clip(round(lognormal(log 1500, 0.5)), 512, 8192); output =
    min(sharegpt_output, 512). Poisson arrivals. Stresses: prefill compute and KV-transfer volume.
``mixed`` - each request is chat / reasoning / documents with probabilities 0.5 / 0.25 / 0.25,
    lengths as in that family; gamma arrivals with burstiness 0.5 (CV 1.41, as
    ``vllm bench serve --burstiness 0.5``). Stresses: placement under heterogeneity and bursts.

Every request's SLO class is ``tight`` or ``loose`` with probability 1/2.

Randomness: ``np.random.default_rng(seed).spawn(6)`` gives independent streams for the family
draw, the ShareGPT row, the reasoning multiplier, the document length, the SLO class and the
arrivals. Lengths therefore do not depend on the rate or the arrival process, and the first
``k`` requests of a trace of ``n`` equal a trace of ``k`` (for every column but ``request_id``
width above a million requests).

Prompt text (`prompt_text`): ``P + filler`` where ``P`` = family prefix + the ShareGPT
``prompt_head`` (whitespace-stripped) + family suffix, and the filler is a slice of a fixed
pseudo-English text (`filler_text`) starting at an offset keyed by the request id (so two
requests on the same ShareGPT row do not share a long prefix in a prefix cache). If ``P`` alone
has more tokens than the request, it is cut with ``tokenizer.fit``. The filler is built so that
appending ``k`` of its pieces to any ``P`` adds exactly ``k`` tokens, which is what lets
`prompt_heads` compute the first 1000 characters of every prompt without rendering documents.
When the ShareGPT turn is longer than its 1000-character head, the rest is replaced by filler:
lengths are ShareGPT's, text beyond the head is not.
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from repro.errors import ConfigError, check_choice
from repro.vocab import FAMILIES, SLO_CLASSES, WORKLOADS
from repro.workload.arrivals import ArrivalSpec
from repro.workload.params import ESTIMATED, WorkloadParams
from repro.workload.sharegpt import HEAD_CHARS, heldout_mask, load_table
from repro.workload.tokenizer import DEFAULT_TOKENIZER, ApproxTokenizer, Tokenizer

# FAMILIES, WORKLOADS and SLO_CLASSES come from repro.vocab (re-exported here)
COLUMNS = ("request_id", "arrival_s", "family", "source_index", "prompt_tokens",
           "output_tokens", "slo_class")
TRACE_FORMAT = 1
METADATA_KEY = b"repro.trace"

# ---- family parameters (documented in the module docstring) ---------------------------------
CHAT_MAX_PROMPT = 1024
CHAT_MAX_OUTPUT = 512
REASONING_MAX_PROMPT = 512
REASONING_MULT_MEDIAN = ESTIMATED.reasoning_mult_median  # the estimates; a testbed may carry its own
REASONING_MULT_SIGMA = ESTIMATED.reasoning_mult_sigma  # (`repro.workload.params.WorkloadParams`)
REASONING_MIN_OUTPUT = 512
REASONING_MAX_OUTPUT = 8192
DOCUMENTS_MAX_SHAREGPT_PROMPT = 1024
DOCUMENTS_MEDIAN = ESTIMATED.documents_median_tokens
DOCUMENTS_SIGMA = ESTIMATED.documents_sigma
DOCUMENTS_MIN = 512
DOCUMENTS_MAX = 8192
DOCUMENTS_MAX_OUTPUT = 512
MIXED_PROBS = (0.5, 0.25, 0.25)
MIXED_BURSTINESS = ESTIMATED.mixed_burstiness
SLO_TIGHT_SHARE = 0.5

# Templates end in two whitespace characters (or are empty) so that the token count of
# prefix + stripped head is the sum of the two counts (a stripped head starts with a non-space).
REASONING_PREFIX = ("Solve the following problem. Think step by step, write out your full "
                    "reasoning, check it, and only then give the final answer.\n\n")
DOCUMENT_PREFIX = ("Use the reference document below to answer the request. Quote the "
                   "passages you rely on.\n\nRequest:\n\n")
DOCUMENT_SUFFIX = "\n\nReference document:\n"
_PREFIX = {"chat": "", "reasoning": REASONING_PREFIX, "documents": DOCUMENT_PREFIX}
_SUFFIX = {"chat": "", "reasoning": "", "documents": DOCUMENT_SUFFIX}

STRESSES = {
    "chat": "request count: many short, homogeneous turns (the baseline case)",
    "reasoning": "decode: long outputs hold decode slots and grow the KV cache",
    "documents": "prefill and KV transfer: long prompts",
    "mixed": "placement: heterogeneous sizes arriving in bursts",
}

_STREAMS = ("family", "source", "reasoning_mult", "document_len", "slo", "arrivals")


def default_arrival(workload: str, params: WorkloadParams = ESTIMATED) -> ArrivalSpec:
    """The arrival process a workload uses unless told otherwise (mixed: gamma with ``params``'
    burstiness)."""
    _check_workload(workload)
    if workload == "mixed":
        return ArrivalSpec("gamma", burstiness=params.mixed_burstiness)
    return ArrivalSpec("poisson")


# ---- the trace ------------------------------------------------------------------------------
@dataclass
class Trace:
    """A request table (`df`, columns `COLUMNS`) plus how it was made (`meta`)."""

    df: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [c for c in COLUMNS if c not in self.df.columns]
        if missing:
            raise ConfigError(f"trace is missing column(s) {missing}; required: {list(COLUMNS)}")
        self.df.attrs.update(self.meta)

    def __len__(self) -> int:
        return len(self.df)

    def __repr__(self) -> str:
        m = self.meta
        return (f"Trace(workload={m.get('workload')!r}, seed={m.get('seed')!r}, "
                f"rate={m.get('rate')!r}, n_requests={len(self)})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self.meta == other.meta and self.df.equals(other.df)

    # metadata shortcuts
    @property
    def workload(self) -> str:
        return self.meta["workload"]

    @property
    def seed(self) -> int:
        return self.meta["seed"]

    @property
    def rate(self) -> float:
        return self.meta["rate"]

    @property
    def n_requests(self) -> int:
        return self.meta["n_requests"]

    @property
    def arrival(self) -> ArrivalSpec:
        return ArrivalSpec.from_dict(self.meta["arrival"])

    @property
    def duration_s(self) -> float:
        return float(self.df["arrival_s"].iloc[-1]) if len(self) else 0.0

    def request(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a plain dict (python scalars)."""
        return {k: (v.item() if hasattr(v, "item") else v)
                for k, v in self.df.iloc[i].to_dict().items()}

    def prompt_text(self, i: int, tokenizer: Tokenizer = DEFAULT_TOKENIZER) -> str:
        return prompt_text(self, i, tokenizer)

    def prompt_heads(self) -> list[str]:
        return prompt_heads(self)

    def features(self) -> pd.DataFrame:
        """The predictor's input: ``prompt_head`` and ``prompt_tokens`` per request."""
        return predictor_frame(self)

    def save(self, path: str | Path) -> Path:
        """Write Parquet (zstd) with `meta` in the schema metadata; `load` round-trips exactly."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pandas(self.df[list(COLUMNS)], preserve_index=False)
        md = dict(table.schema.metadata or {})
        md[METADATA_KEY] = json.dumps(self.meta, sort_keys=True).encode()
        table = table.replace_schema_metadata(md)
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        table = pq.read_table(Path(path))
        raw = (table.schema.metadata or {}).get(METADATA_KEY)
        meta = json.loads(raw) if raw else {}
        df = table.to_pandas()
        df.attrs.clear()
        return cls(df, meta)


# ---- validation -----------------------------------------------------------------------------
TraceRow: TypeAlias = "Trace | pd.DataFrame | pd.Series | Mapping[str, Any] | tuple[Any, ...]"
"""What `prompt_text` accepts: a trace or its frame (with a row index), or one row (a Series, a
mapping, or a namedtuple from ``itertuples``)."""


def _check_workload(workload: object) -> None:
    check_choice("trace", "workload", workload, WORKLOADS)


def _check_args(workload: Any, seed: Any, rate: Any, n_requests: Any) -> None:
    _check_workload(workload)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    if (isinstance(rate, bool) or not isinstance(rate, (int, float, np.integer, np.floating))
            or not math.isfinite(rate) or rate <= 0):
        raise ConfigError(f"rate must be a finite number > 0 (requests/s), got {rate!r}")
    if (isinstance(n_requests, bool) or not isinstance(n_requests, (int, np.integer))
            or n_requests < 1):
        raise ConfigError(f"n_requests must be an integer >= 1, got {n_requests!r}")


# ---- lengths --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _table_arrays() -> tuple[np.ndarray, np.ndarray]:
    t = load_table()
    return (t["prompt_tokens"].to_numpy(np.int64), t["output_tokens"].to_numpy(np.int64))


@functools.lru_cache(maxsize=1)
def family_pools(all_rows: bool = False) -> dict[str, np.ndarray]:
    """Per family, the ShareGPT rows (source_index values, sorted) it draws from.

    Traces draw only from the rows held out of predictor training (`repro.workload.sharegpt.heldout_mask`),
    so a run never asks the predictor about a prompt it was trained on; ``all_rows=True`` gives
    the family filters over the whole table (for building the predictor's training set).
    """
    pt, ot = _table_arrays()
    idx = np.arange(len(pt), dtype=np.int64)
    if not all_rows:
        held = heldout_mask(len(pt))
        idx, pt, ot = idx[held], pt[held], ot[held]
    pools = {
        "chat": idx[(pt <= CHAT_MAX_PROMPT) & (ot <= CHAT_MAX_OUTPUT)],
        "reasoning": idx[pt <= REASONING_MAX_PROMPT],
        "documents": idx[pt <= DOCUMENTS_MAX_SHAREGPT_PROMPT],
    }
    for p in pools.values():
        p.setflags(write=False)
    return pools


@functools.cache
def prefix_tokens(family: str) -> int:
    """Tokens a family's template adds in front of the ShareGPT prompt."""
    return DEFAULT_TOKENIZER.count(_PREFIX[family])


def family_lengths(family_code: np.ndarray, source_index: np.ndarray, reasoning_mult: np.ndarray,
                   document_len: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(prompt_tokens, output_tokens) per request, vectorized.

    ``family_code`` indexes `FAMILIES`; ``reasoning_mult`` is m (used by reasoning rows),
    ``document_len`` is the document length L before clipping (used by documents rows).
    """
    pt, ot = _table_arrays()
    sp = pt[source_index]
    so = ot[source_index]
    prompt = sp.copy()
    output = so.copy()
    r = family_code == 1
    prompt[r] = sp[r] + prefix_tokens("reasoning")
    output[r] = np.clip(np.rint(so[r] * reasoning_mult[r]), REASONING_MIN_OUTPUT,
                        REASONING_MAX_OUTPUT).astype(np.int64)
    d = family_code == 2
    prompt[d] = np.clip(np.rint(document_len[d]), DOCUMENTS_MIN, DOCUMENTS_MAX).astype(np.int64)
    output[d] = np.minimum(so[d], DOCUMENTS_MAX_OUTPUT)
    return prompt, output


def _draw(workload: str, seed: int, n: int, params: WorkloadParams = ESTIMATED) -> dict[str, Any]:
    """Everything but arrivals and ids, from the per-quantity streams."""
    streams = dict(zip(_STREAMS, np.random.default_rng(seed).spawn(len(_STREAMS)), strict=True))
    if workload == "mixed":
        u = streams["family"].random(n)
        code = np.searchsorted(np.cumsum(MIXED_PROBS)[:-1], u, side="right").astype(np.int8)
    else:
        code = np.full(n, FAMILIES.index(workload), dtype=np.int8)
    pools = family_pools()
    u_src = streams["source"].random(n)
    source = np.empty(n, dtype=np.int64)
    for k, fam in enumerate(FAMILIES):
        m = code == k
        if m.any():
            pool = pools[fam]
            source[m] = pool[np.minimum((u_src[m] * len(pool)).astype(np.int64), len(pool) - 1)]
    mult = streams["reasoning_mult"].lognormal(math.log(params.reasoning_mult_median),
                                               params.reasoning_mult_sigma, n)
    doc = streams["document_len"].lognormal(math.log(params.documents_median_tokens), params.documents_sigma, n)
    prompt, output = family_lengths(code, source, mult, doc)
    tight = streams["slo"].random(n) < SLO_TIGHT_SHARE
    return {"code": code, "source": source, "prompt": prompt, "output": output,
            "tight": tight, "arrival_rng": streams["arrivals"]}


def _str_column(labels: Sequence[str], codes: np.ndarray) -> pd.Series:
    """A ``str`` column holding ``labels[codes]``."""
    return pd.Series(np.asarray(labels, dtype=object)[codes.astype(np.intp)], dtype="str")


def make_trace(workload: str, seed: int, rate: float, n_requests: int,
               arrival: ArrivalSpec | None = None, params: WorkloadParams | None = None) -> Trace:
    """The trace of a workload family (see the module docstring); deterministic in its args.

    ``params``: the length distributions and burstiness (default: our estimates,
    `repro.workload.params.ESTIMATED`); those that differ from the estimates are in
    ``meta["workload_params"]``.
    """
    _check_args(workload, seed, rate, n_requests)
    params = ESTIMATED if params is None else params
    if not isinstance(params, WorkloadParams):
        raise ConfigError(f"params must be a WorkloadParams, got {params!r}")
    if arrival is None:
        arrival = default_arrival(workload, params)
    elif not isinstance(arrival, ArrivalSpec):
        raise ConfigError(f"arrival must be an ArrivalSpec (process one of poisson, gamma, "
                          f"burst), got {arrival!r}")
    seed, n, rate = int(seed), int(n_requests), float(rate)
    d = _draw(workload, seed, n, params)
    arrivals = arrival.sample(rate, n, d["arrival_rng"])
    width = max(6, len(str(n - 1)))
    prefix = f"{workload}-s{seed}-"
    ids = pd.Series([f"{prefix}{i:0{width}d}" for i in range(n)], dtype="str")
    df = pd.DataFrame({
        "request_id": ids,
        "arrival_s": np.asarray(arrivals, dtype=np.float64),
        "family": _str_column(FAMILIES, d["code"]),
        "source_index": d["source"],
        "prompt_tokens": d["prompt"],
        "output_tokens": d["output"],
        "slo_class": _str_column(SLO_CLASSES, ~d["tight"]),
    })
    meta = {
        "format": TRACE_FORMAT,
        "workload": workload,
        "seed": seed,
        "rate": rate,
        "n_requests": n,
        "arrival": arrival.to_dict(),
    }
    if params.changes():
        meta["workload_params"] = params.changes()
    return Trace(df, meta)


def synthesize(family: str, source_index: Sequence[int] | np.ndarray, seed: int = 0,
               id_prefix: str | None = None) -> pd.DataFrame:
    """Requests of one family on given ShareGPT rows (one each), trace-shaped, no arrivals.

    Used to build the predictor's training set; `prompt_heads` accepts the result.
    """
    check_choice("trace", "family", family, FAMILIES)
    src = np.asarray(source_index, dtype=np.int64)
    n = len(src)
    streams = dict(zip(_STREAMS, np.random.default_rng(seed).spawn(len(_STREAMS)), strict=True))
    mult = streams["reasoning_mult"].lognormal(math.log(REASONING_MULT_MEDIAN),
                                               REASONING_MULT_SIGMA, n)
    doc = streams["document_len"].lognormal(math.log(DOCUMENTS_MEDIAN), DOCUMENTS_SIGMA, n)
    code = np.full(n, FAMILIES.index(family), dtype=np.int8)
    prompt, output = family_lengths(code, src, mult, doc)
    tight = streams["slo"].random(n) < SLO_TIGHT_SHARE
    prefix = id_prefix if id_prefix is not None else f"{family}-synth-s{seed}-"
    return pd.DataFrame({
        "request_id": pd.Series([f"{prefix}{i:06d}" for i in range(n)], dtype="str"),
        "arrival_s": np.zeros(n, dtype=np.float64),
        "family": pd.Series([family] * n, dtype="str"),
        "source_index": src,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "slo_class": _str_column(SLO_CLASSES, ~tight),
    })


# ---- prompt text ----------------------------------------------------------------------------
_WORDS = (
    "the of and to in is it that for on with as was by be are this from at or an not have "
    "has but they which one can all were will more when there their also new been other some "
    "would about into time these two may first then any only over such use like used well "
    "most after many where those both way each much make made even part must back through "
    "under high long very large small case level state number group system data model value "
    "result method change report table figure order point line rate power cost load work "
    "area field form plan paper study review test sample effect factor market price demand "
    "supply policy public local region city water energy light heat force speed mass object "
    "event record index range limit period phase stage cycle trend input output signal queue "
    "server client node cache memory token batch page block file entry share total annual "
    "early later recent common simple clear strong weak direct basic major minor final"
).split()
_FILLER_PIECES = 65_536
_FILLER_MAX_START = 16_384
_FILLER_SEED = 20_240_607


@functools.lru_cache(maxsize=1)
def _filler() -> tuple[str, np.ndarray, np.ndarray]:
    """(text, char offset of each piece [len+1], piece indices where a slice may start)."""
    rng = np.random.default_rng(_FILLER_SEED)
    words = [w for w in _WORDS if len(w) <= 6]
    pieces: list[str] = []
    sentence_left = 0
    paragraph_left = int(rng.integers(3, 7))
    while len(pieces) < _FILLER_PIECES:
        if sentence_left == 0:
            if pieces:
                pieces.append(".")
                paragraph_left -= 1
            sentence_left = int(rng.integers(6, 19))
            w = words[int(rng.integers(len(words)))].capitalize()
            if paragraph_left == 0 and pieces:
                pieces.append("\n" + w)
                paragraph_left = int(rng.integers(3, 7))
            else:
                pieces.append(" " + w)
        else:
            pieces.append(" " + words[int(rng.integers(len(words)))])
            if sentence_left > 2 and rng.random() < 0.07:
                pieces.append(",")
        sentence_left -= 1
    pieces = pieces[:_FILLER_PIECES]
    text = "".join(pieces)
    offs = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in pieces], out=offs[1:])
    starts = np.array([i for i, p in enumerate(pieces[:_FILLER_MAX_START]) if p[0] == " "],
                      dtype=np.int64)
    if DEFAULT_TOKENIZER.count(text) != len(pieces):  # pragma: no cover - construction bug
        raise AssertionError("filler pieces are not single tokens")
    return text, offs, starts


def filler_text(n_tokens: int, offset: int = 0) -> str:
    """``n_tokens`` tokens of the deterministic filler, from piece ``offset``."""
    text, offs, _ = _filler()
    if offset + n_tokens > len(offs) - 1:
        raise ValueError(f"filler has {len(offs) - 1} pieces; asked for {offset}+{n_tokens}")
    return text[offs[offset]:offs[offset + n_tokens]]


def _filler_start(request_id: str) -> int:
    _, _, starts = _filler()
    return int(starts[zlib.crc32(str(request_id).encode("utf-8")) % len(starts)])


@functools.cache
def _family_bases(family: str) -> tuple[list[str], np.ndarray]:
    """Per ShareGPT row: the prompt's fixed part P and its `ApproxTokenizer` count."""
    pre, suf = _PREFIX[family], _SUFFIX[family]
    heads = load_table()["prompt_head"].tolist()
    bases = [pre + h.strip() + suf for h in heads]
    counts = np.fromiter((DEFAULT_TOKENIZER.count(b) for b in bases), dtype=np.int64,
                         count=len(bases))
    return bases, counts


def _row_fields(obj: TraceRow, i: int | None) -> tuple[str, int, int, str]:
    """(family, source_index, prompt_tokens, request_id) of row ``i`` of a trace, or of one row."""
    if isinstance(obj, Trace):
        obj = obj.df
    if isinstance(obj, pd.DataFrame):
        if i is None:
            raise ValueError("prompt_text(trace, i): the row index i is required")
        obj = obj.iloc[i]
    get = obj.__getitem__ if isinstance(obj, (Mapping, pd.Series)) else \
        (lambda k: getattr(obj, k))
    return (str(get("family")), int(get("source_index")), int(get("prompt_tokens")),
            str(get("request_id")))


def _compose(family: str, source: int, n: int, request_id: str, limit: int | None,
             tokenizer: Tokenizer) -> str:
    check_choice("trace", "family", family, FAMILIES)
    bases, counts = _family_bases(family)
    base = bases[source]
    text, offs, _ = _filler()
    off = _filler_start(request_id)
    if type(tokenizer) is not ApproxTokenizer:
        # Any other tokenizer: fit base + enough filler to the exact count.
        end = min(off + n + 64, len(offs) - 1)
        out = tokenizer.fit(base + text[offs[off]:offs[end]], n)
        return out if limit is None else out[:limit]
    c = int(counts[source])
    if c == n:
        out = base
    elif c > n:
        out = tokenizer.fit(base, n)
    else:
        k = n - c
        if off + k <= len(offs) - 1:
            stop = offs[off + k]
            if limit is not None:
                stop = min(stop, offs[off] + limit)
            out = base + text[offs[off]:stop]
        else:  # longer than the filler: pad the rest with the tokenizer's own filler
            out = tokenizer.fit(base + text[offs[off]:], n)
    return out if limit is None else out[:limit]


def prompt_text(trace_row_or_trace: TraceRow, i: int | None = None,
                tokenizer: Tokenizer = DEFAULT_TOKENIZER) -> str:
    """The exact prompt sent for a request: ``tokenizer.count(text) == prompt_tokens``.

    Accepts ``(trace, i)``, ``(dataframe, i)`` or a single row (Series, dict, namedtuple).
    """
    family, source, n, rid = _row_fields(trace_row_or_trace, i)
    return _compose(family, source, n, rid, None, tokenizer)


def prompt_heads(trace: Trace | pd.DataFrame, n_chars: int = HEAD_CHARS) -> list[str]:
    """``prompt_text(trace, i)[:n_chars]`` for every request, without rendering whole prompts."""
    df = trace.df if isinstance(trace, Trace) else trace
    fam = df["family"].to_numpy(dtype=object)
    src = df["source_index"].to_numpy(np.int64)
    n = df["prompt_tokens"].to_numpy(np.int64)
    rid = df["request_id"].to_numpy(dtype=object)
    return [_compose(f, s, k, r, n_chars, DEFAULT_TOKENIZER)
            for f, s, k, r in zip(fam, src.tolist(), n.tolist(), rid, strict=True)]


def predictor_frame(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    """``prompt_head`` and ``prompt_tokens`` per request: what a length predictor reads."""
    df = trace.df if isinstance(trace, Trace) else trace
    return pd.DataFrame({"prompt_head": pd.Series(prompt_heads(df), dtype="str"),
                         "prompt_tokens": df["prompt_tokens"].to_numpy(np.int64)})


# ---- Table I --------------------------------------------------------------------------------
def table_one(seed: int = 0, n: int = 20_000) -> pd.DataFrame:
    """The paper's Table I: per workload, what it stresses and its token statistics."""
    rows = []
    for w in WORKLOADS:
        t = make_trace(w, seed, 1.0, n)
        df = t.df
        row: dict[str, Any] = {"workload": w, "stresses": STRESSES[w],
                               "arrivals": t.arrival.describe()}
        if w == "mixed":
            share = df["family"].value_counts(normalize=True)
            row["mix"] = " / ".join(f"{f} {share.get(f, 0):.0%}" for f in FAMILIES)
        else:
            row["mix"] = w
        for col, short in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
            x = df[col].to_numpy()
            row[f"{short}_mean"] = round(float(x.mean()), 1)
            for q in (50, 90, 99):
                row[f"{short}_p{q}"] = int(np.percentile(x, q, method="nearest"))
            row[f"{short}_max"] = int(x.max())
        row["tight_share"] = round(float((df["slo_class"] == "tight").mean()), 3)
        rows.append(row)
    return pd.DataFrame(rows)
