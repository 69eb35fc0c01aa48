"""Cluster topologies and the three launchers behind one interface.

A topology is a list of engine instances with a role (``prefill`` or ``decode``), written either
as a shorthand (``2p4d``: 2 prefill + 4 decode) or as YAML (see ``data/clusters/*.yaml``)::

    name: 2p4d
    profile: a40-qwen2.5-3b          # default for every instance
    kv_budget_tokens: 60000          # optional default
    instances:
      - {role: prefill, count: 2}
      - {role: decode, count: 4, profile: a40-qwen2.5-3b, kv_budget_tokens: 60000}
    # vllm launcher only:
    vllm: {model: Qwen/Qwen2.5-3B-Instruct, dtype: bfloat16, gpus: [0, 1, 2, 3, 4, 5]}
    # remote launcher: each instance has a url (or a list of urls, one per count)
    #   - {role: decode, url: "http://node2:8200"}

Launchers (each is a context manager that yields ``list[Instance]`` and always tears down what
it started)::

    with launch("2p4d", "emulated", time_scale=4) as instances: ...
    with launch("data/clusters/2p4d-a40.yaml", "vllm") as instances: ...
    with launch("data/clusters/remote-example.yaml", "remote") as instances: ...

- ``emulated``: one ``python -m repro.emulator`` process per instance on free 127.0.0.1 ports,
  started in parallel, each in its own process group and told to die with its parent; waits for
  ``/health``; tears everything down on normal exit, exception, Ctrl-C or SIGTERM.
- ``vllm``: the exact ``vllm serve`` command per instance (NixlConnector, a unique
  ``VLLM_NIXL_SIDE_CHANNEL_PORT`` per instance, ``--num-gpu-blocks-override`` for the fixed KV
  budget, ``VLLM_SERVER_DEV_MODE=1`` for prefix-cache resets); ``dry_run`` prints them.
- ``remote``: engines that already run elsewhere, given by URL; health-checked, never stopped.

``cluster_app`` is the typer sub-app behind ``repro cluster up|down|status``; ``up`` records the
instances in a state file (default ``runs/cluster.json``) so that ``down`` and ``status`` work from
another shell.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import httpx

from repro.errors import ConfigError
from repro.physics import DEFAULT_PROFILE, Physics

ROLES = ("prefill", "decode")
LAUNCHERS = ("emulated", "vllm", "remote")
DEFAULT_STATE_FILE = Path("runs/cluster.json")
REPO_ROOT = Path(__file__).resolve().parent.parent
CLUSTERS_DIR = REPO_ROOT / "data" / "clusters"
KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
_SHORTHAND = re.compile(r"^\s*(\d+)\s*p\s*(\d+)\s*d\s*$", re.IGNORECASE)


# ---- topology --------------------------------------------------------------------------------
@dataclass(frozen=True)
class InstanceSpec:
    """One engine of a topology, before it runs."""

    name: str
    role: str
    profile: str = DEFAULT_PROFILE
    kv_budget_tokens: Optional[int] = None
    url: Optional[str] = None
    gpu: Optional[str] = None
    engine_id: Optional[str] = None
    faults: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topology:
    name: str
    instances: tuple[InstanceSpec, ...]
    launcher: Optional[str] = None
    options: dict = field(default_factory=dict, compare=False)

    @property
    def prefill(self) -> list[InstanceSpec]:
        return [i for i in self.instances if i.role == "prefill"]

    @property
    def decode(self) -> list[InstanceSpec]:
        return [i for i in self.instances if i.role == "decode"]

    @property
    def shorthand(self) -> str:
        return f"{len(self.prefill)}p{len(self.decode)}d"


@dataclass
class Instance:
    """A running (or reachable) engine, as the proxy and the gates see it."""

    name: str
    role: str
    url: str
    engine_id: Optional[str] = None
    pid: Optional[int] = None
    profile: Optional[str] = None
    log: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _err(field_name: str, msg: str) -> ConfigError:
    return ConfigError(f"topology: field '{field_name}' {msg}")


def _check_role(role: Any, where: str) -> str:
    if role not in ROLES:
        raise _err(where, f"is {role!r}; allowed: {list(ROLES)}")
    return role


def _check_profile(profile: Any, where: str) -> str:
    if not isinstance(profile, str) or not profile:
        raise _err(where, f"must be a profile name or path, got {profile!r}")
    Physics.load(profile)  # raises ConfigError naming the allowed profiles
    return profile


def _check_budget(v: Any, where: str) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise _err(where, f"must be a positive integer (tokens), got {v!r}")
    return v


def parse_topology(spec: "str | Path | dict | Topology", *, profile: Optional[str] = None,
                   kv_budget_tokens: Optional[int] = None) -> Topology:
    """A `Topology` from ``2p4d``, a YAML path (or a name in data/clusters/) or a dict.

    ``profile``/``kv_budget_tokens`` override the file's defaults (not per-instance values).
    Raises ConfigError naming the bad field and the allowed values.
    """
    if isinstance(spec, Topology):
        return spec
    if isinstance(spec, dict):
        return _from_dict(spec, "topology", profile, kv_budget_tokens)
    text = str(spec)
    m = _SHORTHAND.match(text)
    if m:
        n_p, n_d = int(m.group(1)), int(m.group(2))
        if n_p < 1 or n_d < 1:
            raise _err("topology", f"{text!r} needs at least one prefill and one decode instance")
        return _from_dict({"name": f"{n_p}p{n_d}d", "instances": [
            {"role": "prefill", "count": n_p}, {"role": "decode", "count": n_d}]},
            text, profile, kv_budget_tokens)
    path = Path(text)
    if not path.exists():
        for cand in (CLUSTERS_DIR / text, CLUSTERS_DIR / f"{text}.yaml", CLUSTERS_DIR / f"{text}.yml"):
            if cand.exists():
                path = cand
                break
        else:
            known = sorted(p.stem for p in CLUSTERS_DIR.glob("*.y*ml")) if CLUSTERS_DIR.exists() else []
            raise _err("topology", f"{text!r} is neither a shorthand like '2p4d' nor a YAML file; "
                                   f"allowed: NpMd, a path, or one of {known}")
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"topology {path}: not valid YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"topology {path}: expected a mapping with an 'instances' list")
    raw.setdefault("name", path.stem)
    return _from_dict(raw, str(path), profile, kv_budget_tokens)


_TOP_KEYS = {"name", "launcher", "profile", "kv_budget_tokens", "instances", "vllm", "emulated", "description",
             "calibration"}
_INST_KEYS = {"role", "count", "profile", "kv_budget_tokens", "url", "urls", "gpus", "gpu", "engine_id", "fault", "faults", "name"}


def _from_dict(raw: dict, origin: str, profile: Optional[str], kv_budget: Optional[int]) -> Topology:
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise _err(sorted(unknown)[0], f"is unknown in {origin}; allowed: {sorted(_TOP_KEYS)}")
    launcher = raw.get("launcher")
    if launcher is not None and launcher not in LAUNCHERS:
        raise _err("launcher", f"is {launcher!r}; allowed: {list(LAUNCHERS)}")
    default_profile = _check_profile(profile or raw.get("profile") or DEFAULT_PROFILE, "profile")
    default_budget = _check_budget(kv_budget if kv_budget is not None else raw.get("kv_budget_tokens"), "kv_budget_tokens")
    groups = raw.get("instances")
    if not isinstance(groups, list) or not groups:
        raise _err("instances", f"must be a non-empty list of {{role, count, ...}} in {origin}")
    specs: list[InstanceSpec] = []
    counters = {"prefill": 0, "decode": 0}
    for gi, g in enumerate(groups):
        where = f"instances[{gi}]"
        if not isinstance(g, dict):
            raise _err(where, f"must be a mapping, got {g!r}")
        bad = set(g) - _INST_KEYS
        if bad:
            raise _err(f"{where}.{sorted(bad)[0]}", f"is unknown; allowed: {sorted(_INST_KEYS)}")
        role = _check_role(g.get("role"), f"{where}.role")
        urls = g.get("urls")
        if urls is None and g.get("url") is not None:
            urls = [g["url"]]
        count = g.get("count", len(urls) if urls else 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise _err(f"{where}.count", f"must be a positive integer, got {count!r}")
        if urls is not None:
            if not isinstance(urls, list) or len(urls) != count or not all(isinstance(u, str) and u for u in urls):
                raise _err(f"{where}.urls", f"must list one URL per instance ({count}), got {urls!r}")
        gpus = g.get("gpus", [g["gpu"]] if g.get("gpu") is not None else None)
        if gpus is not None and (not isinstance(gpus, list) or len(gpus) != count):
            raise _err(f"{where}.gpus", f"must list one GPU (CUDA_VISIBLE_DEVICES value) per instance ({count}), got {gpus!r}")
        prof = _check_profile(g["profile"], f"{where}.profile") if g.get("profile") else default_profile
        budget = _check_budget(g.get("kv_budget_tokens"), f"{where}.kv_budget_tokens")
        if budget is None:
            budget = default_budget
        faults = g.get("faults", g.get("fault", ()))
        if isinstance(faults, str):
            faults = (faults,)
        for k in range(count):
            counters[role] += 1
            name = g.get("name") if (count == 1 and g.get("name")) else f"{role}-{counters[role] - 1}"
            specs.append(InstanceSpec(
                name=name, role=role, profile=prof, kv_budget_tokens=budget,
                url=urls[k].rstrip("/") if urls else None,
                gpu=str(gpus[k]) if gpus is not None else None,
                engine_id=g.get("engine_id") if count == 1 else None,
                faults=tuple(faults),
            ))
    if not any(s.role == "prefill" for s in specs) or not any(s.role == "decode" for s in specs):
        raise _err("instances", f"needs at least one 'prefill' and one 'decode' instance in {origin}")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise _err("instances", f"instance names must be unique, got {names}")
    options = {k: raw[k] for k in ("vllm", "emulated") if k in raw}
    if raw.get("calibration") is not None:
        options["calibration"] = _check_calibration(raw["calibration"], origin)
    return Topology(name=str(raw.get("name") or "cluster"), instances=tuple(specs), launcher=launcher, options=options)


def _check_calibration(value: Any, origin: str) -> str:
    """The cluster's cost model: a shipped name (``calibrated``, ``sim_derived``) or a JSON file
    written by ``repro calibrate`` (relative to the cluster file); a missing file says how to make it."""
    from repro.calibration import CALIBRATION_DIR

    if not isinstance(value, str) or not value.strip():
        raise _err("calibration", f"must be a shipped cost model name or a path to a calibration JSON in {origin}, got {value!r}")
    if (CALIBRATION_DIR / f"{value}.json").exists():
        return value
    path = Path(value)
    if not path.is_absolute() and Path(origin).exists():
        path = Path(origin).resolve().parent / path
    if not path.exists():
        raise _err("calibration", f"file {path} does not exist: calibrate these engines first "
                                  f"(repro calibrate --cluster {origin} --out {value}, or notebook 01 with this "
                                  "cluster), or write 'calibration: calibrated' to use the paper's A40 constants")
    return str(path)


# ---- process helpers -------------------------------------------------------------------------
def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports (held open together while choosing, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def terminate_pids(pids: Sequence[int], timeout: float = 5.0, procs: Optional[dict[int, subprocess.Popen]] = None) -> None:
    """SIGTERM each process group, wait, SIGKILL what is left; reap children we own."""
    procs = procs or {}
    live = [p for p in pids if p and _pid_alive(p)]
    for pid in live:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        for pid in list(live):
            proc = procs.get(pid)
            if proc is not None:
                if proc.poll() is not None:
                    live.remove(pid)
            elif not _pid_alive(pid):
                live.remove(pid)
        if live:
            time.sleep(0.05)
    for pid in live:
        _signal_group(pid, signal.SIGKILL)
    for pid in pids:
        proc = procs.get(pid)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        pgid = os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        pgid = None
    try:
        if pgid is None or pgid != pid or pgid == os.getpgrp():
            raise ProcessLookupError  # not a group of its own: signal the process only
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_healthy(instances: Sequence[Instance], timeout: float, procs: Optional[dict[str, subprocess.Popen]] = None,
                 interval: float = 0.1) -> None:
    """Poll ``GET /health`` of every instance until all answer 200; raise RuntimeError otherwise."""
    procs = procs or {}
    pending = {i.name: i for i in instances}
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while pending:
            for name, inst in list(pending.items()):
                proc = procs.get(name)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {proc.returncode} before becoming healthy"
                                       f"{_log_tail(inst.log)}")
                try:
                    if client.get(inst.url + "/health").status_code == 200:
                        del pending[name]
                except httpx.HTTPError:
                    pass
            if not pending:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"not healthy after {timeout:.0f} s: {sorted(pending)} "
                                   f"({', '.join(pending[n].url for n in sorted(pending))}): check that the engines "
                                   "run and that this machine reaches them (curl URL/health), or fix the URLs")
            time.sleep(interval)


def _log_tail(path: Optional[str], n: int = 2000) -> str:
    if not path:
        return ""
    try:
        data = Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""
    return f"; log {path}:\n{data}"


# live launchers, stopped at interpreter exit if their owner did not
_LIVE: "set[_ProcessLauncher]" = set()


@atexit.register
def _stop_all_live() -> None:
    for launcher in list(_LIVE):
        try:
            launcher.stop()
        except Exception:
            pass


class Launcher:
    """Common interface: ``start() -> list[Instance]``, ``stop()``; a context manager."""

    name = "base"

    def __init__(self, topology: Topology):
        self.topology = topology
        self.instances: list[Instance] = []

    def start(self) -> list[Instance]:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def __enter__(self) -> list[Instance]:
        self._old_term = None
        if threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                    self._old_term = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
            except (ValueError, TypeError):
                self._old_term = None
        try:
            return self.start()
        except BaseException:
            self.stop()
            self._restore()
            raise

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self._restore()

    def _restore(self) -> None:
        if getattr(self, "_old_term", None) is not None:
            try:
                signal.signal(signal.SIGTERM, self._old_term)
            except (ValueError, TypeError):
                pass
            self._old_term = None


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


class _ProcessLauncher(Launcher):
    def __init__(self, topology: Topology, *, log_dir: Optional[Path] = None, detach: bool = False,
                 startup_timeout: float = 60.0):
        super().__init__(topology)
        self.detach = detach
        self.startup_timeout = startup_timeout
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"repro-{self.name}-"))
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: list[Any] = []

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "ab")
        self._logs.append(log)
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        self.procs[name] = proc
        _LIVE.add(self)
        return proc, str(log_path)

    def stop(self) -> None:
        if self.detach and self.instances and all(p.poll() is None for p in self.procs.values()):
            # a detached cluster outlives us (repro cluster up); `down` stops it
            _LIVE.discard(self)
            return
        procs = {p.pid: p for p in self.procs.values()}
        terminate_pids(list(procs), procs=procs)
        self.procs.clear()
        for f in self._logs:
            try:
                f.close()
            except Exception:
                pass
        self._logs.clear()
        _LIVE.discard(self)


class EmulatedLauncher(_ProcessLauncher):
    """Local emulated engines (``python -m repro.emulator``) on free ports."""

    name = "emulated"

    def __init__(self, topology: Topology, *, time_scale: float = 1.0, host: str = "127.0.0.1",
                 stream_interval_tokens: int = 16, stream_interval_ms: float = 50.0,
                 dev_mode: bool = True, extra_args: Sequence[str] = (), log_dir: Optional[Path] = None,
                 detach: bool = False, startup_timeout: float = 60.0, eos_mean_tokens: Optional[int] = None):
        super().__init__(topology, log_dir=log_dir, detach=detach, startup_timeout=startup_timeout)
        if not time_scale > 0:
            raise ConfigError(f"time_scale must be > 0, got {time_scale}")
        opts = topology.options.get("emulated", {}) or {}
        self.time_scale = float(opts.get("time_scale", time_scale)) if time_scale == 1.0 else float(time_scale)
        self.host = host
        self.stream_interval_tokens = int(opts.get("stream_interval_tokens", stream_interval_tokens))
        self.stream_interval_ms = float(opts.get("stream_interval_ms", stream_interval_ms))
        self.dev_mode = dev_mode
        self.extra_args = list(extra_args)
        self.eos_mean_tokens = eos_mean_tokens

    def commands(self, ports: Sequence[int]) -> list[tuple[InstanceSpec, list[str], str]]:
        out = []
        for spec, port in zip(self.topology.instances, ports):
            engine_id = spec.engine_id or f"{spec.name}-{uuid.uuid4().hex[:8]}"
            argv = [sys.executable, "-m", "repro.emulator", "--host", self.host, "--port", str(port),
                    "--profile", spec.profile, "--time-scale", repr(self.time_scale), "--engine-id", engine_id,
                    "--stream-interval-tokens", str(self.stream_interval_tokens),
                    "--stream-interval-ms", repr(self.stream_interval_ms)]
            if spec.kv_budget_tokens is not None:
                argv += ["--kv-budget-tokens", str(spec.kv_budget_tokens)]
            if self.eos_mean_tokens is not None:
                argv += ["--eos-mean-tokens", str(self.eos_mean_tokens)]
            for f in spec.faults:
                argv += ["--fault", f]
            if not self.detach:
                argv += ["--parent-pid", str(os.getpid())]
            argv += self.extra_args
            out.append((spec, argv, engine_id))
        return out

    def start(self) -> list[Instance]:
        ports = free_ports(len(self.topology.instances), self.host)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONUNBUFFERED"] = "1"
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        env.pop("VLLM_NIXL_SIDE_CHANNEL_PORT", None)  # each engine's side channel is its HTTP port
        self.instances = []
        for (spec, argv, engine_id), port in zip(self.commands(ports), ports):
            proc, log = self._spawn(spec.name, argv, env)
            self.instances.append(Instance(name=spec.name, role=spec.role, url=f"http://{self.host}:{port}",
                                           engine_id=engine_id, pid=proc.pid, profile=spec.profile, log=log))
        wait_healthy(self.instances, self.startup_timeout, self.procs)
        return list(self.instances)


class VllmLauncher(_ProcessLauncher):
    """Real ``vllm serve`` engines on the GPUs of this node.

    They bind 127.0.0.1 unless told otherwise: a multi-node cluster sets ``vllm: {host: <address>,
    side_channel_host: <address>}`` in its YAML so that the other nodes can reach the engines.
    """

    name = "vllm"

    def __init__(self, topology: Topology, *, model: Optional[str] = None, dtype: Optional[str] = None,
                 host: str = "127.0.0.1", url_host: str = "127.0.0.1", base_port: int = 8100,
                 side_channel_base_port: int = 5600, side_channel_host: Optional[str] = None,
                 gpus: Optional[Sequence[str]] = None, extra_args: Sequence[str] = (), dry_run: bool = False,
                 vllm_bin: str = "vllm", log_dir: Optional[Path] = None, detach: bool = False,
                 startup_timeout: float = 1800.0, seed: int = 0):
        super().__init__(topology, log_dir=log_dir, detach=detach, startup_timeout=startup_timeout)
        opts = topology.options.get("vllm", {}) or {}
        first = Physics.load(topology.instances[0].profile)
        self.model = model or opts.get("model") or first.model
        self.dtype = dtype or opts.get("dtype") or "bfloat16"
        self.host = opts.get("host", host)
        self.url_host = opts.get("url_host", url_host)
        self.base_port = int(opts.get("base_port", base_port))
        self.side_channel_base_port = int(opts.get("side_channel_base_port", side_channel_base_port))
        self.side_channel_host = side_channel_host or opts.get("side_channel_host") or "127.0.0.1"
        gl = gpus if gpus is not None else opts.get("gpus")
        self.gpus = [str(g) for g in gl] if gl is not None else None
        self.extra_args = list(opts.get("extra_args", [])) + list(extra_args)
        self.dry_run = dry_run
        self.vllm_bin = vllm_bin
        self.seed = seed
        n = len(topology.instances)
        if self.gpus is not None and len(self.gpus) < n:
            raise _err("vllm.gpus", f"lists {len(self.gpus)} GPUs for {n} instances")

    def commands(self) -> list[tuple[InstanceSpec, dict[str, str], list[str], int]]:
        """Per instance: (spec, env additions, argv, http port)."""
        out = []
        for i, spec in enumerate(self.topology.instances):
            phys = Physics.load(spec.profile)
            if spec.kv_budget_tokens is not None:
                phys = phys.with_overrides(kv_budget_tokens=spec.kv_budget_tokens)
            gpu = spec.gpu if spec.gpu is not None else (self.gpus[i] if self.gpus is not None else str(i))
            port = self.base_port + i
            env = {
                "CUDA_VISIBLE_DEVICES": gpu,
                "VLLM_NIXL_SIDE_CHANNEL_PORT": str(self.side_channel_base_port + i),
                "VLLM_NIXL_SIDE_CHANNEL_HOST": self.side_channel_host,
                "UCX_NET_DEVICES": "all",
                "VLLM_SERVER_DEV_MODE": "1",
            }
            argv = [
                self.vllm_bin, "serve", self.model,
                "--host", self.host, "--port", str(port),
                "--kv-transfer-config", KV_TRANSFER_CONFIG,
                "--num-gpu-blocks-override", str(phys.num_gpu_blocks_override),
                "--block-size", str(phys.block_size),
                "--max-num-batched-tokens", str(phys.max_num_batched_tokens),
                "--max-num-seqs", str(phys.max_num_seqs),
                "--max-model-len", str(phys.max_model_len),
                "--dtype", self.dtype,
                "--seed", str(self.seed),
            ] + self.extra_args
            out.append((spec, env, argv, port))
        return out

    def command_lines(self) -> list[str]:
        lines = []
        for spec, env, argv, _ in self.commands():
            envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            lines.append(f"{envs} {shlex.join(argv)}")
        return lines

    def start(self) -> list[Instance]:
        cmds = self.commands()
        self.instances = [Instance(name=spec.name, role=spec.role, url=f"http://{self.url_host}:{port}",
                                   engine_id=None, profile=spec.profile) for spec, _, _, port in cmds]
        if self.dry_run:
            for line in self.command_lines():
                print(line)
            return list(self.instances)
        base_env = dict(os.environ)
        for inst, (spec, env, argv, port) in zip(self.instances, cmds):
            proc, log = self._spawn(spec.name, argv, {**base_env, **env})
            inst.pid = proc.pid
            inst.log = log
        wait_healthy(self.instances, self.startup_timeout, self.procs, interval=1.0)
        return list(self.instances)


class RemoteLauncher(Launcher):
    """Engines that already run elsewhere, given by URL; health-checked, never started or stopped."""

    name = "remote"

    def __init__(self, topology: Topology, *, timeout: float = 10.0):
        super().__init__(topology)
        missing = [s.name for s in topology.instances if not s.url]
        if missing:
            raise _err("instances[].url", f"is required by the remote launcher; missing for {missing}")
        self.timeout = timeout

    def start(self) -> list[Instance]:
        self.instances = [Instance(name=s.name, role=s.role, url=s.url, engine_id=s.engine_id, profile=s.profile)
                          for s in self.topology.instances]
        wait_healthy(self.instances, self.timeout, interval=0.5)
        return list(self.instances)


def make_launcher(topology: "str | Path | dict | Topology", launcher: Optional[str] = None, **options) -> Launcher:
    topo = parse_topology(topology, profile=options.pop("profile", None),
                          kv_budget_tokens=options.pop("kv_budget_tokens", None))
    kind = launcher or topo.launcher or "emulated"
    if kind == "emulated":
        return EmulatedLauncher(topo, **options)
    if kind == "vllm":
        return VllmLauncher(topo, **options)
    if kind == "remote":
        return RemoteLauncher(topo, **options)
    raise ConfigError(f"launcher: {kind!r} is unknown; allowed: {list(LAUNCHERS)}")


@contextmanager
def launch(topology: "str | Path | dict | Topology", launcher: Optional[str] = None, **options) -> Iterator[list[Instance]]:
    """Bring a cluster up for the duration of a ``with`` block; always tears down what it started."""
    with make_launcher(topology, launcher, **options) as instances:
        yield instances


# ---- state file (repro cluster up / down / status) -------------------------------------------
def save_state(path: Path, launcher: str, topology: Topology, instances: Sequence[Instance]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"launcher": launcher, "topology": topology.name, "shorthand": topology.shorthand,
            "created": time.time(), "instances": [i.to_dict() for i in instances]}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def load_state(path: Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"state file {path} does not exist: no cluster is up (run `repro cluster up` first)")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"state file {path}: not valid JSON ({exc})") from None
    data["instances"] = [Instance(**i) for i in data.get("instances", [])]
    return data


def _owned(pid: Optional[int]) -> bool:
    """Is pid alive and one of our engines (not a recycled pid)?"""
    if not pid or not _pid_alive(pid):
        return False
    cmd = _cmdline(pid)
    return "repro.emulator" in cmd or "vllm" in cmd


def cluster_down(path: Path = DEFAULT_STATE_FILE) -> list[str]:
    """Stop the processes recorded in the state file and remove it; returns the names stopped."""
    data = load_state(path)
    insts = data["instances"]
    pids = [i.pid for i in insts if _owned(i.pid)]
    terminate_pids(pids)
    Path(path).unlink(missing_ok=True)
    return [i.name for i in insts if i.pid in pids]


def cluster_status(path: Path = DEFAULT_STATE_FILE, timeout: float = 2.0) -> list[dict[str, Any]]:
    data = load_state(path)
    rows = []
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        for inst in data["instances"]:
            try:
                healthy = client.get(inst.url + "/health").status_code == 200
            except httpx.HTTPError:
                healthy = False
            rows.append({**inst.to_dict(), "healthy": healthy,
                         "alive": (_pid_alive(inst.pid) if inst.pid else None), "launcher": data.get("launcher")})
    return rows


# ---- typer sub-app ---------------------------------------------------------------------------
def _make_cluster_app():
    import typer

    app = typer.Typer(help="Bring a P/D cluster of engines up, down, or ask its status.", no_args_is_help=True)

    def _fail(exc: Exception) -> None:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)

    @app.command("up")
    def up(
        topology: str = typer.Argument("2p4d", help="shorthand like 2p4d, a YAML path, or a name in data/clusters/"),
        launcher: Optional[str] = typer.Option(None, help="emulated | vllm | remote (default: the YAML's, else emulated)"),
        profile: Optional[str] = typer.Option(None, help="hardware profile for every instance"),
        kv_budget_tokens: Optional[int] = typer.Option(None, help="KV budget per instance (tokens)"),
        time_scale: float = typer.Option(1.0, help="emulated: physics runs K times faster"),
        state_file: Path = typer.Option(DEFAULT_STATE_FILE, help="where the instances are recorded"),
        dry_run: bool = typer.Option(False, help="vllm: print the commands, start nothing"),
        model: Optional[str] = typer.Option(None, help="vllm: model (default: the profile's)"),
        dtype: Optional[str] = typer.Option(None, help="vllm: --dtype (default bfloat16)"),
        gpus: Optional[str] = typer.Option(None, help="vllm: comma-separated CUDA_VISIBLE_DEVICES per instance"),
        side_channel_host: Optional[str] = typer.Option(None, help="vllm: VLLM_NIXL_SIDE_CHANNEL_HOST"),
        base_port: int = typer.Option(8100, help="vllm: first HTTP port"),
        log_dir: Optional[Path] = typer.Option(None, help="where engine logs go (default runs/cluster-logs)"),
        timeout: Optional[float] = typer.Option(None, help="seconds to wait for /health"),
    ):
        """Start the engines and record them in the state file."""
        try:
            topo = parse_topology(topology, profile=profile, kv_budget_tokens=kv_budget_tokens)
            kind = launcher or topo.launcher or "emulated"
            if kind not in LAUNCHERS:
                raise ConfigError(f"--launcher: {kind!r} is unknown; allowed: {list(LAUNCHERS)}")
            if dry_run and kind != "vllm":
                raise ConfigError("--dry-run: only the vllm launcher has commands to print")
            if not dry_run and Path(state_file).exists():
                st = load_state(state_file)
                if any(_owned(i.pid) for i in st["instances"]) or st.get("launcher") == "remote":
                    raise ConfigError(f"a cluster is already up (state file {state_file}); run `repro cluster down` first")
            logs = log_dir or Path(state_file).parent / "cluster-logs"
            opts: dict[str, Any] = {}
            if kind == "emulated":
                opts = dict(time_scale=time_scale, log_dir=logs, detach=True)
            elif kind == "vllm":
                opts = dict(model=model, dtype=dtype, dry_run=dry_run, side_channel_host=side_channel_host,
                            base_port=base_port, log_dir=logs, detach=True,
                            gpus=[g.strip() for g in gpus.split(",")] if gpus else None)
            if timeout is not None and kind != "remote":
                opts["startup_timeout"] = timeout
            elif timeout is not None:
                opts["timeout"] = timeout
            lau = make_launcher(topo, kind, **opts)
        except ConfigError as exc:
            _fail(exc)
            return
        try:
            instances = lau.start()
        except Exception as exc:
            lau.detach = False
            lau.stop()
            _fail(exc)
            return
        if dry_run:
            return
        save_state(state_file, kind, topo, instances)
        for i in instances:
            typer.echo(f"{i.name:<10} {i.role:<8} {i.url:<28} engine_id={i.engine_id} pid={i.pid}")
        typer.echo(f"cluster {topo.shorthand} up ({kind}); state in {state_file}")

    @app.command("down")
    def down(state_file: Path = typer.Option(DEFAULT_STATE_FILE, help="the state file written by `up`")):
        """Stop the engines recorded in the state file."""
        try:
            stopped = cluster_down(state_file)
        except ConfigError as exc:
            _fail(exc)
            return
        typer.echo(f"stopped {len(stopped)} engine(s): {', '.join(stopped) if stopped else '-'}")

    @app.command("status")
    def status(state_file: Path = typer.Option(DEFAULT_STATE_FILE, help="the state file written by `up`"),
               as_json: bool = typer.Option(False, "--json", help="print JSON")):
        """Health of every recorded engine (exit code 1 if any is unhealthy)."""
        try:
            rows = cluster_status(state_file)
        except ConfigError as exc:
            _fail(exc)
            return
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
        else:
            for r in rows:
                typer.echo(f"{r['name']:<10} {r['role']:<8} {r['url']:<28} "
                           f"{'healthy' if r['healthy'] else 'DOWN':<8} pid={r['pid']}")
        if not all(r["healthy"] for r in rows):
            raise typer.Exit(1)

    return app


def get_cluster_app():
    """The typer app for ``repro cluster`` (mount with ``app.add_typer(cluster_app, name="cluster")``)."""
    return cluster_app


cluster_app = _make_cluster_app()
