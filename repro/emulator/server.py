"""Command line and process entry of emulated engines (``python -m repro.emulator``).

One engine per process (``python -m repro.emulator --port N ...``), or several engines in one
process and one event loop (``python -m repro.emulator --engines FILE``: FILE is a JSON list with one
argument list per engine, each parsed exactly as a one-engine command line). Every engine keeps its
own port, app, step loop and KV pool; only the process and the event loop are shared, which saves
the context switches and the per-process interpreter overhead of six engines on two cores
(``benchmarks/bench_emulator.py``). The loop is uvloop's when uvloop is installed (uvicorn[standard]
brings it).

In a shared process a ``crash`` fault ends the whole process (every engine in it), as ``kill -9``
of the process does: tests that kill one engine of a cluster start their engines one per process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from typing import Any

from repro.cluster.processes import orphaned
from repro.emulator.engine import EmulatorConfig
from repro.errors import ConfigError
from repro.vocab import DEFAULT_PROFILE


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m repro.emulator",
        description="An emulated vLLM 0.12 engine (OpenAI API, P/D with NixlConnector semantics) "
                    "whose timing is a hardware profile's physics on the wall clock.",
    )
    ap.add_argument("--engines", default=None,
                    help="serve several engines in this process: a JSON file holding a list of argument lists "
                         "(one engine's options each); the other options are then not allowed but --parent-pid")
    ap.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ap.add_argument("--profile", default=DEFAULT_PROFILE, help="hardware profile name or path to a .json")
    ap.add_argument("--time-scale", type=float, default=1.0,
                    help="run the physics K times faster than the wall clock "
                         "(everything reported stays in physics time)")
    ap.add_argument("--engine-id", default=None, help="NIXL engine id (default: a random uuid, as vLLM)")
    ap.add_argument("--served-model-name", default=None, help="model name to answer to (default: the profile's model)")
    ap.add_argument("--side-channel-host", default=None,
                    help="host advertised as remote_host (default: $VLLM_NIXL_SIDE_CHANNEL_HOST, else the bind host)")
    ap.add_argument("--side-channel-port", type=int, default=None,
                    help="serve the KV side channel on a second port advertised as remote_port "
                         "(default: $VLLM_NIXL_SIDE_CHANNEL_PORT if set, else the HTTP port itself)")
    ap.add_argument("--stream-interval-tokens", type=int, default=1,
                    help="send streamed tokens every N tokens (vLLM's --stream-interval; default 1)")
    ap.add_argument("--stream-interval-ms", type=float, default=0.0,
                    help="when N > 1, also flush pending tokens every M wall-clock ms (default 0: off)")
    ap.add_argument("--fault", action="append", default=[],
                    help="diverge | slow:F | kv-drop | crash[:N] | hang[:N] | errors:F | cut:K "
                         "| dead-metrics[:500|hang] | kv-hold (repeatable; see repro.emulator.faults). "
                         "With VLLM_SERVER_DEV_MODE=1 they can also "
                         "be switched at run time: POST /_emulator/faults {\"faults\": [...]}")
    ap.add_argument("--api-key", default=None,
                    help="as vLLM: /v1/* requests need 'Authorization: Bearer KEY' "
                         "(default: $VLLM_API_KEY; none: open)")
    ap.add_argument("--eos-mean-tokens", type=int, default=256,
                    help="mean natural output length when ignore_eos is false (default 256)")
    ap.add_argument("--kv-budget-tokens", type=int, default=None, help="override the profile's KV budget (tokens)")
    ap.add_argument("--num-gpu-blocks-override", type=int, default=None,
                    help="as vLLM: KV budget = (N - 1) x block_size tokens")
    ap.add_argument("--max-num-batched-tokens", type=int, default=None)
    ap.add_argument("--max-num-seqs", type=int, default=None)
    ap.add_argument("--max-lag-ms", type=float, default=5.0,
                    help="re-anchor the step clock when it falls this far behind (default 5 ms)")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process is no longer our parent")
    ap.add_argument("--log-level", default="warning")
    return ap


def config_from_args(argv: Sequence[str] | None = None) -> EmulatorConfig:
    a = build_parser().parse_args(argv)
    kwargs = dict(
        port=a.port, host=a.host, profile=a.profile, time_scale=a.time_scale,
        served_model_name=a.served_model_name, side_channel_host=a.side_channel_host,
        side_channel_port=a.side_channel_port, stream_interval_tokens=a.stream_interval_tokens,
        stream_interval_ms=a.stream_interval_ms, faults=tuple(a.fault), eos_mean_tokens=a.eos_mean_tokens,
        kv_budget_tokens=a.kv_budget_tokens, num_gpu_blocks_override=a.num_gpu_blocks_override,
        max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=a.max_num_seqs,
        max_lag_ms=a.max_lag_ms, parent_pid=a.parent_pid, log_level=a.log_level, api_key=a.api_key,
    )
    if a.engine_id:
        kwargs["engine_id"] = a.engine_id
    cfg = EmulatorConfig(**kwargs)
    cfg.validate()
    return cfg


async def serve(*cfgs: EmulatorConfig) -> None:
    """Serve every engine of ``cfgs`` in this event loop until a signal stops them (the process's
    entry: each app's lifespan calls `repro.cluster.processes.enter_live_loop` once serving)."""
    import uvicorn

    from repro.emulator.app import create_app

    configs = []
    for cfg in cfgs:
        app = create_app(cfg)
        app.state.live_process = True  # its lifespan enters the live loop (heap, scheduling)
        configs.append(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level=cfg.log_level,
                                      access_log=False, timeout_graceful_shutdown=1, lifespan="on"))
        side = app.state.side_channel_port
        if side is not None and side != cfg.port:
            configs.append(uvicorn.Config(app, host=cfg.host, port=side, log_level=cfg.log_level,
                                          access_log=False, timeout_graceful_shutdown=1, lifespan="off"))
    servers = [uvicorn.Server(c) for c in configs]
    await asyncio.gather(*(s.serve() for s in servers))


