"""A Python aiortc client for the server's OpenAI-style WebRTC endpoint.

* mic: :class:`MicTrack` plays queued PCM in real time (20 ms frames, 48 kHz),
  silence otherwise;
* remote audio: every frame of the server's track is recorded as
  (arrival time, peak) so tests see when the agent spoke and when it stopped;
* events: the ``oai-events`` data channel, JSON both ways.

Loopback-only: ICE with no STUN server (``RTCConfiguration(iceServers=[])``)
and host candidates on 127.0.0.1 (``voice_server.third_party_patches.offered_hosts``),
matching a server run with ``VOICE_AGENT_ICE_HOSTS=127.0.0.1``.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from voice_server.audio_codec import resample
from voice_server.transports.webrtc_audio import FramePacer, audio_frame, frame_to_mono
from voice_server.third_party_patches import low_latency_audio_receiver, offered_hosts
from voice_server.transports.webrtc_ice import rtc_configuration

from .events import NoMatch, next_match

RATE = 48000
FRAME = RATE // 50
AUDIBLE = 200  # peak above this: speech, not Opus noise on silence


async def offer_call(pc, base_url: str, token: str | None,
                     timeout: float = 20.0) -> httpx.Response:
    """Offer ``pc`` (host candidates on 127.0.0.1 only) with ``POST
    /v1/realtime/calls``; on 201 the answer is applied.  Returns the response,
    whatever its status, for the caller to judge."""
    offer = await pc.createOffer()
    with offered_hosts(["127.0.0.1"]):
        await pc.setLocalDescription(offer)
    headers = {"Content-Type": "application/sdp"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(timeout=timeout) as h:
        r = await h.post(base_url.rstrip("/") + "/v1/realtime/calls",
                         content=pc.localDescription.sdp, headers=headers)
    if r.status_code == 201:
        await pc.setRemoteDescription(RTCSessionDescription(sdp=r.text, type="answer"))
    return r


class MicTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.q: list = []  # [pcm48k, start future, end future]
        self.pacer = FramePacer(RATE)

    def say(self, pcm: np.ndarray, rate: int) -> tuple[asyncio.Future, asyncio.Future]:
        loop = asyncio.get_running_loop()
        start, end = loop.create_future(), loop.create_future()
        self.q.append([resample(pcm, rate, RATE) if rate != RATE else pcm, start, end])
        return start, end

    async def recv(self):
        if self.readyState != "live":
            raise MediaStreamError
        pts = await self.pacer.next_pts()
        samples = np.zeros(FRAME, np.int16)
        if self.q:
            cur = self.q[0]
            if not cur[1].done():
                cur[1].set_result(time.monotonic())
            n = min(FRAME, cur[0].size)
            samples[:n] = cur[0][:n]
            cur[0] = cur[0][n:]
            if cur[0].size == 0:
                self.q.pop(0)
                if not cur[2].done():
                    cur[2].set_result(time.monotonic())
        return audio_frame(samples, pts, RATE)


class RTCClient:
    def __init__(self, base_url: str, token: str | None, low_latency: bool = True) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.low_latency = low_latency
        self.pc = RTCPeerConnection(rtc_configuration([]))
        self.mic = MicTrack()
        self.events: list[dict] = []
        self.new = asyncio.Event()
        self.audio: list[tuple[float, int]] = []  # (arrival monotonic, peak)
        self.frames: list[tuple[float, np.ndarray, int]] = []  # (arrival, samples, rate)
        self.open = asyncio.Event()
        self.location: str | None = None
        self.status: int | None = None
        self._tasks: list[asyncio.Task] = []
        self.channel = None

    @classmethod
    async def connect(cls, base_url: str, token: str | None, **kw) -> "RTCClient":
        c = cls(base_url, token, **kw)
        await c._connect()
        return c

    async def _connect(self) -> None:
        pc = self.pc
        self.channel = pc.createDataChannel("oai-events")
        self.channel.on("open", self.open.set)

        @self.channel.on("message")
        def on_message(m):
            ev = json.loads(m)
            ev["_t"] = time.monotonic()
            self.events.append(ev)
            self.new.set()

        @pc.on("track")
        def on_track(track):
            if track.kind == "audio":
                self._tasks.append(asyncio.ensure_future(self._read(track)))

        tr = pc.addTransceiver(self.mic, direction="sendrecv")
        if self.low_latency:
            low_latency_audio_receiver(tr.receiver)
        r = await offer_call(pc, self.base_url, self.token)
        self.status = r.status_code
        if r.status_code != 201:
            raise PermissionError(f"{r.status_code} {r.text}")
        self.location = r.headers.get("location")

    async def _read(self, track) -> None:
        while True:
            try:
                f = await track.recv()
            except MediaStreamError:
                return
            pcm = frame_to_mono(f)
            now = time.monotonic()
            self.audio.append((now, int(np.abs(pcm.astype(np.int32)).max())))
            self.frames.append((now, pcm, int(f.sample_rate)))

    # -------------------------------------------------------------- events
    def send(self, ev: dict) -> None:
        self.channel.send(json.dumps(ev))

    def types(self, start: int = 0) -> list[str]:
        return [e["type"] for e in self.events[start:]]

    def of_type(self, t: str) -> list[dict]:
        return [e for e in self.events if e["type"] == t]

    async def wait(self, pred, timeout: float = 30.0, start: int = 0) -> dict:
        if isinstance(pred, str):
            name = pred
            pred = lambda e: e["type"] == name  # noqa: E731
        try:
            return (await next_match(self.events, self.new, pred, start, timeout))[1]
        except NoMatch:
            raise TimeoutError(f"no matching event; got {self.types()[-20:]}") from None

    # --------------------------------------------------------------- audio
    def audible(self, t0: float = 0.0, t1: float = float("inf")) -> list[float]:
        return [t for t, p in self.audio if t0 <= t < t1 and p > AUDIBLE]

    def received(self, t0: float = 0.0, t1: float = float("inf")) -> tuple[np.ndarray, int]:
        """The remote track's samples that arrived between t0 and t1, and their rate."""
        got = [(pcm, rate) for t, pcm, rate in self.frames if t0 <= t < t1]
        if not got:
            return np.zeros(0, np.int16), 48000
        return np.concatenate([p for p, _ in got]), got[0][1]

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pc.close()
