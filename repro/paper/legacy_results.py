"""Logic behind the §V-B..§V-F notebooks (05-09), kept here so that it is tested.

Same conventions as `repro.paper.section`: tidy pandas frames, times in seconds, goodput a
fraction; ``backend='sim'`` runs in-process and deterministically, other backends go through the
live harness. Every ``*_headline`` function returns rows for `repro.paper.figures.write_headline`
(``key`` a `data/paper_reference.csv` key where the paper states the number).

- §V-B (05): the learned router with calibrated vs simulator-derived constants; the mechanism is
  read off per-decode-instance load: request-count skew vs token-load skew (`repro.experiment.metrics`).
- §V-C (06, Fig. 3): the paper's four policies on the four workloads, each at its saturation rate.
- §V-D (07): decode widths 3, 4, 6 (2 prefill) at the 2p4d operating point.
- §V-E (08, Fig. 4): pool shapes of 3 to 8 GPUs; frontier = best shape per (policy, GPU count);
  GPUs needed by round-robin to match the learned router; the scarcity inversion at 1p2d.
- §V-F (09, Figs. 5-7): a rate sweep up to the operating point, P99 TTFT there, and a burst train
  (`RunSpec.arrival`, a `repro.workload.arrivals` burst process) with rolling P95 TTFT and goodput.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.paper import plans as scale_mod
from repro.paper import reference as paper_reference
from repro.paper.section import PAPER_POLICIES, WORKLOADS, run_live, saturation_table

LOAD_AWARE = ("least_loaded", "length_threshold", "marginal_cost")


# ---- shared ------------------------------------------------------------------------------------
def default_n(backend: str, scale: str, n_requests: int = 0, *, sim: tuple[int, int] = scale_mod.SIM_REQUESTS,
              live: tuple[int, int] = scale_mod.LIVE_REQUESTS) -> int:
    """Requests per run: ``n_requests`` if > 0, else the (quick, full) default of the backend."""
    return scale_mod.seeds_and_requests(backend, scale, [1], n_requests, sim=sim, live=live)[1]


def operating_rates(workloads: Sequence[str] = ("mixed",), *, backend: str = "sim", scale: str = "full",
                    n_requests: int = 1000, seed: int = 1, topology: str = "2p4d", cluster: Optional[str] = None,
                    time_scale: float = 1.0, runs_dir: str | Path = "runs/paper") -> dict[str, float]:
    """The saturation rate (round-robin mid-collapse, §IV-B) of each workload, req/s.

    A saturation search on the backend, except at live quick scale, which takes the simulator's
    rates (`repro.paper.plans.SIM_SATURATION_RATES`) instead of searching the live cluster.
    """
    if not scale_mod.searches_rates(backend, scale):
        return scale_mod.fixed_rates(workloads)
    rates, _ = saturation_table(list(workloads), backend=backend, n_requests=n_requests, seed=seed,
                                topology=topology, cluster=cluster, runs_dir=runs_dir, time_scale=time_scale)
    return {r.workload: float(r.saturation_rate) for r in rates.itertuples()}


def paper_value(key: str) -> float:
    """The paper's number by key (NaN when the reference has no such key)."""
    try:
        return paper_reference.lookup(key)
    except ConfigError:
        return float("nan")


def specs_grid(*, workloads: Sequence[str] = ("mixed",), rates: dict[str, float] | float = 16.0,
               topologies: Sequence[str] = ("2p4d",), policies: Sequence[str] = PAPER_POLICIES,
               seeds: Sequence[int] = (1, 2, 3), cost_models: Sequence[str] = ("calibrated",),
               backend: str = "sim", n_requests: int = 2000, cluster: Optional[str] = None,
               time_scale: float = 1.0, arrival: Optional[dict[str, Any]] = None) -> list[Any]:
    """The cross product of the given axes as `RunSpec`s (``rates`` per workload, or one rate).

    ``cluster`` may contain ``{topology}`` (one cluster file per pool shape, for shape sweeps).
    """
    from repro.experiment.spec import RunSpec

    out = []
    for wl in workloads:
        rate = float(rates[wl] if isinstance(rates, dict) else rates)
        for topo in topologies:
            cl = shape_cluster(cluster, topo, len(topologies) > 1)
            for cm in cost_models:
                for pol in policies:
                    for s in seeds:
                        out.append(RunSpec(backend=backend, workload=wl, topology=topo, seed=int(s), rate=rate,
                                           n_requests=int(n_requests), policy=pol, cost_model=cm, cluster=cl,
                                           time_scale=time_scale, arrival=arrival))
    return out


