"""What the router believes: the cost model, its two shipped instances, and its fit from a benchmark.

A `CostModel` prices work in seconds. It is deliberately a separate object from
`repro.engine.physics.Physics` (the truth): the paper's §V-B result is what happens when the two disagree.

Pricing (all seconds; ``L`` prompt tokens, ``o`` output tokens, ``n`` sequences already running)::

    tau_pre(L)      = tau_pre_base_s + tau_pre_per_token_s * L
    tau_dec(n)      = tau_dec_s * (1 + dec_concurrency_slope * n)       # per output token
    tau_xfer(L)     = xfer_latency_s + L * kv_bytes_per_token / xfer_bandwidth_bytes_per_s

SLO targets (a request is *good* when TTFT <= ttft and TPOT <= tpot of its class)::

    tight: ttft_tight_s, tpot_tight_s          loose: loose_factor x tight

On hardware other than the paper's, SLO targets are derived from the calibration, never
hard-coded (`slo_from_constants`): tpot = 3 x tau_dec (the paper's 39.7 ms = 3 x 13.237 ms), and
ttft = the unloaded P/D TTFT of a reference prompt, tau_pre(L*) + tau_xfer(L*) + tau_dec, with
L* = 1,521 tokens: the prompt whose unloaded P/D TTFT on the paper's calibrated A40 constants is
exactly its 175 ms (`TTFT_REFERENCE_TOKENS`). The paper only says that its targets "derive from
the same calibration". Earlier rules anchored the target on a multiple of a near-empty request's
floor (prefill base, then base + transfer latency + one decode step: both give 175 ms on the
paper's constants), which ignores the per-token prefill cost: on the paper's A40 that cost is
comparable to the base (60 us/token, 66.7 ms), on the tiny CPU engines it is not (a 1,000-token
prompt costs ~60 x the base), and 2.16 x the floor (58 ms) was below what a median mixed prompt
costs unloaded: every request missed, goodput 0 at any load. The reference prompt keeps the
target's meaning ("a ~1.5k-token prompt, unloaded, just meets the tight TTFT") on any hardware.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from repro.engine.physics import HOST_PARAMETERS, NO_CONTEXT_BANDWIDTH, PARAMETERS, Physics, check_overrides
from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.paths import CALIBRATION_DIR
from repro.vocab import DEFAULT_PROFILE, SloClass

TPOT_OVER_TAU_DEC = 3.0
# The paper's calibrated A40 constants (s, bytes; tau_dec as `CostModel.from_physics` computes it for the
# a40-qwen2.5-3b profile: TPOT 39.7 ms / 3) and its tight TTFT target. TTFT_REFERENCE_TOKENS is the prompt
# length whose unloaded P/D TTFT (prefill + KV transfer + one decode step) on them is exactly 175 ms.
PAPER_TTFT_TIGHT_S = 0.175
_PAPER = dict(base=0.0667, per_token=6e-05, xfer_latency=0.001, kv_bytes=36864, bandwidth=2e10,
              tau_dec=0.013236972413793102)
TTFT_REFERENCE_TOKENS = (PAPER_TTFT_TIGHT_S - _PAPER["base"] - _PAPER["xfer_latency"] - _PAPER["tau_dec"]) / (
    _PAPER["per_token"] + _PAPER["kv_bytes"] / _PAPER["bandwidth"])  # = 1,521.0 tokens


PHYSICS_TO_COST_MODEL = {"prefill_per_token_s": "tau_pre_per_token_s",
                         "transfer_bandwidth_bytes_per_s": "xfer_bandwidth_bytes_per_s",
                         "transfer_latency_s": "xfer_latency_s",
                         "max_num_batched_tokens": "max_num_batched_tokens"}
"""Each overridable physics parameter (`repro.engine.physics.OVERRIDABLE`) -> the cost-model constant
`CostModel.from_physics` calibrates from it (the same value, the same unit; the token budget is an engine
setting the router reads); ``decode_per_seq_s`` moves the concurrency slope instead (`CostModel.with_physics`).
The mechanisms' shapes (`repro.engine.mechanisms.UNSEEN_BY_CALIBRATION`) calibrate nothing: a calibration
times whole requests, so it prices the stated prefill base whichever part of it is the engine's step."""


