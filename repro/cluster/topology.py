"""Cluster topologies for every backend: one parser, no processes.

A topology is a list of engine instances with a role (``prefill`` or ``decode``), written either
as a shorthand (``2p4d``: 2 prefill + 4 decode) or as YAML (see ``data/clusters/*.yaml``)::

    name: 2p4d
    profile: a40-qwen2.5-3b          # default for every instance
    kv_budget_tokens: 60000          # optional default
    instances:
      - {role: prefill, count: 2}
      - {role: decode, count: 4, profile: a40-qwen2.5-3b, kv_budget_tokens: 60000}
    # vllm launcher only (unmodified: pass no scheduler budget, vLLM picks its own by the GPU's memory:
    # repro.cluster.launchers.vllm.serve_defaults; else the profile's settings are passed):
    vllm: {model: Qwen/Qwen2.5-3B-Instruct, dtype: bfloat16, gpus: [0, 1, 2, 3, 4, 5],
           unmodified: true, gpu_name: A40, gpu_memory_gib: 48}
    # remote launcher: each instance has a url (or a list of urls, one per count)
    #   - {role: decode, url: "http://node2:8200"}
    calibration: calibrated          # optional: the deployment's own cost model

Instances are named ``prefill-0 ..``, ``decode-0 ..`` unless named in the file. Per-instance
profiles make heterogeneous pools expressible (each instance gets its own Physics). This module
imports no process, HTTP or CLI code, so the simulator can use it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from repro.engine.physics import Physics, check_overrides
from repro.engine.profile import HardwareProfile, load_profile
from repro.errors import ConfigError
from repro.paths import CLUSTERS_DIR
from repro.vocab import DEFAULT_PROFILE, LAUNCHERS, ROLES

_SHORTHAND = re.compile(r"^\s*(\d+)\s*p\s*(\d+)\s*d\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class InstanceSpec:
    """One engine of a topology, before it runs."""

    name: str
    role: str
    profile: str = DEFAULT_PROFILE
    kv_budget_tokens: int | None = None
    url: str | None = None
    gpu: str | None = None
    engine_id: str | None = None
    faults: tuple[str, ...] = ()
    pid: int | None = None
    """An engine already running on this machine (`repro cluster up`'s, through its state file): its process,
    whose CPU time is the run's own (`repro.live.validity.OutsideCpu`)."""

    @property
    def hardware(self) -> HardwareProfile:
        """Its hardware profile, typed (`repro.engine.profile.load_profile`: read once)."""
        return load_profile(self.profile)


@dataclass(frozen=True)
class Topology:
    name: str
    instances: tuple[InstanceSpec, ...]
    launcher: str | None = None
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
    engine_id: str | None = None
    pid: int | None = None
    profile: str | None = None
    log: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def topology_error(field_name: str, msg: str) -> ConfigError:
    return ConfigError(f"topology: field '{field_name}' {msg}")


def _check_role(role: Any, where: str) -> str:
    if role not in ROLES:
        raise topology_error(where, f"is {role!r}; allowed: {list(ROLES)}")
    return role


def _check_profile(profile: Any, where: str) -> str:
    if not isinstance(profile, str) or not profile:
        raise topology_error(where, f"must be a profile name or path, got {profile!r}")
    load_profile(profile)  # raises ConfigError naming the allowed profiles
    return profile


def _check_budget(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise topology_error(where, f"must be a positive integer (tokens), got {v!r}")
    return v


def parse_topology(spec: str | Path | dict | Topology, *, profile: str | None = None,
                   kv_budget_tokens: int | None = None, calibration_must_exist: bool = True) -> Topology:
    """A `Topology` from ``2p4d``, a YAML path (or a name in data/clusters/) or a dict.

    ``profile``/``kv_budget_tokens`` override the file's defaults (not per-instance values).
    Raises ConfigError naming the bad field and the allowed values; a ``calibration:`` file that
    does not exist is one too, unless ``calibration_must_exist`` is False (``repro calibrate``,
    which is about to write it).
    """
    if isinstance(spec, Topology):
        return spec
    if isinstance(spec, dict):
        return _from_dict(spec, "topology", profile, kv_budget_tokens, calibration_must_exist)
    text = str(spec)
    if text.endswith(".json"):
        if is_state_file(text):  # `repro cluster up`'s state file: its running engines, never restarted
            return _from_dict(state_topology(text), text, profile, kv_budget_tokens, calibration_must_exist)
    m = _SHORTHAND.match(text)
    if m:
        n_p, n_d = int(m.group(1)), int(m.group(2))
        if n_p < 1 or n_d < 1:
            raise topology_error("topology", f"{text!r} needs at least one prefill and one decode instance")
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
            raise topology_error("topology", f"{text!r} is neither a shorthand like '2p4d' nor a YAML file; "
                                   f"allowed: NpMd, a path, or one of {known}")
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"topology {path}: not valid YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"topology {path}: expected a mapping with an 'instances' list")
    raw.setdefault("name", path.stem)
    return _from_dict(raw, str(path), profile, kv_budget_tokens, calibration_must_exist)


def is_state_file(path: str | Path) -> bool:
    """Whether ``path`` is a `repro cluster up` state file (a JSON file with ``instances``)."""
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("instances"), list) and "launcher" in data


def state_topology(path: str | Path) -> dict[str, Any]:
    """A ``remote`` topology (the dict `repro.cluster.topology.parse_topology` reads) naming the engines a state
    file records, with the options of the topology they were started from (``vllm``, ``calibration``,
    ``kv_poll_interval_s``, ``profile``). ConfigError if an engine it records is not running."""
    from repro.cluster.processes import pid_alive

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"state file {path}: cannot be read ({exc})") from None
    insts = [Instance(**i) for i in data.get("instances", [])]
    dead = [f"{i.name} (pid {i.pid})" for i in insts if i.pid and not pid_alive(i.pid)]
    if dead or not insts:
        raise ConfigError(f"state file {path}: {'engines ' + ', '.join(dead) + ' are' if dead else 'no engine is'} "
                          "no longer running; run `repro cluster down` and `repro cluster up` again")
    doc: dict[str, Any] = {"name": f"{data.get('topology', 'cluster')}-running", "launcher": "remote"}
    source = data.get("source") or data.get("topology")
    if source:
        try:
            topo = parse_topology(source, calibration_must_exist=False)
        except ConfigError:
            topo = None
        if topo is not None:
            for key in ("vllm", "calibration", "kv_poll_interval_s"):
                if topo.options.get(key) is not None:
                    doc[key] = topo.options[key]
            profiles = {s.profile for s in topo.instances}
            if len(profiles) == 1 and None not in profiles:
                doc["profile"] = profiles.pop()
    doc["instances"] = [{"role": i.role, "url": i.url, "name": i.name,
                         **({"engine_id": i.engine_id} if i.engine_id else {}),
                         **({"pid": i.pid} if i.pid else {})} for i in insts]
    return doc


