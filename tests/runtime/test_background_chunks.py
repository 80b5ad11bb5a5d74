"""The chunk scheduler with an executor that finishes work on its own thread.

Why: the listen stage recognises speech off the loop's thread; its results
must be emitted in order, and a stream whose input has ended must end only
after its last background result, never before (a transcript cut off) and
never not at all (a request that hangs).
"""

from __future__ import annotations

import os
import queue
import threading
import time

from runtime.config import StageConfig
from runtime.executor import ChunkExecutor, WorkItem
from runtime.messages import ENTRY_SRC
from runtime.schedulers.chunk import ChunkScheduler


class EchoLater(ChunkExecutor):
    """Echoes each chunk at once and again, upper-cased, from one worker thread
    (in order, 20 ms each), as the listen stage's recognition thread does."""

    def __init__(self) -> None:
        super().__init__()
        self.efd = os.eventfd(0, os.EFD_NONBLOCK)
        self.lock = threading.Lock()
        self.done: list[tuple[int, list]] = []
        self.inflight: dict[int, int] = {}
        self.released: list[int] = []
        self.jobs: queue.Queue = queue.Queue()
        threading.Thread(target=self._work, daemon=True).start()

    def wakeup_fd(self) -> int:
        return self.efd

    def process(self, items: list[WorkItem]) -> list[list]:
        for it in items:
            if it.payload:
                with self.lock:
                    self.inflight[it.request_id] = self.inflight.get(it.request_id, 0) + 1
                self.jobs.put((it.request_id, it.payload))
        return [[it.payload] if it.payload else [] for it in items]

    def _work(self) -> None:
        while True:
            rid, text = self.jobs.get()
            time.sleep(0.02)
            with self.lock:
                self.done.append((rid, [text.upper()]))
                self.inflight[rid] -= 1
            os.eventfd_write(self.efd, 1)

    def has_results(self) -> bool:
        return bool(self.done)

    def collect(self):
        try:
            os.eventfd_read(self.efd)
        except BlockingIOError:
            pass
        with self.lock:
            out, self.done = self.done, []
        return out

    def pending(self, rid: int) -> bool:
        with self.lock:
            return self.inflight.get(rid, 0) > 0

    def release(self, rid: int) -> None:
        self.released.append(rid)


class Ctx:
    name = "echo"

    def __init__(self) -> None:
        self.out: list[tuple[int, object, bool]] = []
        self.finished: list[int] = []
        self.dead: set[int] = set()
        self.sched: ChunkScheduler | None = None

    def emit(self, rid, payload, end=False):
        self.out.append((rid, payload, end))
        if end:
            self.sched.done(rid)

    def finish(self, rid):
        self.finished.append(rid)
        self.sched.done(rid)

    def fail(self, rid, error):
        raise AssertionError(f"request {rid} failed: {error}")

    def expected_sources(self, rid, params):
        return {ENTRY_SRC}

    def poll_control(self):
        pass

    def is_dead(self, rid):
        return rid in self.dead


def run_until(sched: ChunkScheduler, cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "scheduler never got there"
        if sched.has_work():
            sched.run_once()
        else:
            time.sleep(0.002)


def make() -> tuple[ChunkScheduler, Ctx, EchoLater]:
    ctx, ex = Ctx(), EchoLater()
    sched = ChunkScheduler(ctx, ex, StageConfig(name="echo", executor="x:y", scheduler="chunk"))
    ctx.sched = sched
    return sched, ctx, ex


def test_background_results_are_emitted_and_the_end_waits_for_them():
    sched, ctx, ex = make()
    assert sched.wakeup_fd() == ex.efd
    sched.on_input(1, ENTRY_SRC, "a", True, False, {})
    sched.on_input(1, ENTRY_SRC, "b", True, True, {})      # input ends with work in flight
    run_until(sched, lambda: not sched.requests)
    assert ctx.out == [(1, "a", False), (1, "b", False), (1, "A", False), (1, "B", True)]
    assert ctx.finished == [] and ex.released == [1]


def test_an_end_with_nothing_left_to_say_still_finishes():
    sched, ctx, ex = make()
    sched.on_input(2, ENTRY_SRC, "x", True, False, {})
    sched.on_input(2, ENTRY_SRC, "", True, True, {})       # empty last chunk
    run_until(sched, lambda: not sched.requests)
    assert ctx.out[-1] == (2, "X", True)

    sched.on_input(3, ENTRY_SRC, "", True, True, {})       # nothing ever in flight
    run_until(sched, lambda: not sched.requests)
    assert ctx.finished == [3]


def test_results_of_a_dropped_request_are_not_emitted():
    sched, ctx, ex = make()
    sched.on_input(4, ENTRY_SRC, "q", True, False, {})
    run_until(sched, lambda: len(ctx.out) == 1)
    ctx.dead.add(4)
    sched.drop(4)                                          # abort while its work runs
    deadline = time.monotonic() + 2
    while ex.pending(4) and time.monotonic() < deadline:
        time.sleep(0.005)
    run_until(sched, lambda: not sched.has_work())
    assert ctx.out == [(4, "q", False)] and ex.released == [4]


def test_several_results_collected_at_once_after_the_end_are_all_emitted():
    """Found with the listen stage fed faster than real time: three transcripts came
    back in one collect() after the input ended, and the stream ended on the first."""
    sched, ctx, ex = make()
    for chunk in ("a", "b", "c"):
        sched.on_input(5, ENTRY_SRC, chunk, True, False, {})
    sched.on_input(5, ENTRY_SRC, "", True, True, {})
    while sched.order:
        sched.run_once()                       # the chunks, not yet their background results
    deadline = time.monotonic() + 5
    while ex.pending(5) and time.monotonic() < deadline:
        time.sleep(0.005)                      # all three finish before the loop looks
    run_until(sched, lambda: not sched.requests)
    assert [p for _, p, _ in ctx.out[-3:]] == ["A", "B", "C"]
    assert [e for _, _, e in ctx.out] == [False] * 5 + [True]


def test_a_params_update_on_a_later_chunk_reaches_the_executor():
    """RequestHandle.send(payload, params=...): the listen stage learns whether
    the agent speaks from the chunks it gets; the route never changes."""
    sched, ctx, ex = make()
    seen: list[dict] = []
    process = ex.process

    def recording(items):
        seen.extend(dict(it.params) for it in items)
        return process(items)

    ex.process = recording
    route = ["echo"]
    sched.on_input(5, ENTRY_SRC, "a", True, False, {"_route": route, "agent_speaking": False})
    run_until(sched, lambda: len(seen) == 1)
    sched.on_input(5, ENTRY_SRC, "b", True, False, {"agent_speaking": True, "_route": ["x"]})
    run_until(sched, lambda: len(seen) == 2)
    sched.on_input(5, ENTRY_SRC, "c", True, True, None)     # no update: it holds
    run_until(sched, lambda: not sched.requests)
    assert [p["agent_speaking"] for p in seen] == [False, True, True]
    assert all(p["_route"] == route for p in seen)