def shape_cluster(cluster: Optional[str], topology: str, sweep: bool = True) -> Optional[str]:
    """The cluster file of one pool shape: ``cluster`` with ``{topology}`` filled in.

    A sweep over shapes cannot run on one fixed cluster file: a file without ``{topology}`` is an
    error saying what to pass. Without a file (sim, emulated) the shape is the spec's topology.
    """
    if not cluster:
        return None
    if "{topology}" in cluster:
        path = cluster.replace("{topology}", topology)
        if not Path(path).exists():
            raise ConfigError(f"cluster file {path} (from {cluster!r}) does not exist: write one cluster YAML "
                              f"per pool shape, or run the shape sweep on backend 'emulated' without a cluster")
        return path
    if sweep:
        raise ConfigError(f"cluster = {cluster!r} is one fixed pool; a sweep over pool shapes needs one file per "
                          "shape: pass cluster='clusters/mine-{topology}.yaml' ({topology} becomes e.g. 2p4d)")
    return cluster


def policy_summary(runs: pd.DataFrame, by: Sequence[str] = ("policy",)) -> pd.DataFrame:
    """Mean over seeds per group: goodput (mean, sd, min, max), P99 TTFT (mean, min, max), skews."""
    by = list(by)
    g = runs.groupby(by, sort=False)
    out = pd.DataFrame({
        "goodput": g["goodput"].mean(),
        "goodput_sd": g["goodput"].std(ddof=1).fillna(0.0),
        "goodput_min": g["goodput"].min(),
        "goodput_max": g["goodput"].max(),
        "ttft_p99_s": g["ttft_p99_s"].mean(),
        "ttft_p99_min_s": g["ttft_p99_s"].min(),
        "ttft_p99_max_s": g["ttft_p99_s"].max(),
        "token_skew": g["token_skew"].mean(),
        "request_skew": g["request_skew"].mean(),
        "seeds": g["seed"].nunique(),
    }).reset_index()
    return out


# ---- §V-B: what calibration is worth (05) ---------------------------------------------------------
CALIBRATION_CONDITIONS = (
    ("marginal_cost", "calibrated", "learned, calibrated"),
    ("marginal_cost", "sim_derived", "learned, simulator-derived"),
    ("least_loaded", "calibrated", "least-loaded (JSQ)"),
    ("round_robin", "calibrated", "round-robin"),
)


def calibration_specs(*, backend: str = "sim", seeds: Sequence[int] = (1, 2, 3), rate: float = 16.0,
                      n_requests: int = 2000, topology: str = "2p4d", cluster: Optional[str] = None,
                      time_scale: float = 1.0) -> list[Any]:
    """The learned router with each cost model, plus JSQ and round-robin, on the same traces."""
    from repro.experiment.spec import RunSpec

    return [RunSpec(backend=backend, workload="mixed", topology=topology, seed=int(s), rate=float(rate),
                    n_requests=int(n_requests), policy=p, cost_model=cm, cluster=cluster, time_scale=time_scale)
            for p, cm, _ in CALIBRATION_CONDITIONS for s in seeds]


def condition_label(policy: str, cost_model: str) -> str:
    for p, cm, label in CALIBRATION_CONDITIONS:
        if (p, cm) == (policy, cost_model):
            return label
    return f"{policy} ({cost_model})"


