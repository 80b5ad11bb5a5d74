"""A session's listen requests: the microphone stream and push-to-talk buffers.

The session core says when listening starts, changes its parameters or stops
(``ConfigureListen`` / ``StopListen``) and what audio to feed (``FeedListen``);
this carries that out against the pipeline.  One task writes the audio, in
order, to the current listen request; one task per request reads its events
back into the session.  A listen stream that ends without being asked to
(stage crash, deadline) is reported in-band and started again with the same
parameters, up to ``RunnerOptions.listen_restarts`` times in a row.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from runtime.errors import ErrorCode
from runtime.models.voice_contract import (AGENT_SPEAKING, LINE_RATE, FINAL, LISTEN, LISTEN_LANGUAGE,
                                           LISTEN_LANGUAGE_START, LISTEN_RATE_HZ,
                                           LISTEN_TIME_KEYS)

from .runner_host import RequestKind, RunnerHost
from .session import Close, ConfigureListen, FeedListen, StopListen

log = logging.getLogger("voice_server.runner")


@dataclass
class ListenStream:
    """One listen request: the parameters it was opened with and where the
    session's input timeline stood then (its events' times are shifted by it)."""

    params: dict
    offset_ms: float
    handle: Any = None
    task: Optional[asyncio.Task] = None
    ended: bool = False  # we ended/aborted it on purpose
    agent_speaking: bool | None = None   # what the stage was last told (AGENT_SPEAKING)
    line_rate: int | None = None         # and the caller's line rate (LINE_RATE)


@dataclass
class _Pcm:
    pcm: np.ndarray


@dataclass
class _Open:
    stream: ListenStream


class _Stop:
    pass


async def next_item(queue: deque, ready: asyncio.Event):
    """The next item of a task's queue, waiting for one (the producer sets ``ready``)."""
    while not queue:
        ready.clear()
        await ready.wait()
    return queue.popleft()


