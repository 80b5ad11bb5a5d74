"""The RTP process (voice_server/transports/sip/media_process.py) on its own:
a real process, real UDP sockets on 127.0.0.1, the server's side of the link
(media_remote.py) driving it as a call does."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import numpy as np
import pytest

from voice_server.testing.rtp_peer import RtpPeer
from voice_server.testing.waiting import until
from voice_server.transports.sip.media import MediaEvents
from voice_server.transports.sip.media_remote import MediaProcess
from voice_server.transports.sip.payload import PCMU


class Seen:
    def __init__(self) -> None:
        self.audio: list[np.ndarray] = []
        self.keys: list[str] = []
        self.heard: list = []
        self.dropped: list = []

    def events(self) -> MediaEvents:
        return MediaEvents(on_audio=lambda pcm, rate: self.audio.append(pcm),
                           on_key=self.keys.append, on_heard=self.heard.append,
                           on_dropped=self.dropped.append)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_call_through_the_rtp_process():
    proc = MediaProcess()
    peer = await RtpPeer.open()
    seen = Seen()
    try:
        await proc.ensure_started()
        media = proc.new_media(PCMU, 101, ("127.0.0.1", peer.port), seen.events())
        port = free_udp_port()
        await media.bind("127.0.0.1", port)
        # a port already taken is an OSError, as in the server's own process
        other = proc.new_media(PCMU, 101, ("127.0.0.1", peer.port), Seen().events())
        with pytest.raises(OSError):
            await other.bind("127.0.0.1", port)
        media.start()
        peer.remote = ("127.0.0.1", port)
        mic = asyncio.ensure_future(peer.mic())
        # the caller's audio comes back as audio events, and keeps the line alive
        await until(lambda: len(seen.audio) >= 10, 10, "the caller's audio")
        assert all(a.dtype == np.int16 and a.size == 160 for a in seen.audio[:10])
        # the reply goes out as RTP, 20 ms a packet, and what was heard comes back
        tone = (8000 * np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000)).astype(np.int16)
        media.play("resp_1", "item_1", tone, 16000)
        media.finish("resp_1")
        await until(lambda: any(h.item_id == "item_1" and h.ms >= 1000 for h in seen.heard), 10,
                    "the whole reply heard")
        assert peer.voiced_frames() >= 45
        # barge-in: a flush drops what is queued at once
        media.play("resp_2", "item_2", np.tile(tone, 5), 16000)
        await until(lambda: peer.voiced_frames() >= 60, 10, "the second reply playing")
        media.flush("item_2")
        await until(lambda: media.flushed_frames > 0, 5, "the flush")
        await until(lambda: peer.last_frames_silent(10), 5, "silence after the flush")
        # keys out (RFC 4733)
        media.send_digits("12")
        await until(lambda: peer.keys() == "12", 10, "the keys")
        mic.cancel()
        await media.close()
        assert media.stats["rtp_out"] > 50 and media.stats["rtp_in"] >= 10
        assert len(media.intervals_ms) > 50
        assert not proc.media
    finally:
        peer.close()
        await proc.stop()
    assert proc.proc is None


async def test_a_dead_rtp_process_ends_its_calls_and_the_next_call_starts_another():
    proc = MediaProcess()
    try:
        await proc.ensure_started()
        media = proc.new_media(PCMU, None, ("127.0.0.1", 9), Seen().events())
        await media.bind("127.0.0.1", free_udp_port())
        first = proc.proc.pid
        os.kill(first, signal.SIGKILL)
        await until(lambda: not media.alive, 10, "the media to be lost")
        await media.close()  # nothing to ask a dead process: returns at once
        again = proc.new_media(PCMU, None, ("127.0.0.1", 9), Seen().events())
        await again.bind("127.0.0.1", free_udp_port())
        assert again.alive and proc.proc.pid != first
        await again.close()
    finally:
        await proc.stop()
