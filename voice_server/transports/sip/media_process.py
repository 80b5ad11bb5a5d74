"""The RTP process: every SIP call's RTP socket and 20 ms send clock, away
from the server's event loop.

Why a process of its own: the server's loop also runs every session (audio
in and out, events, the control plane to the stages), so a send tick can wait
behind their work, and while recognition and speech load every core the
kernel hands a busy process the CPU in slices.  This process does nothing but
RTP: it sleeps between ticks, so the kernel wakes it on time, and the
packets keep their 20 ms rhythm (docs/PERFORMANCE.md, "SIP").

:class:`.media_remote.MediaProcess` starts it as
``python -m voice_server.transports.sip.media_process FD``, FD being its end
of a socket pair.  It hosts one :class:`.media.RtpMedia` a call, exactly as
the server would, driven by the messages of :mod:`.media_link`; it answers
``bind`` and ``close`` and sends what the media hands a call (the caller's
audio and keys, what was heard, datagrams ignored).  It ends when the
server's end of the socket closes, so it never outlives the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from typing import Any

import numpy as np

from .media import MediaEvents, RtpMedia
from .media_link import MediaLink, Message
from .payload import FORMATS
from .playout import Heard
from .rtp import Dropped

log = logging.getLogger("voice_server.transports.sip")


class MediaHost:
    """The calls' media in this process, driven over ``link``."""

    def __init__(self) -> None:
        self.calls: dict[int, RtpMedia] = {}
        self.link = MediaLink(self.command, self._lost)
        self.done = asyncio.get_running_loop().create_future()
        self._tasks: set[asyncio.Task] = set()

    def _lost(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ commands
    def command(self, msg: Message) -> None:
        op, mid, *args = msg
        if op == "bind":
            self._spawn(self._bind(mid, *args))
        elif op == "close":
            self._spawn(self._close(mid))
        elif (media := self.calls.get(mid)) is not None:
            self._drive(media, mid, op, args)

    def _drive(self, media: RtpMedia, mid: int, op: str, args: list[Any]) -> None:
        if op == "start":
            media.start()
        elif op == "play":
            response_id, item_id, pcm, rate = args
            media.play(response_id, item_id, np.frombuffer(pcm, np.int16), rate)
        elif op == "finish":
            media.finish(args[0])
        elif op == "flush":
            media.flush(args[0])
            self.link.send("flushed", mid, media.flushed_frames)
        elif op == "rewind":
            media.rewind(args[0], args[1])
        elif op == "hold_item":
            media.hold_item(args[0], args[1])
        elif op == "line_held":
            media.line_held(args[0])
        elif op == "digits":
            media.send_digits(args[0])
        elif op == "renegotiate":
            fmt, dtmf_pt, host, port = args
            media.renegotiate(FORMATS[fmt], dtmf_pt, (host, port))
        else:
            log.warning("RTP process: unknown command %r", op)

    async def _bind(self, mid: int, host: str, port: int, fmt: str, dtmf_pt, rhost: str,
                    rport: int) -> None:
        media = RtpMedia(FORMATS[fmt], dtmf_pt, (rhost, rport), self._events(mid))
        try:
            await media.bind(host, port)
        except OSError as exc:
            self.link.send("bound", mid, str(exc) or type(exc).__name__)
            return
        self.calls[mid] = media
        self.link.send("bound", mid, None)

    async def _close(self, mid: int) -> None:
        media = self.calls.pop(mid, None)
        if media is None:
            self.link.send("closed", mid, {}, [])
            return
        await media.close()
        self.link.send("closed", mid, media.stats, list(media.intervals_ms))

    def _events(self, mid: int) -> MediaEvents:
        def audio(pcm: np.ndarray, rate: int) -> None:
            self.link.send("audio", mid, np.asarray(pcm, np.int16).tobytes(), rate,
                           self.calls[mid].last_rx if mid in self.calls else 0.0)

        def key(k: str) -> None:
            self.link.send("key", mid, k)

        def heard(h: Heard) -> None:
            self.link.send("heard", mid, h.item_id, h.ms)

        def dropped(d: Dropped) -> None:
            self.link.send("dropped", mid, d.why, d.wrong_source)

        return MediaEvents(on_audio=audio, on_key=key, on_heard=heard, on_dropped=dropped)

    async def close_all(self) -> None:
        for media in list(self.calls.values()):
            with contextlib.suppress(Exception):
                await media.close()
        self.calls.clear()


async def serve(fd: int) -> None:
    """Host the calls' media until the server closes its end of ``fd``."""
    loop = asyncio.get_running_loop()
    host = MediaHost()
    sock = socket.socket(fileno=fd)
    await loop.connect_accepted_socket(lambda: host.link, sock)
    host.link.send("ready", 0)
    try:
        await host.done
    finally:
        await host.close_all()


def main(argv: list[str]) -> int:
    # Ctrl-C reaches the whole process group: the server decides when this ends
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s rtp: %(message)s")
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve(int(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
