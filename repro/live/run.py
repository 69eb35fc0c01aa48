"""Live runs (``emulated`` and ``vllm`` backends): cluster -> proxy -> gates -> replay -> journal.

`run_live(spec, run_dir)` is what `repro.experiment.run` calls for a non-sim spec:

1. bring the cluster up (emulated engines as local processes at ``spec.live.time_scale``, or the
   ``spec.cluster`` file's launcher: real ``vllm serve`` processes or remote endpoints);
2. start the router proxy as its own process (so the load generator never shares its event loop)
   with the spec's policy, cost model and predictor, and wait for its ``/health``;
3. run the correctness gates (prefix-cache reset, warm-up of every pair, token-count contract,
   greedy equivalence); a failed gate stops the run with the gate's message;
4. replay the trace open-loop through the proxy with the load generator (a process of its own too,
   `repro.live.loadgen.replay_process`: in a notebook kernel it lagged its schedule), measuring meanwhile what
   would make the run's numbers about the machine (`repro.live.validity`: send lag, the proxy's
   loop lag and poll gaps, the emulated engines' step lateness, CPU steal) -> ``validity.json``;
5. stop the proxy, then merge the two journals by request id into ``journal.jsonl``: the client's
   view (status, TTFT, TPOT, e2e: what a user experiences) plus the proxy's (placement, the
   predicted length, when the prefill answered, when the decode started: its ledger's anchor), on the
   client's clock.

Everything started here is stopped here, also on errors and Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pandas as pd

from repro.cluster.processes import child_setup, free_ports, live_nice, stop_process
from repro.errors import ConfigError, PolicyError, RunInvalid, check_decision_budget
from repro.experiment.backends import OnInvalid
from repro.experiment.journal import frame, write_frame
from repro.experiment.journal import read as read_journal
from repro.experiment.manifest import Attempt, LiveOutcome
from repro.experiment.metrics import AccountingError, check_accounting
from repro.journal_schema import FIELD_NAMES
from repro.live.proxy.config import API_KEY_ENV, Endpoint, ProxyConfig
from repro.live.run_account import CpuAccount, request_time_delta, request_times
from repro.live.validity import (
    ADVICE,
    DEFAULT_THRESHOLDS,
    CpuSampler,
    OutsideCpu,
    Thresholds,
    Verdict,
    engine_lateness,
    engine_requests,
    harness_latency,
    judge,
    lateness_between,
    thresholds_for,
    time_scales_to_try,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from repro.cluster.topology import Instance
    from repro.experiment.spec import RunSpec
    from repro.live.loadgen import ReplayReport
    from repro.live.validity import Verdict


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it; another process may take it before we bind), none
    this process handed out lately (`repro.cluster.processes.free_ports`)."""
    return free_ports(1, host)[0]


