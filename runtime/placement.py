"""Choosing the data-plane transport of each edge from the placement.

Stage code never picks a transport: the same executor runs fused, in its own
process, on a GPU or on another host, and only this table changes.

Two sources of "where": the ``host:`` of a group (backend ``local``), or the
node a Ray placement actually chose for each replica (backend ``ray``), given
as a :class:`NodeMap`.  With a node map, two replicas of one group may sit on
different nodes, so the transport is per (source replica, destination replica).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.config import GroupConfig, PipelineConfig

COORDINATOR = "@coordinator"


@dataclass
class NodeMap:
    """Which node runs the coordinator and each replica of each group (Ray node ids)."""

    coordinator: str
    groups: dict[str, list[str | None]] = field(default_factory=dict)

    def node_of(self, group: str | None, replica: int) -> str | None:
        if group is None:
            return self.coordinator
        nodes = self.groups.get(group) or []
        return nodes[replica] if replica < len(nodes) else None

    def to_wire(self) -> dict:
        return {"coordinator": self.coordinator, "groups": {k: list(v) for k, v in self.groups.items()}}

    @classmethod
    def from_wire(cls, d: dict | None) -> "NodeMap | None":
        if not d:
            return None
        return cls(d["coordinator"], {k: list(v) for k, v in d["groups"].items()})


def _same_host(a: GroupConfig | None, b: GroupConfig | None) -> bool:
    ha = a.host if a else None
    hb = b.host if b else None
    return (ha or "local") == (hb or "local")


def _cuda_index(g: GroupConfig | None) -> int | None:
    if g is None or not g.device.startswith("cuda"):
        return None
    return int(g.device[5:] or 0) if ":" in g.device else 0


def edge_transport(cfg: PipelineConfig, src: str, dst: str, nodes: NodeMap | None = None,
                   src_replica: int = 0, dst_replica: int = 0) -> str:
    """Transport for payloads from stage ``src`` to stage ``dst`` (either may be the coordinator).

    With ``nodes``, "same host" means the same Ray node for these two replicas;
    a replica not placed yet counts as another node (frames work everywhere).
    """
    ga = None if src == COORDINATOR else cfg.group_of(src)
    gb = None if dst == COORDINATOR else cfg.group_of(dst)
    if ga is not None and gb is not None and ga.name == gb.name and src_replica == dst_replica:
        return "local"
    if nodes is not None:
        na = nodes.node_of(ga.name if ga else None, src_replica)
        nb = nodes.node_of(gb.name if gb else None, dst_replica)
        if na is None or na != nb:
            return "frame"
        # Ray gives each actor its own CUDA_VISIBLE_DEVICES, so "cuda:0" in two
        # actors may be two GPUs: tensors cross through host memory.
        return "shm"
    if not _same_host(ga, gb):
        return "frame"
    ca, cb = _cuda_index(ga), _cuda_index(gb)
    if ca is not None and ca == cb:
        return "cuda_ipc"
    return "shm"


def transports_to(cfg: PipelineConfig, src: str, dst: str, nodes: NodeMap | None = None,
                  src_replica: int = 0) -> list[str]:
    """Transport from ``src`` (its replica ``src_replica``) to each replica of ``dst``."""
    n = 1 if dst == COORDINATOR else cfg.group_of(dst).replicas
    return [edge_transport(cfg, src, dst, nodes, src_replica, r) for r in range(n)]
