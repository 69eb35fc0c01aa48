"""A notebook's parameters checked and its plan: `SectionSetup.setup` makes a `Section` from them.

`check_cluster` and `check_seeds` stop a notebook at once, saying what to do, on a bad parameter
(`ConfigError`). `SectionSetup.setup` applies the scale plan (`repro.paper.plans`: traces and
requests per run), the time-scale rule (emulated engines run ``time_scale`` times faster than the
wall clock; other backends in real time), sets the figure style and finds the operating rates (req/s;
`repro.paper.context.rates`). The plan's other readings (`live`, `pick`, `value`, `probe_requests`,
`testbed`) are properties of the context. Part of `repro.paper.section.Section`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from repro.errors import ConfigError
from repro.paper import figures
from repro.paper.plans import (
    FULL_SEEDS,
    SIM_FULL_SEEDS,
    SIM_REQUESTS,
    check_backend_scale,
    is_live_quick,
    pick,
    probe_requests,
    searches_rates,
    seeds_and_requests,
    value,
)
from repro.paths import resolve_dir
from repro.vocab import DEFAULT_PROFILE

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Self


def check_cluster(backend: str, cluster: str, *, need_calibration: bool = True) -> str | None:
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
    from repro.cluster.launchers.base import wait_healthy
    from repro.cluster.topology import Instance, parse_topology

    topo = parse_topology(cluster)  # validates: a missing or malformed file (or calibration file) raises ConfigError
    if backend == "vllm" and need_calibration and "calibration" not in topo.options:
        raise ConfigError(f"cluster {cluster} has no 'calibration': the router's cost model and the SLO targets come "
                          f"from calibrating these engines. Run notebook 01 on it (repro paper --only 01 --backend "
                          f"vllm --cluster {cluster}) or `repro calibrate --cluster {cluster} --out calibration.json`, "
                          "then add 'calibration: calibration.json' to the file ('calibration: calibrated' uses the "
                          "paper's A40 constants)")
    remote = [Instance(name=i.name, role=i.role, url=i.url) for i in topo.instances if i.url]
    if remote:
        try:
            wait_healthy(remote, timeout=2.0)
        except RuntimeError as exc:  # the launcher's own health check, with a short deadline
            raise ConfigError(f"cluster {cluster}: no answer from GET /health within 2 s: {exc}") from None
    return cluster


def check_seeds(seeds: Sequence[int]) -> None:
    """A notebook's ``seeds`` given as they are (no scale default): a non-empty list of integers >= 0."""
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ConfigError(f"parameter 'seeds' = {seeds!r} must be a non-empty list of integers >= 0")


