"""A started launcher kept on another node for a replica (a group's ``standby: true``, Ray only).

Re-creating a replica on Ray costs more than its stage's start: Ray has to
lease a worker on the new node, start it (a Python process importing Ray),
push the actor there and answer its first call, 0.5-2 s on a busy machine.
A standby is that much done ahead: a launcher actor in its own placement
group (the group's bundle, so the room is held) on a node other than the
replica's, already answering, with its stage process already started and
waiting for a spec (the interpreter and the runtime's imports cost about a
second more on a busy machine).  When the replica is lost, the supervisor
adopts the standby as the replica's actor and placement group and only the
stage's model has to load; a new standby is then made for the next loss.

The price is one more bundle of the group's resources held per replica, an
idle Ray worker and an idle stage process (the runtime imported, no model).  Where no other node has room, the standby's placement
group simply pends (and takes a node with room when one joins).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.placement_group import PlacementGroup, remove_placement_group

# How long an adopted standby may take to answer before it counts as lost with its node.
ANSWER_TIMEOUT_S = 1.0


@dataclass
class Standby:
    pg: PlacementGroup
    actor: Any                  # a RayStageLauncher handle
    where: dict | None = None   # its node, address and port, once it answered


async def warm(sb: Standby) -> None:
    """Wait until the standby answers (pends while no node has room), then have it start
    its stage process ahead, waiting for a spec (``StageLauncher.prepare``)."""
    where = await sb.actor.where.remote()
    await sb.actor.prepare.remote()
    sb.where = where


async def adopt(sb: Standby) -> dict | None:
    """The standby's fresh ``where`` if it still answers, else None (it is then dropped)."""
    if sb.where is None:
        drop(sb)
        return None
    try:
        return await asyncio.wait_for(sb.actor.where.remote(), ANSWER_TIMEOUT_S)
    except (RayError, asyncio.TimeoutError):
        drop(sb)
        return None


def drop(sb: Standby) -> None:
    """Kill its actor and give its room back."""
    with contextlib.suppress(RayError):
        ray.kill(sb.actor, no_restart=True)
    with contextlib.suppress(RayError):
        remove_placement_group(sb.pg)
