"""A table of measured numbers: what a testbed is identified from, or what it predicts.

One row per number, in CSV (``data/identify/paper_baselines.csv`` is the paper's; a user writes the
same table from their own cluster's baseline runs). Columns:

============ ==========================================================================================
key          the number's name (a `data/paper_reference.csv` key for the paper's)
workload     ``chat`` | ``reasoning`` | ``documents`` | ``mixed``
topology     e.g. ``2p4d``
policy       the policy that was measured (training rows: baselines only, never the router under study,
             `check_training`);
             a prediction may name two, ``a-b``: the paired difference a minus b (an ordering)
rate         req/s: a number, ``@name`` (a fitted rate, `repro.identify.space`, or a stated one:
             ``repro identify --stated-rate name=R``), or ``F*@name`` / ``F*R``
seeds        the traces, space-separated (``1 2 3``); the statistic is taken over them
n_requests   requests per run
metric       a run summary column: ``goodput``, ``ttft_p99_s``, ``preempted_fraction``, ...
statistic    ``mean`` | ``min`` | ``max`` over the seeds
value        the measured number (the metric's unit: a fraction, seconds)
sd           its noise (same unit; for a time, relative: 0.15 = 15 %); with the simulator's own trace noise
             this is the yardstick of the fit (`repro.identify.fit`)
source       where the number comes from (the paper's section and figure, or the user's run)
bound        optional: ``at_least`` | ``at_most``: the number is a bound the paper states ("every load-aware
             policy holds >= 0.695"), met by any value on its side (residual 0 there)
claim        optional, for a prediction: ``value`` (default for one policy), ``ordering`` (default for two:
             the paper's gap, its sign the claim) or ``tie`` (the paper says the two are level)
============ ==========================================================================================

A time metric (``*_s``) is compared on a log scale (its ``sd`` relative); every other metric on its own
scale. Bad rows are a `ConfigError` naming the row and the column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.vocab import WORKLOADS

COLUMNS = ("key", "workload", "topology", "policy", "rate", "seeds", "n_requests", "metric", "statistic",
           "value", "sd", "source")
STATISTICS = ("mean", "min", "max")
CLAIMS = ("value", "ordering", "tie")
BOUNDS = ("at_least", "at_most")
_RATE = re.compile(r"^\s*(?:(?P<factor>[0-9.eE+-]+)\s*\*\s*)?(?P<ref>@[A-Za-z_][A-Za-z0-9_]*|[0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class Target:
    """One measured number and the runs that measure it (one per seed)."""

    key: str
    workload: str
    topology: str
    policies: tuple[str, ...]
    rate: str
    seeds: tuple[int, ...]
    n_requests: int
    metric: str
    statistic: str
    value: float
    sd: float
    source: str = ""
    claim: str = ""
    """``value`` | ``ordering`` | ``tie`` (`CLAIMS`); empty: ``value`` for one policy, ``ordering`` for two."""
    bound: str = ""
    """``at_least`` | ``at_most`` (`BOUNDS`): a stated bound, met on its side; empty: a number."""

    @property
    def claim_kind(self) -> str:
        return self.claim or ("ordering" if len(self.policies) == 2 else "value")

    @property
    def log_scale(self) -> bool:
        """A time: compared as log(simulated / measured), ``sd`` relative."""
        return self.metric.endswith("_s")

    def rate_of(self, rates: Mapping[str, float]) -> float:
        """The arrival rate (req/s), with ``@name`` looked up in ``rates``."""
        m = _RATE.match(self.rate)
        assert m is not None  # checked on load
        ref = m.group("ref")
        base = float(rates[ref[1:]]) if ref.startswith("@") else float(ref)
        return base * float(m.group("factor") or 1.0)

    def rate_names(self) -> list[str]:
        m = _RATE.match(self.rate)
        assert m is not None
        return [m.group("ref")[1:]] if m.group("ref").startswith("@") else []

    def combine(self, per_policy: Sequence[Sequence[float]]) -> float:
        """The row's number from each policy's per-seed values: the statistic over seeds of the first
        policy, or with two policies of their per-seed differences (first minus second)."""
        vals = np.asarray(per_policy[0], dtype=float)
        if len(per_policy) == 2:
            vals = vals - np.asarray(per_policy[1], dtype=float)
        return float({"mean": np.mean, "min": np.min, "max": np.max}[self.statistic](vals))

    def residual(self, simulated: float) -> float:
        """(simulated - measured) / sd, on a log scale for times; 0 on the allowed side of a bound. NaN or a
        non-positive time: +inf."""
        if not math.isfinite(simulated):
            return math.inf
        if (self.bound == "at_least" and simulated >= self.value) or (self.bound == "at_most"
                                                                      and simulated <= self.value):
            return 0.0
        if self.log_scale:
            if simulated <= 0 or self.value <= 0:
                return math.inf
            return math.log(simulated / self.value) / self.sd
        return (simulated - self.value) / self.sd


def load_targets(path: str | Path) -> list[Target]:
    """The rows of a targets CSV, checked (`COLUMNS`); a bad row is a `ConfigError` naming it."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"targets: file {path} does not exist")
    df = pd.read_csv(path, dtype=str, keep_default_na=False, comment="#")
    return targets_from_frame(df, origin=str(path))


