"""§VI, notebook 12: simulation predicts structure, not magnitudes.

- `batching_physics_table`: why serial service overstates head-of-line blocking.
- `anchor_rate` / `anchored_grids`: re-anchor a simulator's rate on the reference's round-robin
  goodput, then run the grid there; `residual_grid` / `residual_summary`: the 4x4 grid.
- `calibration_in_sim_specs` / `calibration_in_sim_table`: oracle vs ledger backlog, calibrated vs
  simulator-derived constants.

Goodput a fraction, changes in goodput *points* (1 point = 0.01), rates in req/s, times in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import reference as paper_reference
from repro.routing.policies import PAPER_POLICIES
from repro.vocab import DEFAULT_PROFILE

if TYPE_CHECKING:
    from repro.paper.section import Labelled, Section

SIM_MODELS = ("serial", "batching")
"""The simulator's service models compared with a live reference (in sim: only serial)."""
SIM_REFERENCE = "sim-batching (stand-in for hardware)"
"""The reference's name when the notebook runs on the simulator."""


def reference_name(ctx: Section) -> str:
    """What the residual grid compares with: the live backend, or in sim the batching simulator."""
    return ctx.backend if ctx.live else SIM_REFERENCE


def sim_models(ctx: Section) -> list[str]:
    """The simulator service models compared with the reference: both on a live backend, serial in sim."""
    return list(SIM_MODELS) if ctx.live else [SIM_MODELS[0]]


def batching_physics_table(profile: str = DEFAULT_PROFILE, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16),
                           context_tokens: int = 800) -> pd.DataFrame:
    """Per batch size n: the batching engine's per-token cost relative to n = 1 (one step serves all n)
    beside a serial model's wait for the n-th request (n x): §VI's 2.9 % vs 8 x at n = 8.

    ``context_tokens`` per sequence: 800, the calibration benchmark's typical context
    (`repro.paper.sections.calibration.TYPICAL_CONTEXT`)."""
    from repro.engine.physics import Physics

    ph = Physics.load(profile)
    one = ph.decode_step_s(1, context_tokens)
    rows = []
    for n in batch_sizes:
        step = ph.decode_step_s(int(n), int(n) * context_tokens)
        rows.append({"batch": int(n), "step_s": step, "batching_per_token_increase_pct": (step / one - 1.0) * 100.0,
                     "serial_wait_factor": float(n)})
    return pd.DataFrame(rows)


def anchor_rate(base: RunSpec, target_goodput: float, *, hi_rate: float | None = None, band: float = 0.01,
                max_probes: int = 24, min_rate: float = 1e-4,
                probe: Callable[[RunSpec], float] | None = None) -> tuple[float, list[tuple[float, float]]]:
    """The arrival rate at which ``base`` (its round-robin) reaches ``target_goodput`` on the simulator.

    §VI's re-anchoring: the simulator is driven at the rate where its round-robin goodput matches
    the reference's, so that its verdict on the other policies is a prediction, not a fit.
    Goodput falls with the rate: step down by 10x from ``hi_rate`` (default ``base.rate``) until at
    or above the target, then bisect in log-rate. Returns ``(rate, probes)``, probes as (rate, goodput).
    """
    from repro.experiment.inputs import truth_cost_model
    from repro.experiment.metrics import summarize
    from repro.experiment.runner import simulate_spec

    if not 0 < target_goodput <= 1:
        raise ConfigError(f"anchor: target goodput must be in (0, 1], got {target_goodput!r}")
    rr = base.replace(policy="round_robin", policy_options={})

    def default_probe(spec: RunSpec) -> float:
        return float(summarize(simulate_spec(spec), truth_cost_model(spec).slo, sent=spec.n_requests)["goodput"])

    probe = probe or default_probe
    probes: list[tuple[float, float]] = []

    def g(rate: float) -> float:
        v = float(probe(rr.replace(rate=float(rate))))
        probes.append((float(rate), v))
        return v

    hi = float(hi_rate or base.rate)
    if g(hi) >= target_goodput - band:
        return hi, probes
    lo = hi
    while True:
        lo = lo / 10.0
        if lo < min_rate:
            raise ConfigError(f"anchor: the simulator's round-robin does not reach goodput {target_goodput:.3f} "
                              f"above {min_rate} req/s on {base.workload}")
        v = g(lo)
        if v >= target_goodput - band:
            break
        hi = lo
    while len(probes) < max_probes:
        best = min(probes, key=lambda p: abs(p[1] - target_goodput))
        if abs(best[1] - target_goodput) <= band:
            break
        mid = math.sqrt(lo * hi)
        if g(mid) >= target_goodput:
            lo = mid
        else:
            hi = mid
    best = min(probes, key=lambda p: abs(p[1] - target_goodput))
    return best[0], probes


