"""The rate a validation's load levels are fractions of (`saturation_rate`): searched on the cluster's live
probes or on the calibrated simulator (`simulated_saturation`), or stated; and the live search's probes read back
(`search_probes`, `collapsing_from`) for the machine's speed at the search."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from repro.experiment.manifest import write_json_atomic
from repro.experiment.spec import RunSpec
from repro.validation.live_runs import live_run, say
from repro.validation.plan import ValidationConfig
from repro.validation.twin import twin_goodput

if TYPE_CHECKING:
    from repro.engine.physics import Physics
    from repro.experiment.runner import RunResult
    from repro.experiment.saturation import SaturationResult

SATURATION_PROBE_REQUESTS = 400
"""Requests of each simulated probe of the saturation search."""


class SaturationHow(TypedDict, total=False):
    """How `saturation_rate` found the load levels' reference rate: ``how`` in words; the calibrated
    simulator's rate (req/s) and its probes (``[rate, goodput]`` each), always; a searched rate's goodput at
    the light rate and the target (fractions); a search on the cluster's live probes and the rates of the
    probes the machine could not keep up with (req/s, counted as collapsed); whether a probe came within the
    search's band (else the rate is the crossing in its last bracket)."""

    how: str
    simulator_rate: float
    simulator_probes: list[list[float]]
    simulator_rate_by_variant: dict[str, float]
    light_goodput: float
    target_goodput: float
    probes: list[list[float]]
    probes_invalid: list[float]
    converged: bool


def simulated_saturation(base: RunSpec, cfg: ValidationConfig, physics: Physics) -> SaturationResult:
    """Where the simulator with ``physics`` puts the cluster's saturation: round-robin mid-collapse
    (`repro.experiment.saturation.saturation_search`), probes of `SATURATION_PROBE_REQUESTS` requests of the first
    judged trace seed through `twin_goodput`."""
    from repro.experiment.saturation import light_rate_for, saturation_search

    probe_spec = base.replace(n_requests=SATURATION_PROBE_REQUESTS, seed=cfg.seed)
    return saturation_search(probe_spec, light_rate=light_rate_for(probe_spec),
                             probe=lambda s: twin_goodput(s, physics))


def saturation_rate(cfg: ValidationConfig, base: RunSpec, physics: Physics, out: Path, progress: bool
                    ) -> tuple[float, SaturationHow]:
    """The load levels' reference rate (req/s) and how it was found (`ValidationConfig.saturation`): where
    round-robin is mid-collapse (`repro.experiment.saturation.saturation_search`) on the cluster (live
    probes under ``out/saturation``; a probe the machine could not keep up with counts as collapsed) or on
    the calibrated simulator (probes of `SATURATION_PROBE_REQUESTS` requests through `twin_goodput`), or
    as stated. The simulator's rate is always searched and recorded (``simulator_rate``). An input to the
    validation's levels, never one of its results."""
    from repro.experiment.saturation import saturation_search

    simulated = simulated_saturation(base, cfg, physics)
    how: SaturationHow = {"simulator_rate": float(simulated.rate),
                           "simulator_probes": [list(p) for p in simulated.probes]}
    used = cfg.saturation_used
    if used == "stated":
        return float(cfg.saturation_rate or 0.0), {**how, "how": "stated (--saturation-rate)"}
    if used == "simulator":
        return float(simulated.rate), {**how, "how": "searched on the calibrated simulator (round-robin mid-collapse)",
                                       "light_goodput": simulated.light_goodput,
                                       "target_goodput": simulated.target_goodput}
    invalid: list[float] = []
    marks = out / "saturation" / "invalid.json"  # probes left out in an earlier start: a resumed search agrees

    def live_probe(spec: RunSpec) -> float:
        probe = probe_spec(cfg, spec)
        known = set(json.loads(marks.read_text())) if marks.exists() else set()
        res = None
        if probe.run_id not in known:
            res, _ = live_run(probe, out / "saturation", cfg.redo, progress)
            if res is None:
                marks.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(marks, sorted(known | {probe.run_id}))
        goodput = 0.0 if res is None else float(res.summary["goodput"])
        if res is None:
            invalid.append(spec.rate)
        say(progress, f"validate: saturation probe {spec.rate:.3g} req/s ({probe.n_requests} requests): live goodput "
                      f"{goodput:.3f}" + (" (the machine could not keep up: counted as collapsed)" if res is None
                                          else ""))
        return goodput

    # from a sixteenth of the simulator's rate (a power of two, req/s): well below any collapse the simulator
    # sees, and a few doublings from one a cluster slower than it predicts reaches
    live_light = 2.0 ** math.floor(math.log2(simulated.rate / 16))
    found = saturation_search(base.replace(seed=cfg.seed), light_rate=live_light, probe=live_probe, band=0.03,
                              max_probes=cfg.max_probes)
    said = "searched on the cluster (live probes, round-robin mid-collapse)"
    if not found.converged:
        said = (f"searched on the cluster (live probes, round-robin mid-collapse; no probe within 0.03 of the "
                f"target goodput {found.target_goodput:.3f} in {len(found.probes)}: the crossing in the last bracket)")
    return float(found.rate), {**how, "how": said, "converged": found.converged,
                               "light_goodput": found.light_goodput, "target_goodput": found.target_goodput,
                               "probes": [list(p) for p in found.probes], "probes_invalid": invalid}


def probe_spec(cfg: ValidationConfig, spec: RunSpec) -> RunSpec:
    """A live saturation probe of ``spec`` (its rate): `ValidationConfig.probe_duration_s` of arrivals, at least
    `ValidationConfig.min_requests` requests."""
    return spec.replace(n_requests=max(cfg.min_requests, math.ceil(spec.rate * cfg.probe_duration_s)))


def search_probes(cfg: ValidationConfig, base: RunSpec, how: SaturationHow, out: Path
                  ) -> list[tuple[RunSpec, RunResult]]:
    """The live saturation search's valid probes (spec and result, from ``out/saturation``), as
    `saturation_rate` ran them."""
    from repro.experiment.runner import finished_run

    rr = base.replace(seed=cfg.seed).replace(policy="round_robin", policy_options={})
    found = []
    for rate, _ in how.get("probes", []):
        spec = probe_spec(cfg, rr.replace(rate=rate))
        res = finished_run(spec, out / "saturation")
        if res is not None:
            found.append((spec, res))
    return found


def collapsing_from(how: SaturationHow, band: float = 0.03) -> float:
    """The lowest rate (req/s) at which the live search's round-robin goodput fell to its target plus ``band``
    (the search's band; infinity when none did)."""
    target = how.get("target_goodput", math.nan)
    return min((r for r, g in how.get("probes", []) if g <= target + band), default=math.inf)

