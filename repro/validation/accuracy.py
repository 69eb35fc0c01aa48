"""How far the simulator's twin is from the live run: requests paired by id, per-request relative errors,
goodput differences over traces, the policies' ordering, and the load up to which the simulator stays
within its error budget.

Conventions: a relative error is ``sim / live - 1`` (negative: the simulator is faster than the
cluster); "error" in a budget is its absolute value. A level's per-request error is summarized per trace
(the median, or the 90th percentile, of the trace's requests) and then over traces (mean with a Student
t interval: traces are independent, requests inside one are not). Goodput differences are ``sim - live``
per trace (replays of one trace averaged first), t interval over traces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from repro.experiment.metrics import good_mask
from repro.routing.cost_model import SLOTargets
from repro.statistics.intervals import Estimate, t_interval
from repro.validation.decomposition import STAGES, stage_columns
from repro.validation.plan import ErrorBudget

METRICS: tuple[str, ...] = ("ttft_s", "tpot_s", "e2e_s")
"""The per-request latencies compared (seconds; `repro.experiment.journal`)."""
RUN_KEYS: tuple[str, ...] = ("fraction", "rate", "policy", "seed", "replay")
"""What identifies one live run of a validation (load level, its rate in req/s, policy, trace seed, replay)."""


def pair(live: pd.DataFrame, sim: pd.DataFrame, slo: SLOTargets) -> pd.DataFrame:
    """One row per request that completed in both journals (joined on ``request_id``): its lengths and
    family, each metric live and simulated with the relative error ``err_<metric>`` (``sim / live - 1``), each
    stage of its time live and simulated (``live_<stage>_s``, ``sim_<stage>_s``: `repro.validation.decomposition`),
    both decode placements and whether they agree, and both good flags (``slo``). Requests that
    completed on one side only are not rows: `unpaired` counts them."""
    lv = live.assign(good=good_mask(live, slo).to_numpy()).set_index("request_id")
    sm = sim.assign(good=good_mask(sim, slo).to_numpy()).set_index("request_id")
    ok = lv.index[(lv["status"].astype(str) == "ok").to_numpy()].intersection(
        sm.index[(sm["status"].astype(str) == "ok").to_numpy()])
    lv, sm = lv.loc[ok], sm.loc[ok]
    out = pd.DataFrame({"request_id": ok.astype(str), "family": lv["family"].astype(str).to_numpy(),
                        "slo_class": lv["slo_class"].astype(str).to_numpy(),
                        "prompt_tokens": lv["prompt_tokens"].to_numpy(int),
                        "output_tokens": lv["output_tokens"].to_numpy(int),
                        "arrival_s": sm["arrival_s"].to_numpy(float)})
    for m in METRICS:
        a = lv[m].to_numpy(dtype=float, na_value=np.nan)
        b = sm[m].to_numpy(dtype=float, na_value=np.nan)
        out[f"live_{m}"] = a
        out[f"sim_{m}"] = b
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"err_{m}"] = np.where(a > 0, b / a - 1.0, np.nan)
    for name, live_stage, sim_stage in zip(STAGES, stage_columns(lv).T.to_numpy(), stage_columns(sm).T.to_numpy(),
                                           strict=True):
        out[f"live_{name[0]}_s"] = live_stage
        out[f"sim_{name[0]}_s"] = sim_stage
    out["live_prefill"] = lv["prefill_instance"].astype(str).to_numpy()
    out["live_decode"] = lv["decode_instance"].astype(str).to_numpy()
    out["sim_decode"] = sm["decode_instance"].astype(str).to_numpy()
    out["same_decode"] = out["live_decode"] == out["sim_decode"]
    out["live_good"] = lv["good"].to_numpy(bool)
    out["sim_good"] = sm["good"].to_numpy(bool)
    return out


def unpaired(live: pd.DataFrame, sim: pd.DataFrame) -> dict[str, int]:
    """Requests that completed on one side only (``live_only``, ``sim_only``)."""
    lv = set(live.loc[live["status"].astype(str) == "ok", "request_id"].astype(str))
    sm = set(sim.loc[sim["status"].astype(str) == "ok", "request_id"].astype(str))
    return {"live_only": len(lv - sm), "sim_only": len(sm - lv)}


def _per_trace(pairs: pd.DataFrame, column: str, stat: str) -> list[float]:
    """One value per trace (seed) of ``column``'s absolute value: its median (``stat='median'``), 90th
    percentile (``p90``) or signed median (``bias``) over the trace's requests (replays pooled)."""
    out = []
    for _, g in pairs.groupby("seed"):
        v = g[column].to_numpy(float)
        v = v[~np.isnan(v)]
        if not v.size:
            continue
        out.append(float(np.median(v)) if stat == "bias" else
                   float(np.percentile(np.abs(v), 90 if stat == "p90" else 50)))
    return out


