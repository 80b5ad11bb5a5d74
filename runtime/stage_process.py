"""One OS process hosting one placement group (one or more fused stages).

receive -> schedule -> execute -> emit.  The loop blocks only in a zmq poll
(never spins: busy polling starves ZMQ's I/O threads), reads the control
socket between any two steps, and keeps liveness on a separate heartbeat
thread so that a long step is not mistaken for a death.

Started by the supervisor as ``python -m runtime.stage_process`` with its
spec (JSON) on stdin; exits when told, when its parent dies, or on SIGTERM.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any

import zmq

from runtime import messages
from runtime.config import PipelineConfig, StageConfig, parse_config
from runtime.cpu_wakeup import CpuWakeupLatency
from runtime.dataplane import DataPlane
from runtime.endpoints import Endpoints
from runtime.errors import ErrorCode, ErrorInfo, classify
from runtime.messages import (ENTRY_SRC, EXIT_DST, Abort, AbortAck, Data, Done, DoneItem, Failure, Fatal,
                              Heartbeat, Hello, Ready, Release, Shutdown, Stats, Topology)
from runtime.placement import COORDINATOR, NodeMap, transports_to
from runtime.schedulers import SCHEDULERS
from runtime.shm import ShmPool, remove_segments
from runtime.curve import CurveKeys, start_authenticator
from runtime.sockets import Peers, make_socket
from runtime.tombstones import Tombstones

STATS_EVERY_S = 0.2
DONE_FLUSH_S = 0.05


def _set_parent_death_signal() -> None:
    # SIGTERM, not SIGKILL: the orphan gets to remove what its dead parent left.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class StageHost:
    """A stage inside the process: its scheduler plus the routing of what it emits."""

    def __init__(self, loop: "ProcessLoop", cfg: StageConfig, executor: Any) -> None:
        self.loop = loop
        self.name = cfg.name
        self.cfg = cfg
        self.executor = executor
        self.sched = SCHEDULERS[cfg.scheduler](self, executor, cfg)
        pipe = loop.pipeline
        self.out_edges = pipe.outputs(cfg.name)
        self.in_edges = pipe.inputs(cfg.name)
        self.set_transports()
        self.final_buf: dict[tuple[int, str], list] = {}
        self.started: set[tuple[int, str]] = set()
        self.n_out: dict[int, int] = {}

    def set_transports(self) -> None:
        """Per destination stage, the transport to each of its replicas (placement may change)."""
        loop, pipe = self.loop, self.loop.pipeline
        self.transports = {e.dst: transports_to(pipe, self.name, e.dst, loop.nodes, loop.replica)
                           for e in self.out_edges}
        self.to_coord = transports_to(pipe, self.name, COORDINATOR, loop.nodes, loop.replica)[0]

    # ---- StageContext ----------------------------------------------------------------
    def expected_sources(self, rid: int, params: dict) -> set[str]:
        route = params.get("_route") or []
        if route and route[0] == self.name:
            return {ENTRY_SRC}
        srcs = {e.src for e in self.in_edges if not route or e.src in route}
        return srcs or {ENTRY_SRC}

    def poll_control(self) -> None:
        self.loop.poll_control()

    def is_dead(self, rid: int) -> bool:
        return rid in self.loop.tombstones

    def emit(self, rid: int, payload: Any, end: bool = False) -> None:
        if rid in self.loop.tombstones:
            return
        dests, params, to_exit = self._destinations(rid)
        self.n_out[rid] = self.n_out.get(rid, 0) + 1
        for e in dests:
            key = (rid, e.dst)
            if e.kind == "final":
                self.final_buf.setdefault(key, []).append(payload)
                if end:
                    chunks = self.final_buf.pop(key)
                    self._send(rid, e.dst, chunks[0] if len(chunks) == 1 else chunks,
                               has_payload=True, end=True, params=params)
            else:
                self._send(rid, e.dst, payload, has_payload=True, end=end, params=params)
        if to_exit:
            self._send(rid, EXIT_DST, payload, has_payload=True, end=end, params=params)
        if end:
            self._ended(rid)

    def finish(self, rid: int) -> None:
        if rid in self.loop.tombstones:
            return
        dests, params, to_exit = self._destinations(rid)
        for e in dests:
            buffered = self.final_buf.pop((rid, e.dst), None)
            if buffered:
                self._send(rid, e.dst, buffered[0] if len(buffered) == 1 else buffered,
                           has_payload=True, end=True, params=params)
            else:
                self._send(rid, e.dst, None, has_payload=False, end=True, params=params)
        if to_exit:
            self._send(rid, EXIT_DST, None, has_payload=False, end=True, params=params)
        self._ended(rid)

    def fail(self, rid: int, error: BaseException | ErrorInfo) -> None:
        info = error if isinstance(error, ErrorInfo) else classify(error, self.name)
        if not isinstance(error, ErrorInfo) and info.code == ErrorCode.INTERNAL:
            self.loop.log(f"stage {self.name}: request {rid} failed:\n"
                          + "".join(traceback.format_exception(error)))
        self.loop.tombstones.add(rid)
        self.loop.send_coord(Failure(rid, info))
        self.loop.forget(rid)

    # ---- routing -----------------------------------------------------------------------
    def _destinations(self, rid: int) -> tuple[list, dict, bool]:
        """Where this stage's output for ``rid`` goes: the out edges its route
        keeps (all of them without a route), the request's params, and whether
        the coordinator gets it too (no edge left, or an ``output`` stage)."""
        req = self.sched.requests.get(rid)
        params = req.params if req else {}
        route = params.get("_route") or []
        dests = [e for e in self.out_edges if not route or e.dst in route]
        return dests, params, not dests or self.cfg.output

    def _send(self, rid: int, dst: str, payload: Any, *, has_payload: bool, end: bool,
              params: dict) -> None:
        loop = self.loop
        if dst != EXIT_DST:
            local = loop.local_stage(dst, rid)
            if local is not None:
                first = (rid, dst) not in self.started
                self.started.add((rid, dst))
                loop.deliver(local, rid, self.name, payload, has_payload=has_payload, end=end,
                             params=params if first else None)
                if end:
                    self.started.discard((rid, dst))
                return
        msg = Data(dst, rid, self.name, end)
        key = (rid, dst)
        if key not in self.started and dst != EXIT_DST:
            msg.params = params
            self.started.add(key)
        if end:
            self.started.discard(key)
        frames: list = []
        if has_payload:
            if dst == EXIT_DST:
                transport = self.to_coord
            else:
                per_replica = self.transports[dst]
                transport = per_replica[rid % len(per_replica)]
            desc, frames = loop.pack(payload, rid, transport)
            msg.payload = desc
        endpoint = loop.endpoints.coordinator if dst == EXIT_DST else loop.endpoint_of(dst, rid)
        loop.peers.send(endpoint, msg, frames)

    def _ended(self, rid: int) -> None:
        req = self.sched.done(rid)
        self.loop.report_done(rid, self.name, self.n_out.pop(rid, 0), req)
        for key in [k for k in self.started if k[0] == rid]:
            self.started.discard(key)

    def drop(self, rid: int) -> bool:
        held = self.sched.drop(rid)
        for key in [k for k in self.final_buf if k[0] == rid]:
            del self.final_buf[key]
            held = True
        for key in [k for k in self.started if k[0] == rid]:
            self.started.discard(key)
        self.n_out.pop(rid, None)
        return held


class ProcessLoop:
    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.pipeline: PipelineConfig = parse_config(spec["config"], "<spec>", check_imports=False)
        self.group = self.pipeline.placement.groups[[g.name for g in self.pipeline.placement.groups].index(spec["group"])]
        self.replica = int(spec["replica"])
        self.endpoints = Endpoints.from_wire(spec["endpoints"])
        self.nodes = NodeMap.from_wire(spec.get("nodes"))
        self.my_endpoint = self.endpoints.of(self.group.name, self.replica)
        tomb = self.pipeline.tombstones
        self.tombstones = Tombstones(tomb.max_entries, tomb.ttl_s)
        for rid in spec.get("tombstones", []):
            self.tombstones.add(int(rid))
        dp = self.pipeline.data
        prefix = f"va-{spec['run_token']}-{self.group.name}{self.replica}-{os.getpid()}"
        self.pool = ShmPool(prefix, dp.max_lent_mb << 20, dp.max_cached_mb << 20)
        self.data = DataPlane(self.my_endpoint, self.pool, dp.inline_max_bytes)
        self.ctx = zmq.Context.instance()
        self.curve = CurveKeys.from_wire(spec.get("curve"))
        self.auth = start_authenticator(self.ctx, self.curve) if self.curve else None
        self.pull = make_socket(self.ctx, zmq.PULL, bind=self.my_endpoint, curve=self.curve)
        self.sub = make_socket(self.ctx, zmq.SUB, connect=self.endpoints.control_pub, subscribe=True,
                               curve=self.curve)
        self.peers = Peers(self.ctx, self.curve)
        self.poller = zmq.Poller()
        self.poller.register(self.pull, zmq.POLLIN)
        self.poller.register(self.sub, zmq.POLLIN)
        self.stages: dict[str, StageHost] = {}
        self.running = True
        # messages that came while pack() waited for credit and could not be
        # handled then (handle(blocked=True)); the loop handles them next
        self.deferred: deque[tuple[messages.Message, list]] = deque()
        self.done_reports: list = []
        self.last_done_flush = time.monotonic()
        self.last_stats = 0.0
        self.stalled: list[tuple] = []
        self.wakeup = CpuWakeupLatency(self.pipeline.cpu_wakeup_latency_us)

    # ---- setup -------------------------------------------------------------------------
    def log(self, text: str) -> None:
        print(f"[{self.group.name}/{self.replica} pid={os.getpid()}] {text}", file=sys.stderr, flush=True)

    def load_stages(self) -> None:
        for name in self.group.stages:
            scfg = self.pipeline.stage(name)
            module, _, cls_name = scfg.executor.partition(":")
            try:
                cls = getattr(importlib.import_module(module), cls_name)
            except (ImportError, AttributeError) as exc:
                raise RuntimeError(f"stage {name!r}: cannot import executor {scfg.executor!r}: {exc}") from exc
            executor = cls(**scfg.args)
            executor.load()
            host = self.stages[name] = StageHost(self, scfg, executor)
            fd = host.sched.wakeup_fd()
            if fd is not None:   # background results wake the loop like a message would
                self.poller.register(fd, zmq.POLLIN)

    def local_stage(self, name: str, rid: int) -> StageHost | None:
        return self.stages.get(name)

    def endpoint_of(self, stage: str, rid: int) -> str:
        g = self.pipeline.group_of(stage)
        return self.endpoints.of(g.name, rid % g.replicas)

    def send_coord(self, msg: messages.Message) -> None:
        self.peers.send(self.endpoints.coordinator, msg)

    def pack(self, payload: Any, rid: int, transport: str) -> tuple[Any, list]:
        desc, frames = self.data.pack(payload, rid, transport)
        while desc is None:  # credit spent: wait for releases, keep serving control
            self.flush_releases()
            self.poll_control()
            self._drain_pull(timeout_ms=5, blocked=True)
            desc, frames = self.data.pack(payload, rid, transport)
        return desc, frames

    # ---- message handling ----------------------------------------------------------------
    def deliver(self, host: StageHost, rid: int, src: str, payload: Any, *, has_payload: bool,
                end: bool, params: dict | None) -> None:
        host.sched.on_input(rid, src, payload, has_payload, end, params)

    def on_data(self, msg: Data, frames: list) -> None:
        rid = msg.request_id
        desc = msg.payload
        if rid in self.tombstones:
            if desc is not None:
                self.data.discard(desc)
            return
        host = self.stages.get(msg.to)
        if host is None:
            if desc is not None:
                self.data.discard(desc)
            self.log(f"message for unknown stage {msg.to!r} dropped")
            return
        payload = self.data.unpack(desc, frames) if desc is not None else None
        self.wakeup.update(True)       # before the work: the CPUs stay quick to wake for it
        self.deliver(host, rid, msg.src, payload, has_payload=desc is not None, end=msg.end,
                     params=msg.params)

    def on_abort(self, msg: Abort) -> None:
        rid = msg.request_id
        self.tombstones.add(rid)
        held = [name for name, h in self.stages.items() if h.drop(rid)]
        n, freed = self.pool.reclaim(rid)
        cn, cfreed = self.data.cuda_keepalive.reclaim(rid)
        if msg.ack:
            self.send_coord(AbortAck(rid, self.group.name, self.replica, list(self.stages), held,
                                     freed + cfreed, n + cn))
        self.flush_releases()

    def on_topology(self, msg: Topology) -> None:
        """A replica moved (Ray re-created it on another node): new endpoints and transports."""
        self.endpoints.groups = msg.endpoints
        self.nodes = NodeMap.from_wire(msg.nodes)
        for host in self.stages.values():
            host.set_transports()

    def forget(self, rid: int) -> None:
        for h in self.stages.values():
            h.drop(rid)
        self.pool.reclaim(rid)
        self.data.cuda_keepalive.reclaim(rid)

    def on_release(self, msg: Release) -> None:
        self.data.release_lends(msg.lend_ids)

    def handle(self, parts: list, *, blocked: bool = False) -> None:
        """One message; a failure while handling it fails its request, never the stage.

        ``blocked``: called while :meth:`pack` waits for credit.  Only releases
        (they give the credit back) and data (queued for a scheduler) are
        handled then; anything else may send, and so enter ``pack`` again: it
        waits in ``deferred`` for the loop (:meth:`handle_deferred`)."""
        msg = None
        try:
            msg = messages.decode(parts[0].buffer if hasattr(parts[0], "buffer") else parts[0])
            if blocked and type(msg) is not Data and type(msg) is not Release:
                self.deferred.append((msg, parts))
                return
            self._dispatch(msg, parts)
        except Exception as exc:  # noqa: BLE001
            self._handling_failed(msg, exc)

    def handle_deferred(self) -> None:
        while self.deferred:
            msg, parts = self.deferred.popleft()
            try:
                self._dispatch(msg, parts)
            except Exception as exc:  # noqa: BLE001
                self._handling_failed(msg, exc)

    def _handling_failed(self, msg: messages.Message | None, exc: Exception) -> None:
        if isinstance(msg, Data):
            rid: int | None = msg.request_id
        else:  # not even readable: a data message's request is still failed
            rid = exc.request_id if isinstance(exc, messages.MessageError) and exc.data else None
        what = type(msg).__name__ if msg is not None else "unreadable message"
        self.log(f"{what} for request {rid} failed:\n" + "".join(traceback.format_exception(exc)))
        if rid is not None:
            host = self.stages.get(msg.to) if isinstance(msg, Data) else None
            (host or next(iter(self.stages.values()))).fail(rid, exc)

    def _dispatch(self, msg: messages.Message, parts: list) -> None:
        if type(msg) is Data:
            self.on_data(msg, parts[1:])
        elif type(msg) is Release:
            self.on_release(msg)
        elif type(msg) is Abort:
            self.on_abort(msg)
        elif type(msg) is Shutdown:
            self.running = False
        elif type(msg) is Hello:
            pass
        elif type(msg) is Topology:
            self.on_topology(msg)
        else:
            self.log(f"a {type(msg).__name__} message is not for a stage; dropped")

    def poll_control(self) -> None:
        """Apply every control message waiting now (aborts, shutdown); never blocks."""
        sub = self.sub
        while sub.getsockopt(zmq.EVENTS) & zmq.POLLIN:  # cheaper than catching zmq.Again
            try:
                parts = sub.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:  # EVENTS can say POLLIN before a whole message is in (seen on tcp)
                return
            self.handle(parts)

    def _drain_pull(self, timeout_ms: int = 0, limit: int = 256, blocked: bool = False) -> None:
        """Handle what the pull socket has now (waiting up to ``timeout_ms`` for
        the first), ``blocked`` while :meth:`pack` waits for credit."""
        pull = self.pull
        if timeout_ms and not pull.poll(timeout_ms):
            return
        for _ in range(limit):
            if not pull.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                return
            try:
                parts = pull.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:  # EVENTS can say POLLIN before a whole message is in (seen on tcp)
                return
            self.handle(parts, blocked=blocked)

    def flush_releases(self) -> None:
        for owner, lids in self.data.take_releases().items():
            if owner == self.my_endpoint:
                self.data.release_lends(lids)
            else:
                self.peers.send(owner, Release(lids))

    def report_done(self, rid: int, stage: str, n_out: int, req: Any) -> None:
        if req is None:
            return
        start = req.t_start or req.t_arrive
        self.done_reports.append(DoneItem(rid, stage, n_out, round((start - req.t_arrive) * 1000, 3),
                                          round(req.compute_s * 1000, 3)))
        if len(self.done_reports) >= 64:
            self.flush_done()

    def flush_done(self) -> None:
        if self.done_reports:
            self.send_coord(Done(self.done_reports))
            self.done_reports = []
        self.last_done_flush = time.monotonic()

    def held(self) -> list[int]:
        out: set[int] = set()
        for h in self.stages.values():
            out.update(h.sched.held())
        return sorted(out)

    def send_stats(self) -> None:
        ps = self.pool.stats()
        self.send_coord(Stats(self.group.name, self.replica, os.getpid(), {
            "held": self.held(), "tombstones": len(self.tombstones),
            "pool": {"segments": ps.segments, "lent": ps.lent, "lent_bytes": ps.lent_bytes,
                     "reclaimed": ps.reclaimed, "stale_releases": ps.stale_releases},
            "cuda_held": len(self.data.cuda_keepalive), "cpu_wakeup": self.wakeup.state,
            "stages": {n: h.sched.stats() for n, h in self.stages.items()}}))
        self.last_stats = time.monotonic()

    def check_deadlines(self) -> None:
        now = time.monotonic()
        for host in self.stages.values():
            for rid in host.sched.deadline_expired(now):
                host.fail(rid, ErrorInfo.make(ErrorCode.TIMEOUT,
                                              f"stage {host.name} exceeded its deadline of "
                                              f"{host.cfg.deadline_s}s", host.name))

    # ---- main loop -------------------------------------------------------------------------
    def run(self) -> None:
        last_periodic = 0.0
        while self.running:
            self.poll_control()
            self.handle_deferred()
            self._drain_pull()
            ran = False
            for host in self.stages.values():
                if self.running and host.sched.has_work():
                    host.sched.run_once()
                    ran = True
                    self.poll_control()
            self.flush_releases()
            now = time.monotonic()
            if now - last_periodic > 0.05:
                self.check_deadlines()
                self.tombstones.expire()
                self.wakeup.update(bool(self.held()), now)
                last_periodic = now
                if now - self.last_stats > STATS_EVERY_S:
                    self.send_stats()
            if self.done_reports and now - self.last_done_flush > DONE_FLUSH_S:
                self.flush_done()  # coalesced: never one extra message per request
            if ran:
                continue  # more work may be ready; sockets are drained at the top
            hints = [h.sched.wait_hint() for h in self.stages.values()]
            hints = [x for x in hints if x is not None]
            if self.done_reports:
                hints.append(DONE_FLUSH_S)
            self.poller.poll(min([0.05] + hints) * 1000)

    def close(self) -> None:
        self.wakeup.release()
        self.flush_done()
        for h in self.stages.values():
            try:
                h.executor.close()
            except Exception:  # noqa: BLE001
                pass
        self.data.close()
        self.peers.close()
        self.pull.close(0)
        self.sub.close(0)
        if self.auth is not None:
            self.auth.stop()


def _heartbeat(spec: dict, stop: threading.Event) -> None:
    """Liveness on its own thread and socket: a long step is not a death."""
    ctx = zmq.Context.instance()
    sock = make_socket(ctx, zmq.PUSH, connect=spec["endpoints"]["coordinator"],
                       curve=CurveKeys.from_wire(spec.get("curve")))
    parent = os.getppid()
    period = spec["config"].get("control", {}).get("heartbeat_ms", 100) / 1000.0
    msg = messages.encode(Heartbeat(spec["group"], spec["replica"], os.getpid()))
    while not stop.wait(period):
        if os.getppid() != parent:
            _clean_orphaned_run(spec)
            os._exit(3)  # orphaned: the supervisor is gone
        try:
            sock.send(msg, zmq.NOBLOCK)
        except zmq.Again:
            pass
    sock.close(0)


def _clean_orphaned_run(spec: dict) -> None:
    """The supervisor died without closing the pipeline: remove the run's
    shared-memory segments and socket directory (every orphan may do this;
    removing what is already gone is harmless)."""
    remove_segments(f"va-{spec['run_token']}-")
    ep = spec["endpoints"]["coordinator"]
    if ep.startswith("ipc://"):
        shutil.rmtree(os.path.dirname(ep[len("ipc://"):]), ignore_errors=True)


def main() -> int:
    _set_parent_death_signal()
    parent = os.getppid()
    spec = json.loads(sys.stdin.read())
    for k, v in (spec.get("env") or {}).items():
        os.environ[k] = v
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    loop = ProcessLoop(spec)
    try:
        loop.load_stages()
    except BaseException as exc:  # noqa: BLE001 - report why the stage did not start
        loop.send_coord(Fatal(spec["group"], spec["replica"], os.getpid(), f"{type(exc).__name__}: {exc}"))
        loop.log("failed to start:\n" + traceback.format_exc())
        time.sleep(0.1)
        loop.close()
        return 2
    hb = threading.Thread(target=_heartbeat, args=(spec, stop), daemon=True)
    hb.start()
    # PUB/SUB joins late: wait until the coordinator's broadcasts reach us, or an
    # abort published right after 'ready' could be lost.
    if not loop.sub.poll(60_000):
        loop.log("no control broadcast within 60 s; exiting")
        return 2
    loop.send_coord(Ready(spec["group"], spec["replica"], os.getpid(), list(loop.stages)))
    signal.signal(signal.SIGTERM, lambda *_: setattr(loop, "running", False))
    profile_dir = os.environ.get("VOICE_AGENT_PROFILE_DIR")  # cProfile each stage process
    try:
        if profile_dir:
            import cProfile

            cProfile.runctx("loop.run()", globals(), {"loop": loop},
                            os.path.join(profile_dir, f"{spec['group']}-{spec['replica']}.prof"))
        else:
            loop.run()
    finally:
        stop.set()
        loop.close()
        if os.getppid() != parent:
            _clean_orphaned_run(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
