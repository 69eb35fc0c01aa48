"""Logic behind the section notebooks (kept here so that it is tested; the notebooks stay thin).

Conventions: every function returns tidy pandas frames; times in seconds; goodput a fraction.
``backend='sim'`` runs in-process and deterministically; other backends go through the live
harness (`repro.experiment.run`, `repro.cluster.launch`), which needs a cluster.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import pandas as pd

from repro.engine.physics import Physics
from repro.errors import ConfigError
from repro.paper.plans import check_backend_scale, for_this_machine
from repro.paths import resolve_dir
from repro.routing.cost_model import CostModel

PAPER_POLICIES = ("round_robin", "least_loaded", "length_threshold", "marginal_cost")
WORKLOADS = ("chat", "reasoning", "documents", "mixed")


def check_common(backend: str, scale: str, seeds: Sequence[int] | None = None) -> None:
    """Validate the shared notebook parameters; a bad one stops the notebook with what to do."""
    check_backend_scale(backend, scale)
    if seeds is not None:
        if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise ConfigError(f"parameter 'seeds' = {seeds!r} must be a non-empty list of integers >= 0")


def check_cluster(backend: str, cluster: str, *, need_calibration: bool = True) -> Optional[str]:
    """The cluster file for a live backend (None for sim). Stops at once, saying what to do, when the
    file is missing or malformed, when ``vllm`` engines have no calibration (``need_calibration``;
    notebook 01, which makes one, passes False), or when remote engines do not answer ``/health``."""
    if backend == "sim":
        return None
    if backend == "vllm" and not cluster:
        raise ConfigError("backend 'vllm' needs a cluster file: pass cluster='cluster.yaml' "
                          "(repro paper --backend vllm --cluster cluster.yaml); see data/clusters/")
    if not cluster:
        return None
    from repro.cluster.launchers import wait_healthy
    from repro.cluster.topology import Instance, parse_topology

    topo = parse_topology(cluster)  # validates: a missing or malformed file (or calibration file) raises ConfigError
    if backend == "vllm" and need_calibration and "calibration" not in topo.options:
        raise ConfigError(f"cluster {cluster} has no 'calibration': the router's cost model and the SLO targets come "
                          f"from calibrating these engines. Run notebook 01 on it (repro paper --only 01 --backend vllm "
                          f"--cluster {cluster}) or `repro calibrate --cluster {cluster} --out calibration.json`, then add "
                          "'calibration: calibration.json' to the file ('calibration: calibrated' uses the paper's A40 constants)")
    remote = [Instance(name=i.name, role=i.role, url=i.url) for i in topo.instances if i.url]
    if remote:
        try:
            wait_healthy(remote, timeout=2.0)
        except RuntimeError as exc:  # the launcher's own health check, with a short deadline
            raise ConfigError(f"cluster {cluster}: no answer from GET /health within 2 s: {exc}") from None
    return cluster


@contextmanager
def live_cluster(backend: str, cluster: Optional[str], topology: str = "1p1d",
                 time_scale: float = 1.0) -> Iterator[list[Any]]:
    """Bring up the cluster a live notebook step needs: the cluster file, else an emulated ``topology``."""
    from repro.cluster.launchers import launch

    if backend == "sim":
        raise ConfigError("live_cluster: backend 'sim' has no cluster")
    if cluster:
        with launch(cluster) as instances:
            yield instances
    else:
        with launch(topology, launcher="emulated", time_scale=time_scale) as instances:
            yield instances


# ---- §III-B: calibration ------------------------------------------------------------------------
PREFILL_LENGTHS = (128, 256, 512, 1024, 1536, 2048)
CONCURRENCIES = (1, 2, 4, 8, 16)
TYPICAL_CONTEXT = 800


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


def calibrate_sim(profile: str = "a40-qwen2.5-3b", *, seed: int = 0, rounds: int = 3,
                  noise: float = 0.02) -> tuple[CostModel, pd.DataFrame]:
    """Fit a CostModel from a synthetic benchmark of the profile's Physics: ``(model, samples)``."""
    from repro.live.calibration_bench import fit_samples

    physics = Physics.load(profile)
    samples = synthetic_calibration_samples(physics, rounds=rounds, noise=noise, seed=seed)
    return fit_samples(samples, base=CostModel.load("calibrated"), name="fitted"), samples


def calibrate_live(backend: str, cluster: Optional[str], *, time_scale: float = 1.0,
                   budget_s: float = 60.0) -> tuple[CostModel, pd.DataFrame]:
    """`repro.live.calibration_bench.calibrate` on a live cluster (the file, else an emulated 1p1d)."""
    from repro.live.calibration_bench import calibrate

    with live_cluster(backend, cluster, "1p1d", time_scale) as instances:
        model, samples = calibrate(instances, time_scale=time_scale, budget_s=budget_s)
    return model, samples


