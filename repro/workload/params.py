"""The workload generator's parameters that the paper does not state: `WorkloadParams`.

The paper's Table I (the four workload families) does not survive in its text, so the length
distributions and the mixed workload's arrival burstiness of `repro.workload.traces` are our
estimates. They are gathered here so that a testbed can carry its own (`repro identify` fits some
of them to measured baseline numbers) and a run can override them (a spec's ``workloads`` field).

Every field is documented with its unit and its estimate; `FITTABLE` lists the ones a fit or an
override may move, each with the range the generator accepts (not a prior: a fit's prior ranges
are its own, `repro.identify.space`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from repro.errors import ConfigError, check_ranges


@dataclass(frozen=True)
class WorkloadParams:
    """The estimated (paper-silent) parameters of the workload families; lengths in tokens."""

    documents_median_tokens: float = 1500.0
    """Median document prompt length (tokens) of ``documents`` requests: lognormal(log median, sigma),
    clipped to [512, 8192]."""
    documents_sigma: float = 0.5
    """Log-scale spread of the document prompt length."""
    reasoning_mult_median: float = 4.0
    """Median multiplier m of a ``reasoning`` request's ShareGPT output length: lognormal(log median,
    sigma), the output clipped to [512, 8192] tokens."""
    reasoning_mult_sigma: float = 0.3
    """Log-scale spread of the reasoning multiplier."""
    mixed_burstiness: float = 0.5
    """Gamma shape of the ``mixed`` workload's inter-arrival times (``vllm bench serve --burstiness``:
    1 is Poisson, below 1 burstier; CV = 1/sqrt(shape))."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            lo, hi = FITTABLE[f.name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not lo <= value <= hi:
                raise ConfigError(f"workloads: parameter {f.name!r} = {value!r} must be a number in [{lo:g}, {hi:g}]")
            object.__setattr__(self, f.name, float(value))

    def with_overrides(self, overrides: Mapping[str, float] | None) -> WorkloadParams:
        """A copy with ``overrides`` applied (`check_overrides` names a bad key or value)."""
        return replace(self, **check_overrides(overrides or {})) if overrides else self

    def changes(self) -> dict[str, float]:
        """The fields that differ from the estimates (`ESTIMATED`), by name: what a trace records."""
        return {k: v for k, v in asdict(self).items() if v != getattr(ESTIMATED, k)}


FITTABLE: dict[str, tuple[float, float]] = {
    "documents_median_tokens": (512.0, 8192.0),
    "documents_sigma": (0.0, 2.0),
    "reasoning_mult_median": (0.5, 16.0),
    "reasoning_mult_sigma": (0.0, 2.0),
    "mixed_burstiness": (0.05, 4.0),
}
"""Each parameter's accepted range (tokens, -, x, -, gamma shape): the generator's clip bounds for
the document length, otherwise only nonsense excluded."""

ESTIMATED = WorkloadParams()
"""Our estimates, the parameters a trace has unless a testbed or a spec says otherwise."""

SOURCES: dict[str, str] = {
    "documents_median_tokens": "estimate (Table I lost): a few-page reference document, ~1,500 tokens",
    "documents_sigma": "estimate (Table I lost): lengths spread over about 2x either way",
    "reasoning_mult_median": "estimate (Table I lost): a step-by-step answer ~4x a chat answer",
    "reasoning_mult_sigma": "estimate (Table I lost)",
    "mixed_burstiness": "estimate (Table I lost): vllm bench serve --burstiness 0.5 (CV 1.41)",
}
"""Where each estimate comes from (a testbed's own file replaces these for the values it fits)."""


def check_overrides(raw: Any, where: str = "spec: field 'workloads'") -> dict[str, float]:
    """``raw`` (a mapping of `FITTABLE` names to numbers) validated: keys sorted, values floats. An
    unknown name or a value out of its range is a `ConfigError` naming it and the allowed."""
    return check_ranges(raw, FITTABLE, where)


def from_section(section: Any, origin: str = "profile") -> WorkloadParams:
    """The parameters of a testbed file's ``workloads`` section (``{name: {"value": v, "source": s}}``;
    absent names keep the estimates; None: the estimates). A bad entry is a `ConfigError` naming it."""
    if section is None:
        return ESTIMATED
    if not isinstance(section, Mapping):
        raise ConfigError(f"{origin}: field 'workloads' must be an object of {{value, source}} entries")
    values: dict[str, Any] = {}
    for name, entry in section.items():
        if not isinstance(entry, Mapping) or "value" not in entry or "source" not in entry:
            raise ConfigError(f"{origin}: field 'workloads.{name}' must be {{\"value\": ..., \"source\": \"...\"}}")
        values[name] = entry["value"]
    return ESTIMATED.with_overrides(check_overrides(values, f"{origin}: field 'workloads'"))
