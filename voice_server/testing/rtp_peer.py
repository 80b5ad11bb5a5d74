"""The caller's side of RTP for SIP tests: a UDP socket on 127.0.0.1 that
keeps every packet the agent sends and sends the caller's audio or keys.

SIPp does the signalling (:mod:`.sipp`) and names this socket's port in its
SDP; the agent's RTP arrives here, and :meth:`RtpPeer.send_pcap` plays a
capture's RTP payloads to the agent in real time from the same address, so
a test decides WHEN the caller talks (after the agent's voice arrived, for a
barge-in) rather than a fixed script.
"""

from __future__ import annotations

import asyncio
import secrets
import struct
import time
from pathlib import Path
from typing import Optional

import numpy as np
from aiortp import DtmfEvent, RtpPacket

from voice_server.audio_codec import alaw_decode, mulaw_decode, resample
from voice_server.transports.sip.payload import PCMU, PayloadCodec, PayloadFormat

VOICED_LEVEL = 200  # mean |sample| of a 20 ms frame that carries voice (silence is ~0-8)


def pcap_rtp(path: Path) -> list[RtpPacket]:
    """The RTP packets of a classic pcap of Ethernet/IPv4/UDP frames (SIPp's captures)."""
    d = path.read_bytes()
    out, o = [], 24
    while o + 16 <= len(d):
        _, _, incl, _ = struct.unpack("<IIII", d[o:o + 16])
        frame = d[o + 16:o + 16 + incl]
        o += 16 + incl
        ihl = (frame[14] & 0x0F) * 4
        out.append(RtpPacket.parse(frame[14 + ihl + 8:]))
    return out


