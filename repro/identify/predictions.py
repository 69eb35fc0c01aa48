"""What an identified testbed predicts: the numbers it was not fitted on, across its ensemble.

Each prediction row (`repro.identify.targets` format; ``data/identify/paper_predictions.csv`` holds
the paper's numbers about its router) is simulated on every testbed of the ensemble, and on a
reference profile for comparison (the estimated profile we used before identification). A rate the
fit did not identify (``@rate_reasoning``) is found on each testbed by the paper's own protocol, the
saturation search (`repro.experiment.saturation.saturation_search`).

A row *holds* on a testbed when (`holds`): a value is within 2 sd of the paper's (a time: its log
ratio within 2 sd); an ordering (two policies) has the paper's sign and at least half its size (the
verdicts' rule: a gap that cannot be told from half the paper's is not the paper's); a tie (the paper
says the two are level: the row's ``claim``) is within 2 sd of zero. Across the ensemble a row "holds on
every plausible testbed", "depends on the testbed" (the parameter that decides it: the largest
|Spearman rho| between a parameter and the predicted number) or "holds on none" (`robustness`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy import stats

from repro.identify.fit import Problem, simulate_values, target_specs
from repro.identify.targets import Target

if TYPE_CHECKING:
    from repro.experiment.executor import Executor

SEARCH_REQUESTS = 1000
"""Requests per probe of a testbed's saturation search for a rate the fit left out."""


@dataclass(frozen=True)
class MemberTask:
    """One testbed to predict on: its settings (`repro.identify.space.settings`) and the rows."""

    member: str
    profile: str
    settings: Mapping[str, Mapping[str, float]]
    rows: tuple[Target, ...]


def searched_rate(task: MemberTask, workload: str, seed: int, n_requests: int = SEARCH_REQUESTS) -> float:
    """The testbed's saturation rate of ``workload`` on 2p4d (round-robin mid-collapse, the paper's protocol),
    probed with ``n_requests`` per run: the requests of the rows the rate sets (a rate searched on fewer
    requests than it is judged with lands elsewhere: a shorter trace fills fewer queues)."""
    from repro.experiment.runner import SimTask, simulate_output
    from repro.experiment.saturation import saturation_search
    from repro.experiment.spec import RunSpec

    base = RunSpec(backend="sim", workload=workload, topology="2p4d", profile=task.profile, seed=seed,
                   n_requests=n_requests, policy="round_robin",
                   physics=dict(task.settings.get("physics", {})) or None,
                   workloads=dict(task.settings.get("workloads", {})) or None)

    def probe(spec: RunSpec) -> float:
        return float(simulate_output(SimTask(spec, journal=False)).summary["goodput"])

    return float(saturation_search(base, probe=probe).rate)


def predict_member(task: MemberTask) -> dict[str, float]:
    """Row key -> the number simulated on one testbed (plus ``rate:<name>`` for each searched rate)."""
    known = dict(task.settings.get("rate", {}))
    searched: dict[str, float] = {}
    for t in task.rows:
        for name in t.rate_names():
            if name not in known and name not in searched:
                searched[name] = searched_rate(task, name.removeprefix("rate_"), t.seeds[0], t.n_requests)
    problem = Problem(task.profile, (), (), physical_bounds=False)  # the rows' rates: the settings' and the searched
    values = simulate_values(task.rows, target_specs(problem, task.settings, task.rows, rates=searched))
    return {**values, **{f"rate:{k}": v for k, v in searched.items()}}


def holds(t: Target, value: float) -> bool:
    """Whether the paper's claim of row ``t`` holds at the predicted ``value`` (module docstring)."""
    if not math.isfinite(value):
        return False
    if t.claim_kind == "tie":
        return abs(value) <= 2 * t.sd
    if t.claim_kind == "ordering":
        return math.copysign(1.0, value) == math.copysign(1.0, t.value) and abs(value) >= abs(t.value) / 2
    return abs(t.residual(value)) <= 2.0


def predict(members: pd.DataFrame, space: Sequence[Any], profile: str, rows: Sequence[Target], *,
            stated: Mapping[str, float] | None = None, reference: str | None = None,
            executor: Executor | None = None,
            fixed: tuple[Mapping[str, float], Mapping[str, float]] = ({}, {})) -> pd.DataFrame:
    """Long table: member, key, value for each testbed of ``members`` (an ensemble frame: one column per
    parameter; its rates: the fitted ones and the ``stated`` ones, req/s) and, with ``reference``, that
    profile as it is (member ``reference``), every rate of which its own saturation search finds (as the
    main job on that profile did). ``fixed``: the physics and workload overrides the model's mechanisms fix
    on every testbed of the ensemble (`repro.identify.fit.Problem.fixed`)."""
    from repro.experiment.executor import shared_executor
    from repro.identify.space import settings

    tasks = []
    for i, m in members.reset_index(drop=True).iterrows():
        x = [p.to_internal(float(m[p.name])) for p in space]
        s = settings(space, x)
        s["rate"] = {**(stated or {}), **s["rate"]}
        s["physics"] = {**fixed[0], **s["physics"]}
        s["workloads"] = {**fixed[1], **s["workloads"]}
        tasks.append(MemberTask(f"m{i:02d}", profile, s, tuple(rows)))
    if reference is not None:
        tasks.append(MemberTask("reference", reference, {}, tuple(rows)))
    ex = executor or shared_executor()
    out = []
    for i, values in ex.imap_unordered(predict_member, tasks):
        out.extend({"member": tasks[i].member, "key": k, "value": v} for k, v in values.items())
    return pd.DataFrame(out).sort_values(["member", "key"], kind="stable").reset_index(drop=True)


