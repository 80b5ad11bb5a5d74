"""RTP packets of one call, socket-free: what comes in, what goes out.

:class:`RtpReader` turns ONE datagram into a list of :data:`Inbound` values
and never raises: caller audio (reordered by a jitter buffer, decoded to PCM),
a key (RFC 4733), or a :class:`Dropped` naming why the datagram was ignored
(another source, not RTP, an unknown payload type, RTCP).  :class:`RtpWriter`
numbers and stamps what goes out (one SSRC, sequence and timestamp for
audio and events alike, RFC 4733 section 2.1).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
from aiortp import JitterBuffer, RtpPacket, is_rtcp

from .dtmf import BadEvent, KeyReader, EventTick
from .payload import PayloadCodec

JITTER_SLOTS = 16  # packets the jitter buffer can hold (320 ms; a power of two)
MAX_RTP_BYTES = 1500


@dataclass
class CallerAudio:
    """The caller's audio, in order, at ``rate``."""
    pcm: np.ndarray
    rate: int


@dataclass
class CallerKey:
    """A key the caller pressed (RFC 4733)."""
    key: str


@dataclass
class Dropped:
    """A datagram ignored, and why (counted; logged throttled)."""
    why: str
    wrong_source: bool = False


Inbound = Union[CallerAudio, CallerKey, Dropped]


class RtpReader:
    """The caller's RTP: only from ``source_ip``, only our two payload types."""

    def __init__(self, codec: PayloadCodec, dtmf_pt: Optional[int], source_ip: str) -> None:
        self.codec = codec  # decodes the negotiated format
        self.dtmf_pt = dtmf_pt  # the telephone-event payload type, None: none negotiated
        self.source_ip = source_ip  # the address the caller's SDP named
        self.keys = KeyReader()
        self.jitter = JitterBuffer(JITTER_SLOTS, prefetch=0, skip_audio_gaps=True)
        self.ssrc: Optional[int] = None  # the stream we follow (a new one resets the buffer)

    def renegotiated(self, codec: PayloadCodec, dtmf_pt: Optional[int], source_ip: str) -> None:
        """A re-INVITE changed the format or the address."""
        self.codec, self.dtmf_pt, self.source_ip = codec, dtmf_pt, source_ip
        self.jitter.reset()

    def feed(self, data: bytes, addr: tuple[str, int]) -> list[Inbound]:
        if addr[0] != self.source_ip:
            return [Dropped(f"RTP from {addr[0]}, not {self.source_ip}", wrong_source=True)]
        if len(data) > MAX_RTP_BYTES or len(data) < 12:
            return [Dropped(f"{len(data)}-byte datagram")]
        if is_rtcp(data):
            return [Dropped("RTCP")]
        try:
            pkt = RtpPacket.parse(data)
        except ValueError as exc:
            return [Dropped(f"not RTP ({exc})")]
        if pkt.ssrc != self.ssrc:
            self.ssrc = pkt.ssrc
            self.jitter.reset()
        if self.dtmf_pt is not None and pkt.payload_type == self.dtmf_pt:
            return self._event(pkt)
        if pkt.payload_type != self.codec.format.payload_type:
            return [Dropped(f"payload type {pkt.payload_type}")]
        _, frame = self.jitter.add(pkt)
        return self._audio(frame)

    def _event(self, pkt: RtpPacket) -> list[Inbound]:
        out = self._audio(self.jitter.mark_non_media(pkt.sequence_number))
        try:
            key = self.keys.feed(pkt.timestamp, pkt.payload)
        except BadEvent as exc:
            return out + [Dropped(str(exc))]
        return out + ([CallerKey(key)] if key else [])

    def _audio(self, frame) -> list[Inbound]:
        if frame is None or not frame.data:
            return []
        fmt = self.codec.format
        pcm = self.codec.decode(frame.data)
        if frame.lost:  # lost packets stay as silence, so the caller's timeline holds
            pcm = np.concatenate([np.zeros(frame.lost * fmt.frame_samples, np.int16), pcm])
        return [CallerAudio(pcm, fmt.sample_rate)]


class RtpWriter:
    """Our packets: audio every tick, telephone events in place of audio."""

    def __init__(self, payload_type: int, dtmf_pt: Optional[int], timestamp_step: int) -> None:
        self.payload_type = payload_type
        self.dtmf_pt = dtmf_pt
        self.step = timestamp_step
        self.ssrc = secrets.randbits(32)
        self.seq = secrets.randbits(16)
        self.timestamp = secrets.randbits(32)
        self._event_ts = 0  # the timestamp of the event being sent
        self._marker = True  # the first packet of a talkspurt carries the marker

    def _packet(self, pt: int, ts: int, payload: bytes, marker: bool) -> bytes:
        pkt = RtpPacket(payload_type=pt, marker=int(marker), sequence_number=self.seq,
                        timestamp=ts, ssrc=self.ssrc, payload=payload)
        self.seq = (self.seq + 1) & 0xFFFF
        return pkt.serialize()

    def audio(self, payload: bytes) -> bytes:
        """One audio packet for this tick."""
        data = self._packet(self.payload_type, self.timestamp, payload, self._marker)
        self._marker = False
        self.skip()
        return data

    def events(self, tick: EventTick) -> list[bytes]:
        """The telephone-event packets of one tick (the clock moves on as for audio)."""
        if tick.starts_event:
            self._event_ts = self.timestamp
        out = [self._packet(self.dtmf_pt, self._event_ts, p, tick.marker and i == 0)
               for i, p in enumerate(tick.payloads)]
        self.skip()
        return out

    def skip(self) -> None:
        """A tick with nothing sent (hold): the timestamp still runs."""
        self.timestamp = (self.timestamp + self.step) & 0xFFFFFFFF

    def talkspurt(self) -> None:
        """The next audio packet starts a talkspurt (after hold or events)."""
        self._marker = True


__all__ = ["RtpReader", "RtpWriter", "CallerAudio", "CallerKey", "Dropped", "Inbound"]