def targets_from_frame(df: pd.DataFrame, origin: str = "targets") -> list[Target]:
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(f"{origin}: missing column(s) {missing}; required: {list(COLUMNS)}")
    out: list[Target] = []
    keys: set[str] = set()
    for i, row in enumerate(df.to_dict("records"), start=2):
        where = f"{origin} line {i} ({row.get('key')!r})"
        key = str(row["key"]).strip()
        if not key or key in keys:
            raise ConfigError(f"{where}: column 'key' must be a non-empty name used once")
        keys.add(key)
        if row["workload"] not in WORKLOADS:
            raise ConfigError(f"{where}: column 'workload' = {row['workload']!r}; allowed: {list(WORKLOADS)}")
        policies = tuple(p.strip() for p in str(row["policy"]).split("-") if p.strip()) \
            if "-" in str(row["policy"]) and ":" not in str(row["policy"]) else (str(row["policy"]).strip(),)
        if not policies or not all(policies) or len(policies) > 2:
            raise ConfigError(f"{where}: column 'policy' must name a policy, or two as 'a-b' (a minus b)")
        if not _RATE.match(str(row["rate"])):
            raise ConfigError(f"{where}: column 'rate' = {row['rate']!r}: a number (req/s), '@name' or 'F*@name'")
        try:
            seeds = tuple(int(s) for s in str(row["seeds"]).split())
            n = int(row["n_requests"])
            value = float(row["value"])
            sd = float(row["sd"])
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc} (seeds: integers; n_requests: an integer; value, sd: numbers)") from None
        if not seeds or any(s < 0 for s in seeds):
            raise ConfigError(f"{where}: column 'seeds' must list one or more integers >= 0")
        if n < 1:
            raise ConfigError(f"{where}: column 'n_requests' must be >= 1")
        if row["statistic"] not in STATISTICS:
            raise ConfigError(f"{where}: column 'statistic' = {row['statistic']!r}; allowed: {list(STATISTICS)}")
        if not (math.isfinite(value) and math.isfinite(sd) and sd > 0):
            raise ConfigError(f"{where}: columns 'value' and 'sd' must be finite, sd > 0")
        claim = str(row.get("claim", "") or "").strip()
        if claim and claim not in CLAIMS:
            raise ConfigError(f"{where}: column 'claim' = {claim!r}; allowed: {list(CLAIMS)} (or empty)")
        if claim in ("ordering", "tie") and len(policies) != 2:
            raise ConfigError(f"{where}: column 'claim' = {claim!r} needs two policies ('a-b')")
        bound = str(row.get("bound", "") or "").strip()
        if bound and bound not in BOUNDS:
            raise ConfigError(f"{where}: column 'bound' = {bound!r}; allowed: {list(BOUNDS)} (or empty)")
        t = Target(key=key, workload=row["workload"], topology=str(row["topology"]).strip(), policies=policies,
                   rate=str(row["rate"]).strip(), seeds=seeds, n_requests=n, metric=str(row["metric"]).strip(),
                   statistic=row["statistic"], value=value, sd=sd, source=str(row.get("source", "")), claim=claim,
                   bound=bound)
        if t.log_scale and value <= 0:
            raise ConfigError(f"{where}: a time ({t.metric}) must be > 0")
        out.append(t)
    if not out:
        raise ConfigError(f"{origin}: no rows")
    return out


def policies_named(targets: Sequence[Target]) -> set[str]:
    """Every policy the rows measure."""
    return {p for t in targets for p in t.policies}


ROUTER = "marginal_cost"
"""The paper's router: it and its readings (``marginal_cost*``) are always predicted, never fitted."""


def _is_router(policy: str) -> bool:
    return policy.startswith(ROUTER)


