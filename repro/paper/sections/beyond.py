"""Beyond the paper, notebook 13: closing the scarcity failure, and production routers.

- `frontier_specs`: pool shapes x the paper's policies and the switches of ``marginal_cost``
  (power-of-2 sampling, the admission guard) one at a time and together (`OURS`).
- `workload_specs`: the four workloads at their saturation rates, the paper's policies beside the
  production-router baselines (`repro.routing.policies.PRODUCTION_POLICIES`).
- `vllm_router_runs`: vllm-router itself in front of the same live cluster.
- `beyond_goals` / `beyond_headline`: our three goals beyond the paper.

Goodput a fraction, rates in req/s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.experiment.spec import RunSpec
from repro.paper.grids import gpus
from repro.paper.plans import SIM_SATURATION_RATES, for_this_machine
from repro.routing.policies import PAPER_POLICIES, PRODUCTION_POLICIES, make_policy

if TYPE_CHECKING:
    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Labelled, Section

FRONTIER_SHAPES = ("1p2d", "2p2d", "2p3d", "2p4d", "3p3d", "3p4d", "4p4d")  # 3 .. 8 GPUs
PRODUCTION = tuple(PRODUCTION_POLICIES)
"""The production-router baselines' names, in the order shown."""
VLLM_ROUTER_POLICIES = ("round_robin", "power_of_two", "cache_aware")  # vllm-router's own --policy names
OURS = "marginal_cost_plus"
_PLUS = make_policy(OURS, None)
SWITCH_VARIANTS = {"marginal_cost+sampling": {"sample_d": _PLUS.sample_d},
                   "marginal_cost+guard": {"admission_guard": True, "guard_margin": _PLUS.guard_margin}}
"""The two switches of ``marginal_cost_plus`` at its defaults, one at a time, on the paper's scorer (options
of ``marginal_cost``): the mitigation the paper names, each alone."""


def variant_spec(name: str, **fields: Any) -> RunSpec:
    """A spec of policy variant ``name``: a registered policy, or a switch variant of `SWITCH_VARIANTS`
    (``marginal_cost`` with those options); ``fields`` the other flat spec fields."""
    if name in SWITCH_VARIANTS:
        return RunSpec.from_flat(**fields, policy="marginal_cost", policy_options=dict(SWITCH_VARIANTS[name]))
    return RunSpec.from_flat(**fields, policy=name)


def variant_grid(ctx: Section, cells: Sequence[tuple[str, str, float]],
                 policies: Sequence[str]) -> list[Labelled]:
    """``(labels, spec)`` per (workload, pool shape, rate in req/s) cell x policy variant (`variant_spec`) x trace;
    labels: variant, gpus."""
    out = []
    for workload, shape, rate in cells:
        for pol in policies:
            for s in ctx.seeds:
                spec = variant_spec(pol, backend=ctx.backend, workload=workload, topology=shape, seed=int(s),
                                    rate=float(rate), n_requests=int(ctx.n_requests), cluster=ctx.cluster,
                                    time_scale=ctx.time_scale)
                out.append(({"variant": pol, "gpus": gpus(shape)}, spec))
    return out


def frontier_specs(ctx: Section, rate: float, *, shapes: Sequence[str] = FRONTIER_SHAPES,
                   policies: Sequence[str] = (*PAPER_POLICIES, OURS), workload: str = "mixed") -> list[Labelled]:
    """Pool shapes x policies (names, or the single-switch variants of `SWITCH_VARIANTS`) x traces at
    ``rate`` req/s (`variant_grid`)."""
    return variant_grid(ctx, [(workload, shape, rate) for shape in shapes], policies)