@contextmanager
def proxy_process(cfg: ProxyConfig, run_dir: Path, timeout_s: float = 30.0) -> Iterator[str]:
    """Run ``python -m repro.live.proxy`` with ``cfg`` (log in ``run_dir/proxy.log``); yields its base URL
    once ``/health`` answers 200 (within ``timeout_s`` wall seconds, else RuntimeError); always stops it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    conf = run_dir / "proxy.json"
    # the bearer token never goes into a file in the run directory: it travels in the environment
    conf.write_text(dataclasses.replace(cfg, api_key=None).to_json())
    env = dict(os.environ)
    env.pop(API_KEY_ENV, None)
    if cfg.api_key:
        env[API_KEY_ENV] = cfg.api_key
    log = open(run_dir / "proxy.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro.live.proxy", "--config", str(conf), "--parent-pid", str(os.getpid())],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, preexec_fn=child_setup(live_nice()),
    )
    url = f"http://{cfg.host}:{cfg.port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"proxy exited with code {proc.returncode}; see {run_dir / 'proxy.log'}")
            try:
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"proxy did not become healthy within {timeout_s} s; see {run_dir / 'proxy.log'}")
            time.sleep(0.1)
        yield url
    finally:
        stop_process(proc)
        log.close()


def _running_engines(cluster: str) -> bool:
    """Whether ``cluster`` names engines that already run (`repro cluster up`'s state file, or a remote
    cluster file)."""
    from repro.cluster.topology import parse_topology

    return parse_topology(cluster, calibration_must_exist=False).launcher == "remote"


@contextmanager
def _reused(spec: RunSpec) -> Iterator[list[Instance]]:
    """Emulated engines that already run (`repro cluster up`): used as they are, never stopped; each must run
    the spec's time scale and profile (``GET /_emulator/info``), else a ConfigError says which to give."""
    from repro.cluster.launchers import launch

    with launch(spec.cluster) as instances:
        for inst in instances:
            try:
                info = httpx.get(inst.url + "/_emulator/info", timeout=10, trust_env=False).json()
            except (httpx.HTTPError, ValueError):
                raise ConfigError(f"cluster {spec.cluster}: {inst.name} ({inst.url}) is not an emulated engine; "
                                  "use --backend vllm for real engines") from None
            if float(info.get("time_scale", 1.0)) != float(spec.live.time_scale):
                raise ConfigError(f"time_scale: the running engines of {spec.cluster} run at "
                                  f"{info.get('time_scale')} (as `repro cluster up --time-scale` started them); "
                                  f"give --time-scale {info.get('time_scale')}, or restart the cluster")
            if spec.profile and info.get("profile") not in (None, spec.profile):
                raise ConfigError(f"profile: the running engines of {spec.cluster} run profile "
                                  f"{info.get('profile')!r}; give --profile {info.get('profile')}, or restart "
                                  "the cluster with --profile")
        yield instances


def launch_cluster(spec: RunSpec) -> AbstractContextManager[list[Instance]]:
    """The spec's cluster, as a context manager that yields its instances and always stops them:
    backend ``emulated``: the spec's topology (or cluster file) as local emulated engines;
    backend ``vllm``: the ``spec.cluster`` file's launcher (ConfigError without one)."""
    from repro.cluster.launchers import launch

    if spec.backend == "emulated" and spec.cluster and _running_engines(spec.cluster):
        return _reused(spec)
    if spec.backend == "emulated":
        target = spec.cluster or spec.topology
        return launch(target, launcher="emulated", time_scale=spec.live.time_scale, profile=spec.profile,
                      kv_budget_tokens=spec.kv_budget_tokens)
    if not spec.cluster:
        raise ConfigError("spec: field 'cluster' is required for backend 'vllm' "
                          "(a cluster YAML: vllm launcher or remote URLs)")
    return launch(spec.cluster)


def merge_journals(client: pd.DataFrame, proxy: pd.DataFrame, trace: pd.DataFrame) -> pd.DataFrame:
    """One row per request sent: the client's outcome and timings + the proxy's placement.

    Proxy times are shifted onto the client's clock by the median offset between when the client
    sent a request and when the proxy received it.
    """
    out = client.set_index("request_id")
    if len(proxy):
        p = proxy.drop_duplicates("request_id", keep="last").set_index("request_id")
        common = out.index.intersection(p.index)
        offset = 0.0
        if len(common):
            sent = out.loc[common, "prefill_start_s"].to_numpy(float)
            received = p.loc[common, "arrival_s"].to_numpy(float)
            offset = float(np.nanmedian(sent - received))
        for col in ("prefill_instance", "decode_instance", "predicted_output_tokens"):
            have = out[col].notna()
            out.loc[~have, col] = p[col].reindex(out.index)[~have]
        for col in ("prefill_end_s", "decode_start_s", "decode_started_s"):
            out[col] = p[col].reindex(out.index).astype(float) + offset
    fam = trace.set_index("request_id")["family"]
    out["family"] = fam.reindex(out.index).astype("string")
    return frame(out.reset_index()[list(FIELD_NAMES)].to_dict("records"))


