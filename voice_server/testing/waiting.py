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


async def answered_call(endpoint, timeout: float = 20.0):
    """The first call on a SIP ``endpoint`` once it is answered.

    A call is listed as soon as its INVITE is taken, before its RTP port is
    bound; a test that reads ``call.port`` earlier sends to port None."""
    return await until(lambda: next((c for c in endpoint.calls.values()
                                     if c.state.value == "active"), None), timeout, "the call")


__all__ = ["answered_call", "until"]
