"""Logic behind notebooks 10-13 (§V-G, §V-H, §VI and beyond the paper); the notebooks stay thin.

Same conventions as `repro.paper.section`: tidy pandas frames, times in seconds, goodput a
fraction, changes in goodput *points* (1 point = 0.01). ``backend='sim'`` runs in-process and
deterministically; ``emulated``/``vllm`` go through the live harness via
`repro.paper.section.run_grid`.

- §V-G (Fig. 8): `ablation_specs`, `ablation_table`, `ablation_headline`: the marginal-cost router
  with one term switched off, at a steady-load and a saturation operating point, as the change in
  goodput against the full router on the same trace (paired by seed).
- §V-H (Fig. 9): `noise_specs`, `noise_table`, `noise_headline`: injected relative error in the
  output-length predictor, the router against the length-threshold heuristic.
- §VI: `batching_physics_table` (why serial service overstates head-of-line blocking),
  `anchor_rate` (re-anchor a simulator's rate on the reference's round-robin goodput),
  `residual_grid`/`residual_summary` (the 4x4 grid), `calibration_in_sim_specs`/`_table` (oracle
  vs ledger backlog, calibrated vs simulator-derived constants).
- Beyond (issue 6): `frontier_specs`, `workload_specs`, `beyond_goals`, `vllm_router_runs`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.paper import plans as scale_mod
from repro.paper import reference as paper_reference
from repro.paper.section import PAPER_POLICIES, WORKLOADS, run_grid

# The workloads' saturation rates on the simulator (req/s, 2p4d, round-robin mid-collapse): the
# rates of `repro saturate` at 4,000-request probes. Live backends run the same physics, so these
# are the defaults there too; a notebook can ask for a fresh search instead.
SIM_SATURATION_RATES = scale_mod.SIM_SATURATION_RATES


# ---- shared ----------------------------------------------------------------------------------
def scale_plan(backend: str, scale: str, seeds: Sequence[int] | None, n_requests: int, *,
               sim: tuple[int, int] = scale_mod.SIM_REQUESTS, live: tuple[int, int] = scale_mod.LIVE_REQUESTS,
               quick_seeds: Sequence[int] = (1, 2), full_seeds: Sequence[int] = (1, 2, 3)) -> tuple[list[int], int]:
    """``(seeds, n_requests)`` for a notebook: given values win; empty/0 mean the scale default.

    Sim quick: ``quick_seeds`` traces of ``sim[0]`` requests; live quick: one trace of ``live[0]``
    (see `repro.paper.plans`). Full scale: the paper's protocol, three traces of ``sim[1]`` or ``live[1]``.
    """
    return scale_mod.seeds_and_requests(backend, scale, seeds, n_requests, quick_seeds=quick_seeds,
                                        full_seeds=full_seeds, sim=sim, live=live)


def check_rates(rates: dict[str, float], workloads: Sequence[str] = WORKLOADS) -> dict[str, float]:
    """A per-workload rate table (req/s); a missing workload or a rate <= 0 is an error saying so."""
    if not isinstance(rates, dict):
        raise ConfigError(f"parameter 'rates' = {rates!r} must be a mapping workload -> req/s")
    missing = [w for w in workloads if w not in rates]
    if missing:
        raise ConfigError(f"parameter 'rates' lacks {missing}; give every workload a rate (req/s), or {{}} for a saturation search")
    out = {}
    for w in workloads:
        r = rates[w]
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise ConfigError(f"parameter 'rates'[{w!r}] = {r!r} must be a rate > 0 (req/s)")
        out[w] = float(r)
    return out


def run_labelled(items: Sequence[tuple[dict[str, Any], Any]], runs_dir: str | Path = "runs/paper",
                 on_run: Any = None) -> pd.DataFrame:
    """Run ``(labels, spec)`` pairs with `run_grid`; one row per run: labels + spec switches + summary.

    Adds the spec fields `run_grid` leaves out (``policy_options`` as sorted JSON,
    ``predictor_noise``, ``service``, ``backlog``) so that every run is told apart in the CSV.
    """
    if not items:
        return pd.DataFrame()
    specs = [s for _, s in items]
    runs = run_grid(specs, runs_dir, on_run=on_run)
    extra = pd.DataFrame([{**lab, "policy_options": json.dumps(s.policy_options, sort_keys=True),
                           "predictor_noise": float(s.predictor_noise), "service": s.service, "backlog": s.backlog}
                          for lab, s in items])
    dup = [c for c in extra.columns if c in runs.columns]
    return pd.concat([extra, runs.drop(columns=dup)], axis=1)


def _ref(key: str) -> float:
    return paper_reference.lookup(key)


# ---- §V-G: feature ablation (Fig. 8) ----------------------------------------------------------
ABLATION_FEATURES = (
    ("backlog", "use_backlog"),
    ("length", "use_length"),
    ("cache_pressure", "use_cache_pressure"),
    ("slo", "use_slo"),
)
FEATURE_LABELS = {"backlog": "seconds of backlog", "length": "predicted output length",
                  "cache_pressure": "cache pressure", "slo": "SLO tightness"}
OPERATING_POINTS = ("steady", "saturation")
# (operating point, cost model, feature) -> (paper key, sign): our "change" = without - full (points);
# the paper states the length losses as positive losses, hence the sign.
ABLATION_PAPER = {
    ("steady", "calibrated", "length"): ("fig8_no_length_steady", -1.0),
    ("saturation", "calibrated", "length"): ("fig8_no_length_sat", -1.0),
    ("steady", "calibrated", "cache_pressure"): ("fig8_cache_pressure", 1.0),
    ("saturation", "calibrated", "cache_pressure"): ("fig8_cache_pressure", 1.0),
    ("steady", "calibrated", "slo"): ("fig8_slo_moderate", 1.0),
    ("saturation", "calibrated", "slo"): ("fig8_slo_sat", 1.0),
    ("steady", "sim_derived", "slo"): ("fig8_slo_uncalibrated", 1.0),
}


def operating_rates(saturation_rate: float, steady_fraction: float = 0.75) -> dict[str, float]:
    """The two operating points of §V-G: steady load (a fraction of the saturation rate) and saturation."""
    if not saturation_rate > 0:
        raise ConfigError(f"saturation rate must be > 0 req/s, got {saturation_rate!r}")
    if not 0 < steady_fraction < 1:
        raise ConfigError(f"parameter 'steady_fraction' = {steady_fraction!r} must be in (0, 1)")
    return {"steady": float(saturation_rate) * steady_fraction, "saturation": float(saturation_rate)}


def ablation_specs(*, backend: str = "sim", seeds: Sequence[int] = (1, 2), rates: dict[str, float] | None = None,
                   n_requests: int = 2000, topology: str = "2p4d", workload: str = "mixed",
                   cluster: Optional[str] = None, time_scale: float = 1.0,
                   uncalibrated_features: Sequence[str] = ("slo",),
                   features: Optional[Sequence[str]] = None) -> list[tuple[dict[str, Any], Any]]:
    """``(labels, spec)`` for Fig. 8: the full router and each term off, per operating point and seed.

    With the calibrated cost model every term is ablated; with the simulator-derived constants
    (``sim_derived``) the features in ``uncalibrated_features`` are (the paper's -12-point SLO case).
    ``features`` limits the calibrated ablations (default: every term of `ABLATION_FEATURES`).
    """
    from repro.experiment.spec import RunSpec

    rates = rates or operating_rates(16.0)
    known = {f for f, _ in ABLATION_FEATURES}
    features = list(features) if features else [f for f, _ in ABLATION_FEATURES]
    bad = [f for f in [*uncalibrated_features, *features] if f not in known]
    if bad:
        raise ConfigError(f"ablation: unknown feature(s) {bad}; allowed: {sorted(known)}")
    out = []
    for op, rate in rates.items():
        for cm, feats in (("calibrated", features), ("sim_derived", list(uncalibrated_features))):
            if not feats:
                continue
            for variant in ["full", *feats]:
                opts = {} if variant == "full" else {dict(ABLATION_FEATURES)[variant]: False}
                for s in seeds:
                    spec = RunSpec(backend=backend, workload=workload, topology=topology, seed=int(s), rate=float(rate),
                                   n_requests=int(n_requests), policy="marginal_cost", policy_options=opts,
                                   cost_model=cm, cluster=cluster, time_scale=time_scale)
                    out.append(({"operating_point": op, "variant": variant}, spec))
    return out


def ablation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (operating point, cost model, feature): goodput with and without, the paired change (points).

    ``change_points`` = mean over seeds of (goodput without the term - goodput of the full router on
    the same trace) x 100; ``change_sd`` its standard deviation over seeds; ``paper_change_points``
    the paper's value in the same sign convention (negative = the term helps).
    """
    rows = []
    for (op, cm), g in runs.groupby(["operating_point", "cost_model"], sort=False):
        full = g[g.variant == "full"].set_index("seed")
        for feat, _ in ABLATION_FEATURES:
            w = g[g.variant == feat].set_index("seed")
            if w.empty:
                continue
            seeds = sorted(set(full.index) & set(w.index))
            d = (w.loc[seeds, "goodput"].to_numpy(float) - full.loc[seeds, "goodput"].to_numpy(float)) * 100.0
            key, sign = ABLATION_PAPER.get((op, cm, feat), (None, 1.0))
            rows.append({"operating_point": op, "cost_model": cm, "feature": feat, "rate": float(full.rate.iloc[0]),
                         "full_goodput": float(full.loc[seeds, "goodput"].mean()),
                         "without_goodput": float(w.loc[seeds, "goodput"].mean()),
                         "change_points": float(d.mean()), "change_sd": float(d.std(ddof=1)) if len(d) > 1 else 0.0,
                         "seeds": len(seeds), "paper_key": key or "",
                         "paper_change_points": sign * _ref(key) if key else np.nan})
    return pd.DataFrame(rows)


def ablation_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    """Headline rows in the reference's own conventions (the length rows are *losses*, positive)."""
    t = tab.set_index(["operating_point", "cost_model", "feature"])
    out = []

    def get(op, cm, feat):
        return float(t.loc[(op, cm, feat), "change_points"]) if (op, cm, feat) in t.index else None

    for op, key in (("steady", "fig8_no_length_steady"), ("saturation", "fig8_no_length_sat")):
        v = get(op, "calibrated", "length")
        if v is not None:
            out.append({"key": key, "ours": -v})
    cp = [v for v in (get(op, "calibrated", "cache_pressure") for op in OPERATING_POINTS) if v is not None]
    if cp:  # "nothing measurable": the larger-magnitude change of the two regimes
        out.append({"key": "fig8_cache_pressure", "ours": max(cp, key=abs)})
    for op, key in (("steady", "fig8_slo_moderate"), ("saturation", "fig8_slo_sat")):
        v = get(op, "calibrated", "slo")
        if v is not None:
            out.append({"key": key, "ours": v})
    v = get("steady", "sim_derived", "slo")
    if v is not None:
        out.append({"key": "fig8_slo_uncalibrated", "ours": v})
    cal = tab[tab.cost_model == "calibrated"]
    if len(cal):
        largest = all(g.sort_values("change_points").iloc[0].feature == "length"
                      for _, g in cal.groupby("operating_point"))
        out.append({"key": "fig8_length_largest_loss", "ours": float(largest)})
    return out


# ---- §V-H: predictor noise (Fig. 9) --------------------------------------------------------------
NOISE_LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)