def _spread(a: np.ndarray, b: np.ndarray) -> list[float]:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(np.asarray(b, float) / np.asarray(a, float) - 1.0)
    return r[np.isfinite(r)].tolist()


def noise_floor(pairs: pd.DataFrame, metric: str) -> float:
    """The machine's own per-request spread: the median of ``|run b / run a - 1|`` of ``metric`` over requests
    that completed in two live runs of the same trace that placed every request alike: two replays of one
    trace (``replay`` 1 and 2), else two policies whose live runs of the trace made the same placement for
    every request (e.g. any two policies on a 1p1d cluster: one engine of each role). NaN when there is
    neither. ``pairs``: one load level's `pair` rows with ``policy``, ``seed`` and ``replay``."""
    vals: list[float] = []
    col = f"live_{metric}"
    for _, g in pairs.groupby("seed"):
        if g["replay"].nunique() >= 2:
            for _, h in (g.groupby("policy") if "policy" in g.columns else [(None, g)]):
                wide = h.pivot_table(index="request_id", columns="replay", values=col, aggfunc="first").dropna()
                if wide.shape[1] >= 2:
                    vals += _spread(wide.iloc[:, 0].to_numpy(), wide.iloc[:, 1].to_numpy())
            continue
        if not {"live_prefill", "live_decode", "policy"} <= set(g.columns):
            continue
        placed = {pol: h.set_index("request_id")[["live_prefill", "live_decode", col]]
                  for pol, h in g[g["replay"] == g["replay"].min()].groupby("policy")}
        names = sorted(placed)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                both = placed[a].merge(placed[b], left_index=True, right_index=True, suffixes=("_a", "_b"))
                if len(both) and (both["live_prefill_a"] == both["live_prefill_b"]).all() and (
                        both["live_decode_a"] == both["live_decode_b"]).all():
                    vals += _spread(both[f"{col}_a"].to_numpy(), both[f"{col}_b"].to_numpy())
    return float(np.median(vals)) if vals else math.nan


