"""The paper's short calibration benchmark (§III-B): measure a cluster, fit the router's CostModel.

Three measurements, within a budget of physics time (default 300 s; with engines compressed by
``time_scale`` K it takes budget / K wall seconds), then `repro.routing.cost_model.fit`:

(a) **Prefill latency** over prompt lengths (default 64 .. 8000 tokens, never above the engine's
    ``max_num_batched_tokens``, so each prompt is one scheduler step): plain (non-P/D) requests
    with ``max_tokens=1`` sent *alone* to a prefill engine, each prompt unique (no prefix-cache
    hit). A lone request's first token comes at the end of its one prefill step, so its latency is
    ``prefill_base + per_token x L``. The value fitted is the engine's own account of it: the
    increase of ``vllm:request_prefill_time_seconds_sum`` (scheduled -> first token) over that
    one request, which excludes the HTTP round trip; the client-side latency (wall x K, which
    includes it) is recorded beside it and used only when the engine exports no such metric.
(b) **Decode inter-token latency** at concurrency 1..N (default 1, 2, 4, 8, 16): N concurrent
    streaming requests with ``ignore_eos`` on a decode engine, all started together. In the steady
    window (every request past its first ``start_tokens`` tokens, none near its end) the mean ITL
    is read from the engine (``vllm:inter_token_latency_seconds`` sum/count between two scrapes),
    and from the client (tokens vs time of ``continuous_usage_stats`` chunks, wall x K). The
    prompt length is chosen so that the mean context in the window is `TYPICAL_CONTEXT` tokens,
    the context at which the profile quotes its per-token decode time.
(c) **KV transfer** (optional): P/D requests of several lengths; the decode engine's TTFT
    (``vllm:time_to_first_token_seconds``: the KV pull plus its one-token step) minus the fitted
    one-step decode time.

Rounds repeat while the budget allows (at least one), and each (length | concurrency) point is the
median over rounds, so one hiccup of a loaded machine does not move the fit.

`calibrate` returns the fitted `CostModel` (SLO targets derived from it) and the raw samples; with
``out`` it writes the JSON (`CostModel.save`) and the samples beside it (``<out>.samples.csv``).
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import httpx
import numpy as np
import pandas as pd

from repro.cluster.processes import run_sync
from repro.errors import ConfigError
from repro.live.pd_protocol import decode_body, headers_for, prefill_body
from repro.routing.cost_model import CostModel, DecodeSample, PrefillSample, TransferSample, fit

if TYPE_CHECKING:
    from repro.cluster.topology import Instance

DEFAULT_PREFILL_LENGTHS = (64, 128, 256, 512, 1024, 2048, 3072, 4096, 6144, 8000)
DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16)
DEFAULT_TRANSFER_LENGTHS = (256, 1024, 2048, 4096, 8000)
TYPICAL_CONTEXT = 800  # tokens: the context at which a profile quotes its per-token decode time
SHARES = {"prefill": 0.30, "decode": 0.55, "transfer": 0.15}
COMPLETIONS = "/v1/completions"

PREFILL_METRIC = "vllm:request_prefill_time_seconds"
ITL_METRIC = "vllm:inter_token_latency_seconds"
TTFT_METRIC = "vllm:time_to_first_token_seconds"


# ---- Prometheus text --------------------------------------------------------------------------
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name (labels dropped): value summed over label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


def _cache_config(text: str) -> dict[str, str]:
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(re.findall(r'(\w+)="([^"]*)"', line))
    return {}


def apply_cache_config(model: CostModel, info: dict[str, str]) -> CostModel:
    """``model`` with what the decode engine's ``vllm:cache_config_info`` states: the KV capacity
    (tokens; one block is vLLM's null block) and, where the engine was given its KV memory in bytes
    (``kv_cache_memory_bytes``, as CPU engines are), the KV bytes per token, with the fitted transfer
    bandwidth rescaled so that the priced transfer time of a prompt is unchanged."""
    from dataclasses import replace

    try:
        blocks, block_size = int(float(info["num_gpu_blocks"])), int(float(info["block_size"]))
    except (KeyError, ValueError):
        return model
    if blocks > 1 and block_size > 0:
        model = replace(model, kv_capacity_tokens=(blocks - 1) * block_size)
    try:
        per_token = float(info["kv_cache_memory_bytes"]) / (blocks * block_size)
    except (KeyError, ValueError, ZeroDivisionError):
        return model
    if per_token > 0 and math.isfinite(per_token):
        scale = per_token / model.kv_bytes_per_token
        model = replace(model, kv_bytes_per_token=per_token,
                        xfer_bandwidth_bytes_per_s=model.xfer_bandwidth_bytes_per_s * scale)
    return model


async def scrape(client: httpx.AsyncClient, url: str) -> dict[str, float] | None:
    """The engine's ``/metrics`` as `parse_metrics` reads them, or None if it does not answer 200."""
    try:
        r = await client.get(url.rstrip("/") + "/metrics")
        if r.status_code != 200:
            return None
        return parse_metrics(r.text)
    except httpx.HTTPError:
        return None


def _delta(m0: dict | None, m1: dict | None, name: str) -> tuple[float | None, float | None]:
    """(delta sum, delta count) of a histogram between two scrapes (None if not exported)."""
    if not m0 or not m1 or f"{name}_sum" not in m0 or f"{name}_sum" not in m1:
        return None, None
    return m1[f"{name}_sum"] - m0[f"{name}_sum"], m1.get(f"{name}_count", 0.0) - m0.get(f"{name}_count", 0.0)


# ---- prompts ----------------------------------------------------------------------------------
def unique_prompt(n_tokens: int, tag: str) -> str:
    """A prompt of exactly ``n_tokens`` tokens (ApproxTokenizer) whose first block is unique to ``tag``."""
    from repro.workload.tokenizer import DEFAULT_TOKENIZER
    from repro.workload.traces import filler_text

    head = f"Calibration {tag}:"
    off = random.Random(tag).randrange(0, 20_000)
    return DEFAULT_TOKENIZER.fit(head + filler_text(max(0, n_tokens), off), n_tokens)


# ---- the benchmark ----------------------------------------------------------------------------
@dataclass
class _Budget:
    total_s: float
    K: float
    t0: float = field(default_factory=time.monotonic)

    def spent(self) -> float:
        """Physics seconds since the benchmark started (wall x K)."""
        return (time.monotonic() - self.t0) * self.K

    def left(self) -> float:
        """Physics seconds of budget left (negative once overspent)."""
        return self.total_s - self.spent()


class _Bench:
    def __init__(self, client: httpx.AsyncClient, model: str, K: float, api_key: str | None,
                 log: Callable[[str], None]):
        self.c = client
        self.model = model
        self.K = K
        self.api_key = api_key
        self.log = log
        self.rows: list[dict[str, Any]] = []
        self.seq = 0

    def rid(self, kind: str) -> str:
        self.seq += 1
        return f"calib-{kind}-{self.seq}-{uuid.uuid4().hex[:8]}"

    # (a) prefill ------------------------------------------------------------------------------
    async def prefill_one(self, inst: Instance, L: int, rnd: int) -> None:
        """One lone prefill of a unique ``L``-token prompt on ``inst``: one sample row (seconds)."""
        rid = self.rid("prefill")
        body = {"model": self.model, "prompt": unique_prompt(L, rid), "max_tokens": 1, "temperature": 0,
                "ignore_eos": True}
        m0 = await scrape(self.c, inst.url)
        t = time.monotonic()
        r = await self.c.post(inst.url.rstrip("/") + COMPLETIONS, json=body, headers=headers_for(rid, self.api_key))
        client_s = (time.monotonic() - t) * self.K
        _raise_for(r, inst)
        m1 = await scrape(self.c, inst.url)
        P = (r.json().get("usage") or {}).get("prompt_tokens") or L
        s, n = _delta(m0, m1, PREFILL_METRIC)
        engine_s = s if (s is not None and n == 1) else None
        self.rows.append(dict(phase="prefill", instance=inst.name, round=rnd, prompt_tokens=int(P), concurrency=1,
                              output_tokens=1, client_s=client_s, engine_s=engine_s))

    # (b) decode -------------------------------------------------------------------------------
    async def decode_level(self, inst: Instance, n: int, prompt_tokens: int, out_tokens: int, rnd: int,
                           start_tokens: int, end_margin: int) -> None:
        """``n`` concurrent decode streams on ``inst``: one row with the mean inter-token latency
        (physics s) in the window where every stream is past ``start_tokens`` and none is within
        ``end_margin`` tokens of ``out_tokens``."""
        loop = asyncio.get_running_loop()
        progress = [0] * n
        points: list[list[tuple[float, int]]] = [[] for _ in range(n)]
        started = asyncio.Event()
        near_end = asyncio.Event()
        errors: list[str] = []

        async def stream(k: int) -> None:
            rid = self.rid(f"decode{n}")
            body = {"model": self.model, "prompt": unique_prompt(prompt_tokens, rid), "max_tokens": out_tokens,
                    "ignore_eos": True, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            from repro.live.pd_protocol import SSEParser

            parser = SSEParser()
            async with self.c.stream("POST", inst.url.rstrip("/") + COMPLETIONS, json=body,
                                     headers=headers_for(rid, self.api_key)) as resp:
                if resp.status_code != 200:
                    errors.append(f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}")
                    started.set()
                    near_end.set()
                    return
                async for chunk in resp.aiter_raw():
                    if parser.feed(chunk):
                        g = parser.usage.completion_tokens
                        if g is None:
                            g = parser.usage.content_chunks
                        points[k].append((loop.time(), int(g)))
                        progress[k] = g
                        if all(p >= start_tokens for p in progress):
                            started.set()
                        if g >= out_tokens - end_margin:
                            near_end.set()
            if parser.usage.errors:
                errors.append(parser.usage.errors[0])
            started.set()
            near_end.set()

        tasks = [asyncio.create_task(stream(k)) for k in range(n)]
        try:
            await started.wait()
            mA = await scrape(self.c, inst.url)
            tA = loop.time()
            await near_end.wait()
            tB = loop.time()
            mB = await scrape(self.c, inst.url)
            await asyncio.gather(*tasks)
        except BaseException:  # interrupted (Ctrl-C) or failed: no stream is left running, none reports later
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if errors:
            raise RuntimeError(f"calibration: decode request on {inst.name} failed: {errors[0]}")
        s, c = _delta(mA, mB, ITL_METRIC)
        engine_s = (s / c) if (s is not None and c and c >= n) else None
        per_req = []
        for pts in points:
            win = [(t, g) for t, g in pts if tA <= t <= tB]
            if len(win) >= 2 and win[-1][1] > win[0][1]:
                ts = np.array([t for t, _ in win])
                gs = np.array([g for _, g in win], dtype=float)
                slope = np.polyfit(ts, gs, 1)[0] if len(win) > 2 else (gs[-1] - gs[0]) / (ts[-1] - ts[0])
                if slope > 0:
                    per_req.append(self.K / slope)
        client_s = float(np.mean(per_req)) if per_req else None
        ctx = prompt_tokens + (start_tokens + out_tokens - end_margin) / 2
        self.rows.append(dict(phase="decode", instance=inst.name, round=rnd, prompt_tokens=prompt_tokens,
                              concurrency=n, output_tokens=out_tokens, client_s=client_s, engine_s=engine_s,
                              window_s=(tB - tA) * self.K, mean_context=ctx))

    # (c) transfer -----------------------------------------------------------------------------
    async def transfer_one(self, p: Instance, d: Instance, L: int, rnd: int) -> None:
        """One P/D request of ``L`` prompt tokens, ``p`` -> ``d``: one row with the decode engine's TTFT
        (physics s; no row when the prefill hands over no KV)."""
        rid = self.rid("xfer")
        body = {"model": self.model, "prompt": unique_prompt(L, rid), "max_tokens": 1, "temperature": 0,
                "ignore_eos": True}
        h = headers_for(rid, self.api_key)
        r = await self.c.post(p.url.rstrip("/") + COMPLETIONS, json=prefill_body(body), headers=h)
        _raise_for(r, p)
        kv = r.json().get("kv_transfer_params")
        if not kv:
            return  # no handoff (e.g. no NixlConnector): nothing to time
        m0 = await scrape(self.c, d.url)
        t = time.monotonic()
        r2 = await self.c.post(d.url.rstrip("/") + COMPLETIONS, json=decode_body(body, kv), headers=h)
        client_s = (time.monotonic() - t) * self.K
        _raise_for(r2, d)
        m1 = await scrape(self.c, d.url)
        P = (r2.json().get("usage") or {}).get("prompt_tokens") or L
        s, n = _delta(m0, m1, TTFT_METRIC)
        self.rows.append(dict(phase="transfer", instance=f"{p.name}->{d.name}", round=rnd, prompt_tokens=int(P),
                              concurrency=1, output_tokens=1, client_s=client_s,
                              engine_s=s if (s is not None and n == 1) else None))


def _raise_for(r: httpx.Response, inst: Instance) -> None:
    if r.status_code != 200:
        raise RuntimeError(f"calibration: HTTP {r.status_code} from {inst.name} ({inst.url}): {r.text[:300]}")


def _profile_of(inst: Instance) -> str | None:
    return getattr(inst, "profile", None)


async def calibrate_async(
    instances: Sequence[Instance],
    *,
    time_scale: float = 1.0,
    budget_s: float = 300.0,
    out: str | Path | None = None,
    prefill_lengths: Sequence[int] | None = None,
    concurrencies: Sequence[int] = DEFAULT_CONCURRENCIES,
    decode_tokens: int = 576,
    decode_prompt_tokens: int | None = None,
    transfer: bool = True,
    transfer_lengths: Sequence[int] | None = None,
    prefill_instance: str | None = None,
    decode_instance: str | None = None,
    name: str = "calibrated",
    model: str | None = None,
    api_key: str | None = None,
    base: CostModel | None = None,
    max_rounds: int = 50,
    log: Callable[[str], None] | None = None,
) -> tuple[CostModel, pd.DataFrame]:
    """Run the benchmark against ``instances`` and fit; see the module docstring."""
    log = log or (lambda s: None)
    K = float(time_scale)
    if not K > 0:
        raise ConfigError(f"calibrate: time_scale must be > 0, got {time_scale}")
    if not budget_s > 0:
        raise ConfigError(f"calibrate: budget_s must be > 0, got {budget_s}")
    insts = list(instances)
    prefills = [i for i in insts if i.role == "prefill"]
    decodes = [i for i in insts if i.role == "decode"]
    if not prefills or not decodes:
        raise ConfigError("calibrate: the cluster needs at least one prefill and one decode instance")
    P = _pick(prefills, prefill_instance, "prefill_instance")
    D = _pick(decodes, decode_instance, "decode_instance")
    if base is None:
        prof = _profile_of(D) or _profile_of(P)
        if prof:
            from repro.engine.profile import load_profile

            # only non-measurable fields survive the fit
            base = CostModel.from_physics(load_profile(prof).physics, name=name)
        else:
            base = CostModel.load("calibrated")
    max_batch = base.max_num_batched_tokens
    lengths = sorted({min(int(L), max_batch) for L in (prefill_lengths or DEFAULT_PREFILL_LENGTHS) if L >= 2})
    if len(lengths) < 2:
        raise ConfigError(f"calibrate: prefill_lengths needs at least 2 distinct lengths >= 2, got {prefill_lengths}")
    levels = sorted({int(n) for n in concurrencies if n >= 1})
    if len(levels) < 2:
        raise ConfigError(f"calibrate: concurrencies needs at least 2 distinct levels >= 1, got {concurrencies}")
    start_tokens, end_margin = 32, 64
    if decode_tokens < start_tokens + end_margin + 32:
        raise ConfigError(f"calibrate: decode_tokens must be >= {start_tokens + end_margin + 32}, got {decode_tokens}")
    if decode_prompt_tokens is None:
        decode_prompt_tokens = max(16, int(TYPICAL_CONTEXT - (start_tokens + decode_tokens - end_margin) / 2))
    xlens = sorted({min(int(L), max_batch) for L in (transfer_lengths or DEFAULT_TRANSFER_LENGTHS) if L >= 2})

    budget = _Budget(budget_s, K)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits, trust_env=False) as client:
        r = await client.get(D.url.rstrip("/") + "/v1/models")
        _raise_for(r, D)
        card = r.json()["data"][0]
        model = model or card["id"]
        context = card.get("max_model_len")  # vLLM's model card says the engine's context (tokens)
        if isinstance(context, int) and context > 0:
            # a request must leave room for its output inside the context: never ask for more
            lengths = sorted({min(L, context - 2) for L in lengths})
            xlens = sorted({min(L, context - 2) for L in xlens})
            if decode_prompt_tokens + decode_tokens > context:
                decode_prompt_tokens = max(16, context - decode_tokens)
            log(f"engine context {context} tokens: prefill lengths {lengths}")
        for inst in (P, D):  # start from empty prefix caches where the engine allows it
            try:
                await client.post(inst.url.rstrip("/") + "/reset_prefix_cache")
            except httpx.HTTPError:
                pass
        try:
            info = _cache_config((await client.get(D.url.rstrip("/") + "/metrics")).text)
        except httpx.HTTPError:
            info = {}
        b = _Bench(client, model, K, api_key, log)
        shares = dict(SHARES) if transfer else {"prefill": SHARES["prefill"], "decode": SHARES["decode"]}

        def allowance(phase: str) -> float:
            rest = sum(v for k, v in shares.items())
            a = budget.left() * shares[phase] / rest
            shares.pop(phase)
            return a

        # (a) prefill, rounds over shuffled lengths
        rng = random.Random(0)
        a = allowance("prefill")
        t_phase = budget.spent()
        for rnd in range(max_rounds):
            t_r = budget.spent()
            order = list(lengths)
            rng.shuffle(order)
            for L in order:
                await b.prefill_one(P, L, rnd)
            used = budget.spent() - t_phase
            log(f"prefill round {rnd + 1}: {len(order)} lengths on {P.name} ({used:.1f} of {a:.1f} s physics)")
            if used + (budget.spent() - t_r) > a:
                break
        # (b) decode, rounds over the concurrency levels
        a = allowance("decode")
        t_phase = budget.spent()
        for rnd in range(max_rounds):
            t_r = budget.spent()
            for n in levels:
                await b.decode_level(D, n, decode_prompt_tokens, decode_tokens, rnd, start_tokens, end_margin)
            used = budget.spent() - t_phase
            log(f"decode round {rnd + 1}: concurrency {levels} on {D.name} ({used:.1f} of {a:.1f} s physics)")
            if used + (budget.spent() - t_r) > a:
                break
        # (c) transfer
        if transfer and xlens:
            a = allowance("transfer")
            t_phase = budget.spent()
            for rnd in range(max_rounds):
                t_r = budget.spent()
                for L in xlens:
                    await b.transfer_one(P, D, L, rnd)
                used = budget.spent() - t_phase
                log(f"transfer round {rnd + 1}: {len(xlens)} lengths {P.name}->{D.name} "
                    f"({used:.1f} of {a:.1f} s physics)")
                if used + (budget.spent() - t_r) > a:
                    break

    samples = pd.DataFrame(b.rows)
    for col in ("window_s", "mean_context"):
        if col not in samples.columns:
            samples[col] = np.nan
    samples["value_s"] = samples["engine_s"].where(samples["engine_s"].notna(), samples["client_s"])
    samples["source"] = np.where(samples["engine_s"].notna(), "engine", "client")
    model_out = fit_samples(samples, base=base, name=name)
    model_out = apply_cache_config(model_out, info)
    samples.attrs["physics_s"] = budget.spent()
    if out is not None:
        out = Path(out)
        model_out.save(out)
        samples.to_csv(samples_path(out), index=False)
    return model_out, samples


def samples_path(out: str | Path) -> Path:
    """Where `calibrate` writes the samples beside the calibration JSON ``out``."""
    out = Path(out)
    return out.with_name(out.stem + ".samples.csv")


def serving_path_s(samples: pd.DataFrame) -> dict[str, float]:
    """The time a P/D request spends outside the engines' compute, from a calibration's samples (seconds):
    per engine, the median of the client's latency minus the engine's own account of the same request
    (``client_s - engine_s``: HTTP, the API server's parsing, tokenization and detokenization, its hand-off
    to the engine core), for the prefill samples (a lone prompt to the prefill engine) and the transfer
    samples (the decode engine's P/D request); ``total`` = the two added (NaN when a phase has no sample
    with both times). A calibration measures the engines directly: the proxy's own hops are not in it."""
    out: dict[str, float] = {}
    for phase in ("prefill", "transfer"):
        rows = samples[(samples["phase"] == phase) & samples["client_s"].notna() & samples["engine_s"].notna()]
        gap = (rows["client_s"].astype(float) - rows["engine_s"].astype(float)).to_numpy()
        out[phase] = float(np.median(gap)) if gap.size else math.nan
    out["total"] = out["prefill"] + out["transfer"]
    return out


class PrefillCurve(TypedDict):
    """`prefill_curve`'s fit: a prefill step's time ``base_s + per_token_s L + per_token2_s L^2`` (s, s/token,
    s/token^2) for ``L <= max_tokens`` prompt tokens, the median step time per length it was fitted to
    (``points``: tokens -> s) and its largest relative residual (a fraction)."""

    base_s: float
    per_token_s: float
    per_token2_s: float
    points: dict[int, float]
    max_rel_residual: float
    max_tokens: int


def prefill_curve(samples: pd.DataFrame, max_tokens: int) -> PrefillCurve:
    """A prefill step's time as a quadratic in its tokens, ``base + per_token L + per_token2 L^2`` (s, s/token,
    s/token^2), fitted to a calibration's prefill samples of prompts of one scheduler step (``L <=
    max_tokens``, the engine's chunked-prefill budget): the median per length over rounds, weighted least
    squares on relative error (each length counts alike). On the tiny CPU engines the step is convex (7 ms
    at 64 tokens, 21 ms at 1,024, 50 ms at 2,048): the paper's line, fitted over 64-4,094 tokens, priced
    mid-length prompts up to 2x too high. Returns the coefficients, the points and the largest relative
    residual; ``per_token2`` is clipped at 0 (then the line, refitted). Raises `ConfigError` with fewer
    than 3 lengths."""
    s = samples.copy()
    if "value_s" not in s.columns:
        s["value_s"] = s["engine_s"].where(s["engine_s"].notna(), s["client_s"])
    s = s[(s["phase"] == "prefill") & s["value_s"].notna() & (s["prompt_tokens"] <= max_tokens)]
    med = s.groupby("prompt_tokens")["value_s"].median()
    if len(med) < 3:
        raise ConfigError(f"calibration: {len(med)} prefill length(s) of one step (<= {max_tokens} tokens): "
                          f"a curve needs 3")
    L = med.index.to_numpy(float)
    y = med.to_numpy(float)
    w = 1.0 / y
    A = np.vstack([np.ones_like(L), L, L * L]).T
    coef = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)[0]
    if coef[2] < 0:
        coef = np.append(np.linalg.lstsq(A[:, :2] * w[:, None], y * w, rcond=None)[0], 0.0)
    fit = A @ coef
    return {"base_s": float(coef[0]), "per_token_s": float(coef[1]), "per_token2_s": float(coef[2]),
            "points": {int(k): float(v) for k, v in zip(L, y, strict=True)},
            "max_rel_residual": float(np.max(np.abs(fit / y - 1.0))), "max_tokens": int(max_tokens)}


