"""One experiment = one spec -> one journal + manifest, on any backend.

A `RunSpec` names everything that determines a run: backend, topology, hardware profile,
workload, trace seed, arrival rate, request count, policy (and its options), the router's cost
model, the predictor and its injected noise, and the simulator's switches. Specs come from CLI
flags or a YAML file (`load_spec`); bad values raise `ConfigError` naming the field.

`run(spec, out_dir)` writes ``<out_dir>/<run_id>/journal.jsonl`` and ``manifest.json`` (spec,
versions, input hashes, start/end, summary). ``run_id`` is a hash of the spec, so a sweep finds a
finished run by its manifest and skips it; a run without a complete manifest is redone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from repro import __version__
from repro.calibration import CostModel
from repro.errors import ConfigError
from repro.journal import read as read_journal
from repro.journal import write_frame
from repro.metrics import summarize
from repro.policies import make_policy
from repro.router import Router
from repro.sim import SimConfig, Simulator
from repro.topology import Topology, parse_topology, pools

BACKENDS = ("sim", "emulated", "vllm")
WORKLOADS = ("chat", "reasoning", "documents", "mixed")
PREDICTORS = ("default", "constant", "oracle")


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines one run. Units: rate in requests/s, noise as relative error."""

    backend: str = "sim"
    topology: str = "2p4d"
    profile: str = "a40-qwen2.5-3b"
    workload: str = "mixed"
    seed: int = 1
    rate: float = 16.0
    n_requests: int = 2000
    policy: str = "marginal_cost"
    policy_options: dict[str, Any] = field(default_factory=dict)
    cost_model: str = "calibrated"
    predictor: str = "default"
    predictor_noise: float = 0.0
    predictor_seed: int = 0
    service: str = "batching"
    backlog: str = "ledger"
    kv_poll_interval_s: float = 0.05
    kv_budget_tokens: int | None = None
    cluster: str | None = None  # cluster file for emulated/vllm backends
    time_scale: float = 1.0  # emulated: engines run physics this many times faster than the wall clock
    arrival: dict[str, Any] | None = None  # arrival process (`repro.arrivals.ArrivalSpec` fields); None: the workload's own

    def __post_init__(self) -> None:
        _choice("backend", self.backend, BACKENDS)
        _choice("workload", self.workload, WORKLOADS)
        _choice("predictor", self.predictor, PREDICTORS)
        _choice("service", self.service, ("batching", "serial"))
        _choice("backlog", self.backlog, ("ledger", "oracle"))
        _int("seed", self.seed, 0, 2**31 - 1)
        _int("n_requests", self.n_requests, 1, 10_000_000)
        _int("predictor_seed", self.predictor_seed, 0, 2**31 - 1)
        _num("rate", self.rate, lo=0.0, lo_open=True, hi=1e6)
        _num("predictor_noise", self.predictor_noise, lo=0.0, hi=10.0)
        _num("kv_poll_interval_s", self.kv_poll_interval_s, lo=0.0, hi=60.0)
        _num("time_scale", self.time_scale, lo=0.0, lo_open=True, hi=100.0)
        if self.backend == "vllm" and self.time_scale != 1.0:
            raise ConfigError("spec: field 'time_scale' must be 1 for backend 'vllm' (real engines run in real time)")
        if self.kv_budget_tokens is not None:
            _int("kv_budget_tokens", self.kv_budget_tokens, 1, 10**9)
        if not isinstance(self.policy_options, dict):
            raise ConfigError("spec: field 'policy_options' must be a mapping")
        if self.arrival is not None:
            object.__setattr__(self, "arrival", _arrival_dict(self.arrival))
        self.topology_parsed()  # validate
        make_policy(self.policy, None, **self.policy_options)  # validate name and options

    def topology_parsed(self) -> Topology:
        return parse_topology(self.cluster or self.topology, profile=self.profile, kv_budget_tokens=self.kv_budget_tokens)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["arrival"] is None:  # the workload's own process: left out, so run ids made before the field stay valid
            del d["arrival"]
        return d

    def arrival_spec(self):
        """The `ArrivalSpec` of this run: ``arrival`` if given, else the workload's default process."""
        from repro.arrivals import ArrivalSpec
        from repro.workloads import default_arrival

        return default_arrival(self.workload) if self.arrival is None else ArrivalSpec.from_dict(self.arrival)

    @property
    def run_id(self) -> str:
        """Stable id: hash of the spec (a finished run with this id is skipped on resume)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        h = hashlib.sha256(blob.encode()).hexdigest()[:12]
        return f"{self.workload}-{self.topology_parsed().shorthand}-{self.policy.split(':')[-1].split('.')[-1]}-s{self.seed}-{h}"

    def replace(self, **changes: Any) -> "RunSpec":
        return dataclasses.replace(self, **changes)


def _arrival_dict(value: Any) -> dict[str, Any]:
    """Validate ``arrival`` into the full, normalised `ArrivalSpec` fields (stable run ids)."""
    from repro.arrivals import ArrivalSpec

    if isinstance(value, ArrivalSpec):
        return value.to_dict()
    if not isinstance(value, dict):
        raise ConfigError("spec: field 'arrival' must be a mapping of ArrivalSpec fields "
                          "(process: poisson | gamma | burst, burstiness, burst_factor, period_s, duty)")
    try:
        return ArrivalSpec.from_dict(value).to_dict()
    except ConfigError as exc:
        raise ConfigError(f"spec: field 'arrival': {exc}") from None


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"spec: field '{name}' = {value!r} not allowed; allowed: {', '.join(allowed)}")


def _int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ConfigError(f"spec: field '{name}' = {value!r} must be an integer in [{lo}, {hi}]")


def _num(name: str, value: Any, lo: float, hi: float, lo_open: bool = False) -> None:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        raise ConfigError(f"spec: field '{name}' = {value!r} out of range {bracket}{lo}, {hi}]")


def load_spec(path: str | Path, **overrides: Any) -> RunSpec:
    """A spec from a YAML file (keys = `RunSpec` fields), with overrides on top."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"spec: file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"spec {path}: malformed YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"spec {path}: expected a mapping of fields")
    return spec_from_dict({**raw, **{k: v for k, v in overrides.items() if v is not None}}, origin=str(path))