def level_table(pairs: pd.DataFrame, runs: pd.DataFrame, budget: ErrorBudget) -> pd.DataFrame:
    """One row per (load level, policy): the per-request errors (``<metric>_err``: mean over traces of each
    trace's median absolute relative error, with its t interval ``_lo``/``_hi``; ``_p90``: the same of the
    90th percentile; ``_bias``: of the signed median, with its interval: the simulator's systematic error,
    where the machine's noise averages out), the goodputs and their difference ``sim - live`` with
    its t interval over traces, the machine's noise floor at the level (`noise_floor`), how often both
    placed a request on the same decode engine, ``within_budget`` (`ErrorBudget`: the TTFT and TPOT errors and
    the goodput difference's interval inside ``+-budget.goodput``; with one trace, its value) and ``within_noise``
    (`within_noise`: the errors no larger than the budget or the machine's own noise floor, whichever is larger).

    ``pairs``: `pair` rows with `RUN_KEYS` columns; ``runs``: one row per live run with `RUN_KEYS`,
    ``live_goodput``, ``sim_goodput``, ``valid``."""
    rows = []
    valid = runs[runs["valid"].astype(bool)]
    for (fraction, policy), g in valid.groupby(["fraction", "policy"], sort=True):
        p = pairs[(pairs["fraction"] == fraction) & (pairs["policy"] == policy)]
        per_trace = g.groupby("seed")[["live_goodput", "sim_goodput"]].mean()
        diff = goodput_difference(per_trace["live_goodput"].to_numpy(float), per_trace["sim_goodput"].to_numpy(float),
                                  requests=len(p))
        row: dict[str, Any] = {"fraction": float(fraction), "rate": float(g["rate"].iloc[0]), "policy": policy,
                               "traces": int(per_trace.shape[0]), "replays": int(g["replay"].nunique()),
                               "runs": int(len(g)), "requests": int(len(p))}
        mine = runs[(runs["fraction"] == fraction) & (runs["policy"] == policy)]
        row["invalid_runs"] = int((~mine["valid"].astype(bool)).sum())
        same_level = pairs[pairs["fraction"] == fraction]
        for m in METRICS:
            name = m.removesuffix("_s")
            est = t_interval(_per_trace(p, f"err_{m}", "median"), requests=len(p))
            row[f"{name}_err"], row[f"{name}_err_lo"], row[f"{name}_err_hi"] = est.value, est.lo, est.hi
            row[f"{name}_err_p90"] = float(np.mean(_per_trace(p, f"err_{m}", "p90") or [math.nan]))
            bias = t_interval(_per_trace(p, f"err_{m}", "bias"), requests=len(p))
            row[f"{name}_bias"], row[f"{name}_bias_lo"], row[f"{name}_bias_hi"] = bias.value, bias.lo, bias.hi
            row[f"{name}_noise"] = noise_floor(same_level, m)
        row["live_goodput"] = float(per_trace["live_goodput"].mean())
        row["sim_goodput"] = float(per_trace["sim_goodput"].mean())
        row["goodput_diff"], row["goodput_diff_lo"], row["goodput_diff_hi"] = diff.value, diff.lo, diff.hi
        row["goodput_diff_method"] = diff.method
        row["same_decode"] = float(p["same_decode"].mean()) if len(p) else math.nan
        row["within_budget"] = within_budget(row, budget)
        row["within_noise"] = within_noise(row, budget)
        rows.append(row)
    return pd.DataFrame(rows)


def goodput_difference(live: np.ndarray, sim: np.ndarray, requests: int = 0) -> Estimate:
    """``sim - live`` goodput, one value per trace (replays averaged), with its Student t interval over the
    traces (independent: each is its own seed); no interval with one trace."""
    return t_interval((np.asarray(sim, float) - np.asarray(live, float)).tolist(), requests=requests)


def within_budget(row: dict[str, Any] | pd.Series, budget: ErrorBudget) -> bool:
    """Whether one level's row (`level_table`) meets ``budget``: median TTFT and TPOT errors at most their
    budget, and the goodput difference's interval inside ``+-budget.goodput`` (its value, with no interval)."""
    lo, hi = row["goodput_diff_lo"], row["goodput_diff_hi"]
    if math.isnan(lo) or math.isnan(hi):
        lo = hi = row["goodput_diff"]
    return bool(row["ttft_err"] <= budget.ttft and row["tpot_err"] <= budget.tpot
                and -budget.goodput <= lo and hi <= budget.goodput)