def _pick(pool: list[Instance], name: str | None, field_name: str) -> Instance:
    if name is None:
        return pool[0]
    for i in pool:
        if i.name == name:
            return i
    raise ConfigError(f"calibrate: {field_name} {name!r} is not one of {[i.name for i in pool]}")


def fit_samples(samples: pd.DataFrame, *, base: CostModel | None = None, name: str = "calibrated") -> CostModel:
    """Fit a CostModel from a samples table (`calibrate`'s): medians per point over rounds."""
    s = samples.copy()
    if "value_s" not in s.columns:
        s["value_s"] = s["engine_s"].where(s["engine_s"].notna(), s["client_s"])
    s = s[s["value_s"].notna()]
    pre = s[s.phase == "prefill"].groupby("prompt_tokens")["value_s"].median()
    dec = s[s.phase == "decode"].groupby("concurrency")["value_s"].median()
    prefill = [PrefillSample(int(L), float(v)) for L, v in pre.items()]
    decode = [DecodeSample(int(n), float(v)) for n, v in dec.items()]
    transfer: list[TransferSample] = []
    xs = s[s.phase == "transfer"]
    if len(xs) and len(decode):
        step1 = float(dec.sort_index().iloc[0])  # the one-token step after the pull ~ one decode step
        med = xs.groupby("prompt_tokens")["value_s"].median()
        transfer = [TransferSample(int(L), max(float(v) - step1, 0.0)) for L, v in med.items()]
    return fit(prefill, decode, transfer, name=name, base=base)


