"""Readiness and liveness of a pipeline, for a load balancer or an orchestrator.

Three questions, three answers (the server's ``/health/ready``,
``/health/live`` and ``/health`` ask them; docs/CLIENTS.md lists the statuses):

* **ready** -- may this server take a new call?  Yes when every stage group
  has a ready replica, or its replicas are being re-created and have been
  down for at most ``grace_s``.  During a replica restart the server stays
  ready: a turn that needs the missing replica fails in-band at once
  (``stage_unavailable``), and the replica is back within seconds; taking the
  whole front end out of a balancer for that would also drop the stages that
  still work.  A group down for longer than ``grace_s``, or not coming back,
  makes it not ready.
* **live** -- should this server process be restarted?  Only when a replica is
  down and nothing re-creates it (restarts spent, restarts off, or its restart
  failed): a fresh server would start it again.  A replica waiting for room
  on a Ray cluster is still being re-created, so it is live.
* **all ready** -- every replica of every group is ready (``/health``'s
  original meaning, kept).

Pure: the caller hands in the supervisor's processes and a clock value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from runtime.supervisor import Proc


@dataclass(frozen=True)
class GroupHealth:
    replicas: int
    ready: int           # replicas ready now
    recreating: int      # replicas down with a replacement on its way
    given_up: int        # replicas down that nothing re-creates
    down_s: float        # longest time any of its replicas has been down (0: none is)


@dataclass(frozen=True)
class Health:
    live: bool
    ready: bool
    all_ready: bool
    groups: dict[str, GroupHealth]
    reasons: list[str] = field(default_factory=list)  # why not ready / not live, for people

    def to_json(self) -> dict:
        return {"live": self.live, "ready": self.ready, "all_ready": self.all_ready,
                "groups": {name: vars(g) for name, g in self.groups.items()}, "reasons": self.reasons}


def _group(procs: list[Proc], now: float) -> GroupHealth:
    down = [p for p in procs if not p.ready and p.down_since is not None]
    return GroupHealth(
        replicas=len(procs), ready=sum(p.ready for p in procs),
        recreating=sum(p.recreating for p in down), given_up=sum(not p.recreating for p in down),
        down_s=round(max((now - p.down_since for p in down), default=0.0), 3))


def assess(procs: Iterable[Proc], now: float, grace_s: float) -> Health:
    """Readiness and liveness of the processes ``procs`` at monotonic time ``now``."""
    by_group: dict[str, list[Proc]] = {}
    for p in procs:
        by_group.setdefault(p.group, []).append(p)
    groups = {name: _group(ps, now) for name, ps in by_group.items()}
    reasons = []
    ready = live = bool(groups)
    for name, g in groups.items():
        if g.given_up:
            live = False
            reasons.append(f"stage group {name!r}: {g.given_up} replica(s) down and not being re-created")
        if g.ready:
            continue
        starting = g.replicas - g.recreating - g.given_up  # first start, not up yet
        if starting or not g.recreating:
            ready = False
            reasons.append(f"stage group {name!r}: no replica ready")
        elif g.down_s > grace_s:
            ready = False
            reasons.append(f"stage group {name!r}: no replica ready for {g.down_s:.1f} s "
                           f"(being re-created; the bound is {grace_s:g} s)")
    all_ready = bool(groups) and all(g.ready == g.replicas for g in groups.values())
    return Health(live=live, ready=ready and live, all_ready=all_ready, groups=groups, reasons=reasons)