def within_noise(row: dict[str, Any] | pd.Series, budget: ErrorBudget) -> bool:
    """Whether one level's median TTFT and TPOT errors are each at most the larger of their budget and the
    machine's own noise floor there (``<metric>_noise``: two live runs of one trace apart; without a measured
    floor, the budget alone): an error this machine cannot tell from its own spread. Weaker than
    `within_budget` (no goodput, and a noisy machine passes more), so it never sets `trusted_up_to`."""
    def limit(metric: str, allowed: float) -> float:
        noise = row[f"{metric}_noise"]
        return allowed if noise is None or math.isnan(noise) else max(allowed, float(noise))

    return bool(row["ttft_err"] <= limit("ttft", budget.ttft) and row["tpot_err"] <= limit("tpot", budget.tpot))


def trusted_up_to(table: pd.DataFrame) -> float:
    """The highest load fraction up to which every level (all policies) is within budget (0.0: not even the
    lightest; NaN: an empty table)."""
    if table.empty:
        return math.nan
    ok = table.groupby("fraction")["within_budget"].all().sort_index()
    best = 0.0
    for fraction, passed in ok.items():
        if not passed:
            break
        best = float(fraction)
    return best


def ordering(runs: pd.DataFrame, policies: Sequence[str]) -> pd.DataFrame:
    """Per load level, whether the simulator orders the policies as the cluster does: for each policy after
    the first, its goodput minus the first's per trace, live (t interval over traces) and simulated.
    ``agreement``: ``agree`` / ``disagree`` when the live interval excludes zero (the simulated difference
    has the same sign, or not); ``agree (no difference)`` when neither side differs at all (every trace the
    same); ``live within noise`` otherwise, saying whether the simulated difference lies inside the live
    interval."""
    rows = []
    if len(policies) < 2:
        return pd.DataFrame(rows)
    valid = runs[runs["valid"].astype(bool)]
    base = policies[0]
    for fraction, g in valid.groupby("fraction", sort=True):
        per = g.groupby(["seed", "policy"])[["live_goodput", "sim_goodput"]].mean()
        for other in policies[1:]:
            seeds = [s for s in g["seed"].unique() if (s, base) in per.index and (s, other) in per.index]
            if not seeds:
                continue
            live = [per.loc[(s, other), "live_goodput"] - per.loc[(s, base), "live_goodput"] for s in seeds]
            sim = [per.loc[(s, other), "sim_goodput"] - per.loc[(s, base), "sim_goodput"] for s in seeds]
            est = t_interval(live)
            sim_mean = float(np.mean(sim))
            side = est.excludes_zero()
            if est.has_interval and est.lo == est.hi == est.value == sim_mean:  # no difference on either side
                agreement = "agree (no difference)"
            elif side:
                agreement = "agree" if np.sign(sim_mean) == side else "disagree"
            else:
                inside = est.has_interval and est.lo <= sim_mean <= est.hi
                agreement = "live within noise (sim inside)" if inside else "live within noise (sim outside)"
            rows.append({"fraction": float(fraction), "policy": other, "versus": base,
                         "live_diff": est.value, "live_diff_lo": est.lo, "live_diff_hi": est.hi,
                         "sim_diff": sim_mean, "agreement": agreement})
    return pd.DataFrame(rows)


def error_by(pairs: pd.DataFrame, column: str, bins: Sequence[float], metric: str = "ttft_s") -> pd.DataFrame:
    """The residual pattern of ``metric`` against ``column`` (e.g. ``prompt_tokens``): per bin of it, the
    requests, the median signed relative error and the median absolute one. Where the simulator and the
    engines part ways shows as a bias that moves with the bin (`repro.validation.outputs` writes these)."""
    cut = pd.cut(pairs[column], bins=list(bins), right=False)
    err = pairs[f"err_{metric}"]
    g = pd.DataFrame({"bin": cut, "err": err}).dropna().groupby("bin", observed=True)["err"]
    return pd.DataFrame({"requests": g.size(), "bias": g.median(), "abs_err": g.apply(lambda v: v.abs().median())}
                        ).reset_index()


def estimate_text(value: float, lo: float, hi: float, digits: int = 3) -> str:
    """``value [lo, hi]`` (the value alone without an interval)."""
    return Estimate(value, lo, hi).text(digits)
