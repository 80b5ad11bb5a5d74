"""The recognition thread's side jobs: results come back through the shared
wake-up descriptor, and a thread asked to yield the CPU runs at a higher nice value."""

import os
import select
import threading
import time

import numpy as np

from runtime.models.listen.asr_thread import Call, RecognitionThread


def _wait_results(*threads: RecognitionThread, timeout_s: float = 5.0) -> list:
    out: list = []
    while not out:
        ready, _, _ = select.select([threads[0].fileno()], [], [], timeout_s)
        assert ready, "no result came back"
        for t in threads:
            out += t.results()
    return out


def test_a_nicer_thread_runs_below_the_stage_and_shares_the_wakeup_fd():
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    main = RecognitionThread(None, name="t-main")
    side = RecognitionThread(None, name="t-side", efd=main.fileno(), nice=5)
    try:
        side.submit(Call(1, "nice", lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        [(key, tag, value)] = _wait_results(main, side)
        assert (key, tag) == (1, "nice") and value == min(mine + 5, 19)
        main.submit(Call(2, "plain", lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        [(_, _, value)] = _wait_results(main, side)
        assert value == mine                      # the stage's other threads are untouched
    finally:
        side.close()
        main.close()


# ---- transcripts first, early readings dropped under load ------------------------------
class SlowEngine:
    """A recogniser that takes as long as the test says: each call waits for
    ``gate`` and records the tags of the batch it was given (the audio of a
    test segment is its tag number)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.calls: list[list[int]] = []

    def __call__(self, segments: list, **_) -> list[str]:
        self.calls.append([int(a[0]) for a in segments])
        self.started.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return [f"text {int(a[0])}" for a in segments]


def _segment(key: int, n: int, reading=None, **kw):
    from runtime.models.listen.asr_thread import Reading, Segment

    return Segment(key, n, np.full(1, n, dtype=np.float32), lambda: True,
                   reading=Reading.TRANSCRIPT if reading is None else reading, **kw)


def _drain(thread: RecognitionThread) -> dict:
    """Results (tag -> text) until no job is queued or running (dropped ones end too)."""
    got: dict = {}
    end = time.monotonic() + 10
    while not thread.idle:
        assert time.monotonic() < end, (got, thread.counters)
        select.select([thread.fileno()], [], [], 0.2)
        got.update({tag: text for _, tag, text in thread.results()})
    got.update({tag: text for _, tag, text in thread.results()})
    return got


def test_a_final_transcript_never_waits_behind_early_readings():
    """Early readings (peeks) queued before a transcript run after it, never
    in its batch: the transcript's call holds transcripts only."""
    from runtime.models.listen.asr_thread import Reading

    eng = SlowEngine()
    t = RecognitionThread(eng, max_batch=8, early_max_wait_s=60.0, early_max_busy=1.0)
    try:
        t.submit(_segment(1, 1))                  # running while the rest queue up
        assert eng.started.wait(5)
        t.submit(_segment(2, 10, Reading.EARLY))
        t.submit(_segment(3, 11, Reading.EARLY))
        t.submit(_segment(4, 2))                  # a final, queued after two peeks
        t.submit(_segment(5, 12, Reading.EARLY))
        t.submit(_segment(6, 3))
        assert t.load()["queued"] == 2 and t.load()["queued_early"] == 3
        eng.gate.set()
        got = _drain(t)
        assert eng.calls == [[1], [2, 3], [10, 11, 12]], eng.calls
        assert set(got) == {1, 2, 3, 10, 11, 12}
        assert t.counters["early_segments"] == 3 and t.counters["segments"] == 6
    finally:
        eng.gate.set()
        t.close()


def test_a_transcript_queued_while_peeks_wait_goes_first_every_time():
    """Under a steady stream of finals, early readings keep waiting (and go
    stale); no final's batch ever holds one."""
    from runtime.models.listen.asr_thread import Reading

    eng = SlowEngine()
    t = RecognitionThread(eng, max_batch=2, early_max_wait_s=60.0, early_max_busy=1.0)
    try:
        t.submit(_segment(1, 1))
        assert eng.started.wait(5)
        for n in range(10, 14):
            t.submit(_segment(n, n, Reading.EARLY))
        for n in range(2, 7):
            t.submit(_segment(n, n))
        eng.gate.set()
        _drain(t)
        finals = [c for c in eng.calls if any(x < 10 for x in c)]
        assert all(x < 10 for c in finals for x in c), eng.calls
        last_final = max(i for i, c in enumerate(eng.calls) if c in finals)
        first_early = min(i for i, c in enumerate(eng.calls) if c not in finals)
        assert last_final < first_early, eng.calls
    finally:
        eng.gate.set()
        t.close()


def test_early_readings_are_dropped_when_superseded_late_or_the_thread_is_busy():
    from runtime.models.listen.asr_thread import Reading

    eng = SlowEngine()
    t = RecognitionThread(eng, early_max_wait_s=0.5, early_max_busy=1.0)
    try:
        t.submit(_segment(1, 1))
        assert eng.started.wait(5)
        t.submit(_segment(7, 10, Reading.EARLY))
        t.submit(_segment(7, 11, Reading.EARLY))      # the same stream, more words
        t.submit(_segment(8, 12, Reading.EARLY, queued_at=time.monotonic() - 5))  # old news
        eng.gate.set()
        got = _drain(t)
        assert eng.calls == [[1], [11]], eng.calls
        assert 10 not in got and 12 not in got
        assert t.counters["early_superseded"] == 1 and t.counters["early_late"] == 1
        assert t.idle                              # dropped jobs end their stream's work too
    finally:
        eng.gate.set()
        t.close()

    eng = SlowEngine()
    t = RecognitionThread(eng, early_max_wait_s=60.0, early_max_busy=0.7, busy_window_s=0.5)
    try:
        t.submit(_segment(1, 1))
        assert eng.started.wait(5)
        t.submit(_segment(2, 10, Reading.EARLY))
        time.sleep(0.6)                           # the transcript fills the whole window
        eng.gate.set()
        got = _drain(t)
        assert eng.calls == [[1]] and 10 not in got
        assert t.counters["early_busy"] == 1 and t.idle
    finally:
        eng.gate.set()
        t.close()
