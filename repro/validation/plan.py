"""What a validation runs: its configuration, its error budget, and the engines' scheduler settings.

Units: rates in requests/s, durations in seconds, errors as fractions (0.10 = 10 %).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from repro.cluster.launchers.vllm import unmodified
from repro.cluster.topology import Topology, parse_topology
from repro.engine.profile import load_profile
from repro.errors import ConfigError, check_choice, check_int, check_number
from repro.vocab import WORKLOADS, Workload

PhysicsSource = Literal["auto", "calibration", "profile"]
PHYSICS_SOURCES: tuple[str, ...] = ("auto", "calibration", "profile")
BACKENDS: tuple[str, ...] = ("vllm", "emulated")


@dataclass(frozen=True)
class ErrorBudget:
    """How close the simulator must come to the cluster at one load level to be trusted there: the
    median per-request relative error of TTFT and of TPOT (fractions) and the goodput difference
    (absolute, the mean over traces; its interval must lie inside +-goodput)."""

    ttft: float = 0.10
    tpot: float = 0.10
    goodput: float = 0.03

    def __post_init__(self) -> None:
        check_number("validate", "budget.ttft", self.ttft, lo=0.0, lo_open=True, hi=10.0)
        check_number("validate", "budget.tpot", self.tpot, lo=0.0, lo_open=True, hi=10.0)
        check_number("validate", "budget.goodput", self.goodput, lo=0.0, lo_open=True, hi=1.0)


@dataclass(frozen=True)
class ValidationConfig:
    """One validation of the simulator against a cluster.

    ``fractions`` of the cluster's saturation (the rate at which round-robin is mid-collapse, as the
    paper chose its operating point, `repro.experiment.saturation.saturation_search`, found on the
    calibrated simulator unless ``saturation_rate`` states it) give the load levels; each level runs
    ``repeats`` traces (seeds ``seed .. seed + repeats - 1``) of ``duration_s`` seconds (at least
    ``min_requests`` requests) under each of ``policies``, each trace ``replays`` times on the cluster
    (2 or more: the machine's own noise floor, the spread between two replays of one trace)."""

    cluster: str
    """Cluster file (or, with ``backend='emulated'``, a shorthand like ``1p1d``)."""
    backend: str | None = None
    """``vllm`` (the cluster's engines) or ``emulated`` (its topology on emulated engines); None: ``vllm``
    for a cluster file with a ``vllm`` or ``remote`` launcher, else ``emulated``."""
    workload: Workload = "mixed"
    fractions: tuple[float, ...] = (0.25, 0.5, 0.8, 1.0)
    policies: tuple[str, ...] = ("round_robin", "marginal_cost")
    repeats: int = 3
    replays: int = 1
    duration_s: float = 60.0
    min_requests: int = 30
    seed: int = 1
    physics: PhysicsSource = "auto"
    """Where the simulator's engine timing comes from: ``calibration`` (the cluster file's, or a fresh one
    with ``calibrate``, inverted by `repro.routing.cost_model.CostModel.to_physics`), ``profile`` (the
    instances' hardware profile: what emulated engines run, and what the main job simulates); ``auto``:
    ``calibration`` on real engines when there is one, else ``profile``."""
    calibrate: bool = False
    """Measure the cluster first (`repro.live.calibration_bench.calibrate`) and use that calibration."""
    calibration_budget_s: float = 300.0
    context_share: float = 0.0
    """`repro.routing.cost_model.CostModel.to_physics`'s split of the decode slope onto the context."""
    prefill_curve: bool = True
    """Time the simulator's prefill steps by the calibration's measured curve (`repro.live.calibration_bench.
    prefill_curve`: convex in the step's tokens) instead of the router's line; needs the calibration's samples."""
    serving_path: bool = True
    """Add the API servers' time the calibration measured (`repro.validation.twin.validation_physics`)."""
    in_situ: bool = False
    """Fit two deployment constants on a training replay before judging (`repro.validation.twin.fit_in_situ`):
    one more live run, of a trace no judged run replays (seed ``seed + TRAINING_SEED_OFFSET``) at the
    lightest level, gives the decode step's factor (measured TPOT over the twin's) and the TTFT the serving
    path adds (proxy, API servers, CPU shared with the harness); every judged run stays a prediction."""
    shared_host: bool = False
    """Measure the machine the cluster shares with its serving path and simulate it (mechanism ``shared_host``,
    `repro.validation.host`): an idle window and two differential probes (short and long outputs, of the
    training seed's traces) give the serving path's CPU per request and per token, and the training replay
    (as ``in_situ``'s) the serving path's light-load TTFT; the variant ``shared-host`` is then the verdict. Only
    for engines on this machine (its CPU is what is booked)."""
    track_drift: bool = False
    """Mechanism ``machine_drift`` (`repro.validation.drift`): simulate each judged run at the machine's speed when it
    started, read off the training trace's runs (before the judged runs, before each later pass, after the last:
    each run's median TPOT over its twin's under the verdict's fitted physics), interpolated between them; the
    variant ``drift-tracked`` is then the verdict. Needs ``in_situ`` or ``shared_host`` (their training trace)."""
    saturation: str = "auto"
    """Where the load levels' reference rate is found when ``saturation_rate`` does not state it: ``cluster``
    (live probes of round-robin, doubling then bisection: the cluster's own collapse, as the paper found its
    operating point on its hardware), ``simulator`` (the same search on the calibrated simulator: free, but
    the simulator's claim); ``auto``: ``cluster`` on real engines, ``simulator`` on emulated ones (their
    physics is the simulator's). The simulator's rate is recorded either way: where it puts saturation
    against where the cluster collapses is one of the validation's findings."""
    probe_duration_s: float = 20.0
    """Seconds of arrivals of each live saturation probe."""
    max_probes: int = 8
    saturation_rate: float | None = None
    time_scale: float = 1.0
    """Emulated engines' speed-up K (`repro.experiment.spec.LiveConfig.time_scale`; 1 on real engines). A run
    the machine cannot keep up with at K is retried at lower K (`repro.experiment.runner.run`)."""
    redo: int = 2
    """Times a live run the machine could not keep up with (`repro.errors.RunInvalid`) is run again
    before the validation leaves it out (and says so)."""
    budget: ErrorBudget = field(default_factory=ErrorBudget)

    def __post_init__(self) -> None:
        if self.backend is not None:
            check_choice("validate", "backend", self.backend, BACKENDS)
        check_choice("validate", "workload", self.workload, WORKLOADS)
        check_choice("validate", "physics", self.physics, PHYSICS_SOURCES)
        check_choice("validate", "saturation", self.saturation, ("auto", "cluster", "simulator"))
        check_number("validate", "probe_duration_s", self.probe_duration_s, lo=1.0, hi=3600.0)
        check_int("validate", "max_probes", self.max_probes, 3, 32)
        fractions = tuple(float(f) for f in self.fractions)
        if not fractions:
            raise ConfigError("validate: field 'fractions' must list at least one load level")
        for f in fractions:
            check_number("validate", "fractions", f, lo=0.0, lo_open=True, hi=4.0)
        object.__setattr__(self, "fractions", tuple(sorted(set(fractions))))
        if not self.policies:
            raise ConfigError("validate: field 'policies' must name at least one policy")
        object.__setattr__(self, "policies", tuple(dict.fromkeys(self.policies)))
        check_int("validate", "repeats", self.repeats, 1, TRAINING_SEED_OFFSET)
        check_int("validate", "replays", self.replays, 1, 10)
        check_int("validate", "min_requests", self.min_requests, 1, 1_000_000)
        check_int("validate", "seed", self.seed, 0, 2**31 - 1000)
        check_int("validate", "redo", self.redo, 0, 10)
        check_number("validate", "duration_s", self.duration_s, lo=0.0, lo_open=True, hi=86_400.0)
        check_number("validate", "calibration_budget_s", self.calibration_budget_s, lo=10.0, hi=86_400.0)
        check_number("validate", "context_share", self.context_share, lo=0.0, hi=1.0)
        check_number("validate", "time_scale", self.time_scale, lo=1.0, hi=100.0)
        if self.time_scale != 1.0 and self.backend_used != "emulated":
            raise ConfigError(f"validate: field 'time_scale' must be 1 for backend {self.backend_used!r} "
                              f"(real engines run in real time)")
        if self.track_drift and not (self.in_situ or self.shared_host):
            raise ConfigError("validate: field 'track_drift' needs 'in_situ' or 'shared_host' (--in-situ or "
                              "--shared-host): the machine's speed is read off their training trace")
        if self.saturation_rate is not None:
            check_number("validate", "saturation_rate", self.saturation_rate, lo=0.0, lo_open=True, hi=1e6)

    @property
    def topology(self) -> Topology:
        return parse_topology(self.cluster, calibration_must_exist=False)

    @property
    def backend_used(self) -> str:
        """The backend the live runs take (`backend`, or the cluster's launcher's)."""
        if self.backend is not None:
            return self.backend
        return "vllm" if self.topology.launcher in ("vllm", "remote") else "emulated"

    @property
    def saturation_used(self) -> str:
        """``cluster`` or ``simulator`` (`saturation`, resolved), or ``stated`` with a ``saturation_rate``."""
        if self.saturation_rate is not None:
            return "stated"
        if self.saturation != "auto":
            return self.saturation
        return "cluster" if self.backend_used == "vllm" else "simulator"

    @property
    def seeds(self) -> list[int]:
        """The judged traces' seeds."""
        return list(range(self.seed, self.seed + self.repeats))

    @property
    def training_seed(self) -> int:
        """The in-situ fit's trace (`in_situ`): not one of `seeds`."""
        return self.seed + TRAINING_SEED_OFFSET

    def n_requests(self, rate: float) -> int:
        """Requests of one trace at ``rate`` req/s: ``duration_s`` of arrivals, at least ``min_requests``."""
        return max(self.min_requests, math.ceil(rate * self.duration_s))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fractions"] = list(self.fractions)
        d["policies"] = list(self.policies)
        d["backend_used"] = self.backend_used
        return d


TRAINING_SEED_OFFSET = 1000
"""The in-situ fit's trace: seed ``cfg.seed + TRAINING_SEED_OFFSET``, never one of the judged traces
(`ValidationConfig.seeds` stays below it: ``repeats`` is at most 1000)."""


# vLLM 0.32, vllm/engine/arg_utils.py (EngineArgs.get_batch_defaults, "cpu specific default values") and
# vllm/platforms/cpu.py (CpuPlatform.check_and_update_config: block size 128 unless set): what an engine
# started by the CPU launcher (repro.cluster.launchers, which sets none of them) schedules with.
VLLM_CPU_DEFAULTS = {"max_num_batched_tokens": 2048, "max_num_seqs": 128, "block_size": 128}


def engine_settings(topo: Topology) -> dict[str, Any]:
    """The scheduler settings of the cluster's engines that a calibration does not measure (tokens,
    sequences): ``max_num_batched_tokens`` (the chunked-prefill budget of one step), ``max_num_seqs``,
    ``block_size``, ``max_model_len``, and ``source`` saying where they come from. CPU vLLM engines
    (``vllm: {device: cpu}``): vLLM 0.32's CPU defaults (`VLLM_CPU_DEFAULTS`, each overridable by the
    cluster file's ``vllm.extra_args``); unmodified GPU engines (``vllm: {unmodified: true, gpu_memory_gib:
    ...}``): vLLM's own budget for that GPU (`repro.cluster.launchers.vllm.serve_defaults`), the rest from the
    profile; any other: the decode instances' hardware profile (the GPU launcher passes the profile's settings
    to ``vllm serve``)."""
    opts = topo.options.get("vllm") or {}
    if opts.get("device") == "cpu":
        out: dict[str, Any] = dict(VLLM_CPU_DEFAULTS)
        out["max_model_len"] = int(opts.get("max_model_len", 4096))
        extra = [str(a) for a in opts.get("extra_args", [])]
        for flag, key in (("--max-num-batched-tokens", "max_num_batched_tokens"), ("--max-num-seqs", "max_num_seqs"),
                          ("--block-size", "block_size")):
            if flag in extra and extra.index(flag) + 1 < len(extra):
                out[key] = int(extra[extra.index(flag) + 1])
        out["source"] = ("vLLM 0.32 CPU defaults (engine/arg_utils.py get_batch_defaults: 2048 batched tokens, "
                         "128 sequences for the API server; platforms/cpu.py: block size 128)")
        return out
    phys = load_profile(topo.decode[0].profile).physics
    chosen = unmodified(opts)
    if chosen is not None:  # the launcher passes no budget: vLLM's own, by the GPU's memory
        return {"max_num_batched_tokens": chosen[0], "max_num_seqs": chosen[1], "block_size": phys.block_size,
                "max_model_len": phys.max_model_len,
                "source": (f"vLLM's own defaults for `vllm serve` on a {opts.get('gpu_memory_gib')} GiB "
                           f"{opts.get('gpu_name', 'GPU')} (engine/arg_utils.py get_batch_defaults; the cluster "
                           "file's unmodified: true)")}
    return {"max_num_batched_tokens": phys.max_num_batched_tokens, "max_num_seqs": phys.max_num_seqs,
            "block_size": phys.block_size, "max_model_len": phys.max_model_len,
            "source": f"hardware profile {topo.decode[0].profile}"}
