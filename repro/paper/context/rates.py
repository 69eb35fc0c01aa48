"""A notebook's operating rates (req/s): given, the testbed's, or found by a saturation search.

`SectionRates.operating_rates` picks each workload's rate: the one given when > 0; else the
identified testbed's (`repro.identify.testbed.operating_rates`: the paper's stated mixed rate, the
identified chat and documents rates); else its saturation rate (`saturation`: round-robin
mid-collapse on 2p4d with the first trace, §IV-B; probes simulated, or run live on a live
backend), except at live quick scale on ``emulated``, which takes the simulator's rates
(`repro.paper.plans.SIM_SATURATION_RATES`). Rates in requests per second, goodput a fraction of the
requests sent. Part of `repro.paper.section.Section`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.experiment import runner
from repro.experiment.spec import RunSpec
from repro.paper.grids import check_rates, shape_cluster
from repro.paper.plans import fixed_rates, probe_size
from repro.vocab import WORKLOADS

if TYPE_CHECKING:
    from repro.experiment.metrics import Summary


class SectionRates:
    """The operating rates of a `Section`. Reads the fields below."""

    backend: str
    scale: str
    seeds: tuple[int, ...]
    pool_cluster: str | None
    time_scale: float

    if TYPE_CHECKING:  # from repro.paper.context.setup and repro.paper.context.runs
        @property
        def searches_rates(self) -> bool: ...
        @property
        def probe_requests(self) -> int: ...
        @property
        def testbed(self) -> str: ...
        def run_summary(self, spec: RunSpec) -> Summary: ...

    def saturation(self, workloads: Sequence[str] = WORKLOADS, *, n_requests: int,
                   fixed: Mapping[str, float] | None = None, max_probes: int = 16) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The saturation search per workload (§IV-B) on 2p4d with the first trace: ``(rates, probes)``.

        ``rates``: workload, saturation_rate (req/s), rate_lo/rate_hi (`rate_band`: the rates whose
        round-robin goodput is within the search's band; NaN for a given rate), light_goodput,
        target_goodput, probes;
        ``probes``: workload, probe, rate, round_robin_goodput. ``n_requests`` per probe. With
        ``fixed`` (workload -> req/s) there is no search: one round-robin probe per workload at the
        given rate checks that operating point (``light_goodput`` and ``target_goodput`` NaN).
        """
        from repro.experiment.saturation import light_rate_for, rate_band, saturation_search

        cluster = shape_cluster(self.pool_cluster, "2p4d", sweep=False)

        def live_probe(spec: RunSpec) -> float:
            if self.backend == "vllm":  # probes sized by duration (real engines serve in real time)
                spec = spec.replace(n_requests=probe_size(self.backend, self.scale, n_requests, float(spec.rate)))
            return self.run_summary(spec)["goodput"]

        probe = None if self.backend == "sim" else live_probe
        rates, probes = [], []
        for wl in workloads:
            base = RunSpec.from_flat(backend=self.backend, workload=wl, seed=self.seeds[0], n_requests=n_requests,
                                     topology="2p4d", cluster=cluster, time_scale=self.time_scale)
            if fixed is not None:
                if wl not in fixed:
                    raise ConfigError(f"saturation: no fixed rate for workload {wl!r}; given: {sorted(fixed)}")
                spec = base.replace(policy="round_robin", policy_options={}, rate=float(fixed[wl]))
                if probe is None:
                    g = runner.simulated_summary(spec)[0]["goodput"]
                else:
                    g = probe(spec)
                rates.append({"workload": wl, "saturation_rate": float(fixed[wl]), "rate_lo": np.nan,
                              "rate_hi": np.nan, "light_goodput": np.nan, "target_goodput": np.nan, "probes": 1})
                probes.append({"workload": wl, "probe": 0, "rate": float(fixed[wl]), "round_robin_goodput": float(g)})
                continue
            # on real engines the paper's 1 req/s start may already be overload: start from the calibration
            light = light_rate_for(base) if self.backend == "vllm" else 1.0
            res = saturation_search(base, probe=probe, max_probes=max_probes, light_rate=light)
            lo, hi = rate_band(res.probes, res.target_goodput)
            rates.append({"workload": wl, "saturation_rate": res.rate, "rate_lo": lo, "rate_hi": hi,
                          "light_goodput": res.light_goodput, "target_goodput": res.target_goodput,
                          "probes": len(res.probes)})
            for i, (r, g) in enumerate(res.probes):
                probes.append({"workload": wl, "probe": i, "rate": r, "round_robin_goodput": g})
        return pd.DataFrame(rates), pd.DataFrame(probes)

    def operating_rates(self, workloads: Sequence[str], rate: float = 0.0) -> dict[str, float]:
        """Workload -> its operating rate (req/s): ``rate`` for every workload when > 0; else the testbed's
        (`testbed_rates`: the paper's stated mixed rate, the identified chat and documents rates); else its
        saturation rate (round-robin mid-collapse on 2p4d): searched with probes of at most
        `probe_requests` requests, except at live quick scale on ``emulated``, which takes the
        simulator's rates (`repro.paper.plans.SIM_SATURATION_RATES`)."""
        if rate > 0:
            return {wl: float(rate) for wl in workloads}
        known = self.testbed_rates()
        out = {wl: known[wl] for wl in workloads if wl in known}
        rest = [wl for wl in workloads if wl not in out]
        if rest and not self.searches_rates:
            out.update(fixed_rates(rest))
        elif rest:
            rates, _ = self.saturation(rest, n_requests=self.probe_requests)
            out.update({r.workload: float(r.saturation_rate) for r in rates.itertuples()})
        return {wl: out[wl] for wl in workloads}

    def testbed_rates(self) -> dict[str, float]:
        """The identified testbed's operating rates (req/s; `repro.identify.testbed.operating_rates`), on the
        backends that run its physics (``sim``, ``emulated``); none on real engines."""
        from repro.identify.testbed import operating_rates

        return operating_rates(self.testbed) if self.testbed else {}

    def operating_rate(self, rate: float, workload: str = "mixed") -> float:
        """``rate`` (req/s) when > 0, else ``workload``'s saturation rate (`operating_rates`)."""
        return self.operating_rates([workload], rate)[workload]

    def workload_rates(self, rates: Mapping[str, float]) -> dict[str, float]:
        """A rate (req/s) per workload of `repro.vocab.WORKLOADS`: ``rates`` checked
        (`repro.paper.grids.check_rates`), or for ``{}`` each one's `operating_rates` (the testbed's, else
        a saturation search, at any scale)."""
        if not rates:
            rates = self.operating_rates(WORKLOADS)
        return check_rates(rates)