def engine_configs(argv: Sequence[str] | None) -> tuple[list[EmulatorConfig], int | None]:
    """The engines a command line asks for (one, or the ``--engines`` file's) and the ``--parent-pid``;
    raises `ConfigError` for a bad option or file (the file's entry is named)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    if a.engines is None:
        cfg = config_from_args(argv)
        cfg.physics()
        return [cfg], cfg.parent_pid
    if any(x not in ("--engines", a.engines, "--parent-pid", str(a.parent_pid)) for x in argv):
        raise ConfigError("--engines: give every other option inside the file (only --parent-pid goes beside it)")
    try:
        lists = json.loads(open(a.engines).read())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--engines {a.engines}: cannot read a JSON list of argument lists ({exc})") from None
    if not isinstance(lists, list) or not lists or not all(isinstance(x, list) for x in lists):
        raise ConfigError(f"--engines {a.engines}: must hold a non-empty JSON list of argument lists")
    cfgs = []
    for k, args in enumerate(lists):
        try:
            cfg = config_from_args([str(x) for x in args])
            cfg.parent_pid = a.parent_pid
            cfg.physics()
        except (ConfigError, SystemExit) as exc:
            raise ConfigError(f"--engines {a.engines}: engine {k}: {exc}") from None
        cfgs.append(cfg)
    ports = [c.port for c in cfgs]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"--engines {a.engines}: two engines share a port ({ports})")
    return cfgs, a.parent_pid


def run_loop(main_coro: Any) -> None:
    """Run ``main_coro`` on uvloop when it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_coro)
    else:
        uvloop.run(main_coro)


def main(argv: Sequence[str] | None = None) -> int:
    # a launcher's blocked signals are inherited across exec: make sure SIGTERM/SIGINT stop us
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        cfgs, parent_pid = engine_configs(argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if parent_pid is not None and orphaned(parent_pid):
        return 0
    try:
        run_loop(serve(*cfgs))
    except KeyboardInterrupt:
        pass
    return 0
