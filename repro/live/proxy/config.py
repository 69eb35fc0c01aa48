"""What a proxy process is told: its engines (`Endpoint`) and its settings (`ProxyConfig`).

`ProxyConfig` round-trips through JSON (`to_json` / `from_json`): the harness writes it to a file
and starts ``python -m repro.live.proxy --config FILE``. The bearer token never goes into that
file: the harness passes it in the ``REPRO_PROXY_API_KEY`` environment variable (`API_KEY_ENV`).

Units: fields ending in ``_s`` are seconds; ``poll_interval_s`` is physics seconds (the engines'
clock, ``time_scale`` times faster than the wall clock), ``connect_timeout_s`` and
``health_window_s`` are wall seconds.

There is no time-out on a request that an engine is working on: a busy engine queues (as vLLM
does), and only a dead engine fails requests (see `repro.live.proxy.core.Proxy`'s health rules).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from repro.errors import ConfigError

API_KEY_ENV = "REPRO_PROXY_API_KEY"


@dataclass
class Endpoint:
    """One engine behind the proxy: its unique ``name``, ``role`` (prefill | decode) and base ``url``."""

    name: str
    role: str  # prefill | decode
    url: str


@dataclass
class ProxyConfig:
    """Everything a proxy process needs (serialisable to JSON for ``python -m repro.live.proxy``).

    Raises `ConfigError` on construction when a field is out of range (roles, URLs, at least one
    prefill and one decode engine, positive finite timeouts).
    """

    endpoints: list[Endpoint]
    policy: str = "marginal_cost"
    policy_options: dict[str, Any] = field(default_factory=dict)
    cost_model: str = "calibrated"
    predictor: str = "default"  # default | constant | oracle(max_tokens; only for experiments)
    predictor_noise: float = 0.0
    predictor_seed: int = 0
    journal: str | None = None
    time_scale: float = 1.0
    poll_interval_s: float = 0.05  # physics seconds
    min_poll_wall_s: float = 0.02
    connect_timeout_s: float = 2.0  # wall: a connection an engine does not accept within this fails
    health_window_s: float = 5.0  # wall: an engine whose /metrics has not answered for this long is dead
    max_body_bytes: int = 4 * 1024 * 1024
    max_prompt_chars: int = 1_000_000
    api_key: str | None = field(default=None, repr=False)  # never logged; not written by the harness either
    host: str = "127.0.0.1"
    port: int = 8000
    kv_capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        self.endpoints = [e if isinstance(e, Endpoint) else Endpoint(**e) for e in self.endpoints]
        roles = [e.role for e in self.endpoints]
        for e in self.endpoints:
            if e.role not in ("prefill", "decode"):
                raise ConfigError(f"proxy: endpoint {e.name!r} field 'role' must be prefill or decode, got {e.role!r}")
            if not e.url.startswith(("http://", "https://")):
                raise ConfigError(f"proxy: endpoint {e.name!r} field 'url' must start with http:// or https://")
        if "prefill" not in roles or "decode" not in roles:
            raise ConfigError("proxy: field 'endpoints' needs at least one prefill and one decode engine")
        if not self.time_scale > 0:
            raise ConfigError(f"proxy: field 'time_scale' must be > 0, got {self.time_scale!r}")
        if not self.poll_interval_s > 0:
            raise ConfigError(f"proxy: field 'poll_interval_s' must be > 0, got {self.poll_interval_s!r}")
        for name in ("connect_timeout_s", "health_window_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
                raise ConfigError(f"proxy: field '{name}' must be a finite number of seconds > 0, got {v!r}")

    def to_json(self) -> str:
        """The config as indented JSON (including ``api_key``: blank it first if the text is stored)."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ProxyConfig:
        """The config `to_json` wrote (endpoints as objects); validated like the constructor."""
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"proxy: unknown field(s) {unknown}; allowed: {sorted(known)}")
        return cls(**raw)


def endpoints_from_cluster(cluster: str | Path) -> list[Endpoint]:
    """Endpoints from a `repro cluster up` state file (JSON) or a cluster YAML with URLs."""
    path = Path(cluster)
    if path.suffix == ".json":
        from repro.cluster.launchers.state import load_state

        state = load_state(path)
        return [Endpoint(i.name, i.role, i.url) for i in state["instances"]]
    from repro.cluster.topology import parse_topology

    topo = parse_topology(path)
    missing = [i.name for i in topo.instances if not i.url]
    if missing:
        raise ConfigError(f"cluster {path}: instances {missing} have no 'url'; "
                          f"start them with `repro cluster up` and pass its state file")
    return [Endpoint(i.name, i.role, i.url) for i in topo.instances]