def calibrate(instances: Sequence[Instance], *, time_scale: float = 1.0, budget_s: float = 300.0,
              out: str | Path | None = None, **kw: Any) -> tuple[CostModel, pd.DataFrame]:
    """Sync form of `calibrate_async`: ``(CostModel, samples DataFrame)``."""
    return run_sync(calibrate_async(instances, time_scale=time_scale, budget_s=budget_s, out=out, **kw))


# ---- comparison with the profile ----------------------------------------------------------------
COMPARED = ("tau_pre_base_s", "tau_pre_per_token_s", "tau_dec_s", "dec_concurrency_slope", "xfer_latency_s",
            "xfer_bandwidth_bytes_per_s", "ttft_tight_s", "tpot_tight_s", "kv_capacity_tokens")


def compare(fitted: CostModel, reference: CostModel) -> pd.DataFrame:
    """Fitted vs reference constants, with the relative error."""
    rows = []
    for f in COMPARED:
        a, r = float(getattr(fitted, f)), float(getattr(reference, f))
        rows.append({"constant": f, "fitted": a, "profile": r,
                     "rel_error": (a - r) / r if r else (0.0 if a == 0 else math.inf)})
    return pd.DataFrame(rows)


def profile_cost_model(instances: Sequence[Instance], decode_instance: str | None = None) -> CostModel | None:
    """The cost model a perfect calibration of the (decode) instance's profile would give."""
    from repro.engine.profile import load_profile

    decodes = [i for i in instances if i.role == "decode"]
    pool = [i for i in decodes if decode_instance in (None, i.name)] or decodes
    prof = _profile_of(pool[0]) if pool else None
    return CostModel.from_physics(load_profile(prof).physics, name="profile") if prof else None
