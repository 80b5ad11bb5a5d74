"""The CPU clocks the budget per role reads: one thread's, from another
thread, and a step's, on the process's clock."""

import threading
import time

from runtime.step_cost import StepCost
from runtime.thread_cpu import thread_cpu_s


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_threads_clock_counts_that_thread_only():
    go, done = threading.Event(), threading.Event()

    def work():
        go.wait(5)
        _spin(0.2)
        done.set()
        time.sleep(0.5)

    t = threading.Thread(target=work)
    t.start()
    mine0, theirs0 = thread_cpu_s(threading.get_ident()), thread_cpu_s(t.ident)
    go.set()
    assert done.wait(5)
    theirs = thread_cpu_s(t.ident) - theirs0
    t.join()
    assert theirs >= 0.19
    assert thread_cpu_s(threading.get_ident()) - mine0 < theirs
    assert thread_cpu_s(None) is None


def test_a_step_counts_cpu_and_wall_and_tokens():
    cost = StepCost()
    cost.start()
    _spin(0.05)
    time.sleep(0.05)
    cost.stop(tokens=7)
    d = cost.as_dict()
    assert d["steps"] == 1 and d["tokens"] == 7
    assert 0.04 <= d["cpu_s"] < d["wall_s"]
