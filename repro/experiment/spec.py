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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from repro.cluster.topology import Topology, parse_topology
from repro.errors import ConfigError
from repro.routing.policies.base import make_policy

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
    arrival: dict[str, Any] | None = None  # arrival process (`repro.workload.arrivals.ArrivalSpec` fields); None: the workload's own

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
        from repro.workload.arrivals import ArrivalSpec
        from repro.workload.traces import default_arrival

        return default_arrival(self.workload) if self.arrival is None else ArrivalSpec.from_dict(self.arrival)

    @property
    def run_id(self) -> str:
        """Stable id: hash of the spec (a finished run with this id is skipped on resume)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        h = hashlib.sha256(blob.encode()).hexdigest()[:12]
        return f"{self.workload}-{self.topology_parsed().shorthand}-{self.policy.split(':')[-1].split('.')[-1]}-s{self.seed}-{h}"

    @classmethod
    def from_flat(cls, **fields: Any) -> "RunSpec":
        """A spec from flat field names (the names of `to_dict`), validated like a YAML spec."""
        return spec_from_dict(fields)

    def replace(self, **changes: Any) -> "RunSpec":
        return dataclasses.replace(self, **changes)


def _arrival_dict(value: Any) -> dict[str, Any]:
    """Validate ``arrival`` into the full, normalised `ArrivalSpec` fields (stable run ids)."""
    from repro.workload.arrivals import ArrivalSpec

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


