"""What a section notebook runs at each (backend, scale): traces, requests per run, operating rates, grids.

Three plans, one per (backend family, scale):

- ``sim`` (quick or full): the paper's grids and saturation searches; quick shrinks the requests
  per run (2000 instead of 10000), never the grids. Deterministic. Full runs `SIM_FULL_SEEDS`:
  ten traces of the paper's 10,000 requests, so that the trace level of every interval is a real
  sample (t intervals with 9 degrees of freedom; three traces give 2, and a bootstrap over three
  traces gives their [min, max]). A notebook whose sweeps are our own additions, not the
  paper's claims, may keep the paper's three (``full_seeds=FULL_SEEDS``): its intervals stay valid,
  only wider.
- live ``full`` (``emulated``, ``vllm``): the paper's protocol on the live cluster: three traces of
  1000 requests, saturation searches on that cluster, the full grids. Hours on real GPUs.
- live ``quick`` (`repro paper --backend emulated`): every section on the real proxy and HTTP
  path in about 20 minutes on 2 cores. One trace of `LIVE_QUICK_REQUESTS` requests per run, the
  simulator's saturation rates (`SIM_SATURATION_RATES`) as operating points instead of a live
  search, and each sweep cut to the rows that carry its section's claim (`LIVE_QUICK_GRIDS`).
  On ``vllm`` the operating points are searched on the cluster at hand (the simulator's rates are
  the paper's A40 cluster's), from a light rate derived from the cluster's calibration
  (`repro.experiment.saturation.light_rate_for`), with probes of about `VLLM_QUICK_PROBE_S` seconds
  of arrivals, and measured runs have `VLLM_QUICK_REQUESTS` requests.
  Notebooks share identical runs (a run is resumed from ``runs_dir`` by the hash of its spec), so
  notebook 04's four runs also serve 05, 06, 09, 10, 12 and 13.

A live run's wall time is set by its trace's slowest request, not its request count: at time scale
2 a mixed run of 200 requests takes ~40 s, of which ~27 s drain one ~4,500-token reasoning answer.
Hence the grids, not the request counts, are what live quick cuts. Given values always win: a
notebook parameter that is not empty (or not 0) overrides the plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from repro.errors import ConfigError
from repro.vocab import BACKENDS, SCALES

if TYPE_CHECKING:
    from repro.experiment.spec import RunSpec

# The saturation rate (req/s) of each workload on 2p4d (round-robin mid-collapse, §IV-B), from the
# simulator's search on the identified testbed (`repro saturate`); notebooks 12 and 13 use them as
# reference rates, and live quick as its operating points where the testbed has none of its own (its
# stated and identified rates come first: `repro.paper.section.Section.operating_rates`). The emulated
# engines run the same physics, so the rates carry over (notebook 03 checks the mixed one with a
# round-robin probe on the live cluster).
SIM_SATURATION_RATES = {"chat": 64.0, "reasoning": 22.1, "documents": 11.3, "mixed": 26.9}

SIM_REQUESTS = (2000, 10000)  # requests per run at (quick, full)
LIVE_REQUESTS = (200, 1000)
LIVE_QUICK_REQUESTS = LIVE_REQUESTS[0]
FULL_SEEDS = (1, 2, 3)  # the paper's three arrival traces (live full; per-trace rows of Table II)
SIM_FULL_SEEDS = tuple(range(1, 11))  # sim full: ten traces, the trace level of every interval a real sample
LIVE_QUICK_SEEDS = (1,)
SEARCH_MAX_REQUESTS = 1000  # requests per probe of a live notebook's operating-rate search (at most; sim: the rows')
VLLM_QUICK_PROBE_REQUESTS = 60  # vllm quick: requests per probe at most (fewer at low rates, see VLLM_QUICK_PROBE_S)
VLLM_QUICK_PROBE_S = 120.0  # vllm quick: a probe's arrivals span about this many seconds (at least 20 requests)
VLLM_QUICK_REQUESTS = 60  # vllm quick: requests per measured run (real engines serve in real time)

# Live quick: each sweep cut to the rows that carry its section's claim (name -> values).
LIVE_QUICK_GRIDS: dict[str, tuple[Any, ...]] = {
    "saturation_workloads": ("mixed",),  # 03: check the mixed operating point (its probe is 04's round-robin run)
    "heterogeneity_policies": ("round_robin", "marginal_cost"),  # 06, 12: the two ends of Fig. 3
    "widths": (3, 4),  # 07: the narrow pool where the router matters, and the paper's 2p4d
    "width_policies": ("least_loaded", "marginal_cost"),  # 07: the paper's §V-D comparison
    "shapes": ("1p2d", "2p4d"),  # 08: the scarcity corner and the paper's default shape
    "shape_policies": ("round_robin", "least_loaded", "marginal_cost"),
    "rate_fractions": (0.5, 1.0),  # 09: half load and the operating point
    "sweep_policies": ("round_robin", "marginal_cost"),  # 09: Fig. 5 and Fig. 7
    "ablation_features": ("length", "slo"),  # 10: the two terms the paper finds matter
    "ablation_points": ("saturation",),  # 10: the operating point of Table II (and no sim-derived SLO ablation)
    "ablation_formulas": ("marginal_cost",),  # 10: the paper's scorer (notebook 14 sets the two side by side)
    "noise_levels": (0.0, 1.0),  # 11: exact lengths and 100% error
    "noise_policies": ("marginal_cost",),
    "frontier_shapes": ("1p2d", "2p4d"),  # 13: the scarcity failure and the headline shape
    "frontier_policies": ("round_robin", "marginal_cost", "marginal_cost_plus"),
    "beyond_workloads": ("mixed",),  # 13: production baselines on the paper's headline workload
    "vllm_router_policies": ("round_robin", "power_of_two"),  # 13: when the vllm-router binary is installed
    "scorer_formulas": ("marginal_cost", "marginal_cost_batching"),  # 14: the comparison is the point
    "scorer_claims": ("Table II", "Fig. 4 scarcity (1p2d)"),  # 14: the lead and the failure region, per formula
}


# Live quick: single values (name -> value) where the paper's would not fit a short trace.
LIVE_QUICK_VALUES: dict[str, float] = {
    "burst_period_s": 10.0,  # 09: three burst periods fit in ~500 requests at 16 req/s (the paper's 30 s need ~1,500)
}


# The emulated cluster, router proxy and load generator share the machine's CPUs: at time scale K a
# run of R req/s is R*K req/s of wall-clock HTTP. On 2 cores a whole 2p4d cluster holds its TTFT
# within 3% of the physics up to 48 wall req/s (benchmarks/bench_emulator.py: K = 2 at 24 req/s);
# past that the measurement is of the CPU, not of the policy (chat at 64 req/s and K = 2 lost 0.1-0.2
# goodput to it). Live runs therefore lower K for fast workloads, never below real time.
EMULATED_MAX_WALL_RATE = 48.0


def emulated_time_scale(rate: float, time_scale: float, max_wall_rate: float = EMULATED_MAX_WALL_RATE) -> float:
    """The time scale an emulated run of ``rate`` req/s actually uses: ``time_scale``, lowered so
    that ``rate * K <= max_wall_rate``, but never below 1 (real time) nor above what was asked."""
    if rate * time_scale <= max_wall_rate:
        return float(time_scale)
    return float(min(time_scale, max(1.0, max_wall_rate / rate)))


def for_this_machine(spec: RunSpec) -> RunSpec:
    """``spec`` with its emulated time scale capped by `emulated_time_scale` (other backends unchanged)."""
    if spec.backend != "emulated":
        return spec
    ts = emulated_time_scale(float(spec.rate), float(spec.live.time_scale))
    return spec if ts == spec.live.time_scale else spec.replace(time_scale=ts)


def check_backend_scale(backend: str, scale: str) -> None:
    """A notebook's ``backend`` and ``scale`` parameters; an unknown value is a `ConfigError` listing the allowed."""
    if backend not in BACKENDS:
        raise ConfigError(f"parameter 'backend' = {backend!r}; allowed: {list(BACKENDS)}")
    if scale not in SCALES:
        raise ConfigError(f"parameter 'scale' = {scale!r}; allowed: {list(SCALES)}")


