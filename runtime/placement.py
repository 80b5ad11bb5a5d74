"""Choosing the data-plane transport of each edge from the placement.

Stage code never picks a transport: the same executor runs fused, in its own
process, on a GPU or on another host, and only this table changes.
"""

from __future__ import annotations

from runtime.config import GroupConfig, PipelineConfig

COORDINATOR = "@coordinator"


def _same_host(a: GroupConfig | None, b: GroupConfig | None) -> bool:
    ha = a.host if a else None
    hb = b.host if b else None
    return (ha or "local") == (hb or "local")


def _cuda_index(g: GroupConfig | None) -> int | None:
    if g is None or not g.device.startswith("cuda"):
        return None
    return int(g.device[5:] or 0) if ":" in g.device else 0


def edge_transport(cfg: PipelineConfig, src: str, dst: str) -> str:
    """Transport for payloads from stage ``src`` to stage ``dst`` (either may be the coordinator)."""
    ga = None if src == COORDINATOR else cfg.group_of(src)
    gb = None if dst == COORDINATOR else cfg.group_of(dst)
    if ga is not None and gb is not None and ga.name == gb.name:
        return "local"
    if not _same_host(ga, gb):
        return "frame"
    ca, cb = _cuda_index(ga), _cuda_index(gb)
    if ca is not None and ca == cb:
        return "cuda_ipc"
    return "shm"
