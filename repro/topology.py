"""Cluster topology: how many prefill and decode instances, and each one's hardware profile.

Shorthand ``"2p4d"`` = 2 prefill + 4 decode instances of the default profile. A YAML/dict form
gives roles, counts, profile and KV budget per pool::

    prefill: {count: 2, profile: a40-qwen2.5-3b}
    decode:  {count: 4, profile: a40-qwen2.5-3b, kv_budget_tokens: 60000}

Instance names are ``prefill-0 .. prefill-{P-1}``, ``decode-0 .. decode-{D-1}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from repro.errors import ConfigError
from repro.physics import DEFAULT_PROFILE, Physics

_SHORTHAND = re.compile(r"^\s*(\d+)\s*p\s*(\d+)\s*d\s*$", re.IGNORECASE)
MAX_INSTANCES_PER_POOL = 64


@dataclass(frozen=True)
class Pool:
    role: str  # "prefill" | "decode"
    count: int
    profile: str = DEFAULT_PROFILE
    kv_budget_tokens: int | None = None  # override of the profile's KV budget

    def physics(self) -> Physics:
        phys = Physics.load(self.profile)
        if self.kv_budget_tokens is not None:
            phys = phys.with_overrides(kv_budget_tokens=self.kv_budget_tokens)
        return phys

    def names(self) -> list[str]:
        return [f"{self.role}-{i}" for i in range(self.count)]


@dataclass(frozen=True)
class Topology:
    prefill: Pool
    decode: Pool

    @property
    def label(self) -> str:
        return f"{self.prefill.count}p{self.decode.count}d"

    @property
    def gpus(self) -> int:
        return self.prefill.count + self.decode.count


def parse_topology(value: str | dict[str, Any] | Topology, profile: str | None = None) -> Topology:
    """Parse ``"2p4d"``, a dict, or a path to a YAML file; errors name the field."""
    if isinstance(value, Topology):
        return value
    default_profile = profile or DEFAULT_PROFILE
    if isinstance(value, str):
        m = _SHORTHAND.match(value)
        if m:
            p, d = int(m.group(1)), int(m.group(2))
            _check_count("topology", "prefill", p)
            _check_count("topology", "decode", d)
            return Topology(Pool("prefill", p, default_profile), Pool("decode", d, default_profile))
        path = Path(value)
        if path.suffix in (".yaml", ".yml") and path.exists():
            try:
                raw = yaml.safe_load(path.read_text())
            except yaml.YAMLError as exc:
                raise ConfigError(f"topology {path}: malformed YAML ({exc})") from None
            return parse_topology(raw.get("topology", raw) if isinstance(raw, dict) else raw, profile)
        raise ConfigError(
            f"topology: {value!r} is not a topology; allowed: '<P>p<D>d' like '2p4d' (1..{MAX_INSTANCES_PER_POOL} each) or a .yaml file"
        )
    if not isinstance(value, dict):
        raise ConfigError("topology: expected '2p4d' or a mapping with 'prefill' and 'decode'")
    pools = []
    for role in ("prefill", "decode"):
        raw = value.get(role)
        if not isinstance(raw, dict):
            raise ConfigError(f"topology: field '{role}' is missing (a mapping with 'count')")
        unknown = set(raw) - {"count", "profile", "kv_budget_tokens"}
        if unknown:
            raise ConfigError(f"topology: unknown field(s) {sorted(f'{role}.{u}' for u in unknown)}; allowed: count, profile, kv_budget_tokens")
        count = raw.get("count")
        if not isinstance(count, int) or isinstance(count, bool):
            raise ConfigError(f"topology: field '{role}.count' must be an integer 1..{MAX_INSTANCES_PER_POOL}")
        _check_count("topology", role, count)
        kv = raw.get("kv_budget_tokens")
        if kv is not None and (not isinstance(kv, int) or isinstance(kv, bool) or kv < 1):
            raise ConfigError(f"topology: field '{role}.kv_budget_tokens' must be a positive integer, got {kv!r}")
        prof = raw.get("profile", default_profile)
        Physics.load(prof)  # validate now
        pools.append(Pool(role, count, prof, kv))
    return Topology(pools[0], pools[1])


def _check_count(where: str, role: str, count: int) -> None:
    if not 1 <= count <= MAX_INSTANCES_PER_POOL:
        raise ConfigError(f"{where}: field '{role}.count' = {count} out of range (1..{MAX_INSTANCES_PER_POOL})")
