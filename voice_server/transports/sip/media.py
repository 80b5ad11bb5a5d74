"""One call's RTP socket and its send clock: the I/O side of the media.

The clock ticks every 20 ms against absolute deadlines (a late tick does
not push the next ones later; after a stall of more than
:data:`RESYNC_AFTER_S` it starts afresh instead of bursting), and each tick
sends exactly one packet: the next digit's telephone event, else the
playout's next frame, else silence, so the caller's jitter buffer sees a
steady stream.  On hold (the caller does not listen) nothing is sent and the
timestamps run on.  Received datagrams go through the :class:`RtpReader` and
what it finds goes to the call's callbacks.

A caller that stops sending (silence suppression, RFC 3551 section 4.1; a
test tool at the end of its capture) is heard as silence: once no audio came
for :data:`QUIET_AFTER_S`, each tick hands the session a silent frame, so its
turn detection sees the pause it would hear on a line that keeps sending.

The intervals between sends are kept (the last :data:`INTERVALS_KEPT`) so
the benchmark and the metrics can read the rhythm the caller got.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Callable, Optional

import numpy as np

from .dtmf import EventTick, KeyWriter
from .payload import PTIME_MS, PayloadCodec
from .playout import Heard, Playout
from .rtp import CallerAudio, CallerKey, Dropped, RtpReader, RtpWriter

log = logging.getLogger("voice_server.transports.sip")

TICK_S = PTIME_MS / 1000.0
RESYNC_AFTER_S = 0.2
QUIET_AFTER_S = 0.1  # no caller audio this long: the line is silent
INTERVALS_KEPT = 3000  # one minute of send intervals


class RtpMedia(asyncio.DatagramProtocol):
    """The RTP of one call: bound on ``port``, sending to ``remote``."""

    def __init__(self, codec: PayloadCodec, dtmf_pt: Optional[int], remote: tuple[str, int], *,
                 on_audio: Callable[[np.ndarray, int], None],
                 on_key: Callable[[str], None], on_heard: Callable[[Heard], None],
                 on_dropped: Callable[[Dropped], None]) -> None:
        self.codec = codec
        self.remote = remote  # where our RTP goes (the caller's SDP)
        self.reader = RtpReader(codec, dtmf_pt, remote[0])
        self.writer = RtpWriter(codec.format.payload_type, dtmf_pt, codec.format.timestamp_step)
        self.playout = Playout(codec.format)
        self.keys = KeyWriter(codec.format.clock_rate)
        self.events: deque[EventTick] = deque()  # digits to send, tick by tick
        self.sending = True  # False while the caller holds us (they do not listen)
        self.last_rx = time.monotonic()  # the caller's last RTP (the RTP timeout reads it)
        self.last_audio = self.last_rx  # the caller's last audio frame (or silence we filled)
        self.intervals_ms: deque[float] = deque(maxlen=INTERVALS_KEPT)
        self.stats = {"rtp_in": 0, "rtp_out": 0, "dropped": 0, "keys_in": 0, "events_out": 0}
        self._on_audio, self._on_key = on_audio, on_key
        self._on_heard, self._on_dropped = on_heard, on_dropped
        self._silence = codec.encode(np.zeros(codec.format.frame_samples, np.int16))
        self._transport: Optional[asyncio.DatagramTransport] = None
        self._clock: Optional[asyncio.Task] = None
        self._last_send: Optional[float] = None

    # ------------------------------------------------------------ life
    async def bind(self, host: str, port: int) -> None:
        """Bind the RTP socket (OSError: the port is taken)."""
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: self,
                                                                 local_addr=(host, port))

    def start(self) -> None:
        """Start the send clock (after the 200 OK went out)."""
        if self._clock is None:
            self._clock = asyncio.ensure_future(self._run_clock())

    async def close(self) -> None:
        if self._clock is not None:
            self._clock.cancel()
            with contextlib.suppress(BaseException):
                await self._clock
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def renegotiate(self, codec: PayloadCodec, dtmf_pt: Optional[int],
                    remote: tuple[str, int]) -> None:
        """A re-INVITE moved the stream or changed its format."""
        if codec.format != self.codec.format:
            self.codec, self.playout = codec, Playout(codec.format)
            self._silence = codec.encode(np.zeros(codec.format.frame_samples, np.int16))
            self.writer = RtpWriter(codec.format.payload_type, dtmf_pt,
                                    codec.format.timestamp_step)
        self.writer.dtmf_pt = dtmf_pt
        self.remote = remote
        self.reader.renegotiated(self.codec, dtmf_pt, remote[0])

    def send_digits(self, digits: str) -> None:
        self.events.extend(self.keys.ticks(digits))

    # ------------------------------------------------------------ in
    def datagram_received(self, data: bytes, addr) -> None:
        for msg in self.reader.feed(data, (addr[0], addr[1])):
            if isinstance(msg, CallerAudio):
                self.stats["rtp_in"] += 1
                self.last_rx = self.last_audio = time.monotonic()
                self._on_audio(msg.pcm, msg.rate)
            elif isinstance(msg, CallerKey):
                self.stats["keys_in"] += 1
                self.last_rx = time.monotonic()
                self._on_key(msg.key)
            else:
                self.stats["dropped"] += 1
                self._on_dropped(msg)

    def error_received(self, exc: Exception) -> None:  # ICMP port unreachable and the like
        log.debug("RTP socket error: %r", exc)

    # ------------------------------------------------------------ out
    async def _run_clock(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += TICK_S
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif -delay > RESYNC_AFTER_S:
                due = loop.time()  # a long stall: start afresh rather than burst
            self.tick()

    def tick(self) -> None:
        """One 20 ms tick: one packet (or none while held); silence in for a quiet line."""
        now = time.monotonic()
        if now - self.last_audio > QUIET_AFTER_S:
            self.last_audio = now - QUIET_AFTER_S + TICK_S
            fmt = self.codec.format
            self._on_audio(np.zeros(fmt.frame_samples, np.int16), fmt.sample_rate)
        if not self.sending:
            self.writer.skip()
            self._last_send = None  # the rhythm counts while we send
            return
        if self.events and self.writer.dtmf_pt is not None:
            tick = self.events.popleft()
            if tick.payloads:
                self._send(self.writer.events(tick))
                self.stats["events_out"] += len(tick.payloads)
                self.writer.talkspurt()
                return
        pcm, heard = self.playout.next()
        self._send([self.writer.audio(self._silence if pcm is None else self.codec.encode(pcm))])
        if heard is not None:
            self._on_heard(heard)

    def _send(self, packets: list[bytes]) -> None:
        if self._transport is None:
            return
        now = time.monotonic()
        if self._last_send is not None:
            self.intervals_ms.append((now - self._last_send) * 1000.0)
        self._last_send = now
        for p in packets:
            self._transport.sendto(p, self.remote)
            self.stats["rtp_out"] += 1


__all__ = ["RtpMedia", "TICK_S"]
