"""Hand freed heap back to the operating system (glibc ``malloc_trim``).

Why: glibc keeps pages that Python, numpy or a C library freed, for reuse.
A long-running process whose working set rises and falls (a pocketsphinx
decoder is ~90 MB of small allocations; a server's sessions come and go)
then shows its peak as its RSS for ever, which is indistinguishable from a
leak to an operator and to a soak test.  Trimming when a large owner goes
away makes RSS follow what is really in use.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time

_libc = None


def trim_heap() -> bool:
    """Release free heap pages; False where the C library has no malloc_trim."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL("libc.so.6")
        _libc.malloc_trim(0)
        return True
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return False


class HeapTrimmer:
    """At most one trim per ``min_interval_s``, run on a thread of its own.

    For an event loop: the trim walks the whole heap (milliseconds on a big
    one) and must not delay audio; requests while one is running or too soon
    after the last are dropped, since the next session to close asks again.
    The full garbage collection before it does hold the GIL (tens of ms on a
    server with 100k objects) - the same pause Python's own generation-2
    collections make at moments nobody chooses; here at most once per
    interval, right after a session ended.
    """

    def __init__(self, min_interval_s: float = 30.0) -> None:
        self.min_interval_s = min_interval_s
        self._last = float("-inf")
        self._lock = threading.Lock()
        self.trims = 0

    def request(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.min_interval_s:
                return False
            self._last = now
        threading.Thread(target=self._run, name="heap-trim", daemon=True).start()
        return True

    def _run(self) -> None:
        # Objects in reference cycles (a closed connection's protocol objects,
        # tasks and their exceptions) hold their buffers until a full
        # collection; collect first so that the trim sees them freed.
        gc.collect()
        if trim_heap():
            self.trims += 1
