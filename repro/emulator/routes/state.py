"""`EmulatorState`: what every route module of one emulated engine's app shares.

`create_app` builds one per app and stores it as ``app.state.emulator``; a route reads it back
with `emulator_state` (the side-channel listener serves the same app object, hence the same state).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from repro.emulator.engine import AsyncEngine, EmulatorConfig
    from repro.emulator.faults import Faults
    from repro.engine.physics import Physics


def env_flag(name: str) -> bool:
    """vLLM's reading of a boolean environment variable: unset, "", "0", "false", "False" are off."""
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


@dataclass
class EmulatorState:
    """The engine, its configuration and the settings read once at app creation.

    ``side_port`` is the port advertised as ``remote_port`` when a second side-channel listener
    is configured (``--side-channel-port`` or ``$VLLM_NIXL_SIDE_CHANNEL_PORT``); None means the
    HTTP port itself serves the side channel. ``api_key`` None leaves ``/v1/*`` open.
    """

    cfg: EmulatorConfig
    engine: AsyncEngine
    dev_mode: bool
    side_host: str
    side_port: int | None
    api_key: str | None
    registry: CollectorRegistry

    @classmethod
    def create(cls, cfg: EmulatorConfig, engine: AsyncEngine) -> EmulatorState:
        """Read the environment (``VLLM_SERVER_DEV_MODE``, ``VLLM_NIXL_SIDE_CHANNEL_HOST``/``PORT``,
        ``VLLM_API_KEY``) once; explicit ``cfg`` values win over it."""
        dev_mode = env_flag("VLLM_SERVER_DEV_MODE")
        side_host = cfg.advertised_side_channel_host
        env_port = os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT")
        side_port = cfg.side_channel_port
        if side_port is None:
            side_port = int(env_port) if env_port else None
        registry = engine.metrics.registry()
        api_key = cfg.api_key or os.environ.get("VLLM_API_KEY") or None
        return cls(cfg=cfg, engine=engine, dev_mode=dev_mode, side_host=side_host, side_port=side_port,
                   api_key=api_key, registry=registry)

    @property
    def model_name(self) -> str:
        """The served model name (``--served-model-name``, else the profile's model)."""
        return self.engine.model_name

    @property
    def physics(self) -> Physics:
        return self.engine.physics

    @property
    def max_model_len(self) -> int:
        """Prompt + output limit, tokens."""
        return self.engine.physics.max_model_len

    @property
    def faults(self) -> Faults:
        """The fault switches in force now (they can change at run time)."""
        return self.engine.faults

    def advertised_port(self, request: Request) -> int:
        """The ``remote_port`` a prefill answer names: the side-channel port, else the port this
        request came in on (``cfg.port`` when the server address is unknown)."""
        if self.side_port is not None:
            return self.side_port
        server = request.scope.get("server")
        return int(server[1]) if server else self.cfg.port


def emulator_state(request: Request) -> EmulatorState:
    """The `EmulatorState` of the app serving ``request``."""
    return request.app.state.emulator
