"""How much of the recent past a worker spent working: its busy fraction.

A queue's wait grows as 1 / (1 - busy) as the fraction nears 1, so it is
the figure that says a stage (or the listen stage's recognition thread) is
near saturation before its callers feel it.  Cumulative busy seconds cannot
say that without a second sample; this keeps the busy spans that overlap the
last ``window_s`` seconds (a few per second to a few hundred per window)
and the span running now, so the figure is fresh whenever it is read.
Not thread-safe: the owner serialises writes and reads.
"""

from __future__ import annotations

from collections import deque

WINDOW_S = 5.0


class BusyWindow:
    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = float(window_s)
        self._spans: deque[tuple[float, float]] = deque()   # (start, end), oldest first
        self.running_since: float | None = None              # a span in progress

    def start(self, now: float) -> None:
        """Work began at ``now`` (monotonic seconds)."""
        self.running_since = now

    def stop(self, now: float) -> None:
        """The work begun at :meth:`start` ended at ``now``."""
        if self.running_since is not None:
            self.add(self.running_since, now)
            self.running_since = None

    def add(self, start: float, end: float) -> None:
        """A finished span of work."""
        self._spans.append((start, end))
        while self._spans and self._spans[0][1] < end - self.window_s:
            self._spans.popleft()

    def fraction(self, now: float) -> float:
        """Busy share of ``[now - window_s, now]``, 0..1."""
        since = now - self.window_s
        busy = sum(max(0.0, end - max(start, since)) for start, end in self._spans)
        if self.running_since is not None:
            busy += now - max(self.running_since, since)
        return min(1.0, busy / self.window_s)


__all__ = ["BusyWindow", "WINDOW_S"]