CONSTANTS = (
    ("tau_pre_base_s", "s", "sim_prefill_base_measured"),
    ("tau_pre_per_token_s", "s/token", None),
    ("tau_dec_s", "s/token", "sim_tau_dec_measured"),
    ("dec_concurrency_slope", "1/seq", None),
    ("ttft_tight_s", "s", "slo_ttft_tight"),
    ("tpot_tight_s", "s", "slo_tpot_tight"),
)


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

    Returns ``(prefill, decode)`` with columns (x, latency_s, source); x is prompt tokens or
    concurrency; source is 'measured', 'fitted', 'shipped calibrated' or 'simulator-derived'.
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


# ---- §III-C: the length predictor ---------------------------------------------------------------
def predictor_accuracy(seed: Optional[int] = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out accuracy of the shipped predictor vs the constant baseline.

    Returns ``(table, points)``: table has one row per (group, model) with n, mae_tokens,
    median_abs_rel_error, spearman; points has true and predicted output tokens per held-out
    request (group, true_tokens, predicted_tokens).
    """
    from repro.routing.predictor import SPLIT_SEED, build_datasets, default_train_median, evaluate, load_default

    data = build_datasets(SPLIT_SEED if seed is None else seed, splits=("heldout",))["heldout"]
    model = load_default()
    baseline = default_train_median()
    res = evaluate(model, data, baseline)
    rows = []
    for group, by_model in res.items():
        for name, m in by_model.items():
            rows.append({"group": group, "model": "learned" if name == "model" else "constant (train median)",
                         **{k: m[k] for k in ("n", "mae_tokens", "median_abs_rel_error", "spearman")}})
    table = pd.DataFrame(rows)
    pts = []
    for group, (X, y) in data.items():
        p = np.asarray(model.predict(X), dtype=float)
        pts.append(pd.DataFrame({"group": group, "true_tokens": np.asarray(y, float), "predicted_tokens": p}))
    return table, pd.concat(pts, ignore_index=True)


# ---- §IV: methodology -----------------------------------------------------------------------------
def saturation_table(workloads: Sequence[str] = WORKLOADS, *, backend: str = "sim", n_requests: int = 1000,
                     seed: int = 1, topology: str = "2p4d", cluster: Optional[str] = None,
                     runs_dir: str | Path = "runs/paper", time_scale: float = 1.0,
                     max_probes: int = 16, fixed: Optional[dict[str, float]] = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Saturation search per workload: ``(rates, probes)`` tidy frames. A relative ``runs_dir`` is
    relative to the repository root (as in `run_grid`), whatever the notebook's working directory.

    With ``fixed`` (workload -> req/s) there is no search: one round-robin probe per workload at
    the given rate checks that operating point (``light_goodput`` and ``target_goodput`` NaN).
    """
    from repro.experiment.inputs import truth_cost_model
    from repro.experiment.metrics import summarize
    from repro.experiment.runner import simulate_spec
    from repro.experiment.saturation import saturation_search
    from repro.experiment.spec import RunSpec

    rates, probes = [], []
    for wl in workloads:
        base = RunSpec(backend=backend, workload=wl, seed=seed, n_requests=n_requests, topology=topology,
                       cluster=cluster, time_scale=time_scale)
        probe = None if backend == "sim" else (lambda spec: run_live(spec, runs_dir).summary["goodput"])
        if fixed is not None:
            if wl not in fixed:
                raise ConfigError(f"saturation: no fixed rate for workload {wl!r}; given: {sorted(fixed)}")
            spec = base.replace(policy="round_robin", policy_options={}, rate=float(fixed[wl]))
            g = (probe(spec) if probe else summarize(simulate_spec(spec), truth_cost_model(spec).slo)["goodput"])
            rates.append({"workload": wl, "saturation_rate": float(fixed[wl]), "light_goodput": np.nan,
                          "target_goodput": np.nan, "probes": 1})
            probes.append({"workload": wl, "probe": 0, "rate": float(fixed[wl]), "round_robin_goodput": float(g)})
            continue
        res = saturation_search(base, probe=probe, max_probes=max_probes)
        rates.append({"workload": wl, "saturation_rate": res.rate, "light_goodput": res.light_goodput,
                      "target_goodput": res.target_goodput, "probes": len(res.probes)})
        for i, (r, g) in enumerate(res.probes):
            probes.append({"workload": wl, "probe": i, "rate": r, "round_robin_goodput": g})
    return pd.DataFrame(rates), pd.DataFrame(probes)


def gates_table(report: Any) -> pd.DataFrame:
    """A GatesReport as a tidy frame (gate, instance, ok, detail, latency_s)."""
    rows = []
    for rep in getattr(report, "reports", [report]):
        for c in rep.checks:
            rows.append({"gate": rep.gate, "instance": c.instance, "ok": bool(c.ok), "detail": c.detail,
                         "latency_s": c.latency_s})
    return pd.DataFrame(rows, columns=["gate", "instance", "ok", "detail", "latency_s"])


# ---- runs --------------------------------------------------------------------------------------
SUMMARY_COLUMNS = ("goodput", "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                   "token_skew", "request_skew", "requests", "completed", "failed", "rejected")


def run_live(spec: Any, runs_dir: str | Path = "runs/paper") -> Any:
    """`repro.experiment.run` for a notebook: the runs folder relative to the repo root, and an
    emulated time scale no faster than the CPUs keep up with (`repro.paper.plans.for_this_machine`)."""
    from repro.experiment.runner import run

    return run(for_this_machine(spec), resolve_dir(runs_dir))


def run_grid(specs: Sequence[Any], runs_dir: str | Path = "runs/paper", on_run: Any = None) -> pd.DataFrame:
    """Run specs; one row per run (spec fields + summary). ``sim`` runs in-process, without disk.

    ``on_run(i, n, spec)`` is called before each run (progress).
    """
    from repro.experiment.inputs import truth_cost_model
    from repro.experiment.metrics import summarize
    from repro.experiment.runner import simulate_spec

    rows = []
    for i, spec in enumerate(specs):
        spec = for_this_machine(spec)
        if on_run is not None:
            on_run(i, len(specs), spec)
        if spec.backend == "sim":
            summary = summarize(simulate_spec(spec), truth_cost_model(spec).slo, sent=spec.n_requests)
        else:
            summary = run_live(spec, runs_dir).summary
        rows.append({"workload": spec.workload, "topology": spec.topology, "policy": spec.policy,
                     "cost_model": spec.cost_model, "seed": spec.seed, "rate": spec.rate,
                     "n_requests": spec.n_requests, "backend": spec.backend, "time_scale": spec.time_scale,
                     **{k: summary.get(k, np.nan) for k in SUMMARY_COLUMNS}})
    return pd.DataFrame(rows)


# ---- §V-A: Table II --------------------------------------------------------------------------------
def table_two_specs(*, backend: str = "sim", seeds: Sequence[int] = (1, 2, 3), rate: float = 16.0,
                    n_requests: int = 2000, topology: str = "2p4d", cluster: Optional[str] = None,
                    time_scale: float = 1.0, policies: Sequence[str] = PAPER_POLICIES) -> list[Any]:
    """The runs of Table II: every paper policy on every trace (seed), mixed workload."""
    from repro.experiment.spec import RunSpec

    return [RunSpec(backend=backend, workload="mixed", topology=topology, seed=int(s), rate=float(rate),
                    n_requests=int(n_requests), policy=p, cluster=cluster, time_scale=time_scale)
            for p in policies for s in seeds]


def table_two(runs: pd.DataFrame) -> pd.DataFrame:
    """Per policy: per-trace goodput, mean, spread (max - min), sd, worst trace, paper values."""
    from repro.paper import reference as paper_reference

    ref = paper_reference.load()
    ref = ref[ref["figure_or_table"] == "Table II"]
    rows = []
    for pol in [p for p in PAPER_POLICIES if p in set(runs.policy)] + sorted(set(runs.policy) - set(PAPER_POLICIES)):
        g = runs[runs.policy == pol].sort_values("seed")
        row: dict[str, Any] = {"policy": pol}
        for i, (seed, val) in enumerate(zip(g.seed, g.goodput), start=1):
            row[f"trace{i}_goodput"] = float(val)
        vals = g.goodput.to_numpy(float)
        row.update(mean_goodput=float(vals.mean()), spread=float(vals.max() - vals.min()),
                   sd=float(vals.std(ddof=1)) if len(vals) > 1 else 0.0, worst=float(vals.min()),
                   mean_ttft_p99_s=float(g.ttft_p99_s.mean()))
        pref = ref[ref["policy"] == pol].set_index("key")["value"]
        row["paper_mean_goodput"] = float(pref["table2_mc_mean"]) if "table2_mc_mean" in pref else np.nan
        row["paper_worst"] = float(pref["table2_ll_worst"]) if "table2_ll_worst" in pref else (
            float(min(pref[[k for k in pref.index if "trace" in k]])) if any("trace" in k for k in pref.index) else np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def table_two_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    """Headline rows (key, ours) for `repro paper`'s summary."""
    mc = tab.set_index("policy").loc["marginal_cost"]
    out = [{"key": "table2_mc_mean", "ours": mc["mean_goodput"]}]
    for i in (1, 2, 3):
        if f"trace{i}_goodput" in mc and not pd.isna(mc[f"trace{i}_goodput"]):
            out.append({"key": f"table2_mc_trace{i}", "ours": mc[f"trace{i}_goodput"]})
    if "least_loaded" in set(tab.policy):
        out.append({"key": "table2_ll_worst", "ours": tab.set_index("policy").loc["least_loaded", "worst"]})
    best = tab.sort_values("mean_goodput", ascending=False).iloc[0]
    out.append({"key": "table2_best_is_marginal_cost", "ours": float(best.policy == "marginal_cost"),
                "paper": 1.0, "unit": "bool"})
    return out
