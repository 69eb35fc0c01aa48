"""Pieces that several section modules share: the grid of specs, per-policy summaries, pool shapes.

Conventions of `repro.paper`: tidy pandas frames (one row per run or per group), times in
seconds, rates in requests per second, goodput a fraction of the requests sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from repro.errors import ConfigError
from repro.experiment.spec import RunSpec
from repro.paper import reference as paper_reference
from repro.routing.policies import PAPER_POLICIES
from repro.vocab import WORKLOADS


class GridContext(Protocol):
    """What `specs_grid` reads of a notebook's context (a `repro.paper.section.Section` is one), so that
    the grid helpers need no notebook context of their own."""

    @property
    def backend(self) -> str: ...  # sim | emulated | vllm
    @property
    def seeds(self) -> Sequence[int]: ...  # arrival traces, one seed each
    @property
    def n_requests(self) -> int: ...  # requests per run
    @property
    def pool_cluster(self) -> str | None: ...  # the cluster file ({topology}: one per shape) or None
    @property
    def time_scale(self) -> float: ...  # emulated engines run this many times faster than the wall clock


PAPER_POLICY_RANK = {p: i for i, p in enumerate(PAPER_POLICIES)}
"""Policy name -> its place in the paper's figures (a sort key; other policies have none)."""


def paper_value(key: str) -> float:
    """The paper's number by key (`repro.paper.reference`); NaN when the reference has no such key."""
    try:
        return paper_reference.lookup(key)
    except ConfigError:
        return float("nan")


def gpus(shape: str) -> int:
    """GPUs of a pool shape (prefill + decode instances), e.g. 6 for ``2p4d``; a cluster file counts its instances."""
    from repro.cluster.topology import parse_topology

    t = parse_topology(shape)
    return len(t.prefill) + len(t.decode)


def shape_cluster(cluster: str | None, topology: str, sweep: bool = True) -> str | None:
    """The cluster file of one pool shape: ``cluster`` with ``{topology}`` filled in.

    A sweep over shapes cannot run on one fixed cluster file: a file without ``{topology}`` is an
    error saying what to pass. Without a file (sim, emulated) the shape is the spec's topology.
    """
    if not cluster:
        return None
    if "{topology}" in cluster:
        path = cluster.replace("{topology}", topology)
        if not Path(path).exists():
            raise ConfigError(f"cluster file {path} (from {cluster!r}) does not exist: write one cluster YAML "
                              f"per pool shape, or run the shape sweep on backend 'emulated' without a cluster")
        return path
    if sweep:
        raise ConfigError(f"cluster = {cluster!r} is one fixed pool; a sweep over pool shapes needs one file per "
                          "shape: pass cluster='clusters/mine-{topology}.yaml' ({topology} becomes e.g. 2p4d)")
    return cluster


def specs_grid(ctx: GridContext, *, workloads: Sequence[str] = ("mixed",), rates: Mapping[str, float] | float = 16.0,
               topologies: Sequence[str] = ("2p4d",), policies: Sequence[str] = PAPER_POLICIES,
               cost_models: Sequence[str] = ("calibrated",), n_requests: int | None = None,
               arrival: dict[str, Any] | None = None) -> list[RunSpec]:
    """The cross product of the given axes and ``ctx.seeds`` as `RunSpec`s on ``ctx``'s backend.

    ``rates`` (req/s) per workload, or one rate for all; ``n_requests`` per run (default
    ``ctx.n_requests``); ``arrival`` an arrival process (`RunSpec.arrival`), None for the
    workload's own. The cluster is ``ctx.pool_cluster``: with ``{topology}`` in it, one file per
    pool shape (`shape_cluster`).
    """
    out = []
    n = ctx.n_requests if n_requests is None else n_requests
    for wl in workloads:
        rate = float(rates[wl] if isinstance(rates, Mapping) else rates)
        for topo in topologies:
            cl = shape_cluster(ctx.pool_cluster, topo, len(topologies) > 1)
            for cm in cost_models:
                for pol in policies:
                    for s in ctx.seeds:
                        out.append(RunSpec.from_flat(backend=ctx.backend, workload=wl, topology=topo, seed=int(s),
                                                     rate=rate, n_requests=int(n), policy=pol, cost_model=cm,
                                                     cluster=cl, time_scale=ctx.time_scale, arrival=arrival))
    return out


def policy_summary(runs: pd.DataFrame, by: Sequence[str] = ("policy",)) -> pd.DataFrame:
    """Mean over seeds per group of ``runs`` (rows of `Section.run`): goodput (mean, sd, min, max),
    P99 TTFT in s (mean, min, max), token and request skew (max/mean over decode instances), seeds."""
    by = list(by)
    g = runs.groupby(by, sort=False)
    out = pd.DataFrame({
        "goodput": g["goodput"].mean(),
        "goodput_sd": g["goodput"].std(ddof=1).fillna(0.0),
        "goodput_min": g["goodput"].min(),
        "goodput_max": g["goodput"].max(),
        "ttft_p99_s": g["ttft_p99_s"].mean(),
        "ttft_p99_min_s": g["ttft_p99_s"].min(),
        "ttft_p99_max_s": g["ttft_p99_s"].max(),
        "token_skew": g["token_skew"].mean(),
        "request_skew": g["request_skew"].mean(),
        "seeds": g["seed"].nunique(),
    }).reset_index()
    return out


def check_rates(rates: Mapping[str, float], workloads: Sequence[str] = WORKLOADS) -> dict[str, float]:
    """A per-workload rate table (req/s) as floats; a missing workload or a rate <= 0 is an error saying so."""
    if not isinstance(rates, dict):
        raise ConfigError(f"parameter 'rates' = {rates!r} must be a mapping workload -> req/s")
    missing = [w for w in workloads if w not in rates]
    if missing:
        raise ConfigError(f"parameter 'rates' lacks {missing}; give every workload a rate (req/s), "
                          "or {} for a saturation search")
    out = {}
    for w in workloads:
        r = rates[w]
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise ConfigError(f"parameter 'rates'[{w!r}] = {r!r} must be a rate > 0 (req/s)")
        out[w] = float(r)
    return out
