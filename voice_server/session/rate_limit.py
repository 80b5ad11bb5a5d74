"""The client-event rate limit: a token bucket per session.

``ServerLimits.max_client_events_per_s`` tokens drip in per second, up to
``client_events_burst``; every client event, rejected frame and keypad key
takes one, so a flood of any kind gets ``rate_limit_exceeded`` while a burst
of normal traffic (a ``session.update`` with a ``response.create``) does not.
It runs on the caller's clock (``now_ms``) like the rest of the session.
"""

from __future__ import annotations


class TokenBucket:
    """``rate_per_s`` <= 0: unlimited.  A bucket starts full."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s = rate_per_s
        self.capacity = float(max(burst, 1))
        self.tokens = float(burst)
        self._at_ms: float | None = None

    def take(self, now_ms: float) -> bool:
        """One token if there is one; False: the event is over the limit."""
        if self.rate_per_s <= 0:
            return True
        if self.level(now_ms) < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def level(self, now_ms: float) -> float:
        """The tokens there are at ``now_ms`` (``rate_limits.updated`` reports them)."""
        if self._at_ms is not None:
            dripped = max(now_ms - self._at_ms, 0.0) * self.rate_per_s / 1000.0
            self.tokens = min(self.capacity, self.tokens + dripped)
        self._at_ms = now_ms
        return self.tokens

    def full_in_s(self) -> float:
        """Seconds until the bucket is full again, at the last level read."""
        return (self.capacity - self.tokens) / self.rate_per_s


__all__ = ["TokenBucket"]
