"""A simulated caller: a microphone streaming in real time (20 ms frames,
silence between utterances, as real clients do) and a reader that records
every server event with its arrival time (``_t``), over any
:class:`~voice_server.testing.callers.base.CallerTransport`.

The same scripted speech is used by every benchmark that talks to the server:
:data:`QUESTIONS`, :data:`STORY` (a long reply to interrupt) and
:data:`INTERRUPT`; :func:`load_speech` renders them with flite.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time

import numpy as np

from ..audio import FRAME_MS, RATE, caller_pcm
from ..events import NoMatch, next_match
from .base import CallerTransport, RealtimeWSTransport

SILENCE_WINDOW_MS = 500  # the session's default server-VAD silence_duration_ms

QUESTIONS = ["what is the capital of france", "what is two plus two",
             "what color is the sky", "how are you today"]
STORY = "tell me a long story about a dragon"
INTERRUPT = "stop and tell me the time"


def load_speech(voice: str = "flite") -> dict:
    """The script as 24 kHz PCM, in ``voice`` (:func:`caller_pcm`):
    ``{"q": [...], "story": ..., "interrupt": ...}``."""
    return {"q": [caller_pcm(q, voice) for q in QUESTIONS], "story": caller_pcm(STORY, voice),
            "interrupt": caller_pcm(INTERRUPT, voice)}


def _settle(f: asyncio.Future, t: float) -> None:
    if not f.done():  # a waiter that gave up (wait_for timeout) cancelled it
        f.set_result(t)


class Caller:
    """One simulated caller: a mic task streaming in real time, and an event reader."""

    def __init__(self, transport: CallerTransport, speech: dict) -> None:
        self.t = transport
        self.speech = speech
        self.mic_queue: asyncio.Queue = asyncio.Queue()
        self.events: list[dict] = []
        self.new = asyncio.Event()
        self.late = 0
        self.done_ids: set[str] = set()
        self.echo = None     # a PlayoutEcho: the agent's voice comes back into the mic

    async def mic(self) -> None:
        """Real-time pacing: one 20 ms frame per tick, silence when nothing queued.

        If sending fails, every start/end mark still pending gets the exception:
        a caller awaiting the end of its utterance must not wait forever."""
        marks: list = []
        try:
            await self._mic(marks)
        except BaseException as exc:
            pending = [f for _, f in marks]
            while not self.mic_queue.empty():
                pending += [f for _, f in self.mic_queue.get_nowait()[1]]
            err = exc if isinstance(exc, Exception) else ConnectionError("mic stopped")
            for f in pending:
                if not f.done():
                    f.set_exception(err)
            raise

    async def _mic(self, marks: list) -> None:
        n = RATE * FRAME_MS // 1000
        t0 = time.monotonic()
        k = 0
        cur = np.zeros(0, np.int16)
        while True:
            if cur.size == 0 and not self.mic_queue.empty():
                cur, queued = self.mic_queue.get_nowait()
                marks[:] = queued
            if cur.size:
                frame, cur = cur[:n], cur[n:]
                if marks and marks[0][0] == "start":
                    _settle(marks.pop(0)[1], time.monotonic())
            else:
                frame = np.zeros(n, np.int16)
            if self.echo is not None:     # (an utterance's last frame may be short)
                # what a microphone captures in this frame's own time, even when
                # the loop is late and sends it a little after
                captured = min(t0 + k * FRAME_MS / 1000, time.monotonic())   # frame k ends then
                frame = np.clip(frame + self.echo.frame(captured, frame.size),
                                -32768, 32767).astype(np.int16)
            await self.t.send_audio(frame)
            if cur.size == 0 and marks and marks[0][0] == "end":
                _settle(marks.pop(0)[1], time.monotonic())
            k += 1
            delay = t0 + k * FRAME_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -1.0:  # fell far behind (overloaded client): resync
                t0, k = time.monotonic(), 0

    def say(self, pcm: np.ndarray) -> tuple[asyncio.Future, asyncio.Future]:
        loop = asyncio.get_running_loop()
        start, end = loop.create_future(), loop.create_future()
        self.mic_queue.put_nowait((pcm, [("start", start), ("end", end)]))
        return start, end

    async def reader(self) -> None:
        while True:
            ev = await self.t.next_event(3600)
            if ev is None:
                continue
            self.events.append(ev)
            if ev["type"] == "response.done":
                self.done_ids.add(ev["response"]["id"])
            elif ev["type"] == "response.output_audio.delta" and \
                    ev.get("_late", ev["response_id"] in self.done_ids):  # _late: played audio
                self.late += 1
            if self.echo is not None and ev["type"] == "response.output_audio.delta":
                self.echo.heard_delta(ev, ev.get("_t", time.monotonic()))
            self.new.set()

    async def wait(self, pred, start: int, timeout: float = 60.0) -> tuple[int, dict]:
        try:
            return await next_match(self.events, self.new, pred, start, timeout)
        except NoMatch:
            raise TimeoutError(f"caller: no matching event; last "
                               f"{[e['type'] for e in self.events[-8:]]}") from None


def audio_delta(e: dict) -> bool:
    return e["type"] == "response.output_audio.delta"


class Sess:
    """One simulated caller over the WebSocket (:class:`Caller`) plus the waits a
    scripted scenario needs (benchmarks/faults.py, benchmarks/soak.py)."""

    def __init__(self, url: str, speech: dict, name: str, key: str | None) -> None:
        self.t = RealtimeWSTransport(url, key)
        self.c = Caller(self.t, speech)
        self.name = name
        self.sid = None
        self.tasks: list = []

    async def open(self, max_tokens: int) -> "Sess":
        await self.t.connect()
        self.tasks = [asyncio.ensure_future(self.c.reader()), asyncio.ensure_future(self.c.mic())]
        _, ev = await self.c.wait(lambda e: e["type"] == "session.created", 0, 20)
        self.sid = ev["session"]["id"]
        await self.set_tokens(max_tokens)
        return self

    async def set_tokens(self, n: int) -> None:
        await self.t.send_event({"type": "session.update",
                                 "session": {"type": "realtime", "max_output_tokens": n}})

    def mark(self) -> int:
        return len(self.c.events)

    async def first_audio(self, n: int, timeout: float = 40) -> dict:
        return (await self.c.wait(audio_delta, n, timeout))[1]

    async def done_of(self, rid: str, n: int, timeout: float = 40) -> dict:
        return (await self.c.wait(lambda e: e["type"] == "response.done"
                                  and e["response"]["id"] == rid, n, timeout))[1]

    async def next_done(self, n: int, timeout: float = 40) -> dict:
        return (await self.c.wait(lambda e: e["type"] == "response.done", n, timeout))[1]

    def error_after(self, n: int, code: str | None = None) -> dict | None:
        for e in self.c.events[n:]:
            if e["type"] == "error" and (code is None or e["error"].get("code") == code):
                return e
        return None

    async def turn(self, pcm, timeout: float = 40) -> dict:
        n = self.mark()
        self.c.say(pcm)
        return await self.next_done(n, timeout)

    async def close(self, graceful: bool = True) -> None:
        """Stop the mic and the reader, then hang up (close frame; ``graceful``
        False: only stop reading, the socket being gone).  The hang-up comes
        whatever happened to the tasks: a caller that never hangs up leaves
        its session open on the server."""
        try:
            await stop_tasks(self.tasks)
        finally:
            if graceful:
                await self.t.close()
            else:
                self.t._reader.cancel()
                with contextlib.suppress(BaseException):
                    await self.t._reader

    def reset(self) -> None:
        """Vanish without a close frame: RST the TCP connection."""
        tr = self.t.ws.transport
        sock = tr.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        tr.abort()


__all__ = ["Caller", "Sess", "audio_delta", "load_speech", "stop_tasks", "QUESTIONS", "STORY",
           "INTERRUPT", "SILENCE_WINDOW_MS", "FRAME_MS"]


@contextlib.asynccontextmanager
async def connected(transport: CallerTransport, speech: dict | None = None,
                    session: dict | None = None, timeout: float = 30.0):
    """A caller on a connected transport, its reader and real-time mic running,
    past ``session.created`` (and ``session.update`` with ``session``, if given);
    everything is stopped and closed on the way out."""
    await transport.connect()
    c = Caller(transport, speech or {})
    tasks = [asyncio.ensure_future(c.reader()), asyncio.ensure_future(c.mic())]
    try:
        await c.wait(lambda e: e["type"] == "session.created", 0, timeout)
        if session is not None:
            await transport.send_event({"type": "session.update",
                                        "session": {"type": "realtime", **session}})
        yield c
    finally:
        try:
            await stop_tasks(tasks)
        finally:
            await transport.close()


async def stop_tasks(tasks: list) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again while any runs on:
    code awaiting ``asyncio.wait_for`` (Python 3.11) inside a task can swallow
    a cancel that lands as its wait ends (events still streaming in)."""
    while not all(task.done() for task in tasks):
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=0.5)
    await asyncio.gather(*tasks, return_exceptions=True)
