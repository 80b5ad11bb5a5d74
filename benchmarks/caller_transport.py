"""The interface between a simulated caller (benchmarks/realtime_bench.py ``Caller``)
and a transport: WebSocket, Twilio Media Streams, WebRTC.  The caller speaks
Realtime events whatever the wire; each transport translates.
"""

from __future__ import annotations

import asyncio

import numpy as np


class CallerTransport:
    """What a simulated caller needs from a transport: audio up, events down.

    Subclasses put the server's events (Realtime schema, with ``_t`` the
    monotonic arrival time) on ``self.q``."""

    q: asyncio.Queue

    async def connect(self) -> None: ...

    async def send_audio(self, pcm24k: np.ndarray) -> None: ...

    async def send_event(self, ev: dict) -> None: ...

    async def next_event(self, timeout: float) -> dict | None:
        """Next server event, or None on timeout."""
        try:
            return await asyncio.wait_for(self.q.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def close(self) -> None: ...
