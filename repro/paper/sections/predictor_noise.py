"""§V-H, notebook 11 (Fig. 9): how good the predictor needs to be.

Relative error injected into the output-length predictor (`NoisyPredictor`, seeded per trace),
the learned router against the predicted-length threshold heuristic, round-robin (blind to the
predictor) as a reference line. The paper: the router's goodput moves between 0.838 and 0.880
over 0 to 150% error and still beats the heuristic at the worst. Goodput a fraction; changes in points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import reference as paper_reference

if TYPE_CHECKING:
    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Labelled, Section

NOISE_LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
"""Injected relative errors (1.5 = 150%)."""
NOISE_POLICIES = ("marginal_cost", "length_threshold")
"""The length-aware policies whose predictor is perturbed."""


def noise_specs(ctx: Section, rate: float, *, noise_levels: Sequence[float] = NOISE_LEVELS,
                policies: Sequence[str] = NOISE_POLICIES, reference: str | None = "round_robin",
                topology: str = "2p4d", workload: str = "mixed") -> list[Labelled]:
    """``(labels, spec)`` for Fig. 9: each length-aware policy at each injected relative error, ``rate`` req/s.

    The noise draw is seeded per trace (``predictor_seed = seed``). ``reference`` (blind to the
    predictor) runs once per trace as a horizontal reference line (label ``noise`` NaN).
    """
    levels = [float(x) for x in noise_levels]
    if not levels or any(not (0 <= x <= 10) for x in levels):
        raise ConfigError(f"parameter 'noise_levels' = {noise_levels!r} must be relative errors in [0, 10]")
    out = []
    base = dict(backend=ctx.backend, workload=workload, topology=topology, rate=float(rate),
                n_requests=int(ctx.n_requests), cluster=ctx.cluster, time_scale=ctx.time_scale)
    for pol in policies:
        for x in levels:
            for s in ctx.seeds:
                out.append(({"noise": x}, RunSpec.from_flat(**base, seed=int(s), policy=pol, predictor_noise=x,
                                                            predictor_seed=int(s))))
    if reference:
        for s in ctx.seeds:
            out.append(({"noise": np.nan}, RunSpec.from_flat(**base, seed=int(s), policy=reference)))
    return out


def noise_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (policy, noise): mean goodput over traces, sd, P99 TTFT in s (reference policy: noise NaN)."""
    rows = []
    for (pol, x), g in runs.groupby(["policy", "noise"], sort=False, dropna=False):
        v = g.goodput.to_numpy(float)
        rows.append({"policy": pol, "noise": x, "noise_pct": x * 100.0 if not pd.isna(x) else np.nan,
                     "mean_goodput": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                     "mean_ttft_p99_s": float(g.ttft_p99_s.mean()), "seeds": len(v)})
    return pd.DataFrame(rows)


def noise_headline(tab: pd.DataFrame, runs: pd.DataFrame, ctx: Section) -> list[HeadlineRow]:
    """The router's lowest and highest goodput over the noise levels (each with its 95 % interval), the range
    between them (a paired difference in points), the largest noise injected (an input), and router vs
    heuristic at the worst noise (paired; an ordering, the paper: the router still wins)."""
    def of(policy: str, noise: float) -> pd.DataFrame:
        return runs[(runs.policy == policy) & np.isclose(runs.noise.astype(float), noise)]

    mc = tab[(tab.policy == "marginal_cost") & tab.noise.notna()].sort_values("mean_goodput")
    lt = tab[(tab.policy == "length_threshold") & tab.noise.notna()]
    x_lo, x_hi = float(mc.noise.iloc[0]), float(mc.noise.iloc[-1])
    worst = float(mc.noise.max())
    paper_range = (paper_reference.lookup("fig9_goodput_hi") - paper_reference.lookup("fig9_goodput_lo")) * 100.0
    r_lo, r_hi, r_worst = of("marginal_cost", x_lo), of("marginal_cost", x_hi), of("marginal_cost", worst)
    out: list[HeadlineRow] = [
        {"key": "fig9_goodput_lo", "ours": ctx.goodput(r_lo), "runs": ctx.run_ids(r_lo),
         "meaning": f"the router's lowest goodput over the noise levels (at {100 * x_lo:g}% error)"},
        {"key": "fig9_goodput_hi", "ours": ctx.goodput(r_hi), "runs": ctx.run_ids(r_hi),
         "meaning": f"the router's highest goodput over the noise levels (at {100 * x_hi:g}% error)"},
        {"key": "fig9_range_points", "ours": ctx.difference(r_hi, r_lo).scaled(100.0), "paper": paper_range,
         "unit": "points", "runs": ctx.run_ids(r_lo, r_hi),
         "meaning": "highest minus lowest goodput over the noise levels, paired by trace"},
        {"key": "fig9_max_noise", "ours": worst * 100.0, "kind": "input"},
        {"key": "fig9_mc_goodput_worst_noise", "ours": ctx.goodput(r_worst), "unit": "fraction",
         "runs": ctx.run_ids(r_worst), "meaning": f"the router's goodput at {100 * worst:g}% predictor error"}]
    if len(lt) and (lt.noise == worst).any():
        r_lt = of("length_threshold", worst)
        out += [{"key": "fig9_lt_goodput_worst_noise", "ours": ctx.goodput(r_lt), "unit": "fraction",
                 "runs": ctx.run_ids(r_lt),
                 "meaning": f"the heuristic's goodput at {100 * worst:g}% predictor error"},
                {"key": "fig9_mc_minus_lt_worst_noise", "ours": ctx.difference(r_worst, r_lt), "kind": "ordering",
                 "claim": 1, "paper": np.nan, "unit": "fraction", "runs": ctx.run_ids(r_worst, r_lt),
                 "meaning": f"router minus heuristic at {100 * worst:g}% predictor error, paired by trace "
                            "(the paper: the router still beats the heuristic)"}]
    return out
