"""Waiting for a received message that matches, with a deadline: the one wait
loop of every client in the harness (they all collect what they receive in a
list and set an ``asyncio.Event`` on each arrival)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable, Optional


class NoMatch(Exception):
    """Nothing matched: the deadline passed (``closed`` False) or the connection
    ended first (``closed`` True)."""

    def __init__(self, closed: bool) -> None:
        super().__init__("connection closed" if closed else "timeout")
        self.closed = closed


async def next_match(items: list, new: asyncio.Event, pred: Callable[[Any], bool],
                     start: int = 0, timeout: float = 30.0,
                     closed: Optional[Callable[[], bool]] = None) -> tuple[int, Any]:
    """``(index, item)`` of the first item at ``index >= start`` for which
    ``pred`` is true, waiting on ``new`` for more; raises :class:`NoMatch`."""
    deadline = time.monotonic() + timeout
    i = start
    while True:
        while i < len(items):
            if pred(items[i]):
                return i, items[i]
            i += 1
        if closed is not None and closed():
            raise NoMatch(closed=True)
        left = deadline - time.monotonic()
        if left <= 0:
            raise NoMatch(closed=False)
        new.clear()
        # asyncio.timeout: a cancel is never swallowed (3.11's wait_for can)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await new.wait()


__all__ = ["next_match", "NoMatch"]