def predicted_policies(predictions: Sequence[Target]) -> set[str]:
    """The policies a prediction table is about: the paper's router (``marginal_cost``, always), every policy
    a prediction row measures alone, and of a pair ``a-b`` each member that is not a baseline (the paper's
    round-robin, least-loaded and length-threshold, or a production router: `repro.routing.policies`), a
    pair's baseline being the yardstick the training table may well measure."""
    from repro.routing.policies import PAPER_POLICIES, PRODUCTION_POLICIES

    baselines = {p for p in PAPER_POLICIES if not _is_router(p)} | set(PRODUCTION_POLICIES)
    out = {ROUTER}
    for t in predictions:
        out |= set(t.policies) if len(t.policies) == 1 else {p for p in t.policies if p not in baselines}
    return out


def rows_about(rows: Sequence[Target], policies: set[str]) -> list[Target]:
    """The rows that measure one of ``policies`` (or a reading of the paper's router), alone or in a pair."""
    return [t for t in rows if any(p in policies or _is_router(p) for p in t.policies)]


def check_training(rows: Sequence[Target], predictions: Sequence[Target], *, origin: str,
                   shipped: bool = False) -> list[str]:
    """A training table must hold no row about a policy being predicted (`predicted_policies`): its numbers
    would be fitted, and the prediction would no longer be one. In the shipped paper table (``shipped``)
    such a row is a `ConfigError`; in a user's table, each such row is returned as a warning (one line
    naming the rows and the policies) for the caller to show. Empty: the table holds baselines only."""
    policies = predicted_policies(predictions)
    about = rows_about(rows, policies)
    if not about:
        return []
    named = sorted({p for t in about for p in t.policies if p in policies or _is_router(p)})
    text = (f"{origin}: training row(s) {[t.key for t in about]} measure {named}, a policy being predicted "
            f"(predicted: {sorted(policies)}); their numbers are fitted, so the predictions about it are no longer "
            "predictions")
    if shipped:
        raise ConfigError(f"identify: {text}; the paper's training table must hold baselines only")
    return [f"{text}; drop those rows, or read the predictions as fitted"]


def measure(targets: Sequence[Target], *, backend: str, profile: str, cluster: str | None = None,
            rates: Mapping[str, float] | None = None, time_scale: float = 1.0,
            runs_dir: str | Path = "runs/identify") -> tuple[list[Target], pd.DataFrame]:
    """Measure each row's runs on a live backend (``emulated``: engines of ``profile`` started here;
    ``vllm``: the ``cluster`` file's engines) and return the rows with ``value`` replaced by the measured
    number (``sd`` kept), and one line per run (run id, valid, the metric). Runs are resumed from
    ``runs_dir``; a run the machine could not keep up with is retried, then refused
    (`repro.experiment.runner.run`). ``@name`` rates come from ``rates``."""
    from dataclasses import replace

    from repro.experiment.runner import run
    from repro.experiment.spec import RunSpec

    out: list[Target] = []
    lines: list[dict[str, object]] = []
    for t in targets:
        missing = [n for n in t.rate_names() if n not in (rates or {})]
        if missing:
            raise ConfigError(f"identify: row {t.key!r} needs rate(s) {missing} to be measured (give them)")
        rate = t.rate_of(rates or {})
        per_policy = []
        for pol in t.policies:
            vals = []
            for seed in t.seeds:
                spec = RunSpec.from_flat(backend=backend, workload=t.workload, topology=t.topology, profile=profile,
                                         cluster=cluster, seed=seed, rate=rate, n_requests=t.n_requests, policy=pol,
                                         time_scale=time_scale)
                res = run(spec, runs_dir)
                v = float(res.summary.get(t.metric, math.nan))
                vals.append(v)
                lines.append({"key": t.key, "policy": pol, "seed": seed, "run_id": spec.run_id,
                              "valid": res.summary.get("valid", True), t.metric: v})
            per_policy.append(vals)
        where = cluster or profile
        out.append(replace(t, value=t.combine(per_policy), source=f"measured on {backend} ({where})"))
    return out, pd.DataFrame(lines)


def to_frame(targets: Sequence[Target]) -> pd.DataFrame:
    """The rows as a table in the CSV's columns (`COLUMNS`)."""
    return pd.DataFrame([{"key": t.key, "workload": t.workload, "topology": t.topology, "policy": "-".join(t.policies),
                          "rate": t.rate, "seeds": " ".join(map(str, t.seeds)), "n_requests": t.n_requests,
                          "metric": t.metric, "statistic": t.statistic, "value": t.value, "sd": t.sd,
                          "source": t.source, "claim": t.claim, "bound": t.bound} for t in targets],
                        columns=[*COLUMNS, "claim", "bound"])
