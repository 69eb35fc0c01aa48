"""Cluster topology for every backend: one parser (`repro.cluster.parse_topology`), used here for
the simulator's pools.

``"2p4d"`` = 2 prefill + 4 decode instances of the default profile; a YAML file (or a name in
``data/clusters/``) lists instance groups with role, count, profile, KV budget and, for remote
engines, URLs. Instances are named ``prefill-0 ..``, ``decode-0 ..`` unless named in the file.
Per-instance profiles make heterogeneous pools expressible (each instance gets its own Physics).
"""

from __future__ import annotations

from repro.cluster import InstanceSpec, Topology, parse_topology
from repro.physics import Physics

__all__ = ["InstanceSpec", "Topology", "parse_topology", "instance_physics", "pools"]


def instance_physics(inst: InstanceSpec) -> Physics:
    """The true engine timing of one instance (its profile, with its KV budget override)."""
    phys = Physics.load(inst.profile)
    if inst.kv_budget_tokens is not None:
        phys = phys.with_overrides(kv_budget_tokens=inst.kv_budget_tokens)
    return phys


def pools(topo: Topology) -> tuple[list[str], list[Physics], list[str], list[Physics]]:
    """(prefill names, their Physics, decode names, their Physics)."""
    return (
        [i.name for i in topo.prefill],
        [instance_physics(i) for i in topo.prefill],
        [i.name for i in topo.decode],
        [instance_physics(i) for i in topo.decode],
    )