def topology_file(spec: str | Path) -> Path | None:
    """The cluster YAML that ``spec`` names (a path, or a name in data/clusters/), absolute; None for a
    shorthand like ``2p4d`` or a name that names no file."""
    text = str(spec)
    if _SHORTHAND.match(text):
        return None
    for cand in (Path(text), CLUSTERS_DIR / text, CLUSTERS_DIR / f"{text}.yaml", CLUSTERS_DIR / f"{text}.yml"):
        if cand.is_file():
            return cand.resolve()
    return None


_TOP_KEYS = {"name", "launcher", "profile", "kv_budget_tokens", "instances", "vllm", "emulated", "description",
             "calibration", "kv_poll_interval_s"}
_INST_KEYS = {"role", "count", "profile", "kv_budget_tokens", "url", "urls", "gpus", "gpu", "engine_id", "pid", "fault",
              "faults", "name"}


def _from_dict(raw: dict, origin: str, profile: str | None, kv_budget: int | None,
               calibration_must_exist: bool = True) -> Topology:
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise topology_error(sorted(unknown)[0], f"is unknown in {origin}; allowed: {sorted(_TOP_KEYS)}")
    launcher = raw.get("launcher")
    if launcher is not None and launcher not in LAUNCHERS:
        raise topology_error("launcher", f"is {launcher!r}; allowed: {list(LAUNCHERS)}")
    default_profile = _check_profile(profile or raw.get("profile") or DEFAULT_PROFILE, "profile")
    default_budget = _check_budget(kv_budget if kv_budget is not None else raw.get("kv_budget_tokens"),
                                   "kv_budget_tokens")
    groups = raw.get("instances")
    if not isinstance(groups, list) or not groups:
        raise topology_error("instances", f"must be a non-empty list of {{role, count, ...}} in {origin}")
    specs: list[InstanceSpec] = []
    counters = {"prefill": 0, "decode": 0}
    for gi, g in enumerate(groups):
        where = f"instances[{gi}]"
        if not isinstance(g, dict):
            raise topology_error(where, f"must be a mapping, got {g!r}")
        bad = set(g) - _INST_KEYS
        if bad:
            raise topology_error(f"{where}.{sorted(bad)[0]}", f"is unknown; allowed: {sorted(_INST_KEYS)}")
        role = _check_role(g.get("role"), f"{where}.role")
        urls = g.get("urls")
        if urls is None and g.get("url") is not None:
            urls = [g["url"]]
        count = g.get("count", len(urls) if urls else 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise topology_error(f"{where}.count", f"must be a positive integer, got {count!r}")
        if urls is not None:
            if not isinstance(urls, list) or len(urls) != count or not all(isinstance(u, str) and u for u in urls):
                raise topology_error(f"{where}.urls", f"must list one URL per instance ({count}), got {urls!r}")
        gpus = g.get("gpus", [g["gpu"]] if g.get("gpu") is not None else None)
        if gpus is not None and (not isinstance(gpus, list) or len(gpus) != count):
            raise topology_error(
                f"{where}.gpus",
                f"must list one GPU (CUDA_VISIBLE_DEVICES value) per instance ({count}), got {gpus!r}",
            )
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
                pid=int(g["pid"]) if count == 1 and g.get("pid") else None,
            ))
    if not any(s.role == "prefill" for s in specs) or not any(s.role == "decode" for s in specs):
        raise topology_error("instances", f"needs at least one 'prefill' and one 'decode' instance in {origin}")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise topology_error("instances", f"instance names must be unique, got {names}")
    options = {k: raw[k] for k in ("vllm", "emulated") if k in raw}
    if raw.get("kv_poll_interval_s") is not None:
        poll = raw["kv_poll_interval_s"]
        if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not 0.0 < poll <= 60.0:
            raise topology_error("kv_poll_interval_s", f"must be a number of seconds in (0, 60], got {poll!r}")
        options["kv_poll_interval_s"] = float(poll)
    if raw.get("calibration") is not None:
        options["calibration"] = _check_calibration(raw["calibration"], origin, calibration_must_exist)
    return Topology(name=str(raw.get("name") or "cluster"), instances=tuple(specs), launcher=launcher, options=options)


