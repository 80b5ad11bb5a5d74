"""Speech recognition on its own thread, so voice-activity decisions never wait for it.

The listen stage's loop thread must decide "speech started" and "speech
stopped" within a frame of the audio arriving for every caller, however much
recognition is queued.  Recognition therefore runs here, on one thread whose
CPU use the config bounds (the engines release the GIL while they compute),
and its results come back through a queue and an eventfd that the stage loop
polls beside its sockets.

Two kinds of job:

* :class:`Segment`: a whole utterance for a segment recogniser (Whisper).
  Segments queued when the thread wakes go into one batched call; a segment
  whose utterance has moved on (``is_current()`` false: the speaker went on
  talking after a speculative start) is dropped unrun.
* :class:`Call`: one step of a streaming recogniser (pocketsphinx), run in
  order.

A segment is read for one of two reasons (:class:`Reading`).  The words of a
pause or of an ended utterance (``TRANSCRIPT``) are what the turn's decision
and the reply wait for; an early reading while the speaker goes on
(``EARLY``, a peek) only helps: it tells a backchannel from an interruption,
or readies the reply's prompt.  So on a busy thread:

* transcripts go first, and an early reading never rides in their batch (a
  batch costs more per segment it holds): a final waits at most for the one
  early batch already running;
* early readings run only when no transcript is queued, batched together;
* an early reading is dropped unrun when a newer one of its stream is queued
  (it has more words), when it has waited longer than ``early_max_wait_s``
  (its words are old news), or when the thread was busy more than
  ``early_max_busy`` of the last ``busy_window_s`` (near saturation every
  extra job lengthens the queue that transcripts wait in).

A result is ``(stream_key, tag, value)``; the loop thread applies it to the
stream, which alone decides what reaches the client.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable

import numpy as np

from runtime.busy_window import WINDOW_S as BUSY_WINDOW_S, BusyWindow
from runtime.thread_cpu import thread_cpu_s


class Reading(IntEnum):
    """Why a segment is read, most urgent first."""

    TRANSCRIPT = 0    # a pause's or an ended utterance's words: the turn waits for them
    EARLY = 1         # the words so far while the speaker goes on: droppable


@dataclass
class Segment:
    key: int
    tag: Any
    audio: np.ndarray
    is_current: Callable[[], bool]
    reading: Reading = Reading.TRANSCRIPT
    queued_at: float = field(default_factory=time.monotonic)
    # the stream's language (language.LanguageAsk; None: the recogniser's
    # default), or a function that says it when the segment runs (the words
    # of the utterance before may have locked it meanwhile); passed on as
    # ``languages=`` when any segment has one
    language: Any = None
    # heard over the agent's reply: a short one is also read with Whisper's
    # whole window (whisper_asr.py), passed on as ``full_window=`` when any is
    over_reply: bool = False
    # the caller's line sounds noisy (line_noise.py): read by the stage's
    # stronger recogniser where it has one, passed on as ``noisy=`` when any is
    noisy: bool = False


@dataclass
class Call:
    key: int
    tag: Any
    fn: Callable[[], Any]


class DropReason(IntEnum):
    """Why an early reading was dropped unrun (a counter each)."""

    SUPERSEDED = 0    # a newer reading of the same stream was queued
    LATE = 1          # it waited longer than early_max_wait_s
    BUSY = 2          # the thread was busy more than early_max_busy of the window


_DROP_COUNTERS = {DropReason.SUPERSEDED: "early_superseded", DropReason.LATE: "early_late",
                  DropReason.BUSY: "early_busy"}


class RecognitionThread:
    """A daemon thread that runs recognition jobs and hands results back to the loop."""

    def __init__(self, transcribe: Callable[[list[np.ndarray]], list[str]] | None,
                 max_batch: int = 8, name: str = "asr", efd: int | None = None,
                 nice: int = 0, early_max_wait_s: float = 0.3,
                 early_max_busy: float = 0.7, busy_window_s: float = BUSY_WINDOW_S) -> None:
        self._transcribe = transcribe
        self._nice = int(nice)          # > 0: this thread yields the CPU to the stage's others
        self.max_batch = max(1, int(max_batch))
        # an early reading older than this is dropped unrun; so are all of them
        # while the thread's busy fraction is above early_max_busy (1: never)
        self.early_max_wait_s = float(early_max_wait_s)
        self.early_max_busy = float(early_max_busy)
        self._jobs: deque = deque()     # calls and transcript segments, in submission order
        self._early: deque = deque()    # early-reading segments, in submission order
        self._results: deque = deque()
        self._cond = threading.Condition()
        self._busy: dict[int, int] = {}          # stream key -> jobs queued or running
        self._window = BusyWindow(busy_window_s)  # written on this thread, read under _cond
        # Several threads may share one wake-up descriptor (the owner closes it).
        self._own_efd = efd is None
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if efd is None else efd
        self._stop = False
        self._signalled = False
        self.counters = {"calls": 0, "segments": 0, "early_segments": 0, "dropped_stale": 0,
                         "early_superseded": 0, "early_late": 0, "early_busy": 0,
                         "batch_max": 0, "busy_s": 0.0,
                         # busy time by what was read: the recogniser's CPU runs
                         # on its own worker threads, so this is what splits it
                         "busy_transcript_s": 0.0, "busy_early_s": 0.0}
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ---- loop-thread side ------------------------------------------------------------
    def fileno(self) -> int:
        return self._efd

    def submit(self, job: Segment | Call) -> None:
        """Queue a job.  An early reading replaces its stream's queued one."""
        superseded = []
        with self._cond:
            if isinstance(job, Segment) and job.reading == Reading.EARLY:
                superseded = [j for j in self._early if j.key == job.key]
                if superseded:
                    self._early = deque(j for j in self._early if j.key != job.key)
                self._early.append(job)
            else:
                self._jobs.append(job)
            self._busy[job.key] = self._busy.get(job.key, 0) + 1
            self._cond.notify()
        for j in superseded:
            self._drop(j, DropReason.SUPERSEDED)

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

    def load(self) -> dict:
        """The queue now and the recent busy fraction: what an operator reads as load."""
        with self._cond:
            return {"queued": len(self._jobs),
                    "queued_early": len(self._early),
                    "busy_fraction": round(self._window.fraction(time.monotonic()), 3)}

    def cpu_s(self) -> float | None:
        """CPU seconds this thread has used (not an engine's own worker threads)."""
        return thread_cpu_s(self._thread.ident)

    def forget(self, key: int) -> None:
        """Drop a closed stream's queued jobs (a running one finishes; its result is ignored)."""
        with self._cond:
            kept = deque(j for j in self._jobs if j.key != key)
            kept_early = deque(j for j in self._early if j.key != key)
            dropped = len(self._jobs) - len(kept) + len(self._early) - len(kept_early)
            self._jobs, self._early = kept, kept_early
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
    def _take(self) -> tuple[list, list[tuple[Segment, DropReason]]]:
        """The next batch (a call alone, transcripts, or early readings) and the
        early readings dropped on the way.  Empty batch: the thread stops."""
        with self._cond:
            while not self._jobs and not self._early and not self._stop:
                self._cond.wait()
            if self._stop:
                return [], []
            if self._jobs:
                return self._take_jobs(), []
            return self._take_early(time.monotonic())

    def _take_jobs(self) -> list:
        """A call alone, or every queued transcript segment (up to max_batch); the
        calls skipped over keep their order.  Called under the lock."""
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

    def _take_early(self, now: float) -> tuple[list, list[tuple[Segment, DropReason]]]:
        """Early readings worth running now, batched; the rest dropped.  Called
        under the lock, with no transcript queued."""
        busy = self._window.fraction(now) > self.early_max_busy
        batch: list[Segment] = []
        dropped: list[tuple[Segment, DropReason]] = []
        while self._early and len(batch) < self.max_batch:
            j = self._early.popleft()
            if busy:
                dropped.append((j, DropReason.BUSY))
            elif now - j.queued_at > self.early_max_wait_s:
                dropped.append((j, DropReason.LATE))
            else:
                batch.append(j)
        return batch, dropped

    def _drop(self, job: Segment, reason: DropReason) -> None:
        self.counters[_DROP_COUNTERS[reason]] += 1
        self._done(job, _STALE)

    def _done(self, job, value: Any) -> None:
        # the result before the count: a loop that sees the stream no longer
        # busy must find its last result already there
        if value is not _STALE:
            self._results.append((job.key, job.tag, value))
        with self._cond:
            n = self._busy.get(job.key, 0) - 1
            if n > 0:
                self._busy[job.key] = n
            else:
                self._busy.pop(job.key, None)
        self._signalled = True
        os.eventfd_write(self._efd, 1)

    def _set_nice(self) -> None:
        if self._nice:
            try:    # Linux: a thread's own nice value (raising it needs no privilege)
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self._nice)
            except OSError:
                pass

    def _run(self) -> None:
        self._set_nice()
        while True:
            jobs, dropped = self._take()
            for j, reason in dropped:
                self._drop(j, reason)
            if not jobs:
                if self._stop:
                    return
                continue            # every early reading taken was dropped
            t0 = time.monotonic()
            with self._cond:
                self._window.start(t0)
            if isinstance(jobs[0], Call):
                self._run_call(jobs[0])
            else:
                self._run_segments(jobs)
            t1 = time.monotonic()
            with self._cond:
                self._window.stop(t1)
            self.counters["busy_s"] += t1 - t0
            if isinstance(jobs[0], Segment):
                early = jobs[0].reading == Reading.EARLY
                self.counters["busy_early_s" if early else "busy_transcript_s"] += t1 - t0

    def _run_call(self, job: Call) -> None:
        try:
            value = job.fn()
        except Exception as exc:  # noqa: BLE001 - one stream's failure is its own
            value = exc
        self._done(job, value)

    def _run_segments(self, jobs: list[Segment]) -> None:
        live = []
        for j in jobs:
            if j.is_current():
                live.append(j)
            else:
                self.counters["dropped_stale"] += 1
                self._done(j, _STALE)
        if not live:
            return
        try:
            audio = [j.audio for j in live]
            langs = [j.language() if callable(j.language) else j.language for j in live]
            kw: dict[str, Any] = {}
            if any(x is not None for x in langs):
                kw["languages"] = langs
            if any(j.over_reply for j in live):
                kw["full_window"] = [j.over_reply for j in live]
            if any(j.noisy for j in live):
                kw["noisy"] = [j.noisy for j in live]
            if live[0].reading == Reading.EARLY:     # a batch is all early or none
                kw["early"] = True
            texts: list[Any] = list(self._transcribe(audio, **kw))
        except Exception as exc:  # noqa: BLE001 - fail these segments, keep serving
            texts = [exc] * len(live)
        self.counters["calls"] += 1
        self.counters["segments"] += len(live)
        self.counters["early_segments"] += sum(j.reading == Reading.EARLY for j in live)
        self.counters["batch_max"] = max(self.counters["batch_max"], len(live))
        for j, text in zip(live, texts):
            self._done(j, text)


_STALE = object()
