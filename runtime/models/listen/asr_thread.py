"""Speech recognition on its own thread, so voice-activity decisions never wait for it.

The listen stage's loop thread must decide "speech started" and "speech
stopped" within a frame of the audio arriving for every caller, however much
recognition is queued.  Recognition therefore runs here, on one thread whose
CPU use the config bounds (the engines release the GIL while they compute),
and its results come back through a queue and an eventfd that the stage loop
polls beside its sockets.

Two kinds of job:

* :class:`Segment`: a whole utterance for a segment recogniser (Whisper).
  Every segment queued when the thread wakes goes into one batched call; a
  segment whose utterance has moved on (``is_current()`` false: the speaker
  went on talking after a speculative start) is dropped unrun.
* :class:`Call`: one step of a streaming recogniser (pocketsphinx), run in
  order.

A result is ``(stream_key, tag, value)``; the loop thread applies it to the
stream, which alone decides what reaches the client.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass
class Segment:
    key: int
    tag: Any
    audio: np.ndarray
    is_current: Callable[[], bool]


@dataclass
class Call:
    key: int
    tag: Any
    fn: Callable[[], Any]


class RecognitionThread:
    """A daemon thread that runs recognition jobs and hands results back to the loop."""

    def __init__(self, transcribe: Callable[[list[np.ndarray]], list[str]] | None,
                 max_batch: int = 8, name: str = "asr", efd: int | None = None,
                 nice: int = 0) -> None:
        self._transcribe = transcribe
        self._nice = int(nice)          # > 0: this thread yields the CPU to the stage's others
        self.max_batch = max(1, int(max_batch))
        self._jobs: deque = deque()
        self._results: deque = deque()
        self._cond = threading.Condition()
        self._busy: dict[int, int] = {}          # stream key -> jobs queued or running
        # Several threads may share one wake-up descriptor (the owner closes it).
        self._own_efd = efd is None
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if efd is None else efd
        self._stop = False
        self._signalled = False
        self.counters = {"calls": 0, "segments": 0, "dropped_stale": 0, "batch_max": 0,
                         "busy_s": 0.0}
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ---- loop-thread side ------------------------------------------------------------
    def fileno(self) -> int:
        return self._efd

    def submit(self, job: Segment | Call) -> None:
        with self._cond:
            self._jobs.append(job)
            self._busy[job.key] = self._busy.get(job.key, 0) + 1
            self._cond.notify()

    def has_results(self) -> bool:
        """A job finished since the last :meth:`results` (possibly with nothing to say:
        a stale segment ends too, and a stream waiting for it may now end)."""
        return self._signalled

    def results(self) -> list[tuple[int, Any, Any]]:
        """Every result so far, in completion order; clears the wake-up descriptor."""
        self._signalled = False
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        out = []
        while self._results:
            out.append(self._results.popleft())
        return out

    @property
    def idle(self) -> bool:
        """No job of any stream is queued or running: extra work now delays nobody."""
        return not self._busy

    def busy(self, key: int) -> bool:
        """Jobs for this stream are queued or running (their results may still come)."""
        return self._busy.get(key, 0) > 0

    def forget(self, key: int) -> None:
        """Drop a closed stream's queued jobs (a running one finishes; its result is ignored)."""
        with self._cond:
            kept = deque(j for j in self._jobs if j.key != key)
            dropped = len(self._jobs) - len(kept)
            self._jobs = kept
            left = self._busy.get(key, 0) - dropped
            if left > 0:
                self._busy[key] = left
            else:
                self._busy.pop(key, None)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)
        if self._own_efd:
            os.close(self._efd)

    # ---- recognition thread ----------------------------------------------------------
    def _take(self) -> list:
        with self._cond:
            while not self._jobs and not self._stop:
                self._cond.wait()
            if self._stop:
                return []
            first = self._jobs.popleft()
            if isinstance(first, Call):
                return [first]
            batch = [first]
            rest: deque = deque()
            while self._jobs and len(batch) < self.max_batch:
                j = self._jobs.popleft()
                (batch if isinstance(j, Segment) else rest).append(j)
            rest.extend(self._jobs)
            self._jobs = rest
            return batch

    def _done(self, job, value: Any) -> None:
        with self._cond:
            n = self._busy.get(job.key, 0) - 1
            if n > 0:
                self._busy[job.key] = n
            else:
                self._busy.pop(job.key, None)
        if value is not _STALE:
            self._results.append((job.key, job.tag, value))
        self._signalled = True
        os.eventfd_write(self._efd, 1)

    def _run(self) -> None:
        import time

        if self._nice:
            try:    # Linux: a thread's own nice value (raising it needs no privilege)
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self._nice)
            except OSError:
                pass
        while True:
            jobs = self._take()
            if not jobs:
                return
            t0 = time.perf_counter()
            if isinstance(jobs[0], Call):
                job = jobs[0]
                try:
                    value = job.fn()
                except Exception as exc:  # noqa: BLE001 - one stream's failure is its own
                    value = exc
                self._done(job, value)
            else:
                live = []
                for j in jobs:
                    if j.is_current():
                        live.append(j)
                    else:
                        self.counters["dropped_stale"] += 1
                        self._done(j, _STALE)
                if live:
                    try:
                        texts: list[Any] = list(self._transcribe([j.audio for j in live]))
                    except Exception as exc:  # noqa: BLE001 - fail these segments, keep serving
                        texts = [exc] * len(live)
                    self.counters["calls"] += 1
                    self.counters["segments"] += len(live)
                    self.counters["batch_max"] = max(self.counters["batch_max"], len(live))
                    for j, text in zip(live, texts):
                        self._done(j, text)
            self.counters["busy_s"] += time.perf_counter() - t0


_STALE = object()
