"""A testbed's hardware profile, typed and read once: `HardwareProfile` (``data/hardware/<name>.json``).

A profile file holds the engines' true timing (``params``, `repro.engine.physics.Physics`) and the SLO targets
the paper states for that hardware (``slo``, on the physics as ``stated_slo``); a testbed identified by
`repro identify` also holds the workload generator's parameters it was measured with (``workloads``,
`repro.workload.params.WorkloadParams`) and how it was identified (``identified``, `Identified`).

`load_profile` is the one reader: by name or path, parsed once per process and version of the file (keyed by
its resolved path, size and modification time: an edited profile is read again). Every package asks it, or a
`repro.experiment.spec.RunSpec`'s ``hardware``, never the JSON. The object is frozen and shared, as vLLM's
``ModelConfig`` is built once per engine and handed on.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from repro.engine.physics import Physics
from repro.errors import ConfigError
from repro.paths import HARDWARE_DIR
from repro.vocab import DEFAULT_PROFILE
from repro.workload.params import ESTIMATED, WorkloadParams, from_section


@dataclass(frozen=True)
class Identified:
    """How `repro identify` made a testbed (the profile's ``identified`` section; `NOT_IDENTIFIED` for a profile
    not identified). Rates in req/s."""

    base_profile: str = ""
    """The profile it was identified from."""
    mechanisms: tuple[str, ...] = ()
    """The engine model's mechanisms (`repro.engine.mechanisms`) the fit switched on."""
    training_keys: frozenset[str] = frozenset()
    """The paper's headline keys it was fitted to: on this testbed they are inputs, never results."""
    inputs: frozenset[str] = frozenset()
    """Headline keys of numbers the fit was given (a stated operating rate): inputs too."""
    rates: Mapping[str, float] = field(default_factory=dict)
    """Operating rates the fit identified (``rate_chat`` ...)."""
    stated_rates: Mapping[str, float] = field(default_factory=dict)
    """Operating rates the measurements state (``rate_mixed`` ...)."""
    report: str = ""
    """Its report folder (``data/identify/<name>/``), relative to the project."""

    def __bool__(self) -> bool:
        return bool(self.base_profile or self.training_keys or self.mechanisms)

    @property
    def fitted_keys(self) -> frozenset[str]:
        """The numbers it was fitted to or given: inputs on this testbed."""
        return self.training_keys | self.inputs

    @property
    def operating_rates(self) -> dict[str, float]:
        """Workload -> operating rate: the stated rates over the identified ones."""
        out = {name.removeprefix("rate_"): float(v) for name, v in self.rates.items()}
        out.update({name.removeprefix("rate_"): float(v) for name, v in self.stated_rates.items()})
        return out

    @classmethod
    def from_section(cls, raw: Any, origin: str) -> Identified:
        if raw is None:
            return NOT_IDENTIFIED
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{origin}: field 'identified' must be an object")
        try:
            rates = {str(k): float(e["value"] if isinstance(e, Mapping) else e) for k, e in
                     (raw.get("rates") or {}).items()}
            stated = {str(k): float(v) for k, v in (raw.get("stated_rates") or {}).items()}
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{origin}: field 'identified.rates' must map names to {{\"value\": req/s}} and "
                              f"'identified.stated_rates' names to req/s") from None
        return cls(base_profile=str(raw.get("base_profile") or ""),
                   mechanisms=tuple(str(m) for m in raw.get("mechanisms") or ()),
                   training_keys=frozenset(str(k) for k in raw.get("training_keys") or ()),
                   inputs=frozenset(str(k) for k in raw.get("inputs") or ()),
                   rates=MappingProxyType(rates), stated_rates=MappingProxyType(stated),
                   report=str(raw.get("report") or ""))


NOT_IDENTIFIED = Identified()


@dataclass(frozen=True)
class HardwareProfile:
    """One hardware profile, parsed: its ``name``, the file it came from, the engines' true timing (``physics``,
    with the stated SLO targets), the workload parameters of its testbed (``workloads``: our estimates
    when the file has none) and how it was identified (``identified``)."""

    name: str
    path: Path
    physics: Physics
    workloads: WorkloadParams = ESTIMATED
    identified: Identified = NOT_IDENTIFIED
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The file's JSON object, read-only (`as_dict` gives a copy to write a derived profile from)."""

    @property
    def stated_slo(self) -> tuple[float, float] | None:
        """The SLO targets the paper states for this hardware (TTFT, TPOT; seconds), or None."""
        return self.physics.stated_slo

    def as_dict(self) -> dict[str, Any]:
        """A deep copy of the file's JSON object."""
        return copy.deepcopy(dict(self.raw))

    @classmethod
    def from_dict(cls, raw: Any, path: Path, origin: str = "profile") -> HardwareProfile:
        """A profile from its file's JSON object. A missing or bad field is a `ConfigError` naming it."""
        if not isinstance(raw, dict):
            raise ConfigError(f"{origin}: expected a JSON object")
        physics = Physics.from_dict(raw, origin=origin)
        return cls(name=physics.name, path=path, physics=physics,
                   workloads=from_section(raw.get("workloads"), origin=origin),
                   identified=Identified.from_section(raw.get("identified"), origin),
                   raw=MappingProxyType(raw))


_LOADED: dict[tuple[str, int, int], HardwareProfile] = {}


def load_profile(name_or_path: str | Path = DEFAULT_PROFILE) -> HardwareProfile:
    """The profile by name (``data/hardware/<name>.json``) or by path, read once per version of its file. An
    unknown name or a bad file is a `ConfigError` naming the allowed profiles or the bad field."""
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    path = resolve_profile_path(name_or_path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    hit = _LOADED.get(key)
    if hit is None:
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"profile {path}: not valid JSON ({exc})") from None
        hit = _LOADED[key] = HardwareProfile.from_dict(raw, path, origin=str(path))
    return hit


def available_profiles() -> list[str]:
    """The shipped profiles' names."""
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.json"))


def resolve_profile_path(name_or_path: str | Path) -> Path:
    """The file of a profile name or path; a `ConfigError` naming the allowed profiles otherwise."""
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        if not path.exists():
            raise ConfigError(f"profile: file {path} does not exist")
        return path
    candidate = HARDWARE_DIR / f"{name_or_path}.json"
    if not candidate.exists():
        raise ConfigError(
            f"profile: unknown profile {str(name_or_path)!r}; allowed: {available_profiles()} or a path to a .json file"
        )
    return candidate