def noise_specs(*, backend: str = "sim", seeds: Sequence[int] = (1, 2), rate: float = 16.0, n_requests: int = 2000,
                noise_levels: Sequence[float] = NOISE_LEVELS, policies: Sequence[str] = ("marginal_cost", "length_threshold"),
                reference: Optional[str] = "round_robin", topology: str = "2p4d", workload: str = "mixed",
                cluster: Optional[str] = None, time_scale: float = 1.0) -> list[tuple[dict[str, Any], Any]]:
    """``(labels, spec)`` for Fig. 9: each length-aware policy at each injected relative error.

    The noise draw is seeded per trace (``predictor_seed = seed``). ``reference`` (blind to the
    predictor) runs once per trace as a horizontal reference line.
    """
    from repro.experiment.spec import RunSpec

    levels = [float(x) for x in noise_levels]
    if not levels or any(not (0 <= x <= 10) for x in levels):
        raise ConfigError(f"parameter 'noise_levels' = {noise_levels!r} must be relative errors in [0, 10]")
    out = []
    base = dict(backend=backend, workload=workload, topology=topology, rate=float(rate), n_requests=int(n_requests),
                cluster=cluster, time_scale=time_scale)
    for pol in policies:
        for x in levels:
            for s in seeds:
                out.append(({"noise": x}, RunSpec(**base, seed=int(s), policy=pol, predictor_noise=x, predictor_seed=int(s))))
    if reference:
        for s in seeds:
            out.append(({"noise": np.nan}, RunSpec(**base, seed=int(s), policy=reference)))
    return out