def calibration_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per condition: goodput, P99 TTFT range over traces, skews, and the paper's values."""
    runs = runs.assign(condition=[condition_label(p, c) for p, c in zip(runs.policy, runs.cost_model)])
    tab = policy_summary(runs, ("condition", "policy", "cost_model"))
    order = [label for _, _, label in CALIBRATION_CONDITIONS]
    tab["_o"] = [order.index(c) if c in order else len(order) for c in tab.condition]
    tab = tab.sort_values(["_o", "condition"]).drop(columns="_o").reset_index(drop=True)
    paper = {
        "learned, calibrated": ("calib_calibrated_goodput", "calib_calibrated_ttft_p99_lo", "calib_calibrated_ttft_p99_hi"),
        "learned, simulator-derived": ("calib_simderived_goodput", "calib_simderived_ttft_p99_lo", "calib_simderived_ttft_p99_hi"),
    }
    for col, i in (("paper_goodput", 0), ("paper_ttft_p99_lo_s", 1), ("paper_ttft_p99_hi_s", 2)):
        tab[col] = [paper_value(paper[c][i]) if c in paper else np.nan for c in tab.condition]
    tab["skew_gap"] = tab.token_skew - tab.request_skew
    return tab


def calibration_load(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy skews for the mechanism figure: one row per (condition, seed, kind) with kind
    'request count' or 'token load' and its max/mean skew across decode instances."""
    rows = []
    for r in runs.itertuples():
        for kind, col in (("request count", "request_skew"), ("token load", "token_skew")):
            rows.append({"condition": condition_label(r.policy, r.cost_model), "seed": int(r.seed), "kind": kind,
                         "skew": float(getattr(r, col))})
    return pd.DataFrame(rows)


def calibration_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    """Goodput and P99 TTFT with each cost model, the gain in points, the share of the tail advantage
    (over round-robin) that calibration buys, and the mechanism (token skew vs JSQ's)."""
    t = tab.set_index("condition")
    cal, sim = t.loc["learned, calibrated"], t.loc["learned, simulator-derived"]
    out = [
        {"key": "calib_calibrated_goodput", "ours": cal.goodput},
        {"key": "calib_simderived_goodput", "ours": sim.goodput},
        {"key": "calib_goodput_gain", "ours": 100.0 * (cal.goodput - sim.goodput)},
        {"key": "calib_calibrated_ttft_p99_lo", "ours": cal.ttft_p99_min_s},
        {"key": "calib_calibrated_ttft_p99_hi", "ours": cal.ttft_p99_max_s},
        {"key": "calib_simderived_ttft_p99_lo", "ours": sim.ttft_p99_min_s},
        {"key": "calib_simderived_ttft_p99_hi", "ours": sim.ttft_p99_max_s},
    ]
    if "round-robin" in t.index:
        adv = t.loc["round-robin", "ttft_p99_s"] - cal.ttft_p99_s
        share = 100.0 * (sim.ttft_p99_s - cal.ttft_p99_s) / adv if adv > 0 else float("nan")
        out.append({"key": "calib_tail_share", "ours": share})
    if "least-loaded (JSQ)" in t.index:
        out.append({"key": "calib_simderived_token_skew_worse_than_jsq",
                    "ours": float(sim.token_skew > t.loc["least-loaded (JSQ)", "token_skew"]),
                    "paper": 1.0, "unit": "bool"})
    out.append({"key": "calib_simderived_token_minus_request_skew", "ours": sim.token_skew - sim.request_skew,
                "unit": "max/mean"})
    return out


# ---- §V-C: workload heterogeneity, Fig. 3 (06) -------------------------------------------------
FIG3_KEYS = {  # (policy, workload) -> goodput key of Fig. 3
    ("marginal_cost", "mixed"): "fig3_mc_mixed",
    ("marginal_cost", "reasoning"): "fig3_mc_reasoning",
    ("length_threshold", "chat"): "fig3_lt_chat",
    ("marginal_cost", "chat"): "fig3_mc_chat",
    ("round_robin", "documents"): "fig3_rr_documents",
}


def heterogeneity_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, policy): goodput and P99 TTFT over seeds, the paper's goodput where Fig. 3 gives it,
    and the rank of the policy on its workload (1 = best mean goodput)."""
    tab = policy_summary(runs, ("workload", "policy"))
    tab["paper_goodput"] = [paper_value(FIG3_KEYS[(p, w)]) if (p, w) in FIG3_KEYS else np.nan
                            for p, w in zip(tab.policy, tab.workload)]
    tab["paper_ttft_p99_s"] = [paper_value("fig3_rr_documents_tail") if (p, w) == ("round_robin", "documents")
                               else np.nan for p, w in zip(tab.policy, tab.workload)]
    tab["rank"] = tab.groupby("workload")["goodput"].rank(ascending=False, method="min").astype(int)
    wl_order = {w: i for i, w in enumerate(WORKLOADS)}
    pol_order = {p: i for i, p in enumerate(PAPER_POLICIES)}
    tab = tab.sort_values(["workload", "policy"], key=lambda s: s.map(wl_order if s.name == "workload" else pol_order))
    return tab.reset_index(drop=True)


def heterogeneity_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    t = tab.set_index(["policy", "workload"])
    out = [{"key": k, "ours": t.loc[pw, "goodput"]} for pw, k in FIG3_KEYS.items() if pw in t.index]
    if ("round_robin", "documents") in t.index:
        out.append({"key": "fig3_rr_documents_tail", "ours": t.loc[("round_robin", "documents"), "ttft_p99_s"]})
    docs = tab[(tab.workload == "documents") & tab.policy.isin(LOAD_AWARE)]
    if len(docs):
        out.append({"key": "fig3_loadaware_documents_min", "ours": docs.goodput.min()})
    best = tab.sort_values("goodput", ascending=False).groupby("workload").head(1).set_index("workload")["policy"]
    claims = [("fig3_mc_best_mixed", "mixed", lambda: best["mixed"] == "marginal_cost"),
              ("fig3_mc_best_reasoning", "reasoning", lambda: best["reasoning"] == "marginal_cost"),
              ("fig3_lt_beats_mc_chat", "chat", lambda: t.loc[("length_threshold", "chat"), "goodput"]
               > t.loc[("marginal_cost", "chat"), "goodput"]),
              ("fig3_rr_worst_documents", "documents", lambda: tab[tab.workload == "documents"]
               .sort_values("goodput").iloc[0].policy == "round_robin")]
    present = tab.groupby("workload")["policy"].agg(set)
    for key, wl, claim in claims:  # a ranking claim is only made when all four policies ran on that workload
        if wl in best.index and set(PAPER_POLICIES) <= present[wl]:
            out.append({"key": key, "ours": float(bool(claim())), "paper": 1.0, "unit": "bool"})
    return out


# ---- §V-D: pool width (07) ---------------------------------------------------------------------
WIDTHS = (3, 4, 6)
WIDTH_KEYS = {(3, "marginal_cost"): "width3_mc", (3, "least_loaded"): "width3_ll",
              (4, "marginal_cost"): "width4_mc", (4, "least_loaded"): "width4_ll",
              (6, "marginal_cost"): "width6_mc", (6, "round_robin"): "width6_rr"}


def width_topologies(widths: Sequence[int] = WIDTHS, prefill: int = 2) -> list[str]:
    bad = [w for w in widths if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 64]
    if bad or not widths:
        raise ConfigError(f"parameter 'widths' = {list(widths)!r} must be a non-empty list of integers in [1, 64]")
    return [f"{prefill}p{w}d" for w in widths]


def width_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (decode width, policy): goodput over seeds, the paper's value where stated, and the learned
    router's margin over the best baseline at that width."""
    runs = runs.assign(decode_width=[int(t.split("p")[1].rstrip("d")) for t in runs.topology])
    tab = policy_summary(runs, ("decode_width", "policy"))
    tab["paper_goodput"] = [paper_value(WIDTH_KEYS[(w, p)]) if (w, p) in WIDTH_KEYS else np.nan
                            for w, p in zip(tab.decode_width, tab.policy)]
    margins = {}
    for w, g in tab.groupby("decode_width"):
        mc = g[g.policy == "marginal_cost"].goodput
        base = g[g.policy != "marginal_cost"].goodput
        margins[w] = float(mc.iloc[0] - base.max()) if len(mc) and len(base) else np.nan
    tab["mc_margin_over_best_baseline"] = tab.decode_width.map(margins)
    pol_order = {p: i for i, p in enumerate(PAPER_POLICIES)}
    return tab.sort_values(["decode_width", "policy"], key=lambda s: s.map(pol_order) if s.name == "policy" else s
                           ).reset_index(drop=True)


def width_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    t = tab.set_index(["decode_width", "policy"])
    out = [{"key": k, "ours": t.loc[wp, "goodput"]} for wp, k in WIDTH_KEYS.items() if wp in t.index]
    margins = tab.drop_duplicates("decode_width").set_index("decode_width")["mc_margin_over_best_baseline"]
    paper_margin = {3: paper_value("width3_mc") - paper_value("width3_ll"),
                    4: paper_value("width4_mc") - paper_value("width4_ll"),
                    6: paper_value("width6_mc") - paper_value("width6_rr")}
    for w, m in margins.items():
        out.append({"key": f"width{w}_mc_margin", "ours": m, "paper": paper_margin.get(int(w), np.nan), "unit": "fraction"})
    return out


# ---- §V-E: goodput vs provisioned GPUs, Fig. 4 (08) ------------------------------------------------
SHAPES = ("1p2d", "1p3d", "2p2d", "2p3d", "2p4d", "3p3d", "3p4d", "4p4d")


def gpus(topology: str) -> int:
    p, d = topology.rstrip("d").split("p")
    return int(p) + int(d)


def frontier_table(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(shapes, frontier)``: per (shape, policy) summary; per (GPU count, policy) the best shape's goodput
    (the shape a deployer would pick for that policy), with the paper's value where stated."""
    runs = runs.assign(gpus=[gpus(t) for t in runs.topology])
    shapes = policy_summary(runs, ("topology", "gpus", "policy"))
    idx = shapes.groupby(["gpus", "policy"])["goodput"].idxmax()
    front = shapes.loc[idx, ["gpus", "policy", "topology", "goodput", "goodput_sd", "ttft_p99_s"]]
    front = front.rename(columns={"topology": "best_shape"}).sort_values(["policy", "gpus"]).reset_index(drop=True)
    paper = {(5, "marginal_cost"): "fig4_mc_5gpu", (6, "marginal_cost"): "fig4_mc_6gpu"}
    front["paper_goodput"] = [paper_value(paper[(g, p)]) if (g, p) in paper else np.nan
                              for g, p in zip(front.gpus, front.policy)]
    sp = {("1p2d", "marginal_cost"): "fig4_mc_1p2d", ("1p2d", "round_robin"): "fig4_rr_1p2d"}
    shapes["paper_goodput"] = [paper_value(sp[(t, p)]) if (t, p) in sp else np.nan
                               for t, p in zip(shapes.topology, shapes.policy)]
    return shapes, front


def gpus_needed(front: pd.DataFrame, policy: str, goodput: float, tol: float = 0.0) -> float:
    """Fewest GPUs at which ``policy``'s frontier reaches ``goodput - tol`` (NaN if it never does)."""
    f = front[(front.policy == policy) & (front.goodput >= goodput - tol)]
    return float(f.gpus.min()) if len(f) else float("nan")


def gpu_saving(front: pd.DataFrame, at_gpus: int = 6, policy: str = "marginal_cost",
               baseline: str = "round_robin", tol: float = 0.0) -> dict[str, float]:
    """The learned router's goodput at ``at_gpus``; the GPUs the baseline needs for it; the saving in %."""
    row = front[(front.policy == policy) & (front.gpus == at_gpus)]
    if row.empty:
        return {"goodput": np.nan, "baseline_gpus": np.nan, "saving_pct": np.nan}
    target = float(row.goodput.iloc[0])
    need = gpus_needed(front, baseline, target, tol)
    saving = 100.0 * (1.0 - at_gpus / need) if need == need and need > at_gpus else (0.0 if need == need else np.nan)
    return {"goodput": target, "baseline_gpus": need, "saving_pct": saving}


def frontier_headline(shapes: pd.DataFrame, front: pd.DataFrame, tol: float = 0.0) -> list[dict[str, Any]]:
    f = front.set_index(["gpus", "policy"])
    out = []
    for g, key in ((5, "fig4_mc_5gpu"), (6, "fig4_mc_6gpu")):
        if (g, "marginal_cost") in f.index:
            out.append({"key": key, "ours": f.loc[(g, "marginal_cost"), "goodput"]})
    sv = gpu_saving(front, 6, tol=tol)
    out.append({"key": "fig4_gpu_saving", "ours": sv["saving_pct"]})
    out.append({"key": "fig4_rr_gpus_for_mc_6gpu", "ours": sv["baseline_gpus"], "paper": 7.0, "unit": "GPUs"})
    s = shapes.set_index(["topology", "policy"])
    if ("1p2d", "marginal_cost") in s.index and ("1p2d", "round_robin") in s.index:
        mc, rr = s.loc[("1p2d", "marginal_cost"), "goodput"], s.loc[("1p2d", "round_robin"), "goodput"]
        out += [{"key": "fig4_mc_1p2d", "ours": mc}, {"key": "fig4_rr_1p2d", "ours": rr},
                {"key": "fig4_inversion_at_1p2d", "ours": float(rr > mc), "paper": 1.0, "unit": "bool"}]
    return out


# ---- §V-F: load and tails, Figs. 5-7 (09) -------------------------------------------------------
RATE_FRACTIONS = (0.25, 0.4, 0.55, 0.7, 0.85, 1.0)
BURST = {"process": "burst", "burst_factor": 3.0, "period_s": 30.0, "duty": 0.2}


def load_sweep_table(runs: pd.DataFrame, operating_rate: float) -> pd.DataFrame:
    """Per (rate, policy): goodput and P99 TTFT over seeds; ``load`` = rate / operating rate; the paper's
    round-robin values at the lowest rate and at the operating point (Fig. 5)."""
    tab = policy_summary(runs, ("rate", "policy")).sort_values(["rate", "policy"]).reset_index(drop=True)
    tab.insert(1, "load", tab.rate / operating_rate)
    lo, hi = tab.rate.min(), tab.rate.max()
    pg, pt = [], []
    for r, p in zip(tab.rate, tab.policy):
        key = "light" if r == lo else ("sat" if r == hi else None)
        pg.append(paper_value(f"fig5_rr_goodput_{key}") if key and p == "round_robin" else np.nan)
        pt.append(paper_value(f"fig5_rr_ttft_p99_{key}") if key and p == "round_robin" else np.nan)
    tab["paper_goodput"], tab["paper_ttft_p99_s"] = pg, pt
    return tab


FIG6_KEYS = {"marginal_cost": "fig6_mc_ttft_p99", "round_robin": "fig6_rr_ttft_p99", "least_loaded": "fig6_ll_ttft_p99"}


def operating_point_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Fig. 6: P99 TTFT per policy at the operating point (the highest rate of the sweep)."""
    at = runs[runs.rate == runs.rate.max()]
    tab = policy_summary(at, ("policy",))
    tab["paper_ttft_p99_s"] = [paper_value(FIG6_KEYS[p]) if p in FIG6_KEYS else np.nan for p in tab.policy]
    return tab


def burst_requests(rate: float, period_s: float, n_requests: int, periods: int = 3) -> int:
    """Requests of a burst-train run: ``n_requests``, or more when that would not span ``periods``
    burst periods at the mean ``rate`` (a train of one burst shows nothing)."""
    if not rate > 0 or not period_s > 0:
        raise ConfigError(f"burst: rate ({rate!r} req/s) and period ({period_s!r} s) must be > 0")
    return max(int(n_requests), int(np.ceil(rate * period_s * periods)))


def burst_specs(*, backend: str = "sim", seeds: Sequence[int] = (1,), rate: float = 16.0, n_requests: int = 2000,
                topology: str = "2p4d", cluster: Optional[str] = None, time_scale: float = 1.0,
                policies: Sequence[str] = PAPER_POLICIES, burst: Optional[dict[str, Any]] = None) -> list[Any]:
    """The burst-train runs of Fig. 7 (mixed, mean rate ``rate``, arrivals a `repro.workload.arrivals` burst train)."""
    return specs_grid(rates=rate, topologies=(topology,), policies=policies, seeds=seeds, backend=backend,
                      n_requests=n_requests, cluster=cluster, time_scale=time_scale, arrival=dict(burst or BURST))


def burst_timeline(specs: Sequence[Any], runs_dir: str | Path = "runs/paper", window_s: float = 10.0,
                   q: float = 95) -> pd.DataFrame:
    """Rolling goodput and P``q`` TTFT per arrival window, per run (columns: policy, seed, window_s,
    goodput, ttft_p95_s, requests). Windows after the last arrival window that is full are dropped."""
    from repro.experiment.inputs import truth_cost_model
    from repro.experiment.metrics import rolling
    from repro.experiment.runner import simulate_spec

    frames = []
    for spec in specs:
        journal = simulate_spec(spec) if spec.backend == "sim" else run_live(spec, runs_dir).journal()
        r = rolling(journal, truth_cost_model(spec).slo, window_s=window_s, q=q)
        last_full = float(np.floor(journal["arrival_s"].max() / window_s) * window_s)
        r = r[r.window < last_full].rename(columns={"window": "window_s"})
        r.insert(0, "seed", int(spec.seed))
        r.insert(0, "policy", spec.policy)
        frames.append(r)
    return pd.concat(frames, ignore_index=True)


def burst_table(timeline: pd.DataFrame, q: float = 95) -> pd.DataFrame:
    """Per policy: mean and max of the rolling P``q`` TTFT, mean rolling goodput, and the share of windows
    in which it holds goodput at or above round-robin (same seed and window)."""
    col = f"ttft_p{int(q)}_s"
    g = timeline.groupby("policy", sort=False)
    tab = pd.DataFrame({f"rolling_{col}_mean": g[col].mean(), f"rolling_{col}_max": g[col].max(),
                        "rolling_goodput_mean": g["goodput"].mean(), "windows": g.size()}).reset_index()
    if "round_robin" in set(timeline.policy):
        rr = timeline[timeline.policy == "round_robin"].set_index(["seed", "window_s"])["goodput"]
        share = {}
        for pol, grp in timeline.groupby("policy"):
            mine = grp.set_index(["seed", "window_s"])["goodput"]
            both = mine.index.intersection(rr.index)
            share[pol] = float((mine.loc[both] >= rr.loc[both]).mean()) if len(both) else np.nan
        tab["windows_at_or_above_rr"] = tab.policy.map(share)
    pol_order = {p: i for i, p in enumerate(PAPER_POLICIES)}
    tab = tab.sort_values("policy", key=lambda s: s.map(lambda p: pol_order.get(p, 99))).reset_index(drop=True)
    tab["paper_rolling_ttft_p95_s"] = [paper_value("fig7_mc_ttft_p95_rolling") if p == "marginal_cost" else np.nan
                                       for p in tab.policy]
    return tab


def load_and_tails_headline(sweep: pd.DataFrame, op: pd.DataFrame, burst: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    rr = sweep[sweep.policy == "round_robin"].sort_values("rate")
    if len(rr):
        out += [{"key": "fig5_rr_goodput_light", "ours": rr.goodput.iloc[0]},
                {"key": "fig5_rr_goodput_sat", "ours": rr.goodput.iloc[-1]},
                {"key": "fig5_rr_ttft_p99_light", "ours": rr.ttft_p99_s.iloc[0]},
                {"key": "fig5_rr_ttft_p99_sat", "ours": rr.ttft_p99_s.iloc[-1]}]
    o = op.set_index("policy")
    out += [{"key": k, "ours": o.loc[p, "ttft_p99_s"]} for p, k in FIG6_KEYS.items() if p in o.index]
    if {"marginal_cost", "round_robin", "least_loaded"} <= set(o.index):
        best = o.loc[["marginal_cost", "round_robin", "least_loaded"], "ttft_p99_s"].idxmin()
        out.append({"key": "fig6_mc_lowest_ttft_p99", "ours": float(best == "marginal_cost"), "paper": 1.0, "unit": "bool"})
    b = burst.set_index("policy")
    col = "rolling_ttft_p95_s_mean"
    if "marginal_cost" in b.index:
        mc = b.loc["marginal_cost", col]
        others = b.drop(index="marginal_cost")[col]
        out.append({"key": "fig7_mc_ttft_p95_rolling", "ours": mc})
        if len(others):
            out += [{"key": "fig7_other_ttft_p95_rolling_lo", "ours": others.min()},
                    {"key": "fig7_other_ttft_p95_rolling_hi", "ours": others.max()},
                    {"key": "fig7_tail_reduction", "ours": 100.0 * (1.0 - mc / others.mean())}]
        if "windows_at_or_above_rr" in b.columns:
            out.append({"key": "fig7_mc_windows_at_or_above_rr", "ours": b.loc["marginal_cost", "windows_at_or_above_rr"],
                        "paper": 1.0, "unit": "fraction"})
    return out