def spec_from_dict(raw: dict[str, Any], origin: str = "spec") -> RunSpec:
    allowed = [f.name for f in dataclasses.fields(RunSpec)]
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ConfigError(f"{origin}: unknown field(s) {unknown}; allowed: {allowed}")
    return RunSpec(**raw)


# ---- inputs ---------------------------------------------------------------------------------
def build_trace(spec: RunSpec):
    from repro.workloads import make_trace

    return make_trace(spec.workload, spec.seed, spec.rate, spec.n_requests, arrival=spec.arrival_spec())


def build_predictions(spec: RunSpec, trace) -> np.ndarray:
    """The router's output-length estimate per request (tokens), as the proxy would compute it."""
    df = trace.df
    if spec.predictor == "oracle":
        return df["output_tokens"].to_numpy(dtype=float)
    from repro.predictor import ConstantPredictor, NoisyPredictor, load_default
    from repro.workloads import predictor_frame

    if spec.predictor == "constant":
        base = ConstantPredictor(256.0)
    else:
        base = load_default()
    model = NoisyPredictor(base, spec.predictor_noise, random_state=spec.predictor_seed) if spec.predictor_noise > 0 else base
    X = predictor_frame(trace)
    keys = df["request_id"].astype(str).tolist()
    if isinstance(model, NoisyPredictor):
        return np.asarray(model.predict(X, keys=keys), dtype=float)
    return np.asarray(model.predict(X), dtype=float)


def cluster_calibration(spec: RunSpec) -> str | None:
    """The ``calibration:`` of the spec's cluster file (a shipped name or a JSON path), if it has one."""
    return spec.topology_parsed().options.get("calibration") if spec.cluster else None


def truth_cost_model(spec: RunSpec) -> CostModel:
    """The deployment's own calibration (source of the SLO targets used for scoring): on real
    engines (``vllm``) the cluster file's ``calibration``, else the profile's physics."""
    cal = cluster_calibration(spec) if spec.backend == "vllm" else None
    if cal:
        return CostModel.load(cal)
    return CostModel.from_physics(pools(spec.topology_parsed())[3][0], name="truth")


def router_cost_model(spec: RunSpec) -> CostModel:
    """What the router believes: ``spec.cost_model``, where ``calibrated`` means the cluster file's
    own ``calibration`` when it names one (the shipped A40 constants otherwise)."""
    name = spec.cost_model
    if name == "calibrated":
        name = cluster_calibration(spec) or name
    cm = CostModel.load(name)
    if spec.kv_budget_tokens is not None:
        cm = cm.with_overrides(kv_capacity_tokens=spec.kv_budget_tokens)
    return cm


def make_router(spec: RunSpec) -> Router:
    pnames, _, dnames, _ = pools(spec.topology_parsed())
    cm = router_cost_model(spec)
    policy = make_policy(spec.policy, cm, **spec.policy_options)
    return Router(policy, cm, pnames, dnames)


# ---- running --------------------------------------------------------------------------------
@dataclass
class RunResult:
    spec: RunSpec
    run_dir: Path
    summary: dict[str, Any]
    skipped: bool = False

    @property
    def journal_path(self) -> Path:
        return self.run_dir / "journal.jsonl"

    def journal(self) -> pd.DataFrame:
        return read_journal(self.journal_path)


def simulate_spec(spec: RunSpec) -> pd.DataFrame:
    """Run a spec on the simulator and return its journal (no files written)."""
    _, pre, _, dec = pools(spec.topology_parsed())
    trace = build_trace(spec)
    pred = build_predictions(spec, trace)
    router = make_router(spec)
    cfg = SimConfig(service=spec.service, backlog=spec.backlog, kv_poll_interval_s=spec.kv_poll_interval_s)
    return Simulator(trace.df, pred, router, pre, dec, cfg).run()


