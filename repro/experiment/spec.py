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

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from repro.cluster.topology import Topology, parse_topology
from repro.engine.physics import check_overrides
from repro.engine.profile import HardwareProfile, load_profile
from repro.errors import ConfigError, check_choice, check_int, check_number
from repro.routing.policies import PolicyRef, resolve_policy
from repro.sim.config import SimConfig
from repro.vocab import BACKENDS, DEFAULT_PROFILE, PREDICTORS, WORKLOADS, Backend, PredictorKind, Workload

if TYPE_CHECKING:
    from repro.workload.arrivals import ArrivalSpec
    from repro.workload.params import WorkloadParams

@dataclass(frozen=True)
class LiveConfig:
    """Options that only the live backends (``emulated``, ``vllm``) read."""

    time_scale: float = 1.0
    """Emulated engines run their physics this many times faster than the wall clock (K); every
    reported time stays in physics seconds. Must be 1 on ``vllm`` (real engines run in real time)."""

    def __post_init__(self) -> None:
        check_number("spec", "time_scale", self.time_scale, lo=0.0, lo_open=True, hi=100.0)


# The flat field names of each option group, as they appear in `RunSpec.to_dict`, YAML specs and the CLI.
_GROUPS: dict[str, tuple[str, ...]] = {
    "sim": tuple(f.name for f in dataclasses.fields(SimConfig)),
    "live": tuple(f.name for f in dataclasses.fields(LiveConfig)),
}
_GROUP_TYPES = {"sim": SimConfig, "live": LiveConfig}
_GROUP_OF = {name: group for group, names in _GROUPS.items() for name in names}
_CACHED = ("_topology", "_run_id")  # what a spec computes once from its fields (not fields themselves)


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines one run, on any backend. Units: rate in requests/s, noise as a
    relative error, times in seconds.

    Backend-specific switches live in typed option groups (`SimConfig` for ``sim``, `LiveConfig`
    for ``emulated``/``vllm``); `to_dict` and `from_flat` use one flat namespace (the YAML and CLI
    field names), and the run id hashes that flat dict, so ids do not depend on the grouping.
    """

    backend: Backend = "sim"
    """Where the run happens (`repro.vocab.BACKENDS`)."""
    topology: str = "2p4d"
    """Pool shape: a shorthand like ``2p4d`` or a cluster name/file (see `repro.cluster.topology`)."""
    profile: str = DEFAULT_PROFILE
    """Hardware profile (true engine timing) in ``data/hardware/``."""
    workload: Workload = "mixed"
    """Workload family (Table I)."""
    seed: int = 1
    """Arrival trace seed (one seed = one trace)."""
    rate: float = 16.0
    """Mean arrival rate, requests per second."""
    n_requests: int = 2000
    """Requests in the trace."""
    policy: str = "marginal_cost"
    """Registered policy name or ``module:Class`` import path."""
    policy_options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the policy (its switches)."""
    cost_model: str = "calibrated"
    """What the router believes: a shipped cost model name or a calibration JSON path."""
    predictor: PredictorKind = "default"
    """The router's output-length predictor."""
    predictor_noise: float = 0.0
    """Relative error injected into the predictor's estimates (0: none)."""
    predictor_seed: int = 0
    """Seed of the injected noise."""
    kv_poll_interval_s: float = 0.05
    """Seconds between the router's polls of each engine's KV usage (the proxy's metrics poller; the
    simulator polls on the same schedule). A cluster file's own ``kv_poll_interval_s`` (the
    deployment's poll period) wins: see `poll_interval_s`."""
    kv_budget_tokens: int | None = None
    """KV cache budget per instance in tokens (None: the profile's)."""
    cluster: str | None = None
    """Cluster file (YAML) for every backend: topology, engine URLs, and the deployment's calibration."""
    arrival: dict[str, Any] | None = None
    """Arrival process (`repro.workload.arrivals.ArrivalSpec` fields); None: the workload's own."""
    physics: dict[str, float] | None = None
    """Overrides of the hardware profile's estimated constants on every instance (``sim`` only): a
    mapping of `repro.engine.physics.OVERRIDABLE` names (``prefill_per_token_s`` in s/token,
    ``transfer_bandwidth_bytes_per_s`` in bytes/s, ``transfer_latency_s`` in s) to values in their
    ranges; None (or empty): the profile as shipped. The truth changes (`repro.experiment.inputs.
    engine_pools`), and so does a ``calibrated`` router's belief (a calibrated router knows the
    hardware: `repro.experiment.inputs.router_cost_model`); the SLO targets do not (the paper states
    them: `repro.experiment.inputs.truth_cost_model`). In the run id when set."""
    workloads: dict[str, float] | None = None
    """Overrides of the workload generator's estimated parameters (`repro.workload.params.FITTABLE`
    names: ``documents_median_tokens`` in tokens, ``reasoning_mult_median``, ``mixed_burstiness``, ...),
    on top of the testbed's (the profile file's ``workloads`` section, else our estimates). Any backend
    (they shape the trace). None (or empty): the testbed's. In the run id when set."""
    decision_budget_us: float | None = None
    """The most the policy's p99 decision time may be (microseconds of wall time per ``place`` call on
    the machine that runs it; any backend): over it the run fails with `repro.errors.PolicyError` naming
    the measured p50 / p99 / max, and is not marked finished. None: no budget. In the run id when set;
    the decision times are a report of the machine, never an input to a result."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator switches (``sim`` backend)."""
    live: LiveConfig = field(default_factory=LiveConfig)
    """Live-backend options (``emulated``, ``vllm``)."""

    def __post_init__(self) -> None:
        check_choice("spec", "backend", self.backend, BACKENDS)
        check_choice("spec", "workload", self.workload, WORKLOADS)
        check_choice("spec", "predictor", self.predictor, PREDICTORS)
        check_int("spec", "seed", self.seed, 0, 2**31 - 1)
        check_int("spec", "n_requests", self.n_requests, 1, 10_000_000)
        check_int("spec", "predictor_seed", self.predictor_seed, 0, 2**31 - 1)
        check_number("spec", "rate", self.rate, lo=0.0, lo_open=True, hi=1e6)
        check_number("spec", "predictor_noise", self.predictor_noise, lo=0.0, hi=10.0)
        check_number("spec", "kv_poll_interval_s", self.kv_poll_interval_s, lo=0.0, hi=60.0)
        for group, kind in _GROUP_TYPES.items():
            if not isinstance(getattr(self, group), kind):
                raise ConfigError(f"spec: field '{group}' must be a {kind.__name__}")
        if self.backend == "vllm" and self.live.time_scale != 1.0:
            raise ConfigError("spec: field 'time_scale' must be 1 for backend 'vllm' (real engines run in real time)")
        if self.kv_budget_tokens is not None:
            check_int("spec", "kv_budget_tokens", self.kv_budget_tokens, 1, 10**9)
        if self.decision_budget_us is not None:
            check_number("spec", "decision_budget_us", self.decision_budget_us, lo=0.0, lo_open=True, hi=1e9)
        if not isinstance(self.policy_options, dict):
            raise ConfigError("spec: field 'policy_options' must be a mapping")
        if self.arrival is not None:
            object.__setattr__(self, "arrival", _arrival_dict(self.arrival))
        if self.physics is not None:
            physics = check_overrides(self.physics)
            if physics and self.backend != "sim":
                raise ConfigError(f"spec: field 'physics' is for backend 'sim' only (live engines run their own "
                                  f"hardware), got backend {self.backend!r}")
            object.__setattr__(self, "physics", physics or None)
        if self.workloads is not None:
            from repro.workload.params import check_overrides as check_workloads

            object.__setattr__(self, "workloads", check_workloads(self.workloads) or None)
        self.topology_parsed()  # validate
        resolve_policy(self.policy, self.policy_options).build(None, **self.policy_options)  # validate both

    def poll_interval_s(self) -> float:
        """The poll period the router actually uses (s): the cluster file's ``kv_poll_interval_s``
        when it sets one (a property of the deployment: e.g. real CPU engines, whose ``/metrics``
        costs ~15 ms of CPU per scrape), else this spec's."""
        return float(self.topology_parsed().options.get("kv_poll_interval_s", self.kv_poll_interval_s))

    def topology_parsed(self) -> Topology:
        """The parsed topology (the cluster file if given, else ``topology``) with this spec's overrides:
        parsed once, when the spec is made (a spec is frozen; `replace` makes a new one), and kept."""
        cached = self.__dict__.get("_topology")
        if cached is None:
            cached = parse_topology(self.cluster or self.topology, profile=self.profile,
                                    kv_budget_tokens=self.kv_budget_tokens)
            object.__setattr__(self, "_topology", cached)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        # what a worker receives: the fields only (it parses the topology once itself, from its own files)
        return {k: v for k, v in self.__dict__.items() if k not in _CACHED}

    def to_dict(self) -> dict[str, Any]:
        """The flat field dict (YAML/CLI names; option groups flattened). The run id hashes it."""
        d: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _GROUPS:
                d.update(dataclasses.asdict(value))
            else:
                d[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value)
        # unset: left out, so run ids made before the field stay valid
        for name in ("arrival", "physics", "workloads", "decision_budget_us"):
            if d[name] is None:
                del d[name]
        return d

    def arrival_spec(self) -> ArrivalSpec:
        """The `ArrivalSpec` of this run: ``arrival`` if given, else the workload's default process (with
        the testbed's burstiness, `workload_params`)."""
        from repro.workload.arrivals import ArrivalSpec
        from repro.workload.traces import default_arrival

        if self.arrival is None:
            return default_arrival(self.workload, self.workload_params())
        return ArrivalSpec.from_dict(self.arrival)

    @property
    def policy_ref(self) -> PolicyRef:
        """The spec's policy, resolved (`repro.routing.policies.resolve_policy`: once per process, and again only
        when a user's policy code was edited): its class, fingerprint and `PolicyRef.build`."""
        return resolve_policy(self.policy)

    @property
    def hardware(self) -> HardwareProfile:
        """The run's hardware profile (``profile``), typed (`repro.engine.profile.load_profile`: read once)."""
        return load_profile(self.profile)

    def workload_params(self) -> WorkloadParams:
        """The workload generator's parameters of this run: the profile's ``workloads`` section (a testbed
        identified with them, `repro identify`), else our estimates, with ``workloads`` on top."""
        return self.hardware.workloads.with_overrides(self.workloads)

    @property
    def run_id(self) -> str:
        """Stable id: hash of the flat spec (a finished run with this id is skipped on resume). Reads no
        file: the topology's shorthand comes from the parse the spec made when it was built; computed once."""
        cached = self.__dict__.get("_run_id")
        if cached is None:
            blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
            h = hashlib.sha256(blob.encode()).hexdigest()[:12]
            policy = self.policy.split(":")[-1].split(".")[-1]
            cached = f"{self.workload}-{self.topology_parsed().shorthand}-{policy}-s{self.seed}-{h}"
            object.__setattr__(self, "_run_id", cached)
        return cached

    @classmethod
    def from_flat(cls, **fields: Any) -> RunSpec:
        """A spec from flat field names (those of `to_dict`; e.g. ``time_scale=2`` goes to ``live``)."""
        return spec_from_dict(fields)

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with ``changes`` applied; flat names of option-group fields (``service``,
        ``time_scale``, ...) are routed into their group."""
        grouped: dict[str, dict[str, Any]] = {}
        direct: dict[str, Any] = {}
        for name, value in changes.items():
            if name in _GROUP_OF:
                grouped.setdefault(_GROUP_OF[name], {})[name] = value
            else:
                direct[name] = value
        for group, values in grouped.items():
            base = direct.get(group, getattr(self, group))
            direct[group] = dataclasses.replace(base, **values)
        return dataclasses.replace(self, **direct)


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


def flat_field_names() -> list[str]:
    """Every field name a flat spec (YAML file, `from_flat`, `to_dict`) may have, in order."""
    names: list[str] = []
    for f in dataclasses.fields(RunSpec):
        names.extend(_GROUPS.get(f.name, (f.name,)))
    return names


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
    """A spec from a flat mapping (YAML/CLI names); unknown keys are a `ConfigError` listing the allowed ones."""
    allowed = flat_field_names()
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ConfigError(f"{origin}: unknown field(s) {unknown}; allowed: {allowed}")
    top = {k: v for k, v in raw.items() if k not in _GROUP_OF}
    for group, kind in _GROUP_TYPES.items():
        values = {k: raw[k] for k in _GROUPS[group] if k in raw}
        if values:
            top[group] = kind(**values)
    return RunSpec(**top)