def grid_specs(ctx: Section, rates: Mapping[str, float], *, service: str = "batching",
               policies: Sequence[str] = PAPER_POLICIES, topology: str = "2p4d") -> list[Labelled]:
    """The workloads of ``rates`` (req/s each) x ``policies`` x traces on ``ctx``'s backend, with the
    simulator's ``service`` model; labels empty."""
    return [({}, RunSpec.from_flat(backend=ctx.backend, workload=wl, topology=topology, seed=int(s),
                                   rate=float(rates[wl]), n_requests=int(ctx.n_requests), policy=p, service=service,
                                   cluster=ctx.cluster, time_scale=ctx.time_scale))
            for wl in rates for p in policies for s in ctx.seeds]


def anchored_grids(ctx: Section, reference: pd.DataFrame, rates: Mapping[str, float], *, models: Sequence[str],
                   policies: Sequence[str], anchor_requests: int
                   ) -> tuple[dict[str, dict[str, float]], pd.DataFrame, list[pd.DataFrame]]:
    """Per simulator service model: its rate re-anchored per workload on the reference's round-robin goodput
    (`anchor_rate`, first trace, probes of ``anchor_requests``), then its grid (`grid_specs`) at those rates.

    ``reference``: rows of `Section.run` (workload, policy, goodput). Returns ``(anchored, probes, runs)``:
    model -> workload -> rate; the probes (model, workload, probe, rate, round_robin_goodput, target);
    one frame of runs per model (``role`` = the model).
    """
    sim = ctx.simulator()
    anchored: dict[str, dict[str, float]] = {}
    probes: list[dict[str, Any]] = []
    model_runs = []
    for model in models:
        anchored[model] = {}
        for wl, rate in rates.items():
            target = float(reference[(reference.workload == wl) & (reference.policy == "round_robin")].goodput.mean())
            base = RunSpec.from_flat(backend="sim", workload=wl, seed=ctx.seeds[0], rate=rate,
                                     n_requests=anchor_requests, service=model)
            r, pr = anchor_rate(base, target)
            anchored[model][wl] = r
            probes += [{"model": model, "workload": wl, "probe": i, "rate": x, "round_robin_goodput": g,
                        "target": target} for i, (x, g) in enumerate(pr)]
        runs = sim.run(grid_specs(sim, anchored[model], policies=policies, service=model))
        runs["role"] = model
        model_runs.append(runs)
    return anchored, pd.DataFrame(probes), model_runs


def residual_grid(reference: pd.DataFrame, model: pd.DataFrame, model_name: str) -> pd.DataFrame:
    """The 4x4 grid: per (workload, policy), the reference's and the model's mean goodput over traces,
    the residual (model - reference) and P99 TTFT of both."""
    ref = reference.groupby(["workload", "policy"], sort=False).agg(
        ref_goodput=("goodput", "mean"), ref_ttft_p99_s=("ttft_p99_s", "mean"), ref_rate=("rate", "first"))
    mod = model.groupby(["workload", "policy"], sort=False).agg(
        model_goodput=("goodput", "mean"), model_ttft_p99_s=("ttft_p99_s", "mean"), model_rate=("rate", "first"))
    grid = ref.join(mod, how="inner").reset_index()
    grid.insert(0, "model", model_name)
    grid["residual"] = grid.model_goodput - grid.ref_goodput
    grid["abs_residual"] = grid.residual.abs()
    grid["ttft_p99_ratio"] = grid.model_ttft_p99_s / grid.ref_ttft_p99_s
    grid["rate_ratio"] = grid.ref_rate / grid.model_rate
    return grid


def residual_summary(grid: pd.DataFrame, bursty: str = "mixed") -> pd.DataFrame:
    """Per model: mean absolute residual, winners reproduced, rate gap, P99 TTFT overstatement, bursty spread.

    ``ttft_p99_ratio_lo``/``_hi``: the range over workloads of the model's P99 TTFT over the
    reference's (policies averaged); ``rate_ratio_*``: reference rate / the model's anchored rate.
    """
    def spread(goodput: pd.Series) -> float:
        return float(goodput.max() - goodput.min()) if len(goodput) else math.nan

    rows = []
    for name, g in grid.groupby("model", sort=False):
        winners = 0
        for _, w in g.groupby("workload"):
            winners += int(w.loc[w.ref_goodput.idxmax(), "policy"] == w.loc[w.model_goodput.idxmax(), "policy"])
        per_wl = g.groupby("workload").agg(ratio=("ttft_p99_ratio", "mean"), rate_ratio=("rate_ratio", "first"))
        b = g[g.workload == bursty]
        rows.append({"model": name, "cells": len(g), "mean_abs_residual": float(g.abs_residual.mean()),
                     "winners_reproduced": winners, "workloads": int(g.workload.nunique()),
                     "ttft_p99_ratio_lo": float(per_wl.ratio.min()), "ttft_p99_ratio_hi": float(per_wl.ratio.max()),
                     "rate_ratio_lo": float(per_wl.rate_ratio.min()), "rate_ratio_hi": float(per_wl.rate_ratio.max()),
                     "bursty_spread_model": spread(b.model_goodput), "bursty_spread_reference": spread(b.ref_goodput)})
    return pd.DataFrame(rows)


