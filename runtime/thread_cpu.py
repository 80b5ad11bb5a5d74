"""CPU seconds of one thread of this process, read from any thread.

A stage process runs several roles on their own threads (the listen stage:
voice activity on its loop thread, recognition and the end-of-turn models on
theirs).  The process's CPU time says what the stage costs; each thread's says
which role inside it costs it, which is what a capacity budget needs: the
role that saturates first is the one whose thread nears one core.
"""

from __future__ import annotations

import time


def thread_cpu_s(ident: int | None) -> float | None:
    """CPU seconds the thread with this ``threading`` ident has used (None if unknown or gone)."""
    if ident is None:
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, OverflowError):
        return None
