"""Stage groups as Ray actors across a cluster's nodes (``placement.backend: ray``).

Same contract as :class:`runtime.supervisor.Supervisor` (the coordinator
cannot tell them apart), different mechanics:

* Each replica gets its own one-bundle Ray placement group asking for the
  group's ``num_cpus`` / ``num_gpus`` / ``resources``.  A group of one replica
  asks for it directly; a group of several is first placed as one placement
  group under ``placement.ray_strategy`` (SPREAD by default: replicas on
  different nodes while there are nodes, sharing nodes after that), and each
  replica's own placement group is then pinned to the node its bundle got.
  Own groups, because a replica that moves must not leave a bundle behind in
  one it shares with live siblings (Ray would re-reserve it elsewhere).
* Each actor reports its node and a port on the node's address; only then
  are endpoints and transports known (same node -> shm, else frames), and the
  coordinator publishes them.
* Death is learnt four ways: the actor's ``wait`` returns (the stage process
  exited); it raises (Ray says the actor or its node died); the node is lost
  (:mod:`runtime.ray.nodes`: its raylet closes the idle connection we hold to
  it, or does not answer once heartbeats are a few periods late -- a host
  that vanished); or heartbeats stop for ``dead_after_ms`` (a hung process).
  The first to arrive fails the replica's requests; a generation number
  makes the others no-ops.
* A lost replica is re-created at once: in its standby if its group keeps
  one (:mod:`runtime.ray.standby`: a launcher already started on another
  node).  Else, if its node is lost too, its placement group is removed and
  a fresh one is made that excludes every lost node by label, so the
  replacement lands on a live node with room without waiting for Ray's
  health check to declare the node dead (about 15 s with Ray's defaults);
  otherwise it is re-created in its own placement group.  Until it is back, requests that need it fail at once with
  ``stage_unavailable`` naming what it waits for.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from runtime.config import GroupConfig
from runtime.curve import is_loopback
from runtime.messages import Ready, Shutdown
from runtime.placement import NodeMap
from runtime.ray import standby
from runtime.ray.actor import RayStageLauncher
from runtime.ray.nodes import avoiding, node_lost, pinned_to, raylet_answers, raylet_hangs_up, raylets
from runtime.supervisor import Proc, StageStartError, Supervisor

STOP_WAIT_S = 3.0
# A replica that cannot be placed again (its node is gone and no other has the
# bundle free) is retried for as long as the pipeline runs -- a node may join
# later -- but less and less often, and said less and less often.
RETRY_PLACE_S = 0.5
RETRY_PLACE_MAX_S = 15.0
# A replica whose heartbeats are late has its node's raylet asked at most this often.
PROBE_EVERY_S = 0.25


def retry_wait_s(attempt: int) -> float:
    """Seconds before placing a replica again after ``attempt`` failed tries:
    doubling from RETRY_PLACE_S up to RETRY_PLACE_MAX_S."""
    return min(RETRY_PLACE_S * 2 ** min(attempt - 1, 16), RETRY_PLACE_MAX_S)


def _remove(pg: PlacementGroup) -> None:
    """Give a placement group's room back (Ray may already have dropped it with its node)."""
    try:
        remove_placement_group(pg)
    except (RayError, GetTimeoutError):
        pass


def bundle_of(g: GroupConfig) -> dict[str, float]:
    """Resources one replica of ``g`` reserves on a node (Ray refuses an empty bundle)."""
    b: dict[str, float] = {"CPU": g.num_cpus} if g.num_cpus else {}
    if g.num_gpus:
        b["GPU"] = g.num_gpus
    b.update({k: v for k, v in g.resources.items() if v})
    return b or {"CPU": 0.01}