def is_live_quick(backend: str, scale: str) -> bool:
    """True for the smoke-sized plan: a live backend at quick scale."""
    check_backend_scale(backend, scale)
    return backend != "sim" and scale == "quick"


def searches_rates(backend: str, scale: str) -> bool:
    """Whether a rate of 0 means a saturation search (else the simulator's rates are used). Always on
    ``vllm``: the simulator's rates are the paper's A40 cluster's, not those of the engines at hand."""
    return backend == "vllm" or not is_live_quick(backend, scale)


def probe_size(backend: str, scale: str, n_requests: int, rate: float) -> int:
    """Requests of one search probe at ``rate`` req/s: `probe_requests`, and on ``vllm`` at quick
    scale only as many as arrive in `VLLM_QUICK_PROBE_S` (at least 20)."""
    n = probe_requests(backend, scale, n_requests)
    if backend == "vllm" and scale == "quick":
        n = min(n, max(20, math.ceil(rate * VLLM_QUICK_PROBE_S)))
    return n


def probe_requests(backend: str, scale: str, n_requests: int) -> int:
    """Requests per probe of a saturation search: on ``sim``, ``n_requests`` itself (an operating point is
    searched with the requests of the rows it sets: a shorter trace fills fewer queues and lands elsewhere, and
    a simulated probe costs a fraction of a second); live, capped at `SEARCH_MAX_REQUESTS`, and at
    `VLLM_QUICK_PROBE_REQUESTS` on ``vllm`` at quick scale (`probe_size` sizes each probe by its rate)."""
    n = int(n_requests) if backend == "sim" else min(int(n_requests), SEARCH_MAX_REQUESTS)
    if backend == "vllm" and scale == "quick":
        n = min(n, VLLM_QUICK_PROBE_REQUESTS)
    return n


