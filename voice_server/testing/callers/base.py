"""The interface between a simulated caller (:class:`voice_server.testing.callers.Caller`)
and a transport: WebSocket (here), Twilio Media Streams (twilio.py), WebRTC
(webrtc.py).  The caller speaks Realtime events whatever the wire; each
transport translates.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time

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
        """Next server event, or None on timeout.

        ``asyncio.timeout``, not ``wait_for``: Python 3.11's ``wait_for``
        swallows a cancel that lands as an event arrives, and a reader task
        cancelled mid-reply (events streaming in) then ran on for ever - its
        caller's ``close`` never got to send the close frame, and the server
        kept the session open until its idle timeout."""
        try:
            async with asyncio.timeout(timeout):
                return await self.q.get()
        except TimeoutError:
            return None

    async def close(self) -> None: ...


class RealtimeWSTransport(CallerTransport):
    """The OpenAI Realtime WebSocket (``/v1/realtime``), audio as base64 pcm16."""

    def __init__(self, url: str, key: str | None) -> None:
        self.url, self.key = url, key
        self.q: asyncio.Queue = asyncio.Queue()

    async def connect(self) -> None:
        import websockets
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        self.ws = await websockets.connect(self.url + "?model=bench", additional_headers=headers,
                                           max_size=None)
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for m in self.ws:
                ev = json.loads(m)
                ev["_t"] = time.monotonic()
                self.q.put_nowait(ev)

    async def send_audio(self, pcm24k: np.ndarray) -> None:
        await self.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                       "audio": base64.b64encode(pcm24k.tobytes()).decode()}))

    async def send_event(self, ev: dict) -> None:
        await self.ws.send(json.dumps(ev))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


__all__ = ["CallerTransport", "RealtimeWSTransport"]