class RtpPeer(asyncio.DatagramProtocol):
    def __init__(self, mic_format: PayloadFormat = PCMU) -> None:
        self.received: list[tuple[float, RtpPacket]] = []
        self.transport: Optional[asyncio.DatagramTransport] = None
        self.remote: Optional[tuple[str, int]] = None  # the agent's RTP address
        self.ssrc = secrets.randbits(32)
        self.seq = 1000
        self.ts = 0
        self._said: list[tuple[np.ndarray, asyncio.Future, asyncio.Future]] = []  # mic queue
        self.mic_codec = PayloadCodec(mic_format)   # what :meth:`mic` sends (the offer's codec)

    @classmethod
    async def open(cls, host: str = "127.0.0.1", mic_format: PayloadFormat = PCMU) -> "RtpPeer":
        peer = cls(mic_format)
        loop = asyncio.get_running_loop()
        peer.transport, _ = await loop.create_datagram_endpoint(lambda: peer, local_addr=(host, 0))
        return peer

    @property
    def port(self) -> int:
        return self.transport.get_extra_info("sockname")[1]

    def datagram_received(self, data: bytes, addr) -> None:
        try:
            self.received.append((time.monotonic(), RtpPacket.parse(data)))
        except ValueError:
            pass

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------ what the agent sent
    def audio(self, since: float = 0.0) -> np.ndarray:
        """The agent's audio (G.711, 8 kHz) received after ``since`` (monotonic)."""
        parts = []
        for t, p in self.received:
            if t >= since and p.payload_type in (0, 8):
                parts.append((mulaw_decode if p.payload_type == 0 else alaw_decode)(p.payload))
        return np.concatenate(parts) if parts else np.zeros(0, np.int16)

    def voiced_frames(self, since: float = 0.0) -> int:
        pcm = self.audio(since)
        n = pcm.size // 160
        return int((np.abs(pcm[:n * 160].reshape(n, 160).astype(np.int32)).mean(1)
                    > VOICED_LEVEL).sum()) if n else 0

    def last_frames_silent(self, n: int = 10) -> bool:
        """The agent's last ``n`` audio packets carry no voice."""
        audio = [p for _, p in self.received if p.payload_type in (0, 8)][-n:]
        if len(audio) < n:
            return False
        pcm = np.concatenate([(mulaw_decode if p.payload_type == 0 else alaw_decode)(p.payload)
                              for p in audio]).astype(np.int32)
        return bool(np.abs(pcm).reshape(n, -1).mean(1).max() <= VOICED_LEVEL)

    def keys(self, event_pt: int = 101) -> str:
        """The RFC 4733 keys the agent sent, one per event."""
        out, last = [], None
        for _, p in self.received:
            if p.payload_type == event_pt and len(p.payload) >= 4:
                ev = DtmfEvent.parse(p.payload)
                if (p.timestamp, ev.event) != last:
                    last = (p.timestamp, ev.event)
                    out.append(ev.digit)
        return "".join(out)

    # ------------------------------------------------------------ the caller talks
    async def send_pcap(self, path: Path, *, source: Optional["RtpPeer"] = None) -> None:
        """Play a capture's payloads to :attr:`remote` in real time (their own
        timestamps' pace), from this socket (or ``source``'s)."""
        tr = (source or self).transport
        pkts = pcap_rtp(path)
        if not pkts:
            return
        rate_ms = 8.0  # G.711 and telephone-events: 8 samples a millisecond
        t0, ts0 = time.monotonic(), pkts[0].timestamp
        for p in pkts:
            due = t0 + ((p.timestamp - ts0) & 0xFFFFFFFF) / rate_ms / 1000.0
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            self.seq = (self.seq + 1) & 0xFFFF
            out = RtpPacket(payload_type=p.payload_type, marker=p.marker,
                            sequence_number=self.seq, timestamp=(self.ts + p.timestamp - ts0)
                            & 0xFFFFFFFF, ssrc=self.ssrc, payload=p.payload)
            tr.sendto(out.serialize(), self.remote)
        self.ts = (self.ts + pkts[-1].timestamp - ts0 + 240) & 0xFFFFFFFF


    # ------------------------------------------------------------ a phone's microphone
    def say(self, pcm: np.ndarray, rate: int) -> tuple[asyncio.Future, asyncio.Future]:
        """Queue speech for :meth:`mic`; futures of the monotonic times its first
        and last frame went out."""
        loop = asyncio.get_running_loop()
        started, ended = loop.create_future(), loop.create_future()
        self._said.append((resample(np.asarray(pcm, np.int16), rate,
                                    self.mic_codec.format.sample_rate), started, ended))
        return started, ended

    async def mic(self) -> None:
        """One 20 ms frame every tick as a phone sends it, in ``mic_format``
        (PCMU unless said): queued speech, else silence (run it as a task;
        cancel it to stop)."""
        fmt = self.mic_codec.format
        n = fmt.frame_samples
        t0, k, pos = time.monotonic(), 0, 0
        while True:
            frame = np.zeros(n, np.int16)
            if self._said:
                pcm, started, ended = self._said[0]
                if pos == 0 and not started.done():
                    started.set_result(time.monotonic())
                chunk = pcm[pos:pos + n]
                frame[:chunk.size] = chunk
                pos += n
                if pos >= pcm.size:
                    self._said.pop(0)
                    pos = 0
                    if not ended.done():
                        ended.set_result(time.monotonic())
            if self.remote is not None:
                self.seq = (self.seq + 1) & 0xFFFF
                self.ts = (self.ts + fmt.timestamp_step) & 0xFFFFFFFF
                pkt = RtpPacket(payload_type=fmt.payload_type, sequence_number=self.seq,
                                timestamp=self.ts, ssrc=self.ssrc, payload=self.mic_codec.encode(frame))
                self.transport.sendto(pkt.serialize(), self.remote)
            k += 1
            await asyncio.sleep(max(0.0, t0 + k * 0.02 - time.monotonic()))

    def first_voice_after(self, t: float, level: int = VOICED_LEVEL) -> Optional[float]:
        """When the first agent packet with voice arrived after ``t``."""
        for at, p in self.received:
            if at >= t and p.payload_type in (0, 8):
                pcm = (mulaw_decode if p.payload_type == 0 else alaw_decode)(p.payload)
                if np.abs(pcm.astype(np.int32)).mean() > level:
                    return at
        return None

    def silent_from(self, t: float, run: int = 5) -> Optional[float]:
        """When the agent's RTP fell silent after ``t``: the arrival of the first
        of ``run`` silent packets in a row."""
        quiet, first = 0, None
        for at, p in self.received:
            if at < t or p.payload_type not in (0, 8):
                continue
            pcm = (mulaw_decode if p.payload_type == 0 else alaw_decode)(p.payload)
            if np.abs(pcm.astype(np.int32)).mean() <= VOICED_LEVEL:
                first = at if quiet == 0 else first
                quiet += 1
                if quiet >= run:
                    return first
            else:
                quiet = 0
        return None


__all__ = ["RtpPeer", "pcap_rtp", "VOICED_LEVEL"]
