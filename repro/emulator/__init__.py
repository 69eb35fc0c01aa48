"""Emulated vLLM engine: vLLM 0.12's OpenAI API and P/D protocol, with a hardware profile's timing.

- `repro.emulator.core`: clock-agnostic scheduler (continuous batching, chunked prefill, preemption),
  shared with the benchmark's virtual-clock replay; its KV blocks and prefix cache in
  `repro.emulator.kv_blocks`, a request and its states in `repro.emulator.seq`.
- `repro.emulator.engine`: `EmulatorConfig`; `AsyncEngine` runs the core on the wall clock (time-scale K)
  and does the KV pulls.
- `repro.emulator.app`: ``create_app``, the FastAPI app assembled from `repro.emulator.routes`, plus the
  hang / ``--api-key`` gate in front of it.
- `repro.emulator.routes`: one module per concern: ``state`` (`EmulatorState`, shared by the routes),
  ``errors`` and ``params`` (vLLM's error bodies, request validation), ``completions`` (OpenAI completions
  and chat completions, SSE framing), ``kv_transfer`` (the P/D KV read the decode engine makes to the
  prefill engine), ``service`` (``/health``, ``/metrics``, ``/tokenize``, ``/v1/models``, ...) and
  ``admin`` (``/_emulator/state``/``info``; dev mode: ``/reset_prefix_cache``, ``/_emulator/faults``).
- `repro.emulator.model`: the deterministic greedy "model" (token ids, text, chat template).
- `repro.emulator.vllm_metrics`: vLLM's Prometheus metrics (``/metrics``; not the journal metrics of
  `repro.experiment.metrics`).
- `repro.emulator.faults`: fault switches (diverge, slow, kv-drop, crash, hang, errors, cut, dead-metrics, kv-hold).
- `repro.emulator.http`: a minimal keep-alive HTTP/1.1 client (the KV pulls, `benchmarks/bench_emulator.py`).
- `repro.emulator.server`: command line and process entry (``python -m repro.emulator``).
- `repro.cli.emulator`: ``emulator_app``, the same command line as a typer sub-app (``repro emulator``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from repro.emulator.engine import AsyncEngine, EmulatorConfig

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["AsyncEngine", "EmulatorConfig", "create_app"]


def create_app(cfg: EmulatorConfig | None = None, **kwargs: Any) -> FastAPI:
    """The ASGI app of one emulated engine: ``create_app(EmulatorConfig(...))`` or
    ``create_app(port=..., profile=...)`` (``kwargs`` are `EmulatorConfig` fields). FastAPI is
    imported only here, so that ``import repro.emulator`` stays light."""
    from repro.emulator import app

    return app.create_app(cfg or EmulatorConfig(**kwargs))
