"""§III-B, notebook 01: calibration is part of the method.

The router's cost constants (``tau_pre``, ``tau_dec``) and SLO targets are fitted by a short
benchmark of the cluster: a prefill latency curve and the decode rate under concurrency. In
``sim`` the benchmark runs against the hardware profile's Physics; on ``emulated``/``vllm`` it is
`repro.live.calibration_bench.calibrate` on a live cluster. Times in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from repro.engine.physics import Physics
from repro.engine.profile import load_profile
from repro.routing.cost_model import CostModel
from repro.vocab import DEFAULT_PROFILE

if TYPE_CHECKING:
    from repro.paper.section import Section

PREFILL_LENGTHS = (128, 256, 512, 1024, 1536, 2048)
CONCURRENCIES = (1, 2, 4, 8, 16)
TYPICAL_CONTEXT = 800
"""Tokens of context per decoding sequence in the decode benchmark."""
ROUNDS = (3, 10)
"""Benchmark rounds in sim at (quick, full) scale."""
LIVE_FULL_BUDGET_S = 300.0
"""Live benchmark budget (physics seconds) at full scale."""


def synthetic_calibration_samples(physics: Physics, *, prefill_lengths: Sequence[int] = PREFILL_LENGTHS,
                                  concurrencies: Sequence[int] = CONCURRENCIES, rounds: int = 3,
                                  noise: float = 0.02, seed: int = 0,
                                  context: int = TYPICAL_CONTEXT) -> pd.DataFrame:
    """The calibration benchmark run against the Physics (sim): same table as `repro.live.calibration_bench`.

    Prefill: one unbatched request per length and round. Decode: ``n`` sequences of ``context``
    tokens each decoding together; the inter-token latency is one decode step. Each measurement
    gets multiplicative log-normal noise of relative size ``noise`` (seeded), like a real timer.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for rnd in range(rounds):
        for L in prefill_lengths:
            t = physics.prefill_request_time_s(int(L)) * math.exp(noise * rng.standard_normal())
            rows.append(dict(phase="prefill", instance="sim-prefill-0", round=rnd, prompt_tokens=int(L),
                             concurrency=1, output_tokens=1, client_s=t, engine_s=t, mean_context=np.nan))
        for n in concurrencies:
            t = physics.decode_step_s(int(n), int(n) * context) * math.exp(noise * rng.standard_normal())
            rows.append(dict(phase="decode", instance="sim-decode-0", round=rnd, prompt_tokens=context,
                             concurrency=int(n), output_tokens=576, client_s=t, engine_s=t,
                             mean_context=float(context)))
    return pd.DataFrame(rows)


def calibrate_sim(profile: str = DEFAULT_PROFILE, *, seed: int = 0, rounds: int = 3,
                  noise: float = 0.02) -> tuple[CostModel, pd.DataFrame]:
    """Fit a CostModel from a synthetic benchmark of the profile's Physics: ``(model, samples)``."""
    from repro.live.calibration_bench import fit_samples

    physics = load_profile(profile).physics
    samples = synthetic_calibration_samples(physics, rounds=rounds, noise=noise, seed=seed)
    return fit_samples(samples, base=CostModel.load("calibrated"), name="fitted"), samples


def calibrate_live(ctx: Section, *, budget_s: float = 60.0) -> tuple[CostModel, pd.DataFrame]:
    """`repro.live.calibration_bench.calibrate` on ``ctx``'s live cluster (the file, else an emulated 1p1d);
    ``budget_s`` in physics seconds."""
    from repro.live.calibration_bench import calibrate

    with ctx.live_cluster("1p1d") as instances:
        model, samples = calibrate(instances, time_scale=ctx.time_scale, budget_s=budget_s)
    return model, samples


def fit(ctx: Section, *, budget_s: float) -> tuple[CostModel, pd.DataFrame]:
    """The notebook's calibration: ``(fitted model, samples)``. Sim: `calibrate_sim` with the first seed
    and `ROUNDS` rounds; live: `calibrate_live` with ``budget_s`` at quick scale, `LIVE_FULL_BUDGET_S` at full."""
    quick = ctx.scale == "quick"
    if ctx.backend == "sim":
        return calibrate_sim(seed=ctx.seeds[0], rounds=ROUNDS[0] if quick else ROUNDS[1])
    return calibrate_live(ctx, budget_s=budget_s if quick else LIVE_FULL_BUDGET_S)