@dataclass(frozen=True)
class SLOTargets:
    """Per-class latency targets (seconds)."""

    ttft_tight_s: float
    tpot_tight_s: float
    loose_factor: float = 3.0

    def ttft_s(self, slo_class: SloClass) -> float:
        return self.ttft_tight_s * (1.0 if slo_class == "tight" else self.loose_factor)

    def tpot_s(self, slo_class: SloClass) -> float:
        return self.tpot_tight_s * (1.0 if slo_class == "tight" else self.loose_factor)


@dataclass(frozen=True)
class CostModel:
    """The router's assumed constants (seconds, tokens, bytes). See the module docstring."""

    name: str
    tau_pre_base_s: float
    tau_pre_per_token_s: float
    tau_dec_s: float
    dec_concurrency_slope: float
    kv_bytes_per_token: float
    xfer_latency_s: float
    xfer_bandwidth_bytes_per_s: float
    ttft_tight_s: float
    tpot_tight_s: float
    loose_factor: float = 3.0
    kv_capacity_tokens: int = 60_000
    max_num_batched_tokens: int = 8192

    # ---- pricing ----------------------------------------------------------------------------
    def tau_pre(self, prompt_tokens: float) -> float:
        """Priced prefill time of a prompt (s), chunked by the token budget like the engine."""
        steps = max(1, math.ceil(prompt_tokens / self.max_num_batched_tokens))
        return steps * self.tau_pre_base_s + self.tau_pre_per_token_s * prompt_tokens

    def tau_dec(self, running: float = 0.0) -> float:
        """Priced time per output token when ``running`` other sequences share the batch (s)."""
        return self.tau_dec_s * (1.0 + self.dec_concurrency_slope * running)

    def tau_xfer(self, prompt_tokens: float) -> float:
        """Priced KV transfer time of a prompt (s)."""
        return self.xfer_latency_s + prompt_tokens * self.kv_bytes_per_token / self.xfer_bandwidth_bytes_per_s

    @functools.cached_property
    def slo(self) -> SLOTargets:
        """The SLO targets these constants state (built once: every routing decision reads them)."""
        return SLOTargets(self.ttft_tight_s, self.tpot_tight_s, self.loose_factor)

    # ---- construction -----------------------------------------------------------------------
    @classmethod
    def from_physics(cls, physics: Physics, name: str = "calibrated") -> CostModel:
        """The cost model a perfect calibration of ``physics`` yields (SLO targets: the profile's stated ones
        when it has them, else `slo_from_constants`)."""
        typical_ctx = 800  # the context at which the profile's per-token decode time is quoted
        tau_dec = physics.decode_step_s(1, typical_ctx)
        per_extra = physics.decode_per_seq_s + typical_ctx * physics.context_s_per_token
        slope = per_extra / tau_dec
        ttft, tpot = physics.stated_slo or slo_from_constants(
            physics.prefill_base_s, physics.prefill_per_token_s, tau_dec, physics.transfer_latency_s,
            physics.kv_bytes_per_token / physics.transfer_bandwidth_bytes_per_s)
        return cls(
            name=name,
            tau_pre_base_s=physics.prefill_base_s,
            tau_pre_per_token_s=physics.prefill_per_token_s,
            tau_dec_s=tau_dec,
            dec_concurrency_slope=slope,
            kv_bytes_per_token=physics.kv_bytes_per_token,
            xfer_latency_s=physics.transfer_latency_s,
            xfer_bandwidth_bytes_per_s=physics.transfer_bandwidth_bytes_per_s,
            ttft_tight_s=ttft,
            tpot_tight_s=tpot,
            kv_capacity_tokens=physics.kv_budget_tokens,
            max_num_batched_tokens=physics.max_num_batched_tokens,
        )

    def to_physics(self, *, name: str, model: str, block_size: int, max_num_seqs: int,
                   max_model_len: int, max_num_batched_tokens: int | None = None,
                   context_share: float = 0.0, typical_context: int = 800,
                   source: str = "calibration") -> Physics:
        """The engine this calibration describes: the inverse of `from_physics`
        (``CostModel.from_physics(self.to_physics(...))`` gives back this model's timing constants).

        Read: the fitted constants (``tau_pre_base_s``, ``tau_pre_per_token_s``, ``tau_dec_s``: the
        per-token decode time of a lone sequence at ``typical_context`` tokens, ``dec_concurrency_slope``,
        ``xfer_*``, ``kv_bytes_per_token``, ``kv_capacity_tokens``; its SLO targets become the profile's
        stated ones). A calibration measures decode at one context only, so it cannot tell a sequence's
        fixed cost from its context's: ``context_share`` (0..1) is the part of each extra sequence's cost
        (``slope * tau_dec``) put on its context (0: all per sequence, the default; the validation
        measures what that leaves, `repro.validation`). The engine's scheduler settings (``block_size``,
        ``max_num_seqs``, ``max_model_len``, ``max_num_batched_tokens``: default this model's) are not in a
        calibration: the caller states them (`repro.validation.plan.engine_settings`)."""
        if not 0.0 <= context_share <= 1.0:
            raise ConfigError(f"physics: field 'context_share' = {context_share!r} out of range [0, 1]")
        extra = self.dec_concurrency_slope * self.tau_dec_s  # each extra sequence's share of a step (s)
        per_ctx = context_share * extra / typical_context  # s per context token
        per_seq = extra - per_ctx * typical_context
        base = self.tau_dec_s - per_seq - per_ctx * typical_context
        if base < 0:
            raise ConfigError(f"physics: calibration {self.name!r}: its concurrency slope "
                              f"{self.dec_concurrency_slope:g} is above 1 (a lone sequence's step would cost less "
                              f"than nothing)")
        said = f"{source} ({self.name})"
        sources = {n: said for n in PARAMETERS if n not in HOST_PARAMETERS}  # the host: not the engines
        sources.update(block_size=f"{source}: engine setting", max_num_seqs=f"{source}: engine setting",
                       max_model_len=f"{source}: engine setting",
                       hbm_bandwidth_bytes_per_s=f"{said}: context_share {context_share:g} of the concurrency slope")
        return Physics(
            name=name, model=model,
            prefill_base_s=self.tau_pre_base_s, prefill_per_token_s=self.tau_pre_per_token_s,
            max_num_batched_tokens=int(max_num_batched_tokens or self.max_num_batched_tokens),
            decode_base_s=base, decode_per_seq_s=per_seq,
            hbm_bandwidth_bytes_per_s=self.kv_bytes_per_token / per_ctx if per_ctx > 0 else NO_CONTEXT_BANDWIDTH,
            kv_bytes_per_token=int(round(self.kv_bytes_per_token)), kv_budget_tokens=int(self.kv_capacity_tokens),
            block_size=int(block_size), max_num_seqs=int(max_num_seqs), max_model_len=int(max_model_len),
            transfer_latency_s=self.xfer_latency_s, transfer_bandwidth_bytes_per_s=self.xfer_bandwidth_bytes_per_s,
            sources=sources, stated_slo=(self.ttft_tight_s, self.tpot_tight_s),
        )

    def with_overrides(self, **changes: Any) -> CostModel:
        return replace(self, **changes)

    def with_physics(self, overrides: dict[str, float], base: Physics | None = None) -> CostModel:
        """This model with a hardware profile's overridden estimates (`repro.engine.physics.check_overrides`
        names; s/token, s, bytes/s, s) carried into the constants they calibrate (`PHYSICS_TO_COST_MODEL`),
        as a perfect calibration of that hardware would (`from_physics`). A new ``decode_per_seq_s`` moves
        the concurrency slope by its change over ``base`` (the profile this model calibrated; required
        then): the lone-sequence decode time stays (`repro.engine.physics.Physics.with_estimates`). The
        SLO targets stay."""
        checked = check_overrides(overrides, "cost model: physics overrides")
        changes: dict[str, Any] = {PHYSICS_TO_COST_MODEL[k]: v for k, v in checked.items()
                                   if k in PHYSICS_TO_COST_MODEL}
        if "decode_per_seq_s" in checked:
            if base is None:
                raise ConfigError("cost model: a 'decode_per_seq_s' override needs the profile it changes (base=)")
            moved = (checked["decode_per_seq_s"] - base.decode_per_seq_s) / self.tau_dec_s
            changes["dec_concurrency_slope"] = self.dec_concurrency_slope + moved
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], origin: str = "cost model") -> CostModel:
        if not isinstance(raw, dict):
            raise ConfigError(f"{origin}: expected a JSON object")
        known = {f.name: f for f in fields(cls)}
        unknown = set(raw) - set(known)
        if unknown:
            raise ConfigError(f"{origin}: unknown field(s) {sorted(unknown)}; allowed: {sorted(known)}")
        values: dict[str, Any] = {}
        for name, f in known.items():
            if name not in raw:
                if f.default is not MISSING:
                    continue
                raise ConfigError(f"{origin}: field '{name}' is missing")
            value = raw[name]
            if name == "name":
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{origin}: field 'name' must be a non-empty string")
            else:
                if (isinstance(value, bool) or not isinstance(value, (int, float))
                        or not math.isfinite(value) or value < 0):
                    raise ConfigError(f"{origin}: field '{name}' must be a finite number >= 0, got {value!r}")
                if name in ("xfer_bandwidth_bytes_per_s", "tau_dec_s", "ttft_tight_s", "tpot_tight_s") and value <= 0:
                    raise ConfigError(f"{origin}: field '{name}' must be > 0, got {value!r}")
            values[name] = value
        missing = [n for n in ("tau_pre_base_s", "tau_dec_s", "ttft_tight_s") if n not in values]
        if missing:
            raise ConfigError(f"{origin}: field '{missing[0]}' is missing")
        return cls(**values)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, name_or_path: str | Path) -> CostModel:
        """A shipped cost model by name (`calibrated`, `sim_derived`) or a calibration JSON file."""
        path = Path(name_or_path)
        if path.suffix != ".json" and not path.exists():
            path = CALIBRATION_DIR / f"{name_or_path}.json"
            if not path.exists():
                raise ConfigError(
                    f"cost model: unknown name {str(name_or_path)!r}; allowed: {available_cost_models()}"
                    " or a path to a calibration .json"
                )
        if not path.exists():
            raise ConfigError(f"cost model: file {path} does not exist")
        st = path.stat()  # read once per process and version of the file (a CostModel is frozen: shared)
        key = (cls, str(path.resolve()), st.st_size, st.st_mtime_ns)
        cached = _LOADED.get(key)
        if cached is not None:
            return cached
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"cost model {path}: not valid JSON ({exc})") from None
        cached = _LOADED[key] = cls.from_dict(raw, origin=f"cost model {path}")
        return cached