REAL_ENGINE_HEALTH = {"health_window_s": 15.0}
"""Proxy health rule for real vLLM engines: a real engine's ``/metrics`` (a full Prometheus registry
rendered in Python) answered in over 1 s while it computed on a busy core (2-core machine, 1p2d on
CPU); the engine is declared dead only after 15 s without an answer (emulated engines: the default
5 s). A dead engine is still caught at once by a refused connection."""


class RunWatch:
    """What a live run's verdict needs from the machine and the engines, around its replay: made
    (CPU steal and the engines' step lateness start counting) just before the replay; `judge` after
    it, while the engines still run, writes ``validity.json`` (and ``engine_requests.json``: each
    emulated engine's physics times of every request; ``account.json``: the CPU each part of the run took and
    each engine's own account of its requests, `repro.live.run_account`) and returns the `Verdict`."""

    def __init__(self, instances: Sequence[Instance], rate: float | None = None):
        self.instances = list(instances)
        self.rate = rate
        self.urls = [i.url for i in self.instances]
        self.cpu = CpuSampler()
        self.cpu.start()
        self.outside = OutsideCpu([i.pid for i in self.instances if i.pid])
        self.outside.start()
        self.engines_before = engine_lateness(self.urls)
        self.times_before = request_times(self.urls)
        self.account = CpuAccount({i.name: i.pid for i in self.instances if i.pid}).start()
        self.t0 = time.monotonic()

    def judge(self, time_scale: float, report: ReplayReport, client: pd.DataFrame, run_dir: Path,
              proxy_validity: dict[str, Any] | None, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Verdict:
        """The verdict of the replay that just ended (``proxy_validity``: the proxy's ``/health``
        ``validity``, None without our proxy; ``thresholds``: `repro.live.validity.thresholds_for`);
        written to ``run_dir/validity.json``."""
        wall = time.monotonic() - self.t0
        self.account.stop()
        account = {"offered_rate": self.rate, "requests": report.sent, "cpu": self.account.shares(),
                   "series": self.account.series(), "replay_started_unix": report.started_unix,
                   "engines": request_time_delta(self.times_before, request_times(self.urls),
                                                 {i.url: i.name for i in self.instances})}
        (run_dir / "account.json").write_text(json.dumps(account, indent=2))
        late_p99, lost = lateness_between(self.engines_before, engine_lateness(self.urls), wall)
        records = engine_requests(self.urls)  # {} on real engines
        if records:
            names = {i.url: i.name for i in self.instances}
            (run_dir / "engine_requests.json").write_text(json.dumps({names[u]: r for u, r in records.items()}))
        latency = harness_latency(client, records)  # None on real engines
        verdict = judge(time_scale=time_scale, client_lag_p99_s=report.lag_p99_s, proxy=proxy_validity,
                        engine_late_p99_s=late_p99, engine_lost_fraction=lost,
                        cpu_steal_fraction=self.cpu.steal_fraction(),
                        harness_latency_p50_s=None if latency is None else latency["p50_s"],
                        harness_latency_unjoinable=bool(records) and latency is None,
                        outside=self.outside.measure(), thresholds=thresholds)
        (run_dir / "validity.json").write_text(json.dumps(
            {**verdict.to_dict(), "proxy": proxy_validity, "harness_latency": latency, "wall_s": wall},
            indent=2, default=str))
        return verdict


def run_live(spec: RunSpec, run_dir: Path) -> pd.DataFrame:
    """Run one spec on live engines; writes journal.jsonl (+ client, proxy, gates files)."""
    from repro.experiment.inputs import build_trace, router_cost_model
    from repro.live.gates import run_gates
    from repro.live.loadgen import replay_process

    run_dir = Path(run_dir)
    trace = build_trace(spec)
    client_path = run_dir / "client.jsonl"
    proxy_path = run_dir / "proxy.jsonl"
    # an earlier attempt is redone from scratch
    for p in (client_path, proxy_path, run_dir / "validity.json", run_dir / "loadgen.json", run_dir / "account.json"):
        if p.exists():
            p.unlink()
    # What the router believes, resolved as the simulator resolves it (`router_cost_model`: the
    # cluster's own calibration for "calibrated"), written beside the journal and handed to the proxy
    # by path: a bare name would make the proxy load the shipped A40 constants.
    cost_model_path = run_dir / "router_cost_model.json"
    router_cost_model(spec).save(cost_model_path)
    with launch_cluster(spec) as instances:
        endpoints = [Endpoint(i.name, i.role, i.url) for i in instances]
        cfg = ProxyConfig(
            endpoints=endpoints, policy=spec.policy, policy_options=dict(spec.policy_options),
            cost_model=str(cost_model_path), predictor=spec.predictor, predictor_noise=spec.predictor_noise,
            predictor_seed=spec.predictor_seed, journal=str(proxy_path), time_scale=spec.live.time_scale,
            poll_interval_s=spec.poll_interval_s(), port=free_port(), kv_capacity_tokens=spec.kv_budget_tokens,
            **REAL_ENGINE_HEALTH if spec.backend == "vllm" else {},
        )
        gates = run_gates(instances)
        (run_dir / "gates.json").write_text(json.dumps(jsonable(gates), indent=2, default=str))
        with proxy_process(cfg, run_dir) as url:
            check_proxy_constants(url, cost_model_path, run_dir)
            watch = RunWatch(instances, rate=spec.rate)
            report = replay_process(trace, url, journal_path=client_path, work_dir=run_dir,
                                    time_scale=spec.live.time_scale, progress=sys.stderr.isatty())
            health = httpx.get(url + "/health", timeout=10.0).json()
            check_policy(spec, health)
            # the policy's decision times travel with the proxy's measurements (validity.json -> the manifest)
            proxy_validity = {**(health.get("validity") or {}), "decision_time": health.get("decision_time")}
        client = read_journal(client_path)
        watch.judge(spec.live.time_scale, report, client, run_dir, proxy_validity,
                    thresholds_for(spec.backend, spec.poll_interval_s()))
    proxy = read_journal(proxy_path) if proxy_path.exists() else frame([])
    check_live_accounting(report, client, proxy)
    merged = merge_journals(client, proxy, trace.df)
    check_accounting(merged, report.sent)
    write_frame(merged, run_dir / "journal.jsonl")
    return merged


def check_policy(spec: RunSpec, health: dict[str, Any]) -> None:
    """Stop a live run (`PolicyError`, nothing marked finished) whose policy broke its contract on a
    request of the replay (the proxy answered it 500 and counted it: ``health["policy_errors"]``), or
    whose p99 decision time (``health["decision_time"]``) exceeds the spec's ``decision_budget_us``.
    ``health``: the proxy's ``GET /health`` body after the replay."""
    errors = health.get("policy_errors") or {}
    if errors.get("count"):
        raise PolicyError(f"run {spec.run_id}: the policy broke its contract on {errors['count']} request(s) of "
                          f"the replay (answered 500, journaled failed in proxy.jsonl and client.jsonl); the "
                          f"first: {errors.get('first')}")
    try:
        check_decision_budget(spec.policy, health.get("decision_time"), spec.decision_budget_us)
    except PolicyError as exc:
        raise PolicyError(f"run {spec.run_id}: {exc}") from None


def check_proxy_constants(url: str, cost_model_path: Path, run_dir: Path) -> dict[str, Any]:
    """Read back from the running proxy's ``/health`` the constants it prices with; write them to
    ``run_dir/proxy_constants.json``; a `ConfigError` if they differ from the run's router cost model
    (``cost_model_path``): a live run must route with the constants the simulator would use."""
    from repro.routing.cost_model import CostModel

    body = httpx.get(url + "/health", timeout=10.0).json()
    loaded = body.get("cost_model") or {}
    (run_dir / "proxy_constants.json").write_text(json.dumps(
        {"cost_model": loaded, "poll_interval_s": body.get("poll_interval_s")}, indent=2, sort_keys=True))
    expected = CostModel.load(cost_model_path).to_dict()
    if loaded != expected:
        diff = sorted(k for k in set(expected) | set(loaded) if expected.get(k) != loaded.get(k))
        raise ConfigError(f"proxy: it loaded other router constants than the run's ({', '.join(diff)}); "
                          f"expected those of {cost_model_path}")
    return loaded


def check_live_accounting(report: ReplayReport, client: pd.DataFrame,
                          proxy: pd.DataFrame | None = None) -> dict[str, int]:
    """A live run's books must balance, or the run is an error (`AccountingError`), not a warning:

    - every request the load generator sent has exactly one client journal row
      (``ReplayReport.sent == rows``, ids unique), and sent = ok + failed + rejected there;
    - the report's own counts agree with the journal's;
    - the proxy journaled no request the client did not send, and none twice.
    """
    counts = check_accounting(client, int(report.sent))
    mine = {"ok": int(report.ok), "failed": int(report.failed), "rejected": int(report.rejected)}
    if counts != mine:
        raise AccountingError(f"accounting: the load generator counted {mine} but its journal holds {counts}")
    if proxy is not None and len(proxy):
        dup = proxy["request_id"][proxy["request_id"].duplicated()]
        if len(dup):
            raise AccountingError(f"accounting: the proxy journaled {len(dup)} request(s) twice, e.g. {dup.iloc[0]!r}")
        extra = set(proxy["request_id"].astype(str)) - set(client["request_id"].astype(str))
        if extra:
            raise AccountingError(f"accounting: the proxy journaled {len(extra)} request(s) the client never sent, "
                                  f"e.g. {sorted(extra)[0]!r}")
    return counts


def jsonable(obj: Any) -> Any:
    """``obj`` as something `json.dumps` takes: a dataclass instance as a dict, an object with
    ``to_dict()`` as its dict; anything else as is."""
    from dataclasses import asdict, is_dataclass

    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return obj


def run_live_valid(spec: RunSpec, run_dir: Path, on_invalid: OnInvalid = "retry",
                   attempt: Callable[[RunSpec, Path], pd.DataFrame] | None = None,
                   ) -> tuple[pd.DataFrame, LiveOutcome]:
    """Run a live spec until an attempt is valid (time scales of `time_scales_to_try`; one attempt
    with ``keep``); the journal and the manifest's validity fields. ``attempt(spec, run_dir)`` runs
    one attempt and writes its ``validity.json`` (default `repro.live.run.run_live`: our proxy;
    `repro.live.external_router.run_external` passes its own). Every attempt's verdict is kept in
    ``attempts.jsonl``; an invalid last attempt raises `RunInvalid` (``retry``)."""
    attempt = attempt or run_live

    (run_dir / "attempts.jsonl").unlink(missing_ok=True)
    scales = time_scales_to_try(spec.live.time_scale) if on_invalid == "retry" else [spec.live.time_scale]
    attempts: list[Attempt] = []
    for k, ts in enumerate(scales):
        journal = attempt(spec if ts == spec.live.time_scale else spec.replace(time_scale=ts), run_dir)
        measured = json.loads((run_dir / "validity.json").read_text())
        verdict = Verdict.from_dict(measured)
        decision_time = (measured.get("proxy") or {}).get("decision_time")  # our proxy's (an external router: none)
        attempts.append({"attempt": k + 1, "time_scale": ts, "valid": verdict.valid, "reasons": verdict.reasons})
        with open(run_dir / "attempts.jsonl", "a") as f:
            f.write(json.dumps({**attempts[-1], "measured": verdict.measured}) + "\n")
        if verdict.valid or on_invalid == "keep":
            break
    else:
        tried = ", ".join(f"K={a['time_scale']:g}: {'; '.join(a['reasons'])}" for a in attempts)
        raise RunInvalid(f"run {spec.run_id}: no valid attempt in {len(attempts)} ({tried}). {ADVICE}. "
                         f"Each attempt's measurements: {run_dir / 'attempts.jsonl'}")
    live: LiveOutcome = {"valid": verdict.valid, "validity": verdict.to_dict(), "attempts": attempts,
                        "time_scale_used": attempts[-1]["time_scale"]}
    if decision_time is not None:
        live["decision_time"] = decision_time
    return journal, live
