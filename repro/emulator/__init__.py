"""Emulated vLLM engine: vLLM 0.12's OpenAI API and P/D protocol, with a hardware profile's timing.

- `repro.emulator.core`: clock-agnostic scheduler (continuous batching, chunked prefill, KV blocks,
  prefix cache, preemption), shared with the benchmark's virtual-clock replay.
- `repro.emulator.engine`: runs the core on the wall clock (time-scale K) and does the KV pulls.
- `repro.emulator.app`: the FastAPI app (vLLM's endpoints, bodies, SSE framing, errors).
- `repro.emulator.model`: the deterministic greedy "model" (token ids, text, chat template).
- `repro.emulator.metrics`: vLLM's Prometheus metrics.
- `repro.emulator.faults`: fault switches (diverge, slow, kv-drop, crash, hang, errors, cut, dead-metrics, kv-hold).
- `repro.emulator.server`: command line (``python -m repro.emulator``), ``emulator_app`` for typer.
"""

from repro.emulator.engine import AsyncEngine, EmulatorConfig

__all__ = ["AsyncEngine", "EmulatorConfig", "create_app"]


def create_app(cfg: EmulatorConfig | None = None, **kwargs):
    """The ASGI app of one emulated engine (``create_app(EmulatorConfig(...))``)."""
    from repro.emulator.app import create_app as _create

    return _create(cfg or EmulatorConfig(**kwargs))