class SectionSetup:
    """Making a `Section` (`setup`) and reading its plan. Reads the fields below."""

    notebook: str
    backend: str
    scale: str
    n_requests: int
    rates: Mapping[str, float]

    if TYPE_CHECKING:  # from repro.paper.context.rates
        def operating_rates(self, workloads: Sequence[str], rate: float = 0.0) -> dict[str, float]: ...
        def workload_rates(self, rates: Mapping[str, float]) -> dict[str, float]: ...

    @classmethod
    def setup(cls, *, notebook: str, backend: str, scale: str, seeds: Sequence[int], cluster: str = "",
              results_dir: str | Path = "", figures_dir: str | Path = "",
              runs_dir: str | Path = "runs/paper", time_scale: float = 1.0, n_requests: int = 0,
              quick_seeds: Sequence[int] | None = None, full_seeds: Sequence[int] | None = None,
              sim_requests: tuple[int, int] = SIM_REQUESTS,
              uses_cluster: bool = True, need_calibration: bool = True, shape_sweep: bool = False,
              rate: float | None = None, workloads: Sequence[str] = ("mixed",),
              rates: Mapping[str, float] | None = None) -> Self:
        """Check a notebook's shared parameters and make its context; also sets the figure style and finds
        the operating rates.

        Traces and requests (`repro.paper.plans.seeds_and_requests`): with ``quick_seeds`` the
        notebook follows the scale plan (``seeds=[]`` means ``quick_seeds`` in sim quick, one trace
        on a live backend at quick scale, at full scale ``full_seeds`` (default: the ten traces of
        `repro.paper.plans.SIM_FULL_SEEDS` in sim, the paper's three live); ``n_requests=0`` means
        ``sim_requests`` (quick, full) in sim, `repro.paper.plans.LIVE_REQUESTS` live). Without
        ``quick_seeds`` the seeds are used as given and must not be empty.

        Cluster (`check_cluster`): not looked at when ``uses_cluster`` is False; a ``vllm`` cluster
        must carry a calibration unless ``need_calibration`` is False; with ``shape_sweep`` a
        ``{topology}`` template is not checked here but per pool shape when specs are made.

        Operating rates (`rates`, req/s): with ``rate`` those of ``workloads`` (`operating_rates`:
        ``rate`` when > 0, else each one's saturation rate); with ``rates`` a rate per workload of
        `repro.vocab.WORKLOADS` (`workload_rates`: ``{}`` means a saturation search).
        Relative folders are relative to the repository root; empty ``results_dir`` / ``figures_dir``
        mean ``results/<backend>-<scale>`` / ``figures/<backend>-<scale>`` (as `repro paper`). Bad values
        raise `ConfigError`.
        """
        check_backend_scale(backend, scale)
        if quick_seeds is None:
            check_seeds(seeds)
            chosen, n = seeds_and_requests(backend, scale, seeds, n_requests, sim=sim_requests)
        else:
            full = full_seeds if full_seeds is not None else (SIM_FULL_SEEDS if backend == "sim" else FULL_SEEDS)
            chosen, n = seeds_and_requests(backend, scale, seeds, n_requests, quick_seeds=quick_seeds,
                                           full_seeds=full, sim=sim_requests)
        if not uses_cluster or (shape_sweep and "{topology}" in cluster):
            cluster_file = None
        else:
            cluster_file = check_cluster(backend, cluster, need_calibration=need_calibration)
        figures.set_style()
        ctx = cls(notebook=notebook, backend=backend, scale=scale, seeds=tuple(chosen), n_requests=n,
                  cluster=cluster_file, pool_cluster=(cluster or None) if shape_sweep else cluster_file,
                  time_scale=time_scale if backend == "emulated" else 1.0,
                  results_dir=resolve_dir(results_dir or f"results/{backend}-{scale}"),
                  figures_dir=resolve_dir(figures_dir or f"figures/{backend}-{scale}"),
                  runs_dir=resolve_dir(runs_dir))
        if rate is not None and rates is not None:
            raise ConfigError("Section.setup: give 'rate' (one operating rate) or 'rates' (per workload), not both")
        if rate is not None:
            return dataclasses.replace(ctx, rates=ctx.operating_rates(workloads, rate))
        if rates is not None:
            return dataclasses.replace(ctx, rates=ctx.workload_rates(rates))
        return ctx

    # ---- the plan --------------------------------------------------------------------------------
    @property
    def rate(self) -> float:
        """The operating rate of the mixed workload (req/s), the one most sections run at."""
        if "mixed" not in self.rates:
            raise ConfigError(f"{self.notebook}: no operating rate of 'mixed' (Section.setup takes rate= or rates=)")
        return self.rates["mixed"]

    @property
    def live(self) -> bool:
        """True on a live backend (``emulated``, ``vllm``)."""
        return self.backend != "sim"

    @property
    def live_quick(self) -> bool:
        """True for the smoke-sized plan: a live backend at quick scale."""
        return is_live_quick(self.backend, self.scale)

    @property
    def searches_rates(self) -> bool:
        """Whether an operating rate of 0 means a saturation search here (else the simulator's rates)."""
        return searches_rates(self.backend, self.scale)

    @property
    def probe_requests(self) -> int:
        """Requests per probe of a saturation search here (`repro.paper.plans.probe_requests`)."""
        return probe_requests(self.backend, self.scale, self.n_requests)

    @property
    def testbed(self) -> str:
        """The hardware profile this section's numbers were simulated on ("" on real engines, ``vllm``): the
        default profile (the identified A40 testbed, `repro.vocab.DEFAULT_PROFILE`)."""
        return "" if self.backend == "vllm" else DEFAULT_PROFILE

    def pick(self, name: str, given: Sequence[Any] | None, default: Sequence[Any]) -> list[Any]:
        """The values of grid ``name``: ``given`` when not empty, else this plan's (`repro.paper.plans.pick`)."""
        return pick(name, given, self.backend, self.scale, default)

    def value(self, name: str, given: float, default: float) -> float:
        """A single setting: ``given`` when > 0, else this plan's (`repro.paper.plans.value`)."""
        return value(name, given, self.backend, self.scale, default)

    def simulator(self) -> Self:
        """This context on the simulator (same traces, requests and folders; no cluster, real time)."""
        return dataclasses.replace(self, backend="sim", cluster=None, pool_cluster=None, time_scale=1.0)