_LOADED: dict[tuple[type, str, int, int], CostModel] = {}


def available_cost_models() -> list[str]:
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.json"))


def slo_from_constants(prefill_base_s: float, prefill_per_token_s: float, tau_dec_s: float, xfer_latency_s: float,
                       xfer_s_per_token: float) -> tuple[float, float]:
    """SLO targets (tight TTFT, tight TPOT; s) derived from calibrated constants (s, s/token): TTFT
    the unloaded P/D TTFT of a `TTFT_REFERENCE_TOKENS`-token prompt (prefill + KV transfer + one
    decode step), TPOT 3 x tau_dec. Exactly the paper's 175 ms / 39.7 ms on its A40 constants."""
    L = TTFT_REFERENCE_TOKENS
    ttft = prefill_base_s + L * prefill_per_token_s + xfer_latency_s + L * xfer_s_per_token + tau_dec_s
    return ttft, TPOT_OVER_TAU_DEC * tau_dec_s


def sim_derived(calibrated: CostModel) -> CostModel:
    """The paper's simulator-derived constants (§VI), keeping the deployment's SLO targets.

    decode 0.0018 s/token, prefill base 0.005 s, 2048 KV bytes/token (paper). The paper gives no
    simulator per-token prefill cost; we scale the calibrated one by the same ratio as the base
    (0.005 / 0.0667), and keep the concurrency slope and transfer bandwidth.
    """
    ratio = 0.005 / calibrated.tau_pre_base_s
    return replace(
        calibrated,
        name="sim_derived",
        tau_pre_base_s=0.005,
        tau_pre_per_token_s=calibrated.tau_pre_per_token_s * ratio,
        tau_dec_s=0.0018,
        kv_bytes_per_token=2048,
    )