class RaySupervisor(Supervisor):
    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.groups = {g.name: g for g in self.cfg.placement.groups}
        self.nodes = NodeMap("", {g.name: [None] * g.replicas for g in self.cfg.placement.groups})
        for name, g in self.groups.items():
            self.endpoints.groups[name] = [""] * g.replicas
        self.pgs: dict[tuple[str, int], PlacementGroup] = {}  # replica -> its own placement group
        self.lost_nodes: set[str] = set()  # nodes found gone: no replacement is placed there
        self._pg_serial = itertools.count()
        self._next_probe: dict[tuple[str, int], float] = {}  # replica -> earliest next raylet probe
        self._watched: set[str] = set()  # nodes whose raylet connection is watched
        self.standbys: dict[tuple[str, int], standby.Standby] = {}  # replica -> its launcher ready elsewhere
        self.actors: dict[tuple[str, int], object] = {}
        self.gen: dict[tuple[str, int], int] = {k: 0 for k in self.procs}
        self.launched: set[tuple[str, int]] = set()
        self._tasks: set[asyncio.Future] = set()

    # ---- placement -------------------------------------------------------------------------
    def _new_pg(self, g: GroupConfig, replica: int, selector: list[dict[str, str]] | None) -> PlacementGroup:
        return placement_group([bundle_of(g)], bundle_label_selector=selector,
                               name=f"va-{self.run_token}-{g.name}-{replica}-{next(self._pg_serial)}")

    async def _pg_ready(self, pg: PlacementGroup, g: GroupConfig, n: int) -> None:
        timeout = self.cfg.control.ready_timeout_s
        try:
            await asyncio.wait_for(pg.ready(), timeout)
        except asyncio.TimeoutError:
            raise StageStartError(
                f"stage group {g.name!r} (stages {g.stages}): Ray has no room for {n} x "
                f"{bundle_of(g)} ({self.cfg.placement.ray_strategy}) within {timeout:g}s; free in the "
                f"cluster now: {ray.available_resources()}") from None

    async def _reserve(self, g: GroupConfig) -> None:
        """Each replica of ``g`` its own placement group (the module docstring says why and how)."""
        selectors: list[list[dict[str, str]] | None] = [None]
        if g.replicas > 1:
            plan = placement_group([bundle_of(g)] * g.replicas, strategy=self.cfg.placement.ray_strategy,
                                   name=f"va-{self.run_token}-{g.name}-plan")
            try:
                await self._pg_ready(plan, g, g.replicas)
                nodes = placement_group_table(plan)["bundles_to_node_id"]
            finally:
                _remove(plan)
            selectors = [pinned_to(nodes[r]) for r in range(g.replicas)]
        for r, selector in enumerate(selectors):
            self.pgs[(g.name, r)] = self._new_pg(g, r, selector)
        await asyncio.gather(*(self._pg_ready(self.pgs[(g.name, r)], g, g.replicas) for r in range(g.replicas)))

    async def _rehome_if_node_lost(self, p: Proc) -> None:
        """If ``p``'s node is gone, swap its placement group for one that avoids every lost node."""
        if p.node is None or not (p.node in self.lost_nodes or await node_lost(p.node)):
            return
        self.lost_nodes.add(p.node)
        g = self.groups[p.group]
        avoid = set(self.lost_nodes)
        if self.cfg.placement.ray_strategy == "STRICT_SPREAD":  # never beside a sibling
            avoid |= {q.node for q in self.procs.values() if q.group == p.group and q is not p and q.node}
        old = self.pgs.pop(p.key, None)
        self.pgs[p.key] = self._new_pg(g, p.replica, avoiding(avoid))
        if old is not None:
            _remove(old)
        print(f"re-creating {p.group}/{p.replica} away from lost node {p.node_ip} ({p.node[:8]})",
              file=sys.stderr, flush=True)

    def _launcher(self, g: GroupConfig, pg: PlacementGroup):
        """A launcher actor in ``pg``'s one bundle."""
        b = bundle_of(g)
        return RayStageLauncher.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0), num_cpus=b.get("CPU", 0),
            num_gpus=b.get("GPU", 0), resources={k: v for k, v in b.items() if k not in ("CPU", "GPU")}).remote()

    async def _place(self, p: Proc) -> None:
        """A new actor for ``p``, and where it landed.  Pends while no node has room."""
        gen = self.gen[p.key]
        actor = self._launcher(self.groups[p.group], self.pgs[p.key])
        self.actors[p.key] = actor
        where = await actor.where.remote()
        if gen != self.gen[p.key] or self.stopping:
            ray.kill(actor)
            raise asyncio.CancelledError
        self._landed(p, where)

    def _landed(self, p: Proc, where: dict) -> None:
        """``p``'s actor answered from ``where``: its node, address and endpoint are known."""
        if not is_loopback(where["ip"]) and self.curve is None:
            raise StageStartError(f"stage group {p.group!r} replica {p.replica} landed on {where['ip']}, "
                                  "a routable address, but this pipeline runs without CURVE")
        p.node, p.node_ip = where["node"], where["ip"]
        self._watch_raylet_of(where)
        self.nodes.groups[p.group][p.replica] = where["node"]
        self.endpoints.groups[p.group][p.replica] = f"tcp://{where['ip']}:{where['port']}"

    async def _launch(self, p: Proc) -> None:
        spec = self._spec(p)
        spec["nodes"] = self.nodes.to_wire()
        # Shared-memory names carry the node: an orphaned stage cleans only its own node's segments.
        spec["run_token"] = f"{self.run_token}-{p.node[:8]}"
        p.ready = False
        p.ready_future = self.loop.create_future()
        actor = self.actors[p.key]
        p.pid = await actor.launch.remote(json.dumps(spec))
        p.alive = True
        p.last_heartbeat = time.monotonic()
        self.launched.add(p.key)
        self._spawn_task(self._watch_actor(p, self.gen[p.key], actor.wait.remote()))

    def _spawn_task(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # ---- death -------------------------------------------------------------------------------
    async def _watch_actor(self, p: Proc, gen: int, waiter) -> None:
        try:
            res = await waiter
            why = f"stage process {p.pid} on node {p.node_ip} ({(p.node or '')[:8]}) exited with code {res['code']}"
            p.stderr_tail = res.get("tail", [])
        except RayError as exc:
            why = (f"Ray reports the actor of {p.group}/{p.replica} on node {p.node_ip} "
                   f"({(p.node or '')[:8]}) lost: {type(exc).__name__}")
        self._dead(p, gen, why)

    def _dead(self, p: Proc, gen: int, why: str) -> None:
        if gen != self.gen[p.key] or self.stopping:
            return
        self.gen[p.key] += 1  # whatever else reports this death later is ignored
        self.launched.discard(p.key)
        was_ready = p.ready
        p.died()
        self._not_started(p, f"died ({why})")
        actor = self.actors.pop(p.key, None)
        if actor is not None:
            ray.kill(actor, no_restart=True)
        self.down[p.key] = f"stage group {p.group!r} replica {p.replica} is down ({why})"
        self.on_death(p, why)
        tail = "".join(f"\n    {line}" for line in p.stderr_tail[-8:])
        print(f"stage group {p.group!r} replica {p.replica}: {why}{tail}", file=sys.stderr, flush=True)
        p.recreating = self._will_restart(p, was_ready)
        if p.recreating:
            p.restarts += 1
            self.down[p.key] += (f"; being re-created on a Ray node with {bundle_of(self.groups[p.group])} "
                                 "free")
            self._spawn_task(self._restart(p))

    # ---- standbys (runtime/ray/standby.py) ---------------------------------------------------
    async def _keep_standby(self, p: Proc) -> None:
        """A started launcher for ``p`` on another live node, if its group asks for one."""
        g = self.groups[p.group]
        if not g.standby or self.stopping or p.key in self.standbys:
            return
        pg = self._new_pg(g, p.replica, avoiding(self.lost_nodes | {p.node}))
        sb = self.standbys[p.key] = standby.Standby(pg, self._launcher(g, pg))
        try:
            await standby.warm(sb)
            self._watch_raylet_of(sb.where)
        except RayError:
            if self.standbys.get(p.key) is sb:
                del self.standbys[p.key]
                standby.drop(sb)

    async def _adopt_standby(self, p: Proc) -> bool:
        """Make ``p``'s standby its actor and placement group; False when there is none that answers."""
        sb = self.standbys.pop(p.key, None)
        if sb is None:
            return False
        where = await standby.adopt(sb)
        if where is None or where["node"] in self.lost_nodes:
            standby.drop(sb)
            return False
        old = self.pgs.get(p.key)
        self.pgs[p.key], self.actors[p.key] = sb.pg, sb.actor
        if old is not None:
            _remove(old)
        self._landed(p, where)
        return True

    async def _restart(self, p: Proc) -> None:
        gen = self.gen[p.key]
        try:
            if not await self._adopt_standby(p):
                await self._rehome_if_node_lost(p)
                await self._place_retrying(p, gen)
            if gen != self.gen[p.key] or self.stopping:
                return
            self._spawn_task(self._keep_standby(p))
            self.on_topology(self.nodes)
            await self._launch(p)
            await self._wait_ready(p, self.cfg.control.ready_timeout_s)
        except asyncio.CancelledError:
            return
        except (StageStartError, RayError) as exc:
            self._restart_failed(p, exc)

    async def _place_retrying(self, p: Proc, gen: int) -> None:
        """:meth:`_place`, again after each Ray error, less and less often, until it works."""
        for attempt in itertools.count(1):
            try:
                await self._place(p)
                return
            except RayError as exc:
                # e.g. the actor could not be made (a node lost between the probe and now)
                if self.stopping or gen != self.gen[p.key]:
                    return
                wait = retry_wait_s(attempt)
                if attempt & (attempt - 1) == 0:    # attempts 1, 2, 4, 8, ...
                    print(f"re-creating {p.group}/{p.replica}: {type(exc).__name__} "
                          f"(attempt {attempt}); trying again in {wait:g} s", file=sys.stderr, flush=True)
                await asyncio.sleep(wait)

    def _running(self, p: Proc) -> bool:
        return p.key in self.launched

    def _kill_hung(self, p: Proc) -> None:
        # The node may be gone with no one left to confirm a kill: declare it dead now.
        self._dead(p, self.gen[p.key], f"no heartbeat from node {p.node_ip} ({(p.node or '')[:8]})")

    def _suspect(self, p: Proc) -> None:
        """Late heartbeats: ask the node's raylet (runtime/ray/nodes.py), at most every
        PROBE_EVERY_S per replica.  A node that is gone is known in well under
        ``dead_after_ms``; a busy process on a live node still gets all of it."""
        now = time.monotonic()
        if p.node is None or self._next_probe.get(p.key, 0.0) > now:
            return
        self._next_probe[p.key] = now + PROBE_EVERY_S
        self._spawn_task(self._probe_node(p.node, p.node_ip))

    def _watch_raylet_of(self, where: dict) -> None:
        if where["node"] not in self._watched:
            self._watched.add(where["node"])
            self._spawn_task(self._watch_node(where["node"], where["ip"]))

    def _hosts(self, node: str) -> bool:
        """Whether a replica or a standby of ours is on ``node``."""
        return any(q.node == node for q in self.procs.values()) or any(
            sb.where is not None and sb.where["node"] == node for sb in self.standbys.values())

    async def _watch_node(self, node: str, ip: str) -> None:
        """Hold a connection to ``node``'s raylet while we have actors there; its end is a loss."""
        address = (await asyncio.get_running_loop().run_in_executor(None, raylets)).get(node)
        while address is not None and not self.stopping:
            await raylet_hangs_up(address)
            if self.stopping or not self._hosts(node):
                break
            if not await raylet_answers(address):
                self._node_gone(node, f"node {ip} ({node[:8]}) lost: its raylet is gone")
                break
            await asyncio.sleep(PROBE_EVERY_S)  # a live raylet closed an idle connection: watch again
        self._watched.discard(node)

    async def _probe_node(self, node: str, ip: str | None) -> None:
        if node in self.lost_nodes or await node_lost(node):
            self._node_gone(node, f"node {ip} ({node[:8]}) lost: its raylet does not answer")

    def _node_gone(self, node: str, why: str) -> None:
        """Every live replica on ``node`` is dead now; replacements avoid the node."""
        self.lost_nodes.add(node)
        for q in self.procs.values():
            if q.node == node and q.key in self.launched:
                self._dead(q, self.gen[q.key], why)
        for key, sb in list(self.standbys.items()):
            if sb.where is not None and sb.where["node"] == node:  # a standby there is lost too
                del self.standbys[key]
                standby.drop(sb)
                self._spawn_task(self._keep_standby(self.procs[key]))

    def on_ready(self, msg: Ready) -> None:
        super().on_ready(msg)
        p = self._sender(msg)
        if p is not None and p.ready:
            self.on_topology(self.nodes)  # a process that joined late hears the latest map too

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.nodes.coordinator = ray.get_runtime_context().get_node_id()
        try:
            await asyncio.gather(*(self._reserve(g) for g in self.groups.values()))
            await asyncio.gather(*(self._place(p) for p in self.procs.values()))
            for p in self.procs.values():
                self._spawn_task(self._keep_standby(p))
            self.on_topology(self.nodes)
            await asyncio.gather(*(self._launch(p) for p in self.procs.values()))
            self._monitor = asyncio.ensure_future(self._watch())
            await asyncio.gather(*(self._wait_ready(p, self.cfg.control.ready_timeout_s)
                                   for p in self.procs.values()))
        except BaseException:
            await self.stop()
            raise

    async def stop(self, grace_s: float = STOP_WAIT_S) -> None:
        self.stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
        for t in list(self._tasks):
            t.cancel()
        self.publish(Shutdown())
        stops = [a.stop.remote(grace_s) for a in self.actors.values()]
        if stops:
            try:
                await asyncio.wait_for(asyncio.gather(*stops, return_exceptions=True), grace_s + 2)
            except asyncio.TimeoutError:
                pass
        for a in self.actors.values():
            ray.kill(a, no_restart=True)
        self.actors.clear()
        for sb in self.standbys.values():
            standby.drop(sb)
        self.standbys.clear()
        self.launched.clear()
        for pg in self.pgs.values():
            _remove(pg)
        self.pgs.clear()

    def kill(self, group: str, replica: int = 0, sig: int = 9) -> int:
        """Test and fault-injection hook: kill the replica's Ray actor (its stage process follows)."""
        p = self.procs[(group, replica)]
        ray.kill(self.actors[p.key], no_restart=True)
        return p.pid

    def placement(self) -> dict:
        """Node of each replica, for views and tests."""
        return {f"{p.group}/{p.replica}": {"node": p.node, "ip": p.node_ip} for p in self.procs.values()}
