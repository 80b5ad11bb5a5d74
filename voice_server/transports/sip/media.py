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
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .dtmf import EventTick, KeyWriter
from .payload import PTIME_MS, PayloadCodec, PayloadFormat
from .playout import Heard, Playout
from .rtp import CallerAudio, CallerKey, Dropped, RtpReader, RtpWriter

log = logging.getLogger("voice_server.transports.sip")

TICK_S = PTIME_MS / 1000.0
RESYNC_AFTER_S = 0.2
QUIET_AFTER_S = 0.1  # no caller audio this long: the line is silent
INTERVALS_KEPT = 3000  # one minute of send intervals


@dataclass(frozen=True)
class MediaEvents:
    """What a call's media hands the call: the caller's audio and keys, what
    the caller has heard of the reply, and datagrams it ignored."""
    on_audio: Callable[[np.ndarray, int], None]
    on_key: Callable[[str], None]
    on_heard: Callable[[Heard], None]
    on_dropped: Callable[[Dropped], None]


class RtpMedia(asyncio.DatagramProtocol):
    """The RTP of one call: bound on ``port``, sending to ``remote``."""

    def __init__(self, fmt: PayloadFormat, dtmf_pt: Optional[int], remote: tuple[str, int],
                 events: MediaEvents) -> None:
        self.codec = codec = PayloadCodec(fmt)
        self.remote = remote  # where our RTP goes (the caller's SDP)
        self.reader = RtpReader(codec, dtmf_pt, remote[0])
        self.writer = RtpWriter(fmt.payload_type, dtmf_pt, fmt.timestamp_step)
        self.playout = Playout(fmt)
        self.keys = KeyWriter(fmt.clock_rate)
        self.events: deque[EventTick] = deque()  # digits to send, tick by tick
        self.sending = True  # False while the caller holds us (they do not listen)
        self.last_rx = time.monotonic()  # the caller's last RTP (the RTP timeout reads it)
        self.last_audio = self.last_rx  # the caller's last audio frame (or silence we filled)
        self.intervals_ms: deque[float] = deque(maxlen=INTERVALS_KEPT)
        self.stats = {"rtp_in": 0, "rtp_out": 0, "dropped": 0, "keys_in": 0, "events_out": 0}
        self._on_audio, self._on_key = events.on_audio, events.on_key
        self._on_heard, self._on_dropped = events.on_heard, events.on_dropped
        self._silence = codec.encode(np.zeros(fmt.frame_samples, np.int16))
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

    def renegotiate(self, fmt: PayloadFormat, dtmf_pt: Optional[int],
                    remote: tuple[str, int]) -> None:
        """A re-INVITE moved the stream or changed its format."""
        if fmt != self.codec.format:
            self.codec, self.playout = PayloadCodec(fmt), Playout(fmt)
            self._silence = self.codec.encode(np.zeros(fmt.frame_samples, np.int16))
            self.writer = RtpWriter(fmt.payload_type, dtmf_pt, fmt.timestamp_step)
        self.writer.dtmf_pt = dtmf_pt
        self.remote = remote
        self.reader.renegotiated(self.codec, dtmf_pt, remote[0])

    def send_digits(self, digits: str) -> None:
        self.events.extend(self.keys.ticks(digits))

    # ------------------------------------------------------------ what the call drives
    # (the same methods as :class:`.media_remote.RemoteMedia`, its stand-in in the
    # server when the RTP runs in its own process)
    def play(self, response_id: str, item_id: str, pcm: np.ndarray, rate: int) -> None:
        self.playout.audio(response_id, item_id, pcm, rate)

    def finish(self, response_id: str) -> None:
        self.playout.finish(response_id)

    def flush(self, item_id: str) -> None:
        self.playout.flush(item_id)

    def rewind(self, item_id: str, played_ms: float) -> None:
        self.playout.rewind(item_id, played_ms)

    def hold_item(self, item_id: str, paused: bool) -> None:
        self.playout.hold(item_id, paused=paused)

    def line_held(self, held: bool) -> None:
        """The caller holds us (they do not listen: nothing is sent) or resumes
        (the next packet starts a talkspurt); the RTP timeout starts afresh."""
        self.sending = not held
        self.last_rx = time.monotonic()
        if not held:
            self.writer.talkspurt()

    @property
    def alive(self) -> bool:
        return True

    @property
    def flushed_frames(self) -> int:
        return self.playout.stats.flushed_frames

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


__all__ = ["RtpMedia", "MediaEvents", "TICK_S"]
