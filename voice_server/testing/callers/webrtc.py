"""WebRTC caller for benchmarks/realtime_bench.py (``--transport webrtc``).

A :class:`CallerTransport` over the server's OpenAI-style WebRTC endpoint with
an aiortc client: the caller's 24 kHz mic frames go up as an Opus track
(paced in real time by the track), events come over the ``oai-events`` data
channel, and the agent's voice comes back on the remote track.

The bench measures audio by events; over WebRTC audio is not an event, so
each frame of the remote track that is not digital silence becomes a synthetic
``response.output_audio.delta`` (``_t`` = arrival of the decoded frame,
``_played`` = True) attributed to the latest ``response.created``.  First
audio is thus "first audible frame heard", barge-in last audio "last audible
frame heard" - what a listener gets, including Opus and both jitter buffers.
A completed ``response.done`` is handed on after the first audible frame of
its response (see ``_release``).  ``_late`` marks audible frames of a response arriving more than 150 ms after
its ``output_audio_buffer.cleared`` (audio that outlived a barge-in).

ICE: no STUN server, host candidate 127.0.0.1 (the bench server binds
loopback and is configured with ``ice_hosts=["127.0.0.1"]``).  Both ends use
the low-latency receive buffer (``voice_server.third_party_patches``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from urllib.parse import urlsplit

import numpy as np

from .base import CallerTransport
from voice_server.audio_codec import StreamResampler

RATE = 48000
FRAME = RATE // 50
AUDIBLE = 0  # a frame with any non-zero sample carries audio: decoded digital silence
# is exactly 0 here, and TTS output starts with ~200 ms of very quiet samples (peaks 15-40)
LATE_AFTER_CLEAR_S = 0.15


def http_base(url: str) -> str:
    """ws(s)://host:port/v1/realtime -> http(s)://host:port"""
    u = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(u.scheme, u.scheme)
    return f"{scheme}://{u.netloc}"


def _mic_track_class():
    from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
    from voice_server.transports.webrtc_audio import FramePacer, audio_frame

    class QueueMicTrack(MediaStreamTrack):
        """Plays what was queued, in real time; silence when nothing is queued."""
        kind = "audio"

        def __init__(self) -> None:
            super().__init__()
            self.buf = np.zeros(0, np.int16)
            self.pacer = FramePacer(RATE)

        def push(self, pcm48k: np.ndarray) -> None:
            self.buf = np.concatenate([self.buf, pcm48k])

        async def recv(self):
            if self.readyState != "live":
                raise MediaStreamError
            pts = await self.pacer.next_pts()
            if self.buf.size >= FRAME:
                samples, self.buf = self.buf[:FRAME], self.buf[FRAME:]
            else:
                samples = np.zeros(FRAME, np.int16)
            return audio_frame(samples, pts, RATE)

    return QueueMicTrack


class WebRTCTransport(CallerTransport):
    """CallerTransport (see realtime_bench.py) over WebRTC."""

    def __init__(self, url: str, key: str | None) -> None:
        self.base = http_base(url)
        self.key = key
        self.q: asyncio.Queue = asyncio.Queue()
        self._rs = StreamResampler(24000, RATE, "LQ")
        self._tasks: list[asyncio.Task] = []
        self._rid: str | None = None  # latest response.created
        self._cleared: dict[str, float] = {}
        self._started: set = set()  # output_audio_buffer.started seen
        self._heard: set = set()  # first audible frame seen
        self._held: dict[str, dict] = {}  # response.done held back, see _release
        self.pc = None

    async def connect(self) -> None:
        from aiortc import RTCPeerConnection
        from voice_server.third_party_patches import low_latency_audio_receiver
        from voice_server.transports.webrtc_audio import frame_to_mono
        from voice_server.transports.webrtc_ice import rtc_configuration

        from ..rtc_client import offer_call

        self.pc = pc = RTCPeerConnection(rtc_configuration([]))
        self.mic = _mic_track_class()()
        self.dc = pc.createDataChannel("oai-events")
        opened = asyncio.Event()
        self.dc.on("open", opened.set)

        @self.dc.on("message")
        def on_message(m):
            ev = json.loads(m)
            ev["_t"] = time.monotonic()
            t = ev.get("type")
            if t == "response.created":
                self._rid = ev["response"]["id"]
            elif t == "output_audio_buffer.started":
                self._started.add(ev.get("response_id"))
            elif t == "output_audio_buffer.cleared":
                self._cleared[ev.get("response_id")] = ev["_t"]
            elif t == "output_audio_buffer.stopped":
                self._release(ev.get("response_id"))
            elif t == "response.done" and ev["response"]["status"] != "cancelled":
                rid = ev["response"]["id"]
                if rid in self._started and rid not in self._heard:
                    self._held[rid] = ev  # see _release
                    return
                if rid == self._rid:
                    self._rid = None
            self.q.put_nowait(ev)

        async def read(track):
            from aiortc.mediastreams import MediaStreamError
            while True:
                try:
                    f = await track.recv()
                except MediaStreamError:
                    return
                now = time.monotonic()
                pcm = frame_to_mono(f)
                if self._rid is None or int(np.abs(pcm.astype(np.int32)).max()) <= AUDIBLE:
                    continue
                rid = self._rid
                cleared = self._cleared.get(rid)
                self.q.put_nowait({"type": "response.output_audio.delta",
                                   "response_id": rid, "_t": now, "_played": True,
                                   "_late": cleared is not None
                                   and now > cleared + LATE_AFTER_CLEAR_S})
                if rid not in self._heard:
                    self._heard.add(rid)
                    self._release(rid)

        @pc.on("track")
        def on_track(track):
            if track.kind == "audio":
                self._tasks.append(asyncio.ensure_future(read(track)))

        tr = pc.addTransceiver(self.mic, direction="sendrecv")
        low_latency_audio_receiver(tr.receiver)
        r = await offer_call(pc, self.base, self.key, timeout=30)
        if r.status_code != 201:
            raise ConnectionError(f"POST /v1/realtime/calls: {r.status_code} {r.text[:200]}")
        await asyncio.wait_for(opened.wait(), 20)

    def _release(self, rid) -> None:
        """Over WebRTC a completed ``response.done`` arrives when generation ends,
        usually before its first audio frame has even been heard; the bench reads
        "first audio" as the first audio event before ``response.done``.  So a
        completed response's ``response.done`` is handed on right after its first
        audible frame (or its ``output_audio_buffer.stopped``), and the frames
        after it (the playback tail) are not reported."""
        ev = self._held.pop(rid, None)
        if ev is not None:
            self.q.put_nowait(ev)
            if self._rid == rid:
                self._rid = None

    async def send_audio(self, pcm24k: np.ndarray) -> None:
        self.mic.push(self._rs.process(pcm24k))

    async def send_event(self, ev: dict) -> None:
        self.dc.send(json.dumps(ev))

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.pc is not None:
            with contextlib.suppress(Exception):
                await self.pc.close()


__all__ = ["WebRTCTransport", "http_base"]
