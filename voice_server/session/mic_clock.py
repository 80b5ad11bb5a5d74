"""When a piece of microphone audio was captured, on the session clock.

Its arrival time is a poor answer: a busy event loop, a congested network or
a client that sends in bursts delays some pieces by tens of milliseconds and
then delivers several at once.  Its position in the stream is exact, but
only up to an offset.  So the offset is the smallest delay seen lately
(arrival minus position, over ``window_ms``): the piece that came quickest
shows the path without the queueing.  A client that stops sending for a
while (push-to-talk, a muted track) starts a new stream: a delay more than
``gap_ms`` over the offset takes over at once.
"""

from __future__ import annotations

from collections import deque


class MicClock:
    def __init__(self, window_ms: float = 2000.0, gap_ms: float = 400.0) -> None:
        self.window_ms = window_ms
        self.gap_ms = gap_ms
        self.position_ms = 0.0
        self._lags: deque[tuple[float, float]] = deque()   # (arrival, delay), delays increasing

    def stamp(self, duration_ms: float, now_ms: float) -> float:
        """The capture time of the end of a piece ``duration_ms`` long that
        arrived at ``now_ms`` (never later than ``now_ms``)."""
        self.position_ms += duration_ms
        lag = now_ms - self.position_ms
        lags = self._lags
        while lags and lags[0][0] < now_ms - self.window_ms:
            lags.popleft()
        if lags and lag > lags[0][1] + self.gap_ms:
            lags.clear()
        while lags and lags[-1][1] >= lag:
            lags.pop()
        lags.append((now_ms, lag))
        return self.position_ms + lags[0][1]


__all__ = ["MicClock"]
