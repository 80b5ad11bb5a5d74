"""Waiting on a condition in an async test: polled, bounded, never a fixed sleep.

A loaded two-core machine stretches everything, so tests wait for what they
need to see, with a generous limit, and fail naming what never came.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")


async def until(cond: Callable[[], T], timeout: float = 30.0, what: str = "condition",
                every_s: float = 0.05) -> T:
    """Poll ``cond()`` until it is truthy; its value (AssertionError after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(every_s)


__all__ = ["until"]