def workload_specs(ctx: Section, rates: Mapping[str, float] | None = None, *,
                   policies: Sequence[str] = (*PAPER_POLICIES, OURS, *PRODUCTION),
                   topology: str = "2p4d") -> list[Labelled]:
    """The workloads of ``rates`` (req/s; default the simulator's saturation rates) x policies x traces
    (`variant_grid`)."""
    rates = rates or SIM_SATURATION_RATES
    return variant_grid(ctx, [(wl, topology, rate) for wl, rate in rates.items()], policies)


def policy_kind(name: str) -> str:
    """'paper', 'production', 'external' (vllm-router) or 'ours'."""
    if name in PAPER_POLICIES:
        return "paper"
    if name in PRODUCTION:
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
                 baselines: Sequence[str] = (*PAPER_POLICIES[:3], *PRODUCTION)) -> pd.DataFrame:
    """Our three goals beyond the paper, each with our value, the threshold and whether it is met.

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


GOAL_KEYS = {"1p2d scarcity: ours - round_robin": "beyond_goal_scarcity_gap",
             "mixed 2p4d: ours - best other policy": "beyond_goal_mixed_lead",
             "never more than 0.03 below the best baseline": "beyond_goal_worst_gap"}


def beyond_headline(frontier: pd.DataFrame, workloads: pd.DataFrame, goals: pd.DataFrame,
                    frontier_runs: pd.DataFrame, workload_runs: pd.DataFrame, ctx: Section,
                    baselines: Sequence[str] = (*PAPER_POLICIES[:3], *PRODUCTION)) -> list[HeadlineRow]:
    """Headline rows (our own goals: the paper states none of these numbers, so they are context), each
    with its 95 % interval: our router at 1p2d and per workload, its paired gap to round-robin at 1p2d
    and its paired lead over the best other policy on mixed, and the worst gap to the best of
    ``baselines`` (`beyond_goals`'), paired by trace there.
    The paper's 1p2d numbers are notebook 08's rows (one key per quantity)."""
    def of(runs: pd.DataFrame, col: str, where: str, variant: str) -> pd.DataFrame:
        return runs[(runs[col] == where) & (runs.variant == variant)]

    out: list[HeadlineRow] = []
    f = frontier.pivot(index="topology", columns="variant", values="goodput")
    if "1p2d" in f.index and OURS in f.columns:
        ours = of(frontier_runs, "topology", "1p2d", OURS)
        out.append({"key": "beyond_plus_1p2d", "ours": ctx.goodput(ours), "unit": "fraction",
                    "runs": ctx.run_ids(ours), "meaning": "our router (marginal_cost_plus) at 1p2d"})
        if "round_robin" in f.columns:
            rr = of(frontier_runs, "topology", "1p2d", "round_robin")
            out.append({"key": "beyond_goal_scarcity_gap", "ours": ctx.difference(ours, rr), "kind": "ordering",
                        "unit": "fraction", "runs": ctx.run_ids(ours, rr),
                        "meaning": "our router minus round-robin at 1p2d, paired by trace (goal: >= -0.02)"})
    w = workloads.pivot(index="workload", columns="variant", values="goodput")
    if OURS in w.columns:
        for wl in w.index:
            ours = of(workload_runs, "workload", wl, OURS)
            out.append({"key": f"beyond_plus_{wl}", "ours": ctx.goodput(ours), "unit": "fraction",
                        "runs": ctx.run_ids(ours), "meaning": f"our router (marginal_cost_plus) on {wl}"})
        if "mixed" in w.index:
            others = w.loc["mixed"].drop(OURS).dropna()
            if len(others):
                best = str(others.idxmax())
                a, b = of(workload_runs, "workload", "mixed", OURS), of(workload_runs, "workload", "mixed", best)
                out.append({"key": "beyond_goal_mixed_lead", "ours": ctx.difference(a, b), "kind": "ordering",
                            "unit": "fraction", "runs": ctx.run_ids(a, b),
                            "meaning": f"our router minus the best other policy on mixed 2p4d ({best}), paired by "
                                       "trace (goal: >= 0)"})
    for r in goals.itertuples():
        if GOAL_KEYS[r.goal] != "beyond_goal_worst_gap":
            continue
        col, where = str(r.where).split(" ", 1)  # "topology 1p2d" / "workload chat" (`beyond_goals`)
        frame, runs = (f, frontier_runs) if col == "topology" else (w, workload_runs)
        base = frame.loc[where, [c for c in baselines if c in frame.columns]].dropna()
        best = str(base.idxmax())
        a, b = of(runs, col, where, OURS), of(runs, col, where, best)
        out.append({"key": "beyond_goal_worst_gap", "ours": ctx.difference(a, b), "unit": "fraction",
                    "runs": ctx.run_ids(a, b),
                    "meaning": f"our router minus the best baseline where the gap is lowest ({where}: {best}), paired "
                               "by trace (goal >= -0.03)"})
    return out


def vllm_router_runs(ctx: Section, rates: Mapping[str, float], *,
                     policies: Sequence[str] = ("round_robin", "power_of_two"),
                     topology: str = "2p4d") -> tuple[pd.DataFrame, str]:
    """vllm-router (Rust, P/D mode) in front of ``ctx``'s live cluster, per workload (at ``rates``, req/s),
    policy and trace.

    Returns ``(runs, note)``: runs empty with a note saying why when the backend is ``sim`` or the
    ``vllm-router`` binary is missing (``pip install 'calibrate-then-route[routers]'`` or set
    ``$REPRO_VLLM_ROUTER``). A finished run (its manifest under ``ctx.runs_dir``) is reused.
    """
    from repro.experiment.inputs import truth_cost_model
    from repro.experiment.journal import read as read_journal
    from repro.experiment.metrics import summarize
    from repro.live.external_router import find_vllm_router, run_external, vllm_router_template

    if ctx.backend == "sim":
        return pd.DataFrame(), ("vllm-router needs live engines: rerun with backend='emulated' (or 'vllm') "
                                "to put it in front of the cluster; skipped in sim.")
    binary = find_vllm_router()
    if binary is None:
        return pd.DataFrame(), ("vllm-router binary not found (pip install 'calibrate-then-route[routers]', "
                                "or set $REPRO_VLLM_ROUTER): skipped.")
    rows = []
    for wl, rate in rates.items():
        for pol in policies:
            for s in ctx.seeds:
                spec = for_this_machine(RunSpec.from_flat(
                    backend=ctx.backend, workload=wl, topology=topology, seed=int(s), rate=float(rate),
                    n_requests=int(ctx.n_requests), policy="round_robin", cluster=ctx.cluster,
                    time_scale=ctx.time_scale))
                run_dir = ctx.runs_dir / f"vllm-router-{pol}-{spec.run_id}"
                manifest = run_dir / "manifest.json"
                done = json.loads(manifest.read_text()) if manifest.exists() else {}
                if not done.get("complete") or "valid" not in done:  # (before validity: run again)
                    run_external(spec, vllm_router_template(pol, binary=binary), run_dir, label=f"vllm-router {pol}")
                    done = json.loads(manifest.read_text())
                journal = read_journal(run_dir / "journal.jsonl")
                summary = summarize(journal, truth_cost_model(spec).slo, sent=spec.n_requests)
                rows.append({"workload": wl, "topology": spec.topology_parsed().shorthand,
                             "variant": f"vllm-router:{pol}",
                             "policy": f"vllm-router:{pol}", "seed": int(s), "rate": float(rate),
                             "backend": ctx.backend, "n_requests": int(ctx.n_requests),
                             **{k: summary.get(k, np.nan) for k in
                                ("goodput", "ttft_p99_s", "tpot_p99_s", "rejected", "failed")},
                             "valid": done.get("valid"), "time_scale_used": done.get("time_scale_used")})
    return pd.DataFrame(rows), f"vllm-router ({binary}) in P/D mode, policies {list(policies)}."