def _check_calibration(value: Any, origin: str, must_exist: bool = True) -> str:
    """The cluster's cost model: a shipped name (``calibrated``, ``sim_derived``) or a JSON file
    written by ``repro calibrate`` (relative to the cluster file); a missing file says how to make it."""
    from repro.paths import CALIBRATION_DIR

    if not isinstance(value, str) or not value.strip():
        raise topology_error(
            "calibration",
            f"must be a shipped cost model name or a path to a calibration JSON in {origin}, got {value!r}",
        )
    if (CALIBRATION_DIR / f"{value}.json").exists():
        return value
    path = Path(value)
    if not path.is_absolute() and Path(origin).exists():
        path = Path(origin).resolve().parent / path
    if must_exist and not path.exists():
        raise topology_error("calibration", f"file {path} does not exist: calibrate these engines first "
                                  f"(repro calibrate --cluster {origin} --out {value}, or notebook 01 with this "
                                  "cluster), or write 'calibration: calibrated' to use the paper's A40 constants")
    return str(path)




def instance_physics(inst: InstanceSpec, physics: dict[str, float] | None = None) -> Physics:
    """The true engine timing of one instance: its profile, with its KV budget override and ``physics``
    (overrides of the profile's estimated constants, `repro.engine.physics.OVERRIDABLE`, checked)."""
    phys = inst.hardware.physics
    if inst.kv_budget_tokens is not None:
        phys = phys.with_overrides(kv_budget_tokens=inst.kv_budget_tokens)
    if physics:
        phys = phys.with_estimates(check_overrides(physics, "topology: physics overrides"))
    return phys


def pools(topo: Topology, physics: dict[str, float] | None = None
          ) -> tuple[list[str], list[Physics], list[str], list[Physics]]:
    """(prefill names, their Physics, decode names, their Physics); ``physics`` overrides every
    instance's estimated constants (`instance_physics`)."""
    return (
        [i.name for i in topo.prefill],
        [instance_physics(i, physics) for i in topo.prefill],
        [i.name for i in topo.decode],
        [instance_physics(i, physics) for i in topo.decode],
    )