def calibration_in_sim_specs(ctx: Section, services: Mapping[str, float] | None = None, *,
                             topology: str = "2p4d", workload: str = "mixed") -> list[Labelled]:
    """§VI's "calibration is invisible in simulation": the router with calibrated vs simulator-derived
    constants, backlog from the oracle (true remaining work) or from the ledger (the proxy's estimate),
    on the simulator with ``ctx``'s traces and requests per run.

    ``services`` maps each simulator service model ('batching', 'serial') to its arrival rate (req/s;
    a serial simulator needs its own, re-anchored rate). Default: batching at 16 req/s.
    """
    services = services or {"batching": 16.0}
    return [({}, RunSpec.from_flat(backend="sim", workload=workload, topology=topology, seed=int(s), rate=float(rate),
                                   n_requests=int(ctx.n_requests), policy="marginal_cost", cost_model=cm, backlog=bl,
                                   service=sv))
            for sv, rate in services.items() for bl in ("oracle", "ledger") for cm in ("calibrated", "sim_derived")
            for s in ctx.seeds]


def calibration_in_sim_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (service, backlog): goodput and P99 TTFT calibrated vs simulator-derived, and the calibration gain."""
    rows = []
    for (sv, bl), g in runs.groupby(["service", "backlog"], sort=False):
        c = g[g.cost_model == "calibrated"].set_index("seed")
        d = g[g.cost_model == "sim_derived"].set_index("seed")
        seeds = sorted(set(c.index) & set(d.index))
        gain = (c.loc[seeds, "goodput"].to_numpy(float) - d.loc[seeds, "goodput"].to_numpy(float)) * 100.0
        rows.append({"service": sv, "backlog": bl, "rate": float(g.rate.iloc[0]),
                     "goodput_calibrated": float(c.goodput.mean()), "goodput_sim_derived": float(d.goodput.mean()),
                     "calibration_gain_points": float(gain.mean()),
                     "gain_sd": float(gain.std(ddof=1)) if len(gain) > 1 else 0.0,
                     "ttft_p99_calibrated_s": float(c.ttft_p99_s.mean()),
                     "ttft_p99_sim_derived_s": float(d.ttft_p99_s.mean()),
                     "paper_gain_points": (paper_reference.lookup("sim_calib_goodput_gain") if bl == "ledger"
                                           else math.nan),
                     "paper_hardware_gain_points": paper_reference.lookup("calib_goodput_gain")})
    return pd.DataFrame(rows)


def sim_vs_hardware_headline(summary: pd.DataFrame, calib: pd.DataFrame, physics: pd.DataFrame,
                             primary: str) -> list[dict[str, Any]]:
    """Headline rows of §VI. ``primary`` names the model row whose residual stands for ``sim_grid_mar``."""
    s = summary.set_index("model")
    out = []
    if primary in s.index:
        p = s.loc[primary]
        out += [{"key": "sim_grid_mar", "ours": p.mean_abs_residual},
                {"key": "sim_grid_winners_reproduced", "ours": p.winners_reproduced}]
    if "serial" in s.index:
        out += [{"key": "sim_mar_serial", "ours": s.loc["serial", "mean_abs_residual"]},
                {"key": "sim_rate_gap_serial", "ours": s.loc["serial", "rate_ratio_hi"]},
                {"key": "sim_ttft_p99_overstated_serial_lo", "ours": s.loc["serial", "ttft_p99_ratio_lo"]},
                {"key": "sim_ttft_p99_overstated_serial_hi", "ours": s.loc["serial", "ttft_p99_ratio_hi"]}]
    if "batching" in s.index:
        out += [{"key": "sim_mar_batching", "ours": s.loc["batching", "mean_abs_residual"]},
                {"key": "sim_ttft_p99_overstated_batching_lo", "ours": s.loc["batching", "ttft_p99_ratio_lo"]},
                {"key": "sim_ttft_p99_overstated_batching_hi", "ours": s.loc["batching", "ttft_p99_ratio_hi"]},
                {"key": "sim_bursty_policy_spread", "ours": s.loc["batching", "bursty_spread_model"]}]
    if primary in s.index and not pd.isna(s.loc[primary, "bursty_spread_reference"]):
        out.append({"key": "hw_bursty_policy_spread", "ours": s.loc[primary, "bursty_spread_reference"]})
    b8 = physics[physics.batch == 8]
    if len(b8):
        out += [{"key": "decode_batch8_penalty", "ours": float(b8.batching_per_token_increase_pct.iloc[0])},
                {"key": "serial_batch8_wait", "ours": float(b8.serial_wait_factor.iloc[0])}]
    c = calib.set_index(["service", "backlog"])
    for (sv, bl), r in c.iterrows():
        if sv != "batching":
            continue
        if bl == "ledger":
            out += [{"key": "sim_calib_goodput_gain", "ours": r.calibration_gain_points},
                    {"key": "sim_miscal_ttft_p99_calibrated", "ours": r.ttft_p99_calibrated_s},
                    {"key": "sim_miscal_ttft_p99_miscalibrated", "ours": r.ttft_p99_sim_derived_s}]
        else:
            out.append({"key": "sim_calib_goodput_gain_oracle", "ours": r.calibration_gain_points, "paper": 0.0,
                        "unit": "points"})
    return out