# ---- fitting from benchmark measurements ----------------------------------------------------
@dataclass(frozen=True)
class PrefillSample:
    """One measured prefill: ``prompt_tokens`` took ``latency_s`` seconds (alone on the engine)."""

    prompt_tokens: int
    latency_s: float


@dataclass(frozen=True)
class DecodeSample:
    """Mean inter-token latency ``itl_s`` (s) measured with ``concurrency`` sequences decoding."""

    concurrency: int
    itl_s: float


@dataclass(frozen=True)
class TransferSample:
    """One measured KV transfer of ``prompt_tokens`` taking ``latency_s`` seconds."""

    prompt_tokens: int
    latency_s: float


def fit(
    prefill: Iterable[PrefillSample],
    decode: Iterable[DecodeSample],
    transfer: Iterable[TransferSample] = (),
    *,
    name: str = "fitted",
    base: CostModel | None = None,
) -> CostModel:
    """Turn benchmark measurements into a cost model (least squares), with SLOs derived from it.

    - prefill latency = tau_pre_base_s + tau_pre_per_token_s * L    (needs >= 2 distinct L)
    - ITL(n)          = tau_dec_s * (1 + slope * (n - 1))           (needs >= 2 distinct n)
    - transfer        = xfer_latency_s + L * bytes / bandwidth      (optional; else kept from base)
    ``base`` supplies whatever the samples do not determine (KV bytes per token, capacity).
    """
    pre = list(prefill)
    dec = list(decode)
    if len({s.prompt_tokens for s in pre}) < 2:
        raise ConfigError("calibration: prefill samples need at least 2 distinct prompt lengths")
    if len({s.concurrency for s in dec}) < 2:
        raise ConfigError("calibration: decode samples need at least 2 distinct concurrencies")
    base = base or CostModel.load("calibrated")
    a_pre, b_pre = _line([s.prompt_tokens for s in pre], [s.latency_s for s in pre])
    if a_pre <= 0 < b_pre:
        # A convex prefill curve (attention's quadratic term dominating, as on CPU engines) drives the
        # least-squares intercept to zero or below; anchor the line at the shortest prompt's median
        # latency instead, so that the base stays what a near-empty prefill costs.
        shortest = min(s.prompt_tokens for s in pre)
        at_shortest = float(np.median([s.latency_s for s in pre if s.prompt_tokens == shortest]))
        a_pre = max(at_shortest - b_pre * shortest, 0.0)
    a_dec, b_dec = _line([s.concurrency - 1 for s in dec], [s.itl_s for s in dec])
    tau_dec = max(a_dec, 1e-9)
    slope = max(b_dec, 0.0) / tau_dec
    changes: dict[str, Any] = {}
    xfer = list(transfer)
    if len({s.prompt_tokens for s in xfer}) >= 2:
        a_x, b_x = _line([s.prompt_tokens for s in xfer], [s.latency_s for s in xfer])
        changes["xfer_latency_s"] = max(a_x, 0.0)
        if b_x > 0:
            changes["xfer_bandwidth_bytes_per_s"] = base.kv_bytes_per_token / b_x
    bandwidth = changes.get("xfer_bandwidth_bytes_per_s", base.xfer_bandwidth_bytes_per_s)
    ttft, tpot = slo_from_constants(max(a_pre, 0.0), max(b_pre, 0.0), tau_dec,
                                    changes.get("xfer_latency_s", base.xfer_latency_s),
                                    base.kv_bytes_per_token / bandwidth)
    return replace(
        base,
        name=name,
        tau_pre_base_s=max(a_pre, 0.0),
        tau_pre_per_token_s=max(b_pre, 0.0),
        tau_dec_s=tau_dec,
        dec_concurrency_slope=slope,
        ttft_tight_s=ttft,
        tpot_tight_s=tpot,
        **changes,
    )


def _line(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    return float(intercept), float(slope)


def write_shipped_cost_models(profile: str | Path = DEFAULT_PROFILE) -> list[Path]:
    """Regenerate ``data/calibration/{calibrated,sim_derived}.json`` from a hardware profile."""
    cal = CostModel.from_physics(load_profile(profile).physics)
    paths = []
    for model in (cal, sim_derived(cal)):
        path = CALIBRATION_DIR / f"{model.name}.json"
        model.save(path)
        paths.append(path)
    return paths