def robustness(rows: Sequence[Target], predicted: pd.DataFrame, members: pd.DataFrame,
               space: Sequence[Any]) -> pd.DataFrame:
    """Per row: the paper's number, the best testbed's prediction, the ensemble's range, on how many
    testbeds the claim holds, the verdict of that count and the deciding parameter; the reference
    profile's prediction beside it."""
    wide = predicted.pivot(index="member", columns="key", values="value")
    ens = wide.drop(index="reference", errors="ignore")
    out = []
    for t in rows:
        vals = ens[t.key].astype(float) if t.key in ens else pd.Series(dtype=float)
        ok = [holds(t, float(v)) for v in vals]
        n, k = len(ok), int(sum(ok))
        decided_by, rho_best = "", 0.0
        if 0 < k < n:
            for p in space:
                col = members[p.name].astype(float).to_numpy()[: len(vals)]
                if np.ptp(col) == 0 or np.ptp(vals.to_numpy()) == 0:
                    continue
                rho = float(stats.spearmanr(col, vals.to_numpy()).statistic)
                if math.isfinite(rho) and abs(rho) > abs(rho_best):
                    decided_by, rho_best = p.name, rho
        verdict = ("holds on every plausible testbed" if n and k == n else "holds on none" if k == 0
                   else f"depends on the testbed ({decided_by}, Spearman rho {rho_best:+.2f})" if decided_by
                   else "depends on the testbed")
        ref = float(wide.loc["reference", t.key]) if "reference" in wide.index and t.key in wide else math.nan
        out.append({"key": t.key, "paper": t.value, "metric": t.metric, "policies": "-".join(t.policies),
                    "predicted": float(vals.iloc[0]) if n else math.nan,
                    "ensemble_lo": float(vals.min()) if n else math.nan,
                    "ensemble_hi": float(vals.max()) if n else math.nan,
                    "holds": k, "testbeds": n, "robustness": verdict, "decided_by": decided_by,
                    "reference": ref, "reference_holds": holds(t, ref) if math.isfinite(ref) else False,
                    "source": t.source})
    return pd.DataFrame(out)


def kv_peak_tokens(profile: str, *, rate: float, policy: str, seed: int, n_requests: int = 2000,
                   settings: Mapping[str, Mapping[str, float]] | None = None, topology: str = "2p4d") -> int:
    """The most KV tokens any decode engine held in one simulated mixed run (the simulator's own peak,
    `repro.sim.simulator.Simulator.kv_peak`): how close the run came to the profile's KV budget."""
    from repro.experiment.inputs import build_predictions, build_trace, engine_pools, make_router
    from repro.experiment.spec import RunSpec
    from repro.sim.simulator import Simulator

    s = settings or {}
    spec = RunSpec(backend="sim", workload="mixed", topology=topology, profile=profile, seed=seed, rate=rate,
                   n_requests=n_requests, policy=policy, physics=dict(s.get("physics", {})) or None,
                   workloads=dict(s.get("workloads", {})) or None)
    _, pre, _, dec = engine_pools(spec)
    trace = build_trace(spec)
    sim = Simulator(trace.df, build_predictions(spec, trace), make_router(spec), pre, dec, spec.sim,
                    spec.poll_interval_s())
    sim.run()
    return int(max(sim.kv_peak))


KV_PEAK_POLICIES: tuple[str, ...] = ("round_robin", "least_loaded", "marginal_cost")
"""The policies `kv_peaks` runs: two baselines and the paper's router."""
KV_PEAK_SEEDS: tuple[int, ...] = (1, 2, 3)
"""The traces `kv_peaks` runs (the paper's three)."""


def kv_peaks(best: Mapping[str, Mapping[str, float]], profile: str, stated: Mapping[str, float], *,
             reference: str = "", reference_rate: float | None = None,
             policies: Sequence[str] = KV_PEAK_POLICIES, seeds: Sequence[int] = KV_PEAK_SEEDS) -> pd.DataFrame | None:
    """The most KV tokens a decode engine held at mixed's operating point (2p4d; `kv_peak_tokens`), per policy
    over ``seeds``, beside each testbed's KV budget (tokens): on the identified testbed (``profile`` with the
    best vector's ``best`` settings, at the stated rate ``stated["rate_mixed"]``, req/s) and, when given, on the
    ``reference`` profile at its own searched rate. None when the measurements state no mixed rate."""
    from repro.engine.profile import load_profile

    if "rate_mixed" not in stated:
        return None
    where = [("identified (best)", profile, float(stated["rate_mixed"]), best)]
    if reference and reference_rate is not None:
        where.append((f"reference {reference}", reference, float(reference_rate), {}))
    rows = []
    for label, prof, rate, s in where:
        budget = load_profile(prof).physics.kv_budget_tokens
        for pol in policies:
            peaks = [kv_peak_tokens(prof, rate=rate, policy=pol, seed=seed, settings=s) for seed in seeds]
            rows.append({"testbed": label, "rate": rate, "policy": pol, "kv_peak_tokens_max": max(peaks),
                         "kv_peak_tokens_seeds": " ".join(map(str, peaks)), "kv_budget_tokens": budget})
    return pd.DataFrame(rows)
