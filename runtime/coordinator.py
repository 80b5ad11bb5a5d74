"""The coordinator: global request table, submit, abort fan-out, error fan-in, output gate.

Lives in the server process on the asyncio loop.  Stages stay ignorant of
the pipeline around them; the coordinator alone knows where request 17 is.

The output gate: once a request is terminal, nothing more of it reaches the
caller, whatever is still in flight: ``abort`` closes the gate before it
publishes the abort, in the same call.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import OrderedDict
from typing import Any

import zmq

from runtime import messages
from runtime.config import PipelineConfig
from runtime.curve import CurveKeys, start_authenticator
from runtime.dataplane import DataPlane
from runtime.endpoints import Endpoints
from runtime.errors import ErrorCode, ErrorInfo, PipelineClosed
from runtime.messages import (ENTRY_SRC, Abort, AbortAck, Data, Done, DoneItem, Failure, Fatal, Heartbeat,
                              Ready, Release, Stats, Topology)
from runtime.placement import COORDINATOR, NodeMap, transports_to
from runtime.request_ids import RequestIds
from runtime.request_lifecycle import (OutputEvent, RequestHandle, RequestRecord, RequestView, StageProgress,
                                       State)
from runtime.shm import ShmPool
from runtime.sockets import Peers, make_socket
from runtime.supervisor import Proc, Supervisor

# finished requests remembered at most (Coordinator.recent), however recent
RECENT_MAX = 4096
# after a request ends, how long its unreleased input buffers may stay lent
INPUT_RECLAIM_AFTER_S = 2.0


class AbortTicket:
    """Resolves when every live stage process acknowledged the abort."""

    def __init__(self, rid: int, expected: set[tuple[str, int]], loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = rid
        self.expected = set(expected)
        self.t0 = time.perf_counter()
        self.acked = loop.create_future()
        self.freed_bytes = 0
        self.freed_buffers = 0
        self.held_by: list[str] = []
        self.ack_ms: float | None = None
        # when each process answered (time.monotonic(); traces draw one span per ack)
        self.started_at = time.monotonic()
        self.acked_at: dict[tuple[str, int], float] = {}
        if not self.expected:
            self.acked.set_result(self)

    def ack(self, key: tuple[str, int], msg: AbortAck | None = None) -> None:
        """One process acknowledged (``msg``), or died (None): it holds nothing now."""
        if key in self.expected:
            self.acked_at[key] = time.monotonic()
        self.expected.discard(key)
        if msg is not None:
            self.freed_bytes += msg.freed_bytes
            self.freed_buffers += msg.freed_buffers
            self.held_by.extend(msg.held)
        if not self.expected and not self.acked.done():
            self.ack_ms = (time.perf_counter() - self.t0) * 1000
            self.acked.set_result(self)

    def __await__(self):
        return self.acked.__await__()


class Coordinator:
    def __init__(self, cfg: PipelineConfig, endpoints: Endpoints, run_token: str,
                 curve: CurveKeys | None = None) -> None:
        self.cfg = cfg
        self.endpoints = endpoints
        self.run_token = run_token
        # Plain sockets: sends never block (no high-water mark) and the PULL
        # socket is read from an event-loop reader on its FD.
        self.ctx = zmq.Context()
        self.auth = start_authenticator(self.ctx, curve) if curve else None
        self.pull = make_socket(self.ctx, zmq.PULL, bind=endpoints.coordinator, curve=curve)
        self.pub = make_socket(self.ctx, zmq.PUB, bind=endpoints.control_pub, curve=curve)
        # a 'tcp://host:*' endpoint (Ray placement) is bound to a port the kernel picked
        endpoints.coordinator = self.pull.getsockopt_string(zmq.LAST_ENDPOINT)
        endpoints.control_pub = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.peers = Peers(self.ctx, curve)
        for eps in endpoints.groups.values():
            for ep in eps:
                if ep:  # Ray placement fills its endpoints in later
                    self.peers.get(ep)
        dp = cfg.data
        self.pool = ShmPool(f"va-{run_token}-coord-{os.getpid()}", dp.max_lent_mb << 20, dp.max_cached_mb << 20)
        self.data = DataPlane(endpoints.coordinator, self.pool, dp.inline_max_bytes)
        self.live: dict[int, RequestRecord] = {}
        # Finished requests, oldest first, for /v1/requests/{id}, late stage
        # reports and a restarted stage's tombstones: kept as long as a stage
        # keeps an aborted id's tombstone (tombstones.ttl_s) and RECENT_MAX at
        # most.  Without the age bound the table sat full on any busy server,
        # several views per call that ended minutes ago.
        self.recent: OrderedDict[int, RequestView] = OrderedDict()
        self.recent_ttl_s = cfg.tombstones.ttl_s
        self.tickets: dict[int, AbortTicket] = {}
        self._ids = RequestIds(g.replicas for g in cfg.placement.groups)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._credit = asyncio.Event()
        self._release_scheduled = False
        self.counters = {"submitted": 0, "completed": 0, "cancelled": 0, "failed": 0,
                         "aborts": 0, "errors_by_code": {}}
        supervisor_cls = Supervisor
        if cfg.placement.backend == "ray":
            from runtime.ray.supervisor import RaySupervisor as supervisor_cls
        self.supervisor = supervisor_cls(cfg, endpoints, run_token, self._on_proc_death, self._publish, curve)
        self.supervisor.tombstone_source = self._recent_dead_ids
        self.supervisor.on_topology = self._on_topology
        self._on_topology(None)
        self.closed = False
        self._routes: dict[tuple, tuple[list[str], set[str]]] = {}

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.data.on_release_ready = self._schedule_release_flush
        self.loop.add_reader(self.pull.getsockopt(zmq.FD), self._on_readable)
        self._on_readable()
        await self.supervisor.start()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for rid in list(self.live):
            self._terminate(self.live[rid], State.CANCELLED, "shutdown",
                            ErrorInfo.make(ErrorCode.CANCELLED, "the pipeline is shutting down"))
        await self.supervisor.stop()
        try:
            self.loop.remove_reader(self.pull.getsockopt(zmq.FD))
        except (ValueError, zmq.ZMQError):
            pass
        self.data.on_release_ready = None
        self.data.close()
        self.peers.close()
        for s in (self.pull, self.pub):
            s.close(0)
        if self.auth is not None:
            self.auth.stop()
        self.ctx.term()

    def _on_topology(self, nodes: NodeMap | None) -> None:
        """Placement known or changed (Ray): entry transports per replica, and tell the stages."""
        self._entry_transport = {s.name: transports_to(self.cfg, COORDINATOR, s.name, nodes) for s in self.cfg.stages}
        if nodes is not None:
            self._publish(Topology(self.endpoints.groups, nodes.to_wire()))

    # ---- submit ------------------------------------------------------------------------------
    async def submit(self, payload: Any = None, *, entry: str | None = None, route: list[str] | None = None,
                     params: dict | None = None, stream_input: bool = False,
                     deadline_s: float | None = None, affinity: str | None = None) -> RequestHandle:
        """Start a request at ``entry``; with ``stream_input`` feed it later through the handle.
        Requests of one ``affinity`` (a conversation) reach the same replica of
        every group (runtime/request_ids.py)."""
        if self.closed:
            raise PipelineClosed("the pipeline is closed")
        if entry is None:
            roots = self.cfg.roots()
            entry = route[0] if route else roots[0]
        try:
            self.cfg.stage(entry)
        except KeyError:
            raise ValueError(f"unknown entry stage {entry!r}") from None
        full_route, outputs = self._route(entry, tuple(route) if route else None)
        rid = self._ids.next(affinity)
        deadline_s = deadline_s or self.cfg.request_deadline_s
        rec = RequestRecord(rid, entry, full_route, outputs, time.monotonic() + deadline_s)
        rec.stages = {s: StageProgress() for s in full_route}
        self.live[rid] = rec
        self.counters["submitted"] += 1
        rec.timer = self.loop.call_later(deadline_s, self._expire, rid)
        p = dict(params or {})
        p["_route"] = full_route
        rec.params = p
        down = self.supervisor.unavailable(full_route, rid)
        if down is not None:  # a replica on the route is gone and not back: fail now, not at the deadline
            self._fail(rec, ErrorInfo.make(ErrorCode.STAGE_UNAVAILABLE, down[1], down[0]))
            return RequestHandle(self, rec)
        if stream_input:
            rec.state = State.RUNNING
            await self._send_data(rec, payload, end=False, has_payload=payload is not None, params=p)
        else:
            rec.input_closed = True
            rec.state = State.RUNNING
            await self._send_data(rec, payload, end=True, has_payload=True, params=p)
        return RequestHandle(self, rec)

    def _route(self, entry: str, within: tuple[str, ...] | None) -> tuple[list[str], set[str]]:
        """(stages visited, stages whose end completes the request); cached per shape."""
        key = (entry, within)
        hit = self._routes.get(key)
        if hit is None:
            full = self.cfg.route_from(entry, list(within) if within else None)
            outs = {s for s in full
                    if self.cfg.stage(s).output or not any(e.dst in full for e in self.cfg.outputs(s))}
            hit = self._routes[key] = (full, outs)
        return list(hit[0]), set(hit[1])

    async def send_input(self, rec: RequestRecord, payload: Any, end: bool, has_payload: bool = True,
                         params: dict | None = None) -> None:
        if rec.input_closed:
            raise RuntimeError(f"request {rec.request_id}: input already closed")
        if rec.state.terminal:
            if has_payload:
                return  # the request ended (aborted/failed); input is dropped quietly
            rec.input_closed = True
            return
        if end:
            rec.input_closed = True
        await self._send_data(rec, payload, end=end, has_payload=has_payload, params=params)

    async def _send_data(self, rec: RequestRecord, payload: Any, end: bool, has_payload: bool,
                         params: dict | None) -> None:
        msg = Data(rec.entry, rec.request_id, ENTRY_SRC, end)
        if rec.input_seq == 0:
            msg.params = params if params is not None else rec.params
        elif params:
            msg.params = params     # an update, merged at the entry stage (Scheduler.on_input)
        rec.input_seq += 1
        frames: list = []
        if has_payload:
            per_replica = self._entry_transport[rec.entry]
            transport = per_replica[rec.request_id % len(per_replica)]
            while True:
                desc, frames = self.data.pack(payload, rec.request_id, transport)
                if desc is not None:
                    break
                self._credit.clear()
                await self._credit.wait()
            msg.payload = desc
        g = self.cfg.group_of(rec.entry)
        self.peers.send(self.endpoints.of(g.name, rec.request_id % g.replicas), msg, frames)

    # ---- abort -------------------------------------------------------------------------------
    def abort(self, rid: int, reason: str = "cancelled") -> AbortTicket:
        """Close the output gate now, then tell every stage.  Await the ticket for the acks."""
        rec = self.live.get(rid)
        ticket = AbortTicket(rid, {p.key for p in self.supervisor.live()}, self.loop)
        if rec is None:
            ticket.expected.clear()
            if not ticket.acked.done():
                ticket.acked.set_result(ticket)
            return ticket
        self.counters["aborts"] += 1
        self._terminate(rec, State.CANCELLED, reason, None)
        self.tickets[rid] = ticket
        ticket.acked.add_done_callback(lambda _f, r=rid: self.tickets.pop(r, None))
        self._publish(Abort(rid, reason))
        return ticket

    def _publish(self, msg: messages.Message) -> None:
        try:
            self.pub.send(messages.encode(msg), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def _terminate(self, rec: RequestRecord, state: State, reason: str | None, error: ErrorInfo | None) -> None:
        if rec.state.terminal:
            return
        rec.state = state
        rec.reason = reason
        rec.error = error
        rec.t_end = time.monotonic()
        if rec.timer is not None:
            rec.timer.cancel()
        self.live.pop(rec.request_id, None)
        if rec.request_id in self.pool.lent_request_ids() and self.loop is not None:
            # Input buffers the entry stage has not released yet: normally the
            # release is in flight, but a stage killed while reading one never
            # sends it.  Whatever is still out after a grace period comes back.
            self.loop.call_later(INPUT_RECLAIM_AFTER_S, self.pool.reclaim, rec.request_id)
        self.recent[rec.request_id] = rec.view()
        self._forget_finished(rec.t_end)
        if state == State.COMPLETED:
            self.counters["completed"] += 1
            rec.push(OutputEvent("done", rec.request_id))
        elif state == State.CANCELLED:
            self.counters["cancelled"] += 1
            rec.events.clear()  # the gate: nothing queued before the cancel is delivered after it
            rec.push(OutputEvent("cancelled", rec.request_id, reason=reason, error=error))
        else:
            self.counters["failed"] += 1
            code = error.code.value if error else "internal"
            self.counters["errors_by_code"][code] = self.counters["errors_by_code"].get(code, 0) + 1
            rec.push(OutputEvent("error", rec.request_id, stage=error.stage if error else None,
                                 error=error, reason=reason))

    def _forget_finished(self, now: float) -> None:
        """Drop the finished requests past RECENT_MAX or older than ``recent_ttl_s``."""
        recent = self.recent
        while len(recent) > RECENT_MAX:
            recent.popitem(last=False)
        cutoff = now - self.recent_ttl_s
        while recent:
            oldest = next(iter(recent.values()))
            if oldest.t_end is not None and oldest.t_end >= cutoff:
                break
            recent.popitem(last=False)

    def _fail(self, rec: RequestRecord, error: ErrorInfo) -> None:
        if rec.state.terminal:
            return
        self._terminate(rec, State.FAILED, error.code.value, error)
        # Free whatever the other stages still hold for it.
        self._publish(Abort(rec.request_id, error.code.value, ack=False))

    def _expire(self, rid: int) -> None:
        rec = self.live.get(rid)
        if rec is not None:
            where = [s for s, p in rec.stages.items() if not p.done]
            self._fail(rec, ErrorInfo.make(ErrorCode.TIMEOUT,
                                           f"request {rid} passed its deadline (still at {where})"))

    def _on_proc_death(self, p: Proc, why: str) -> None:
        """A stage process died: fail what it held, and take back what it can never release."""
        group = next(g for g in self.cfg.placement.groups if g.name == p.group)
        stages = set(group.stages)
        mine = [rid for rid in self.pool.lent_request_ids()
                if rid % group.replicas == p.replica and self._entry_of(rid) in stages]
        for rec in list(self.live.values()):
            if rec.request_id % group.replicas != p.replica:
                continue
            pending = [s for s in rec.route if s in stages and not rec.stages[s].done]
            if pending:
                self._fail(rec, ErrorInfo.make(
                    ErrorCode.STAGE_UNAVAILABLE, f"stage {pending[0]!r} became unavailable ({why})", pending[0]))
        for rid in mine:  # input buffers lent to it: no release will ever come
            self.pool.reclaim(rid)
        self._credit.set()
        for ticket in list(self.tickets.values()):
            ticket.ack(p.key)

    def _entry_of(self, rid: int) -> str | None:
        rec = self.live.get(rid) or self.recent.get(rid)
        return getattr(rec, "entry", None)

    def _recent_dead_ids(self) -> list[int]:
        return [rid for rid, rec in self.recent.items()
                if getattr(rec, "state", None) in (State.CANCELLED, State.FAILED)]

    # ---- receive -----------------------------------------------------------------------------
    def _on_readable(self) -> None:
        """The PULL socket's FD fired: drain everything waiting, then re-arm.

        zmq's FD is edge-triggered, so the socket is drained until it reports
        no more input; no asyncio future is made per message (that cost
        about as much as a whole hop).
        """
        sock = self.pull
        while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            for _ in range(512):
                try:
                    parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self._handle(parts)

    def _handle(self, parts: list) -> None:
        try:
            msg = messages.decode(parts[0].buffer)
            if type(msg) is Data:  # the hot path first
                self._on_output(msg, parts[1:])
            elif type(msg) is Release:
                self.data.release_lends(msg.lend_ids)
                self._credit.set()
            elif type(msg) is Failure:
                rec = self.live.get(msg.request_id)
                if rec is not None:
                    self._fail(rec, msg.error)
            elif type(msg) is AbortAck:
                ticket = self.tickets.get(msg.request_id)
                if ticket is not None:
                    ticket.ack((msg.group, msg.replica), msg)
            elif type(msg) is Done:
                self._on_done(msg.items)
            elif type(msg) is Heartbeat:
                self.supervisor.on_heartbeat(msg)
            elif type(msg) is Stats:
                self.supervisor.on_stats(msg)
            elif type(msg) is Ready:
                self.supervisor.on_ready(msg)
            elif type(msg) is Fatal:
                self.supervisor.on_fatal(msg)
            else:
                raise messages.MessageError(f"a {type(msg).__name__} message is not for the coordinator")
        except Exception as exc:  # noqa: BLE001 - one bad message must not stop the loop
            print(f"coordinator: dropped a message: {type(exc).__name__}: {exc}", flush=True)

    def _on_output(self, msg: Data, frames: list) -> None:
        rid = msg.request_id
        desc = msg.payload
        rec = self.live.get(rid)
        if rec is None:  # the gate is closed for this request
            if desc is not None:
                self.data.discard(desc)
                self._flush_releases()
            return
        src = msg.src
        if desc is not None:
            payload = self.data.unpack(desc, frames)
            if rec.t_first_output is None:
                rec.t_first_output = time.monotonic()
            prog = rec.stages.get(src)
            if prog is not None:
                prog.chunks += 1
            rec.push(OutputEvent("chunk", rid, stage=src, payload=payload))
        if msg.end:
            rec.ended_outputs.add(src)
            prog = rec.stages.get(src)
            if prog is not None:
                prog.done = True
            if rec.outputs <= rec.ended_outputs:
                for p in rec.stages.values():
                    p.done = True
                self._terminate(rec, State.COMPLETED, "completed", None)

    def _on_done(self, items: list[DoneItem]) -> None:
        for rid, stage, n_out, queue_ms, compute_ms in items:
            rec = self.live.get(rid) or self.recent.get(rid)
            if rec is None:
                continue
            prog = rec.stages.setdefault(stage, StageProgress())
            prog.done = True
            prog.chunks = max(prog.chunks, n_out)
            prog.queue_ms = queue_ms
            prog.compute_ms = compute_ms

    def _schedule_release_flush(self) -> None:
        if not self._release_scheduled and self.loop is not None and not self.loop.is_closed():
            self._release_scheduled = True
            self.loop.call_soon_threadsafe(self._flush_releases)

    def _flush_releases(self) -> None:
        self._release_scheduled = False
        for owner, lids in self.data.take_releases().items():
            if owner == self.endpoints.coordinator:
                self.data.release_lends(lids)
                self._credit.set()
                continue
            self.peers.send(owner, Release(lids))

    # ---- views -------------------------------------------------------------------------------
    def status(self, rid: int) -> dict | None:
        rec = self.live.get(rid) or self.recent.get(rid)
        if rec is None:
            return None
        s = rec.summary()
        held_by = [f"{p.group}/{p.replica}" for p in self.supervisor.procs.values()
                   if rid in (p.stats.get("held") or ())]
        s["held_by"] = held_by
        return s

    def snapshot(self) -> dict:
        self._forget_finished(time.monotonic())  # an idle server lets go of them too
        procs = {}
        for p in self.supervisor.procs.values():
            st = p.stats
            procs[f"{p.group}/{p.replica}"] = {
                "pid": p.pid, "ready": p.ready, "restarts": p.restarts, "node": p.node, "node_ip": p.node_ip,
                # alive: the process (pid) runs; a dead one holds nothing, and down_s says for how long
                "alive": p.alive, "recreating": p.recreating,
                "down_s": None if p.down_since is None else round(time.monotonic() - p.down_since, 3),
                "heartbeat_age_ms": round((time.monotonic() - p.last_heartbeat) * 1000, 1),
                "stats_reports": p.stats_reports,
                "held": st.get("held", []), "pool": st.get("pool", {}),
                "cuda_held": st.get("cuda_held", 0),  # CUDA IPC lends this process still keeps alive
                "cpu_wakeup": st.get("cpu_wakeup"),   # runtime/cpu_wakeup.py: off, held, released, unavailable
                "tombstones": st.get("tombstones", 0), "stages": st.get("stages", {}),
            }
        ps = self.pool.stats()
        return {"live_requests": len(self.live), "finished_requests": len(self.recent),
                "counters": dict(self.counters),
                "coordinator_pool": {"segments": ps.segments, "lent": ps.lent, "lent_bytes": ps.lent_bytes},
                "processes": procs}
