"""Starts one OS process per placed stage group, watches it, restarts it.

Death is noticed two ways: the process exiting (a waiter thread sees it at
once) and missing heartbeats (a hung process is killed, then treated as
exited).  Either way the coordinator fails only the requests that process
held, with ``stage_unavailable``, and the group is started again.

A process that died holds nothing: its last stats report (held requests,
lent buffers) is dropped at its death, and whatever it still had in flight
to the coordinator is ignored (:meth:`Supervisor._sender`), so no view ever
lists a request as held by a dead process.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from runtime.config import PipelineConfig
from runtime.curve import CurveKeys
from runtime.endpoints import Endpoints
from runtime.messages import Fatal, Heartbeat, Hello, Message, Ready, Shutdown, Stats


# Heartbeats this many periods late make a ready process suspect (Supervisor._suspect).
SUSPECT_AFTER_HEARTBEATS = 3


class StageStartError(RuntimeError):
    """A stage group did not report ready; the message names it and why."""


@dataclass
class Proc:
    group: str
    replica: int
    popen: subprocess.Popen | None = None
    pid: int | None = None
    ready: bool = False
    ready_future: asyncio.Future | None = None
    last_heartbeat: float = 0.0
    restarts: int = 0
    stats: dict = field(default_factory=dict)
    stats_reports: int = 0  # how many arrived: a reader waits for one newer than its question
    stderr_tail: list[str] = field(default_factory=list)
    node: str | None = None     # where it runs: this host's name, or the Ray node id
    node_ip: str | None = None
    alive: bool = False         # a process was started and has not been seen to die
    down_since: float | None = None  # monotonic time it died (None: up, or never started)
    recreating: bool = False    # down, and a replacement is on its way

    def died(self) -> None:
        """It is gone: not ready, and it holds nothing (its last report is void)."""
        self.ready = False
        self.alive = False
        self.stats = {}
        if self.down_since is None:
            self.down_since = time.monotonic()

    @property
    def key(self) -> tuple[str, int]:
        return (self.group, self.replica)


class Supervisor:
    def __init__(self, cfg: PipelineConfig, endpoints: Endpoints, run_token: str,
                 on_death: Callable[[Proc, str], None], publish: Callable[[Message], None],
                 curve: CurveKeys | None = None) -> None:
        self.cfg = cfg
        self.curve = curve
        self.endpoints = endpoints
        self.run_token = run_token
        self.on_death = on_death
        self.publish = publish
        self.procs: dict[tuple[str, int], Proc] = {}
        for g in cfg.placement.groups:
            for r in range(g.replicas):
                self.procs[(g.name, r)] = Proc(g.name, r)
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._monitor: asyncio.Task | None = None
        self.tombstone_source: Callable[[], list[int]] = lambda: []
        # replica -> why it cannot serve now: a request routed there fails at once
        # (stage_unavailable) instead of waiting for its deadline
        self.down: dict[tuple[str, int], str] = {}
        self.on_topology: Callable = lambda nodes: None  # placement backends that move replicas

    # ---- spawning --------------------------------------------------------------------------
    def _spec(self, p: Proc) -> dict:
        """What a stage process is told on stdin (JSON only: it may travel through Ray's RPC)."""
        group = next(g for g in self.cfg.placement.groups if g.name == p.group)
        return {"config": self.cfg.model_dump(mode="json", by_alias=True), "group": p.group,
                "replica": p.replica, "endpoints": self.endpoints.to_wire(),
                "run_token": self.run_token, "tombstones": self.tombstone_source(),
                "env": group.env, "curve": self.curve.to_wire() if self.curve else None}

    def _spawn(self, p: Proc) -> None:
        spec = self._spec(p)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([x for x in sys.path if x] + [env.get("PYTHONPATH", "")])
        p.ready = False
        p.alive = True
        p.ready_future = self.loop.create_future()
        p.popen = subprocess.Popen([sys.executable, "-m", "runtime.stage_process"],
                                   stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                   start_new_session=False)
        p.pid = p.popen.pid
        p.node, p.node_ip = platform.node(), None
        p.last_heartbeat = time.monotonic()
        p.popen.stdin.write(json.dumps(spec).encode())
        p.popen.stdin.close()
        popen = p.popen
        threading.Thread(target=self._pump_stderr, args=(p, popen), daemon=True).start()
        threading.Thread(target=self._wait_exit, args=(p, popen), daemon=True).start()

    def _pump_stderr(self, p: Proc, popen: subprocess.Popen) -> None:
        for raw in popen.stderr:
            line = raw.decode(errors="replace").rstrip()
            p.stderr_tail = (p.stderr_tail + [line])[-40:]
            print(line, file=sys.stderr, flush=True)

    def _wait_exit(self, p: Proc, popen: subprocess.Popen) -> None:
        code = popen.wait()
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._exited, p, popen, code)
            except RuntimeError:
                pass

    def _exited(self, p: Proc, popen: subprocess.Popen, code: int) -> None:
        if p.popen is not popen:
            return
        was_ready = p.ready
        p.died()
        self._not_started(p, f"exited with code {code}")
        if self.stopping:
            return
        self.on_death(p, f"process {p.pid} exited with code {code}")
        p.recreating = self._will_restart(p, was_ready)
        if p.recreating:
            p.restarts += 1
            self._spawn(p)
            asyncio.ensure_future(self._await_restart(p))
        elif was_ready:  # restarts off or used up (a replacement that dies unready: _await_restart)
            self._given_up(p, f"process {p.pid} exited with code {code}")

    def _will_restart(self, p: Proc, was_ready: bool) -> bool:
        """Whether a replica that just died is started again (one that never got ready is not)."""
        return was_ready and self.cfg.control.restart and p.restarts < self.cfg.control.max_restarts

    def _not_started(self, p: Proc, why: str) -> None:
        """A process that died before 'ready': its start fails with why and its last stderr lines."""
        if p.ready_future is not None and not p.ready_future.done():
            tail = "\n    ".join(p.stderr_tail[-8:])
            p.ready_future.set_exception(StageStartError(
                f"stage group {p.group!r} (replica {p.replica}, stages {self._stages(p)}) {why} "
                f"before it was ready\n    {tail}"))

    async def _await_restart(self, p: Proc) -> None:
        try:
            await self._wait_ready(p, self.cfg.control.ready_timeout_s)
        except StageStartError as exc:
            self._restart_failed(p, exc)
            if self._running(p):  # it never got ready in time: it must not linger
                p.ready_future.cancel()  # nobody waits for it any more
                self._kill_hung(p)

    def _restart_failed(self, p: Proc, exc: Exception) -> None:
        p.recreating = False
        print(f"restart of {p.group}/{p.replica} failed: {exc}", file=sys.stderr, flush=True)
        self._given_up(p, f"its restart failed: {str(exc).splitlines()[0]}")

    def _given_up(self, p: Proc, why: str) -> None:
        """Nothing re-creates ``p`` now: requests routed to it fail at once, and health
        says the server is not live (restart it)."""
        self.down[p.key] = (f"stage group {p.group!r} replica {p.replica} is down and not being "
                            f"re-created ({why}); restart the server")

    def _stages(self, p: Proc) -> list[str]:
        return next(g.stages for g in self.cfg.placement.groups if g.name == p.group)

    # ---- messages from the processes ---------------------------------------------------------
    def _sender(self, msg: Ready | Fatal | Heartbeat | Stats) -> Proc | None:
        """The process a message came from, if it is still the current one and alive
        (a dead one's last messages may still be queued: they must not revive its report)."""
        p = self.procs.get((msg.group, msg.replica))
        return p if p is not None and p.alive and msg.pid == p.pid else None

    def on_ready(self, msg: Ready) -> None:
        p = self._sender(msg)
        if p is None:
            return
        p.ready = True
        p.down_since = None
        p.recreating = False
        self.down.pop(p.key, None)
        p.last_heartbeat = time.monotonic()
        if p.ready_future is not None and not p.ready_future.done():
            p.ready_future.set_result(None)

    def on_fatal(self, msg: Fatal) -> None:
        p = self._sender(msg)
        if p is None:
            return
        if p.ready_future is not None and not p.ready_future.done():
            p.ready_future.set_exception(StageStartError(
                f"stage group {p.group!r} (stages {self._stages(p)}) failed to start: {msg.error}"))

    def on_heartbeat(self, msg: Heartbeat) -> None:
        p = self._sender(msg)
        if p is not None:
            p.last_heartbeat = time.monotonic()

    def on_stats(self, msg: Stats) -> None:
        p = self._sender(msg)
        if p is not None:
            p.stats = msg.report
            p.stats_reports += 1
            p.last_heartbeat = time.monotonic()

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for p in self.procs.values():
            self._spawn(p)
        self._monitor = asyncio.ensure_future(self._watch())
        try:
            await asyncio.gather(*(self._wait_ready(p, self.cfg.control.ready_timeout_s)
                                   for p in self.procs.values()))
        except BaseException:
            await self.stop()
            raise

    async def _wait_ready(self, p: Proc, timeout: float) -> None:
        fut = p.ready_future
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            raise StageStartError(f"stage group {p.group!r} (stages {self._stages(p)}) did not report "
                                  f"ready within {timeout:g}s") from None

    def starting(self) -> bool:
        return any(not p.ready and self._running(p) for p in self.procs.values())

    async def _watch(self) -> None:
        dead_after = self.cfg.control.dead_after_ms / 1000.0
        suspect_after = min(dead_after, SUSPECT_AFTER_HEARTBEATS * self.cfg.control.heartbeat_ms / 1000.0)
        while not self.stopping:
            if self.starting():
                self.publish(Hello())  # SUB sockets wait for this before reporting ready
                await asyncio.sleep(0.02)
            else:
                await asyncio.sleep(0.05)
            now = time.monotonic()
            for p in self.procs.values():
                late = now - p.last_heartbeat
                if not (p.ready and late > suspect_after and self._running(p)):
                    continue
                if late > dead_after:
                    print(f"stage group {p.group!r} pid {p.pid}: no heartbeat for "
                          f"{late:.2f}s, killing it", file=sys.stderr, flush=True)
                    self._kill_hung(p)
                else:
                    self._suspect(p)

    def _running(self, p: Proc) -> bool:
        return p.popen is not None and p.popen.poll() is None

    def _kill_hung(self, p: Proc) -> None:
        p.popen.kill()  # the waiter thread then reports the exit

    def _suspect(self, p: Proc) -> None:
        """Heartbeats are late but not yet ``dead_after_ms`` late: a backend that can
        check the process's machine faster than that does so (Ray: its node's raylet)."""

    def unavailable(self, route: list[str], rid: int) -> tuple[str, str] | None:
        """(stage, why) when request ``rid`` would need a replica that cannot run now."""
        if not self.down:
            return None
        for stage in route:
            g = self.cfg.group_of(stage)
            why = self.down.get((g.name, rid % g.replicas))
            if why is not None:
                return stage, why
        return None

    def live(self) -> list[Proc]:
        return [p for p in self.procs.values() if p.ready]

    async def stop(self, grace_s: float = 5.0) -> None:
        self.stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
        self.publish(Shutdown())
        deadline = time.monotonic() + grace_s
        for p in self.procs.values():
            if p.popen is None:
                continue
            while p.popen.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.2)
            if p.popen.poll() is None:
                p.popen.kill()
            await asyncio.get_running_loop().run_in_executor(None, p.popen.wait)

    def kill(self, group: str, replica: int = 0, sig: int = signal.SIGKILL) -> int:
        """Test and fault-injection hook: signal one stage process."""
        p = self.procs[(group, replica)]
        os.kill(p.pid, sig)
        return p.pid
