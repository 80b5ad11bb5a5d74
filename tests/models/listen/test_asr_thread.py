"""The recognition thread's side jobs: results come back through the shared
wake-up descriptor, and a thread asked to yield the CPU runs at a higher nice value."""

import os
import select
import threading

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