def pick(name: str, given: Sequence[Any] | None, backend: str, scale: str, default: Sequence[Any]) -> list[Any]:
    """The values of grid ``name``: ``given`` when not empty, else the live-quick cut, else ``default``."""
    if given:
        return list(given)
    if name not in LIVE_QUICK_GRIDS:
        raise KeyError(f"scale: no grid named {name!r}; known: {sorted(LIVE_QUICK_GRIDS)}")
    return list(LIVE_QUICK_GRIDS[name] if is_live_quick(backend, scale) else default)


def value(name: str, given: float, backend: str, scale: str, default: float) -> float:
    """A single setting: ``given`` when > 0, else the live-quick value, else ``default``."""
    if given and given > 0:
        return float(given)
    if name not in LIVE_QUICK_VALUES:
        raise KeyError(f"scale: no value named {name!r}; known: {sorted(LIVE_QUICK_VALUES)}")
    return float(LIVE_QUICK_VALUES[name] if is_live_quick(backend, scale) else default)


def seeds_and_requests(backend: str, scale: str, seeds: Sequence[int] | None, n_requests: int, *,
                       quick_seeds: Sequence[int] = FULL_SEEDS, full_seeds: Sequence[int] = FULL_SEEDS,
                       sim: tuple[int, int] = SIM_REQUESTS,
                       live: tuple[int, int] = LIVE_REQUESTS) -> tuple[list[int], int]:
    """``(seeds, n_requests)``: given values win; empty / 0 mean the plan's default.

    ``quick_seeds`` is the notebook's sim-quick choice; live quick always runs `LIVE_QUICK_SEEDS`.
    """
    check_backend_scale(backend, scale)
    if isinstance(n_requests, bool) or not isinstance(n_requests, int) or n_requests < 0:
        raise ConfigError(f"parameter 'n_requests' = {n_requests!r} must be an integer >= 0 (0 = the scale default)")
    full = scale == "full"
    if seeds:
        chosen = list(seeds)
    elif full:
        chosen = list(full_seeds)
    else:
        chosen = list(LIVE_QUICK_SEEDS if backend != "sim" else quick_seeds)
    if not chosen or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in chosen):
        raise ConfigError(f"parameter 'seeds' = {seeds!r} must be a list of integers >= 0 ([] = the scale default)")
    n = int(n_requests) or (sim if backend == "sim" else live)[1 if full else 0]
    if not n_requests and backend == "vllm" and not full:
        n = min(n, VLLM_QUICK_REQUESTS)
    return chosen, n


def default_n(backend: str, scale: str, n_requests: int = 0, *, sim: tuple[int, int] = SIM_REQUESTS,
              live: tuple[int, int] = LIVE_REQUESTS) -> int:
    """Requests per run: ``n_requests`` if > 0, else the (quick, full) default of the backend."""
    return seeds_and_requests(backend, scale, [1], n_requests, sim=sim, live=live)[1]


def fixed_rates(workloads: Sequence[str]) -> dict[str, float]:
    """The simulator's saturation rates of ``workloads`` (req/s), live quick's operating points."""
    unknown = [w for w in workloads if w not in SIM_SATURATION_RATES]
    if unknown:
        raise ConfigError(f"scale: no operating point for workload(s) {unknown}; known: {sorted(SIM_SATURATION_RATES)}")
    return {w: SIM_SATURATION_RATES[w] for w in workloads}
