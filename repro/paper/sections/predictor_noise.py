"""§V-H, notebook 11 (Fig. 9): how good the predictor needs to be.

Relative error injected into the output-length predictor (`NoisyPredictor`, seeded per trace),
the learned router against the predicted-length threshold heuristic, round-robin (blind to the
predictor) as a reference line. The paper: the router's goodput moves between 0.838 and 0.880
over 0 to 150% error and still beats the heuristic at the worst. Goodput a fraction; changes in points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import reference as paper_reference

if TYPE_CHECKING:
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


def noise_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    """fig9 lo/hi of the router over the noise levels, the range, and router vs heuristic at the worst noise."""
    mc = tab[(tab.policy == "marginal_cost") & tab.noise.notna()]
    lt = tab[(tab.policy == "length_threshold") & tab.noise.notna()]
    lo, hi = float(mc.mean_goodput.min()), float(mc.mean_goodput.max())
    worst = float(mc.noise.max())
    mc_w = float(mc[mc.noise == worst].mean_goodput.iloc[0])
    paper_range = (paper_reference.lookup("fig9_goodput_hi") - paper_reference.lookup("fig9_goodput_lo")) * 100.0
    out = [{"key": "fig9_goodput_lo", "ours": lo}, {"key": "fig9_goodput_hi", "ours": hi},
           {"key": "fig9_range_points", "ours": (hi - lo) * 100.0, "paper": paper_range, "unit": "points"},
           {"key": "fig9_max_noise", "ours": worst * 100.0},
           {"key": "fig9_mc_goodput_worst_noise", "ours": mc_w, "unit": "fraction"}]
    if len(lt) and (lt.noise == worst).any():
        lt_w = float(lt[lt.noise == worst].mean_goodput.iloc[0])
        out += [{"key": "fig9_lt_goodput_worst_noise", "ours": lt_w, "unit": "fraction"},
                {"key": "fig9_mc_beats_lt_at_worst_noise", "ours": float(mc_w > lt_w), "paper": 1.0, "unit": "bool"}]
    return out