def noise_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (policy, noise): mean goodput over traces, sd, P99 TTFT (reference policy: noise NaN)."""
    rows = []
    for (pol, x), g in runs.groupby(["policy", "noise"], sort=False, dropna=False):
        v = g.goodput.to_numpy(float)
        rows.append({"policy": pol, "noise": x, "noise_pct": x * 100.0 if not pd.isna(x) else np.nan,
                     "mean_goodput": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                     "mean_ttft_p99_s": float(g.ttft_p99_s.mean()), "seeds": len(v)})
    return pd.DataFrame(rows)


def noise_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    """fig9 lo/hi of the router over the noise levels, the range, and router vs heuristic at the worst noise."""
    mc = tab[(tab.policy == "marginal_cost") & tab.noise.notna()]
    lt = tab[(tab.policy == "length_threshold") & tab.noise.notna()]
    lo, hi = float(mc.mean_goodput.min()), float(mc.mean_goodput.max())
    worst = float(mc.noise.max())
    mc_w = float(mc[mc.noise == worst].mean_goodput.iloc[0])
    out = [{"key": "fig9_goodput_lo", "ours": lo}, {"key": "fig9_goodput_hi", "ours": hi},
           {"key": "fig9_range_points", "ours": (hi - lo) * 100.0,
            "paper": (_ref("fig9_goodput_hi") - _ref("fig9_goodput_lo")) * 100.0, "unit": "points"},
           {"key": "fig9_max_noise", "ours": worst * 100.0},
           {"key": "fig9_mc_goodput_worst_noise", "ours": mc_w, "unit": "fraction"}]
    if len(lt) and (lt.noise == worst).any():
        lt_w = float(lt[lt.noise == worst].mean_goodput.iloc[0])
        out += [{"key": "fig9_lt_goodput_worst_noise", "ours": lt_w, "unit": "fraction"},
                {"key": "fig9_mc_beats_lt_at_worst_noise", "ours": float(mc_w > lt_w), "paper": 1.0, "unit": "bool"}]
    return out


# ---- §VI: simulation vs hardware ---------------------------------------------------------------
def batching_physics_table(profile: str = "a40-qwen2.5-3b", batch_sizes: Sequence[int] = (1, 2, 4, 8, 16),
                           context_tokens: int = 800) -> pd.DataFrame:
    """Per batch size n: the batching engine's per-token cost relative to n = 1 (one step serves all n)
    beside a serial model's wait for the n-th request (n x): §VI's 2.9 % vs 8 x at n = 8.

    ``context_tokens`` per sequence: 800, the calibration benchmark's typical context
    (`repro.paper.section.TYPICAL_CONTEXT`)."""
    from repro.engine.physics import Physics

    ph = Physics.load(profile)
    one = ph.decode_step_s(1, context_tokens)
    rows = []
    for n in batch_sizes:
        step = ph.decode_step_s(int(n), int(n) * context_tokens)
        rows.append({"batch": int(n), "step_s": step, "batching_per_token_increase_pct": (step / one - 1.0) * 100.0,
                     "serial_wait_factor": float(n)})
    return pd.DataFrame(rows)


def anchor_rate(base: Any, target_goodput: float, *, hi_rate: Optional[float] = None, band: float = 0.01,
                max_probes: int = 24, min_rate: float = 1e-4,
                probe: Optional[Callable[[Any], float]] = None) -> tuple[float, list[tuple[float, float]]]:
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

    def default_probe(spec: Any) -> float:
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


def residual_grid(reference: pd.DataFrame, model: pd.DataFrame, model_name: str) -> pd.DataFrame:
    """The 4x4 grid: per (workload, policy), the reference's and the model's mean goodput over traces,
    the residual (model - reference) and P99 TTFT of both."""
    ref = reference.groupby(["workload", "policy"], sort=False).agg(ref_goodput=("goodput", "mean"), ref_ttft_p99_s=("ttft_p99_s", "mean"), ref_rate=("rate", "first"))
    mod = model.groupby(["workload", "policy"], sort=False).agg(model_goodput=("goodput", "mean"), model_ttft_p99_s=("ttft_p99_s", "mean"), model_rate=("rate", "first"))
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
                     "bursty_spread_model": float(b.model_goodput.max() - b.model_goodput.min()) if len(b) else np.nan,
                     "bursty_spread_reference": float(b.ref_goodput.max() - b.ref_goodput.min()) if len(b) else np.nan})
    return pd.DataFrame(rows)


def grid_specs(*, backend: str, seeds: Sequence[int], rates: dict[str, float], n_requests: int,
               service: str = "batching", policies: Sequence[str] = PAPER_POLICIES, topology: str = "2p4d",
               cluster: Optional[str] = None, time_scale: float = 1.0) -> list[tuple[dict[str, Any], Any]]:
    """Four workloads x ``policies`` x seeds at the given per-workload rates."""
    from repro.experiment.spec import RunSpec

    return [({}, RunSpec(backend=backend, workload=wl, topology=topology, seed=int(s), rate=float(rates[wl]),
                         n_requests=int(n_requests), policy=p, service=service, cluster=cluster, time_scale=time_scale))
            for wl in rates for p in policies for s in seeds]


def calibration_in_sim_specs(*, seeds: Sequence[int] = (1, 2), services: dict[str, float] | None = None,
                             n_requests: int = 2000, topology: str = "2p4d",
                             workload: str = "mixed") -> list[tuple[dict[str, Any], Any]]:
    """§VI's "calibration is invisible in simulation": the router with calibrated vs simulator-derived
    constants, backlog from the oracle (true remaining work) or from the ledger (the proxy's estimate).

    ``services`` maps each simulator service model ('batching', 'serial') to its arrival rate (req/s;
    a serial simulator needs its own, re-anchored rate). Default: batching at 16 req/s.
    """
    from repro.experiment.spec import RunSpec

    services = services or {"batching": 16.0}
    return [({}, RunSpec(backend="sim", workload=workload, topology=topology, seed=int(s), rate=float(rate),
                         n_requests=int(n_requests), policy="marginal_cost", cost_model=cm, backlog=bl, service=sv))
            for sv, rate in services.items() for bl in ("oracle", "ledger") for cm in ("calibrated", "sim_derived")
            for s in seeds]


def calibration_in_sim_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (service, backlog): goodput and P99 TTFT calibrated vs simulator-derived, and the calibration gain."""
    rows = []
    for (sv, bl), g in runs.groupby(["service", "backlog"], sort=False):
        c = g[g.cost_model == "calibrated"].set_index("seed")
        d = g[g.cost_model == "sim_derived"].set_index("seed")
        seeds = sorted(set(c.index) & set(d.index))
        gain = (c.loc[seeds, "goodput"].to_numpy(float) - d.loc[seeds, "goodput"].to_numpy(float)) * 100.0
        rows.append({"service": sv, "backlog": bl, "rate": float(g.rate.iloc[0]), "goodput_calibrated": float(c.goodput.mean()),
                     "goodput_sim_derived": float(d.goodput.mean()), "calibration_gain_points": float(gain.mean()),
                     "gain_sd": float(gain.std(ddof=1)) if len(gain) > 1 else 0.0,
                     "ttft_p99_calibrated_s": float(c.ttft_p99_s.mean()), "ttft_p99_sim_derived_s": float(d.ttft_p99_s.mean()),
                     "paper_gain_points": _ref("sim_calib_goodput_gain") if bl == "ledger" else np.nan,
                     "paper_hardware_gain_points": _ref("calib_goodput_gain")})
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
            out.append({"key": "sim_calib_goodput_gain_oracle", "ours": r.calibration_gain_points, "paper": 0.0, "unit": "points"})
    return out


# ---- beyond the paper (issue 6) -------------------------------------------------------------------
FRONTIER_SHAPES = ("1p2d", "2p2d", "2p3d", "2p4d", "3p3d", "3p4d", "4p4d")  # 3 .. 8 GPUs
PRODUCTION_POLICIES = ("power_of_two", "dynamo_kv", "llmd_weighted", "sglang_least_load")
VLLM_ROUTER_POLICIES = ("round_robin", "power_of_two", "cache_aware")  # vllm-router's own --policy names
OURS = "marginal_cost_plus"
# The two switches of marginal_cost_plus, one at a time (options of marginal_cost).
SWITCH_VARIANTS = {"marginal_cost+sampling": {"sample_d": 2},
                   "marginal_cost+guard": {"admission_guard": True, "guard_margin": 1.5}}


def gpus(shape: str) -> int:
    from repro.cluster.topology import parse_topology

    t = parse_topology(shape)
    return len(t.prefill) + len(t.decode)


def _variant_spec(name: str, **base: Any) -> Any:
    from repro.experiment.spec import RunSpec

    if name in SWITCH_VARIANTS:
        return RunSpec(**base, policy="marginal_cost", policy_options=dict(SWITCH_VARIANTS[name]))
    return RunSpec(**base, policy=name)


def frontier_specs(*, backend: str = "sim", seeds: Sequence[int] = (1,), rate: float = 16.0, n_requests: int = 2000,
                   shapes: Sequence[str] = FRONTIER_SHAPES, policies: Sequence[str] = (*PAPER_POLICIES, OURS),
                   workload: str = "mixed", cluster: Optional[str] = None,
                   time_scale: float = 1.0) -> list[tuple[dict[str, Any], Any]]:
    """Pool shapes x policies (names, or the single-switch variants of `SWITCH_VARIANTS`) x seeds."""
    out = []
    for shape in shapes:
        for pol in policies:
            for s in seeds:
                spec = _variant_spec(pol, backend=backend, workload=workload, topology=shape, seed=int(s), rate=float(rate),
                                     n_requests=int(n_requests), cluster=cluster, time_scale=time_scale)
                out.append(({"variant": pol, "gpus": gpus(shape)}, spec))
    return out


def workload_specs(*, backend: str = "sim", seeds: Sequence[int] = (1,), rates: dict[str, float] | None = None,
                   n_requests: int = 2000, policies: Sequence[str] = (*PAPER_POLICIES, OURS, *PRODUCTION_POLICIES),
                   topology: str = "2p4d", cluster: Optional[str] = None,
                   time_scale: float = 1.0) -> list[tuple[dict[str, Any], Any]]:
    """The four workloads at their saturation rates x policies x seeds."""
    rates = rates or SIM_SATURATION_RATES
    out = []
    for wl, rate in rates.items():
        for pol in policies:
            for s in seeds:
                spec = _variant_spec(pol, backend=backend, workload=wl, topology=topology, seed=int(s), rate=float(rate),
                                     n_requests=int(n_requests), cluster=cluster, time_scale=time_scale)
                out.append(({"variant": pol, "gpus": gpus(topology)}, spec))
    return out


def policy_kind(name: str) -> str:
    if name in PAPER_POLICIES:
        return "paper"
    if name in PRODUCTION_POLICIES:
        return "production"
    if name.startswith("vllm-router"):
        return "external"
    return "ours"


def mean_by(runs: pd.DataFrame, index: str) -> pd.DataFrame:
    """Tidy mean goodput per (``index``, variant) over seeds, with sd and the policy's kind."""
    g = runs.groupby([index, "variant"], sort=False)
    out = g.agg(goodput=("goodput", "mean"), ttft_p99_s=("ttft_p99_s", "mean"), rejected=("rejected", "mean"),
                seeds=("goodput", "size")).reset_index()
    sd = g.goodput.std(ddof=1).fillna(0.0).to_numpy()
    out["sd"] = sd
    out["kind"] = [policy_kind(v) for v in out.variant]
    return out


def beyond_goals(frontier: pd.DataFrame, workloads: pd.DataFrame, ours: str = OURS,
                 baselines: Sequence[str] = (*PAPER_POLICIES[:3], *PRODUCTION_POLICIES)) -> pd.DataFrame:
    """Issue 6's three goals, each with our value, the threshold and whether it is met.

    ``frontier``/``workloads``: `mean_by` frames (index ``topology`` / ``workload``). "Best
    baseline" is the best of ``baselines`` (the counting baselines and the production routers;
    the paper's own router is compared separately) present in that row.
    """
    rows = []
    f = frontier.pivot(index="topology", columns="variant", values="goodput")
    if "1p2d" in f.index and {"round_robin", ours} <= set(f.columns):
        v = f.loc["1p2d", ours] - f.loc["1p2d", "round_robin"]
        rows.append({"goal": "1p2d scarcity: ours - round_robin", "where": "1p2d", "value": float(v),
                     "threshold": -0.02, "met": bool(v >= -0.02)})
    w = workloads.pivot(index="workload", columns="variant", values="goodput")
    if "mixed" in w.index and ours in w.columns:
        others = [c for c in w.columns if c != ours and c in (*baselines, "marginal_cost")]
        lead = w.loc["mixed", ours] - w.loc["mixed", others].max()
        rows.append({"goal": "mixed 2p4d: ours - best other policy", "where": "mixed/2p4d", "value": float(lead),
                     "threshold": 0.0, "met": bool(lead >= 0.0)})
    worst = None
    for frame, label in ((f, "topology"), (w, "workload")):
        if ours not in frame.columns:
            continue
        for idx, r in frame.iterrows():
            base = [c for c in baselines if c in frame.columns and not pd.isna(r[c])]
            if not base:
                continue
            gap = float(r[ours] - r[base].max())
            if worst is None or gap < worst[0]:
                worst = (gap, f"{label} {idx}")
    if worst is not None:
        rows.append({"goal": "never more than 0.03 below the best baseline", "where": worst[1], "value": worst[0],
                     "threshold": -0.03, "met": bool(worst[0] >= -0.03)})
    return pd.DataFrame(rows, columns=["goal", "where", "value", "threshold", "met"])


def beyond_headline(frontier: pd.DataFrame, workloads: pd.DataFrame, goals: pd.DataFrame) -> list[dict[str, Any]]:
    """Headline rows: 1p2d with and without the switches (beside the paper's 0.292 / 0.680), the goals."""
    f = frontier.pivot(index="topology", columns="variant", values="goodput")
    out = []
    if "1p2d" in f.index:
        for pol, key, unit in (("marginal_cost", "fig4_mc_1p2d", None), ("round_robin", "fig4_rr_1p2d", None),
                               (OURS, "beyond_plus_1p2d", "fraction")):
            if pol in f.columns:
                out.append({"key": key, "ours": f.loc["1p2d", pol], **({"unit": unit} if unit else {})})
    w = workloads.pivot(index="workload", columns="variant", values="goodput")
    if OURS in w.columns:
        for wl in w.index:
            out.append({"key": f"beyond_plus_{wl}", "ours": w.loc[wl, OURS], "unit": "fraction"})
    for r in goals.itertuples():
        key = {"1p2d scarcity: ours - round_robin": "beyond_goal_scarcity_gap",
               "mixed 2p4d: ours - best other policy": "beyond_goal_mixed_lead",
               "never more than 0.03 below the best baseline": "beyond_goal_worst_gap"}[r.goal]
        out.append({"key": key, "ours": r.value, "unit": "fraction"})
    return out


def vllm_router_runs(*, backend: str, cluster: Optional[str], seeds: Sequence[int], rates: dict[str, float],
                     n_requests: int, policies: Sequence[str] = ("round_robin", "power_of_two"),
                     topology: str = "2p4d", time_scale: float = 1.0,
                     runs_dir: str | Path = "runs/paper") -> tuple[pd.DataFrame, str]:
    """vllm-router (Rust, P/D mode) in front of the same live cluster, per workload and policy.

    Returns ``(runs, note)``: runs empty with a note saying why when the backend is ``sim`` or the
    ``vllm-router`` binary is missing (``pip install 'calibrate-then-route[routers]'`` or set
    ``$REPRO_VLLM_ROUTER``). A finished run (its manifest) is reused.
    """
    from repro.experiment.inputs import truth_cost_model
    from repro.experiment.journal import read as read_journal
    from repro.experiment.metrics import summarize
    from repro.experiment.spec import RunSpec
    from repro.live.external_router import find_vllm_router, run_external, vllm_router_template

    if backend == "sim":
        return pd.DataFrame(), ("vllm-router needs live engines: rerun with backend='emulated' (or 'vllm') "
                                "to put it in front of the cluster; skipped in sim.")
    binary = find_vllm_router()
    if binary is None:
        return pd.DataFrame(), ("vllm-router binary not found (pip install 'calibrate-then-route[routers]', "
                                "or set $REPRO_VLLM_ROUTER): skipped.")
    rows = []
    for wl, rate in rates.items():
        for pol in policies:
            for s in seeds:
                spec = scale_mod.for_this_machine(RunSpec(
                    backend=backend, workload=wl, topology=topology, seed=int(s), rate=float(rate),
                    n_requests=int(n_requests), policy="round_robin", cluster=cluster, time_scale=time_scale))
                run_dir = Path(runs_dir) / f"vllm-router-{pol}-{spec.run_id}"
                manifest = run_dir / "manifest.json"
                if manifest.exists() and json.loads(manifest.read_text()).get("complete"):
                    journal = read_journal(run_dir / "journal.jsonl")
                else:
                    journal = run_external(spec, vllm_router_template(pol, binary=binary), run_dir,
                                           label=f"vllm-router {pol}")
                summary = summarize(journal, truth_cost_model(spec).slo, sent=spec.n_requests)
                rows.append({"workload": wl, "topology": spec.topology, "variant": f"vllm-router:{pol}",
                             "policy": f"vllm-router:{pol}", "seed": int(s), "rate": float(rate), "backend": backend,
                             "n_requests": int(n_requests), **{k: summary.get(k, np.nan) for k in
                                                                ("goodput", "ttft_p99_s", "tpot_p99_s", "rejected", "failed")}})
    return pd.DataFrame(rows), f"vllm-router ({binary}) in P/D mode, policies {list(policies)}."