CONSTANTS = (
    ("tau_pre_base_s", "s", "sim_prefill_base_measured"),
    ("tau_pre_per_token_s", "s/token", None),
    ("tau_dec_s", "s/token", "sim_tau_dec_measured"),
    ("dec_concurrency_slope", "1/seq", None),
    ("ttft_tight_s", "s", "slo_ttft_tight"),
    ("tpot_tight_s", "s", "slo_tpot_tight"),
)
"""(CostModel field, unit, paper reference key or None)."""


def constants_table(fitted: CostModel, shipped: CostModel, sim_derived: CostModel) -> pd.DataFrame:
    """One row per constant: fitted, shipped calibrated, shipped simulator-derived, the paper's value."""
    from repro.paper import reference as paper_reference

    rows = []
    for name, unit, key in CONSTANTS:
        f, s, d = (float(getattr(m, name)) for m in (fitted, shipped, sim_derived))
        rows.append({"constant": name, "unit": unit, "fitted": f, "shipped_calibrated": s,
                     "shipped_sim_derived": d, "paper": paper_reference.lookup(key) if key else np.nan,
                     "fitted_vs_shipped_rel_error": (f - s) / s if s else np.nan})
    return pd.DataFrame(rows)


def calibration_curves(samples: pd.DataFrame, fitted: CostModel, shipped: CostModel,
                       sim_derived: CostModel) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tidy frames for the two §III-B figures: measured points and each model's line.

    Returns ``(prefill, decode)``: prefill has (prompt_tokens, latency_s, source), decode has
    (concurrency, itl_s, source); source is 'measured', 'fitted', 'shipped calibrated' or
    'simulator-derived'.
    """
    s = samples.copy()
    s["value_s"] = s["engine_s"].where(s["engine_s"].notna(), s["client_s"])
    pre = s[s.phase == "prefill"]
    dec = s[s.phase == "decode"]
    p_rows = [{"prompt_tokens": int(r.prompt_tokens), "latency_s": float(r.value_s), "source": "measured"}
              for r in pre.itertuples()]
    d_rows = [{"concurrency": int(r.concurrency), "itl_s": float(r.value_s), "source": "measured"}
              for r in dec.itertuples()]
    xs_p = sorted(set(pre.prompt_tokens.astype(int)))
    xs_d = sorted(set(dec.concurrency.astype(int)))
    for label, m in (("fitted", fitted), ("shipped calibrated", shipped), ("simulator-derived", sim_derived)):
        for L in xs_p:
            p_rows.append({"prompt_tokens": L, "latency_s": m.tau_pre_base_s + m.tau_pre_per_token_s * L,
                           "source": label})
        for n in xs_d:
            d_rows.append({"concurrency": n, "itl_s": m.tau_dec_s * (1 + m.dec_concurrency_slope * (n - 1)),
                           "source": label})
    return pd.DataFrame(p_rows), pd.DataFrame(d_rows)


def calibration_headline(fitted: CostModel, sim_derived: CostModel, backend: str) -> list[dict[str, float | str]]:
    """Headline rows: measured / simulator-derived ``tau_dec`` (x), the fitted constants and SLO targets (s).

    On ``sim`` and ``emulated`` the engines' timing is a physics profile that holds the paper's A40
    numbers, so fitting recovers what the model was given: those rows are ``input`` (a check of the
    fit, never a reproduction). On ``vllm`` they are measured on the engines."""
    kind = "value" if backend == "vllm" else "input"
    return [{**row, "kind": kind} for row in (
        {"key": "sim_tau_dec_underestimate", "ours": fitted.tau_dec_s / sim_derived.tau_dec_s},
        {"key": "sim_tau_dec_measured", "ours": fitted.tau_dec_s},
        {"key": "sim_prefill_base_measured", "ours": fitted.tau_pre_base_s},
        {"key": "slo_ttft_tight", "ours": fitted.ttft_tight_s},
        {"key": "slo_tpot_tight", "ours": fitted.tpot_tight_s},
    )]
