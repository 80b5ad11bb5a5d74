"""The server's side of the RTP process (:mod:`.media_process`).

:class:`MediaProcess` starts the process on the first call's bind, speaks to
it over a socket pair (:mod:`.media_link`), and stops it with the endpoint.
:class:`RemoteMedia` stands for one call's media there: it has the methods a
:class:`~.call.SipCall` drives (:class:`~.call.CallMedia`), and sends each as
a message; what the media hands the call comes back as messages and reaches
the call's :class:`~.media.MediaEvents` on the server's loop.  Only ``bind``
and ``close`` wait for an answer.

If the process dies, every call it carried loses its media: ``alive`` turns
false and the call hangs up; the next call starts a new process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import subprocess
import sys
import time
from typing import Any, Optional

import numpy as np

from .media import MediaEvents
from .media_link import MediaLink, Message
from .payload import PayloadFormat
from .playout import Heard
from .rtp import Dropped

log = logging.getLogger("voice_server.transports.sip")

START_TIMEOUT_S = 20.0  # the process imports numpy and aiortp, then says "ready"
ANSWER_TIMEOUT_S = 10.0  # bind / close
STOP_TIMEOUT_S = 3.0


class MediaProcessError(RuntimeError):
    """The RTP process could not start or did not answer."""


class MediaProcess:
    """The RTP process of one endpoint (module docstring)."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self.link: Optional[MediaLink] = None
        self.media: dict[int, RemoteMedia] = {}
        self._ids = itertools.count(1)
        self._answers: dict[tuple[str, int], asyncio.Future] = {}
        self._starting: Optional[asyncio.Future] = None

    @property
    def running(self) -> bool:
        return self.link is not None and self.link.open

    def new_media(self, fmt: PayloadFormat, dtmf_pt: Optional[int], remote: tuple[str, int],
                  events: MediaEvents) -> "RemoteMedia":
        return RemoteMedia(self, next(self._ids), fmt, dtmf_pt, remote, events)

    # ------------------------------------------------------------ life
    async def ensure_started(self) -> None:
        if self.running:
            return
        if self._starting is None or self._starting.done():
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        await self.stop()
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "voice_server.transports.sip.media_process",
                 str(theirs.fileno())], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        loop = asyncio.get_running_loop()
        ready = self._answers[("ready", 0)] = loop.create_future()
        _, self.link = await loop.connect_accepted_socket(
            lambda: MediaLink(self._message, self._lost), ours)
        try:
            await asyncio.wait_for(ready, START_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.stop()
            raise MediaProcessError("the RTP process did not start") from None
        finally:
            self._answers.pop(("ready", 0), None)
        log.info("sip: RTP process %s started", self.proc.pid)

    async def stop(self) -> None:
        """Close the link (the process then ends by itself) and reap it."""
        if self.link is not None:
            self.link.close()
            self.link = None
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                await asyncio.to_thread(proc.wait, STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)

    # ------------------------------------------------------------ messages
    async def request(self, op: str, mid: int, *args: Any) -> list:
        """Send ``op`` and wait for its answer's arguments."""
        await self.ensure_started()
        fut = self._answers[(_ANSWER[op], mid)] = asyncio.get_running_loop().create_future()
        self.link.send(op, mid, *args)
        try:
            return await asyncio.wait_for(fut, ANSWER_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise MediaProcessError(f"the RTP process did not answer {op}") from None
        finally:
            self._answers.pop((_ANSWER[op], mid), None)

    def send(self, op: str, mid: int, *args: Any) -> None:
        if self.link is not None:
            self.link.send(op, mid, *args)

    def _message(self, msg: Message) -> None:
        op, mid, *args = msg
        fut = self._answers.get((op, mid))
        if fut is not None:
            if not fut.done():
                fut.set_result(args)
            return
        media = self.media.get(mid)
        if media is not None:
            media.received(op, args)

    def _lost(self) -> None:
        if self.proc is not None:
            log.warning("sip: the RTP process ended (%d calls lose their media)",
                        len(self.media))
        self.link = None
        for fut in self._answers.values():
            if not fut.done():
                fut.set_exception(MediaProcessError("the RTP process ended"))
        for media in list(self.media.values()):
            media.lost()


_ANSWER = {"bind": "bound", "close": "closed"}


class RemoteMedia:
    """One call's media in the RTP process (module docstring)."""

    def __init__(self, proc: MediaProcess, mid: int, fmt: PayloadFormat,
                 dtmf_pt: Optional[int], remote: tuple[str, int], events: MediaEvents) -> None:
        self.proc = proc
        self.mid = mid
        self.format, self.dtmf_pt, self.remote = fmt, dtmf_pt, remote
        self.events = events
        self.last_rx = time.monotonic()
        self.stats: dict = {}
        self.intervals_ms: list[float] = []  # the send intervals, once the call is closed
        self.flushed_frames = 0
        self.sending = True  # False while the caller holds us (as RtpMedia.sending)
        self._bound = False
        self._alive = True

    async def bind(self, host: str, port: int) -> None:
        """OSError: the port is taken (as :meth:`.media.RtpMedia.bind`)."""
        self.proc.media[self.mid] = self
        try:
            (error,) = await self.proc.request("bind", self.mid, host, port, self.format.name,
                                               self.dtmf_pt, *self.remote)
        except BaseException:
            self.proc.media.pop(self.mid, None)
            raise
        if error is not None:
            self.proc.media.pop(self.mid, None)
            raise OSError(error)
        self._bound = True

    def start(self) -> None:
        self.proc.send("start", self.mid)

    async def close(self) -> None:
        if self._bound and self._alive:
            with contextlib.suppress(MediaProcessError):
                self.stats, self.intervals_ms = await self.proc.request("close", self.mid)
        self._bound = False
        self.proc.media.pop(self.mid, None)

    def renegotiate(self, fmt: PayloadFormat, dtmf_pt: Optional[int],
                    remote: tuple[str, int]) -> None:
        self.format, self.dtmf_pt, self.remote = fmt, dtmf_pt, remote
        self.proc.send("renegotiate", self.mid, fmt.name, dtmf_pt, *remote)

    def send_digits(self, digits: str) -> None:
        self.proc.send("digits", self.mid, digits)

    def play(self, response_id: str, item_id: str, pcm: np.ndarray, rate: int) -> None:
        self.proc.send("play", self.mid, response_id, item_id,
                       np.asarray(pcm, np.int16).tobytes(), int(rate))

    def finish(self, response_id: str) -> None:
        self.proc.send("finish", self.mid, response_id)

    def flush(self, item_id: str) -> None:
        self.proc.send("flush", self.mid, item_id)

    def rewind(self, item_id: str, played_ms: float) -> None:
        self.proc.send("rewind", self.mid, item_id, float(played_ms))

    def hold_item(self, item_id: str, paused: bool) -> None:
        self.proc.send("hold_item", self.mid, item_id, bool(paused))

    def line_held(self, held: bool) -> None:
        self.last_rx = time.monotonic()
        self.sending = not held
        self.proc.send("line_held", self.mid, bool(held))

    @property
    def alive(self) -> bool:
        return self._alive

    # ------------------------------------------------------------ from the process
    def received(self, op: str, args: list) -> None:
        ev = self.events
        if op == "audio":
            pcm, rate, last_rx = args
            self.last_rx = max(self.last_rx, last_rx)
            ev.on_audio(np.frombuffer(pcm, np.int16).copy(), rate)
        elif op == "key":
            self.last_rx = time.monotonic()
            ev.on_key(args[0])
        elif op == "heard":
            ev.on_heard(Heard(args[0], args[1]))
        elif op == "dropped":
            ev.on_dropped(Dropped(args[0], wrong_source=args[1]))
        elif op == "flushed":
            self.flushed_frames = args[0]

    def lost(self) -> None:
        self._alive = False


__all__ = ["MediaProcess", "RemoteMedia", "MediaProcessError"]