class Listening:
    def __init__(self, host: RunnerHost) -> None:
        self.host = host
        self.current: ListenStream | None = None   # what the session listens with now
        self._queue: deque = deque()               # _Pcm | _Open | _Stop, in command order
        self._ready = asyncio.Event()
        self._failures = 0                         # consecutive unasked ends of the stream

    # ------------------------------------------------------------ commands
    def configure(self, c: ConfigureListen) -> None:
        stream = ListenStream(dict(c.params), self.host.session.input_ms)
        self.current = stream
        self._put(_Open(stream))

    def feed(self, c: FeedListen) -> None:
        if self.current is not None:
            self._put(_Pcm(c.pcm16k))

    def stop(self, _: StopListen | None = None) -> None:
        self.current = None
        self._put(_Stop())

    def end_all(self) -> None:
        """The session is closing: nothing restarts any more."""
        if self.current is not None:
            self.current.ended = True
        self.current = None

    def _put(self, item) -> None:
        self._queue.append(item)
        self._ready.set()

    # ------------------------------------------------------------ the writer task
    async def write(self) -> None:
        """Runs for the session's life: opens, feeds and ends listen requests in order."""
        cur: ListenStream | None = None
        while True:
            item = await next_item(self._queue, self._ready)
            if isinstance(item, _Pcm):
                # coalesce what queued up meanwhile: fewer, larger messages
                parts = [item.pcm]
                while self._queue and isinstance(self._queue[0], _Pcm):
                    parts.append(self._queue.popleft().pcm)
                if cur is None or cur.handle is None or cur.ended:
                    continue
                pcm = parts[0] if len(parts) == 1 else np.concatenate(parts)
                try:
                    await cur.handle.send(pcm, params=self._updates(cur))
                except Exception as exc:  # noqa: BLE001
                    log.warning("listen send failed: %r", exc)
            elif isinstance(item, _Open):
                await self._end(cur)
                cur = item.stream
                await self._open(cur)
            else:
                await self._end(cur)
                cur = None

    def _updates(self, stream: ListenStream) -> dict | None:
        """What the stage is told on the first chunk after it changed: whether
        the caller hears a reply (voice_contract.AGENT_SPEAKING), which spends
        early readings by it, and the rate of the caller's line (LINE_RATE)."""
        session = self.host.session
        out = {}
        speaking = bool(session.agent_speaking)
        if speaking != stream.agent_speaking:
            stream.agent_speaking = out[AGENT_SPEAKING] = speaking
        rate = session.input_rate
        if rate is not None and rate != stream.line_rate:
            stream.line_rate = out[LINE_RATE] = rate
        return out or None

    async def _open(self, stream: ListenStream) -> None:
        host = self.host
        stream.agent_speaking = bool(host.session.agent_speaking)
        stream.line_rate = host.session.input_rate
        params = {"sample_rate": LISTEN_RATE_HZ, **stream.params,
                  AGENT_SPEAKING: stream.agent_speaking, LINE_RATE: stream.line_rate}
        try:
            h = await host.pipeline.submit(None, entry=LISTEN, stream_input=True, params=params,
                                           deadline_s=host.opt.listen_deadline_s)
        except Exception as exc:  # noqa: BLE001
            self._failed(stream, {"code": ErrorCode.STAGE_UNAVAILABLE.value,
                                  "message": f"listen could not start: {exc}"})
            return
        stream.handle = h
        host.live[h.request_id] = RequestKind.LISTEN
        if stream.ended:  # stopped while submitting
            host.abort_request(h.request_id, "listen_stopped")
        stream.task = host.spawn(self._read(stream), "listen")

    async def _end(self, stream: ListenStream | None) -> None:
        if stream is None or stream.ended:
            return
        stream.ended = True
        h = stream.handle
        if h is None or h.request_id not in self.host.live:
            return
        try:
            await h.end_input()  # flushes a final for speech in progress
        except Exception:  # noqa: BLE001
            self.host.abort_request(h.request_id, "listen_stopped")

    async def _read(self, stream: ListenStream) -> None:
        host = self.host
        h = stream.handle
        off = stream.offset_ms
        term = None
        try:
            async for ev in h:
                if ev.kind != "chunk":
                    term = ev
                    continue
                p = ev.payload
                if not isinstance(p, dict):
                    continue
                if off:
                    p = dict(p)
                    for k in LISTEN_TIME_KEYS:
                        if k in p:
                            p[k] = int(round(p[k] + off))
                self._failures = 0
                host.turns.listen_event(p)
                host.dispatch(host.session.listen_event(p, host.clock()))
        finally:
            host.live.pop(h.request_id, None)
        if term is None or host.closed or stream.ended:
            return
        # The listen stream ended without us asking (stage crash, deadline): say so
        # and start a new one with the same params, so the session keeps listening.
        err = term.error.to_wire() if term.error is not None else \
            {"code": ErrorCode.INTERNAL.value, "message": f"listen stream ended ({term.kind}: {term.reason})"}
        self._failed(stream, err)

    def _failed(self, stream: ListenStream, err: dict) -> None:
        host = self.host
        if host.closed:
            return
        host.push_server_error(err.get("code", ErrorCode.INTERNAL.value),
                               f"Speech input failed: {err.get('message', '')}".strip())
        # an utterance that was being spoken gets an (empty) end, so nothing waits forever
        host.dispatch(host.session.listen_lost(host.clock()))
        if self.current is not stream:
            return
        self._failures += 1
        if self._failures > host.opt.listen_restarts:
            host.push_server_error(ErrorCode.STAGE_UNAVAILABLE.value,
                                   "Speech input keeps failing; closing the session.")
            host.dispatch([Close(1011, "speech input unavailable")])
            return
        new = ListenStream(dict(stream.params), host.session.input_ms)
        self.current = new
        self._put(_Open(new))

    # ------------------------------------------------------------ push-to-talk
    async def transcribe(self, item_id: str, pcm: np.ndarray) -> None:
        """One committed input buffer through the listen stage with lenient VAD."""
        host = self.host
        params = {"sample_rate": LISTEN_RATE_HZ, **host.opt.transcribe_params}
        if host.session.settings.language:       # the client's pin
            params[LISTEN_LANGUAGE] = host.session.settings.language
        elif host.session.language:             # detected before: where to start
            params[LISTEN_LANGUAGE_START] = host.session.language
        texts: list[str] = []
        language = None
        error = None
        rid = None
        try:
            h = await host.pipeline.submit(None, entry=LISTEN, stream_input=True, params=params,
                                           deadline_s=host.opt.transcribe_deadline_s)
            rid = h.request_id
            host.live[rid] = RequestKind.TRANSCRIBE
            step = LISTEN_RATE_HZ  # one second per message
            for i in range(0, max(pcm.size, 1), step):
                await h.send(np.ascontiguousarray(pcm[i:i + step]))
            await h.end_input()
            async for ev in h:
                if ev.kind == "chunk":
                    p = ev.payload
                    if isinstance(p, dict) and p.get("type") == FINAL and p.get("text"):
                        texts.append(str(p["text"]).strip())
                        language = language or p.get("language")
                elif ev.kind != "done":
                    error = ev.error.to_wire() if ev.error is not None else \
                        {"code": ErrorCode.INTERNAL.value, "message": f"transcription {ev.kind}"}
        except Exception as exc:  # noqa: BLE001
            error = {"code": ErrorCode.INTERNAL.value, "message": f"transcription failed: {exc}"}
        finally:
            if rid is not None:
                host.live.pop(rid, None)
        if host.closed:
            return
        text = " ".join(t for t in texts if t)
        host.dispatch(host.session.transcription_result(item_id, text, host.clock(), error=error,
                                                        language=language))
