"""Bring your own router: put any external OpenAI-compatible router in front of the cluster.

Instead of our proxy, an external router process (vllm-router, an SGLang gateway, a script of
your own) is started against the launched engines, and the load generator replays the trace
through it. Everything is then measured from the client's side: status, TTFT, TPOT, e2e per
request (`repro.live.loadgen`), scored with the same `repro.experiment.metrics.summarize` as every other run.
Placement columns stay null (an external router does not tell us where it put a request, unless
it sets our ``X-Prefill-Instance``/``X-Decode-Instance`` response headers), so per-instance skew
is not available for such runs.

The command is a template, formatted then split like a shell line (`shlex`, no shell runs it):

    {port}             the port the router must listen on (a free port, chosen here)
    {host}             127.0.0.1
    {metrics_port}     a second free port (for routers that open a metrics listener, which would
                       otherwise collide between runs)
    {prefill_urls}     the prefill engines' base URLs, space-separated (one argv token each)
    {decode_urls}      likewise for the decode engines
    {prefill_urls:-F}  with a format spec: each URL preceded by the flag ``-F``, e.g.
                       ``{prefill_urls:--prefill}`` -> ``--prefill URL1 --prefill URL2``
    {prefill_urls_csv} / {decode_urls_csv}: comma-joined

Example (vllm-router, P/D mode)::

    vllm-router --vllm-pd-disaggregation --host {host} --port {port} --prometheus-port {metrics_port}
        --policy power_of_two {prefill_urls:--prefill} {decode_urls:--decode}

`external_router(...)` starts it, waits until it answers ``GET /health`` with 200, yields its
base URL and always stops it (SIGTERM to its process group, then SIGKILL).
`run_external(spec, template, run_dir)` = launch the spec's cluster (emulated or a cluster file),
run the correctness gates, replay the spec's trace through the external router, judge the run's
validity as our own runs are judged (retried at lower time scales when invalid), write
``journal.jsonl`` + ``manifest.json`` (the `repro.experiment.run` layout, with a ``router`` entry
naming the command).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pandas as pd

from repro.errors import ConfigError, check_choice

if TYPE_CHECKING:
    from repro.experiment.spec import RunSpec

VLLM_ROUTER_ENV = "REPRO_VLLM_ROUTER"
VLLM_ROUTER_POLICIES = ("random", "round_robin", "power_of_two", "cache_aware", "consistent_hash")


class _UrlList(list):
    """A list of URLs that formats as space-separated tokens, each after a flag given as spec."""

    def __format__(self, spec: str) -> str:
        if spec:
            return " ".join(f"{spec} {shlex.quote(u)}" for u in self)
        return " ".join(shlex.quote(u) for u in self)


def render_command(template: str | Sequence[str], *, port: int, prefill_urls: Sequence[str],
                   decode_urls: Sequence[str], host: str = "127.0.0.1", metrics_port: int | None = None) -> list[str]:
    """The argv of ``template`` with its placeholders filled (see the module docstring)."""
    if not isinstance(template, str):
        template = " ".join(shlex.quote(t) if "{" not in t else t for t in template)
    values = {
        "port": port,
        "host": host,
        "metrics_port": metrics_port if metrics_port is not None else 0,
        "prefill_urls": _UrlList(prefill_urls),
        "decode_urls": _UrlList(decode_urls),
        "prefill_urls_csv": ",".join(prefill_urls),
        "decode_urls_csv": ",".join(decode_urls),
    }
    try:
        line = template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"external router: bad command template {template!r} ({exc!r}); "
                          f"placeholders: {sorted(values)}") from None
    argv = shlex.split(line)
    if not argv:
        raise ConfigError("external router: empty command")
    return argv


def find_vllm_router() -> str | None:
    """Path of the ``vllm-router`` executable: $REPRO_VLLM_ROUTER, else on PATH, else None."""
    env = os.environ.get(VLLM_ROUTER_ENV)
    if env:
        return env if os.access(env, os.X_OK) else None
    return shutil.which("vllm-router")


def vllm_router_template(policy: str = "round_robin", *, prefill_policy: str | None = None,
                         decode_policy: str | None = None, binary: str | None = None,
                         extra: Sequence[str] = ()) -> str:
    """A command template for vllm-router in its P/D mode (NIXL protocol, as our engines speak).

    ``policy`` applies to both pools unless ``prefill_policy``/``decode_policy`` override it.
    Retries are left at the router's defaults.
    """
    binary = binary or find_vllm_router() or "vllm-router"
    parts = [shlex.quote(binary), "--vllm-pd-disaggregation", "--host {host}", "--port {port}",
             "--prometheus-host 127.0.0.1", "--prometheus-port {metrics_port}", f"--policy {shlex.quote(policy)}"]
    if prefill_policy:
        parts.append(f"--prefill-policy {shlex.quote(prefill_policy)}")
    if decode_policy:
        parts.append(f"--decode-policy {shlex.quote(decode_policy)}")
    parts += ["--log-level warning", "{prefill_urls:--prefill}", "{decode_urls:--decode}"]
    parts += [shlex.quote(e) for e in extra]
    return " ".join(parts)


def _free_port() -> int:
    from repro.live.run import free_port

    return free_port()


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@contextmanager
def external_router(template: str | Sequence[str], prefill_urls: Sequence[str], decode_urls: Sequence[str], *,
                    log_path: str | Path | None = None, host: str = "127.0.0.1", port: int | None = None,
                    health_path: str = "/health", timeout_s: float = 60.0) -> Iterator[str]:
    """Start the router command, wait for ``GET health_path`` -> 200, yield its URL; always stop it."""
    port = port or _free_port()
    argv = render_command(template, port=port, prefill_urls=prefill_urls, decode_urls=decode_urls,
                          host=host, metrics_port=_free_port())
    if shutil.which(argv[0]) is None and not os.access(argv[0], os.X_OK):
        raise ConfigError(f"external router: executable {argv[0]!r} not found")
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    except BaseException:
        if log_path:
            log.close()
        raise
    url = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"external router exited with code {proc.returncode} before serving"
                                       + (f"; see {log_path}" if log_path else "") + f" (argv: {argv})")
                try:
                    if client.get(url + health_path).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"external router did not answer {health_path} with 200 within {timeout_s} s"
                                       + (f"; see {log_path}" if log_path else ""))
                time.sleep(0.1)
        yield url
    finally:
        _stop(proc)
        if log_path:
            log.close()


def run_external(spec: RunSpec, command_template: str | Sequence[str], run_dir: str | Path, *,
                 health_path: str = "/health", startup_timeout_s: float = 60.0,
                 label: str | None = None, on_invalid: str = "retry") -> pd.DataFrame:
    """Run ``spec``'s trace on its live cluster through an external router; returns the journal.

    Writes under ``run_dir``: ``router.log``, ``gates.json``, ``client.jsonl``, ``loadgen.json``,
    ``validity.json``, ``attempts.jsonl``, ``journal.jsonl`` (client-side rows; placement columns
    null) and ``manifest.json`` (spec, ``router`` {label, template, argv}, versions, journal hash,
    summary, and the validity fields of our own runs: ``valid``, ``validity``, ``attempts``,
    ``time_scale_used``). The run is judged as ours are (`repro.live.validity`; no proxy loop lag or
    poll gaps: the router is not ours) and an invalid attempt is retried at lower time scales
    (`repro.live.run.run_live_valid`; ``on_invalid="keep"``: one attempt, kept). ``spec.policy``
    is not used (the external router decides); the spec's backend must be live (``emulated`` or ``vllm``).
    """
    from repro.experiment.inputs import truth_cost_model
    from repro.experiment.manifest import sha256, versions, write_json_atomic
    from repro.experiment.metrics import summarize
    from repro.live.run import run_live_valid

    if spec.backend == "sim":
        raise ConfigError("external router: spec.backend must be 'emulated' or 'vllm' "
                          "(an external router needs live engines)")
    check_choice("run_external", "on_invalid", on_invalid, ("retry", "keep"))
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    argv_seen: list[str] = []

    def attempt(s: RunSpec, d: Path) -> pd.DataFrame:
        journal, argv = _external_attempt(s, command_template, d, health_path=health_path,
                                          startup_timeout_s=startup_timeout_s)
        argv_seen[:] = argv
        return journal

    journal, live = run_live_valid(spec, run_dir, on_invalid, attempt)
    summary = summarize(journal, truth_cost_model(spec).slo, sent=spec.n_requests)
    template_text = command_template if isinstance(command_template, str) else " ".join(command_template)
    manifest = {
        "run_id": run_dir.name,
        "spec": spec.to_dict(),
        "router": {"kind": "external", "label": label, "template": template_text,
                   "argv": argv_seen},
        "complete": True,
        "started_unix": started,
        "wall_s": time.time() - started,
        "versions": versions(),
        "journal_sha256": sha256(run_dir / "journal.jsonl"),
        "summary": summary,
        **live,
    }
    write_json_atomic(run_dir / "manifest.json", manifest)
    return journal


def _external_attempt(spec: RunSpec, command_template: str | Sequence[str], run_dir: Path, *,
                      health_path: str, startup_timeout_s: float) -> tuple[pd.DataFrame, list[str]]:
    """One attempt of `run_external` at ``spec``'s time scale: its journal (written) and the
    router's argv; ``validity.json`` judged as for our proxy's runs (`repro.live.run.RunWatch`)."""
    from repro.experiment.inputs import build_trace
    from repro.experiment.journal import frame, write_frame
    from repro.experiment.journal import read as read_journal
    from repro.live.gates import run_gates
    from repro.live.loadgen import replay_process
    from repro.live.run import RunWatch, jsonable, launch_cluster, merge_journals

    client_path = run_dir / "client.jsonl"
    for p in (client_path, run_dir / "validity.json", run_dir / "loadgen.json"):
        p.unlink(missing_ok=True)
    trace = build_trace(spec)
    with launch_cluster(spec) as instances:
        prefill = [i.url for i in instances if i.role == "prefill"]
        decode = [i.url for i in instances if i.role == "decode"]
        gates = run_gates(instances)
        (run_dir / "gates.json").write_text(json.dumps(jsonable(gates), indent=2, default=str))
        port = _free_port()
        argv = render_command(command_template, port=port, prefill_urls=prefill, decode_urls=decode,
                              metrics_port=0)
        with external_router(command_template, prefill, decode, log_path=run_dir / "router.log", port=port,
                             health_path=health_path, timeout_s=startup_timeout_s) as url:
            watch = RunWatch(instances)
            report = replay_process(trace, url, journal_path=client_path, work_dir=run_dir,
                                    time_scale=spec.live.time_scale, progress=sys.stderr.isatty())
        client = read_journal(client_path)
        watch.judge(spec.live.time_scale, report, client, run_dir, None)
    journal = merge_journals(client, frame([]), trace.df)
    write_frame(journal, run_dir / "journal.jsonl")
    return journal, argv