def run(spec: RunSpec, out_dir: str | Path = "runs", resume: bool = True) -> RunResult:
    """Run one spec, writing journal + manifest under ``out_dir/<run_id>/``; skip if finished."""
    run_dir = Path(out_dir) / spec.run_id
    manifest_path = run_dir / "manifest.json"
    if resume and manifest_path.exists():
        manifest = _read_manifest(manifest_path)
        journal_path = run_dir / "journal.jsonl"
        if manifest and manifest.get("complete") and journal_path.exists() and _sha256(journal_path) == manifest.get("journal_sha256"):
            return RunResult(spec, run_dir, manifest["summary"], skipped=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    if spec.backend == "sim":
        journal = simulate_spec(spec)
        write_frame(journal, run_dir / "journal.jsonl")
    else:
        from repro.harness import run_live  # emulated / vllm: real HTTP path

        journal = run_live(spec, run_dir)
    summary = summarize(journal, truth_cost_model(spec).slo, sent=spec.n_requests)
    manifest = {
        "run_id": spec.run_id,
        "spec": spec.to_dict(),
        "complete": True,
        "started_unix": None if spec.backend == "sim" else started,
        "wall_s": None if spec.backend == "sim" else time.time() - started,
        "versions": _versions(),
        "journal_sha256": _sha256(run_dir / "journal.jsonl"),
        "summary": summary,
    }
    _write_json_atomic(manifest_path, manifest)
    return RunResult(spec, run_dir, summary)


def _versions() -> dict[str, str]:
    import sklearn

    return {
        "repro": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "scikit-learn": sklearn.__version__,
    }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return None if not np.isfinite(o) else float(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")


def sweep(specs: list[RunSpec], out_dir: str | Path = "runs", progress: bool = True) -> pd.DataFrame:
    """Run many specs (resumable: finished ones are skipped); one row per run with its summary."""
    rows = []
    if progress:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("runs", total=len(specs))
            for spec in specs:
                res = run(spec, out_dir)
                rows.append(_row(res))
                bar.advance(task)
    else:
        for spec in specs:
            rows.append(_row(run(spec, out_dir)))
    return pd.DataFrame(rows)


def _row(res: RunResult) -> dict[str, Any]:
    s = res.spec
    return {
        "run_id": s.run_id,
        "backend": s.backend,
        "workload": s.workload,
        "topology": s.topology_parsed().shorthand,
        "policy": s.policy,
        "cost_model": s.cost_model,
        "seed": s.seed,
        "rate": s.rate,
        "skipped": res.skipped,
        **res.summary,
    }


# ---- saturation search ----------------------------------------------------------------------
PAPER_COLLAPSE_FRACTION = 0.733 / 0.880  # Fig. 5: round-robin's goodput at the operating point / at light load


@dataclass(frozen=True)
class SaturationResult:
    """The rate at which round-robin is mid-collapse, and the probes that found it."""

    workload: str
    rate: float
    light_goodput: float
    target_goodput: float
    probes: list[tuple[float, float]]  # (rate, round-robin goodput)


def saturation_search(
    base: RunSpec,
    light_rate: float = 1.0,
    collapse_fraction: float = PAPER_COLLAPSE_FRACTION,
    band: float = 0.02,
    max_rate: float = 512.0,
    max_probes: int = 16,
    probe: Any = None,
) -> SaturationResult:
    """Find the arrival rate where round-robin's goodput is ``collapse_fraction`` of its light-load
    goodput (within ``band``, absolute), by doubling then bisection on the rate.

    ``probe(spec) -> goodput`` runs one short probe; the default simulates ``base`` with
    ``policy=round_robin`` (backends other than sim pass a probe that runs the live harness).
    """
    if not 0 < collapse_fraction < 1:
        raise ConfigError(f"saturation: field 'collapse_fraction' must be in (0, 1), got {collapse_fraction!r}")
    if not 0 < band < 0.5:
        raise ConfigError(f"saturation: field 'band' must be in (0, 0.5), got {band!r}")
    rr = base.replace(policy="round_robin", policy_options={})

    def default_probe(spec: RunSpec) -> float:
        return summarize(simulate_spec(spec), truth_cost_model(spec).slo)["goodput"]

    probe = probe or default_probe
    probes: list[tuple[float, float]] = []

    def g(rate: float) -> float:
        value = float(probe(rr.replace(rate=rate)))
        probes.append((rate, value))
        return value

    light = g(light_rate)
    target = light * collapse_fraction
    lo, hi = light_rate, light_rate * 2
    while g(hi) > target + band:
        lo, hi = hi, hi * 2
        if hi > max_rate:
            raise ConfigError(f"saturation: round-robin does not collapse below rate {max_rate} req/s for {base.workload}")
    best = min(probes, key=lambda p: abs(p[1] - target))
    while abs(best[1] - target) > band and len(probes) < max_probes:
        mid = math.sqrt(lo * hi)
        value = g(mid)
        if value > target:
            lo = mid
        else:
            hi = mid
        best = min(probes, key=lambda p: abs(p[1] - target))
    return SaturationResult(base.workload, best[0], light, target, probes)
