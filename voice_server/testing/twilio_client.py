"""Twilio's side of a bidirectional Media Stream, for tests: a real WebSocket
to ``/v1/telephony/twilio``; flite speech resampled to 8 kHz and mu-law
encoded, sent in real time in 20 ms frames followed by silence; it "plays"
the media it receives at real time and echoes each mark once the audio
before it has played, as Twilio does (and echoes pending marks at once on
``clear``).  (The benchmarks' Twilio caller, with the Realtime-event
interface of every simulated caller, is :mod:`voice_server.testing.callers.twilio`.)"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time

import numpy as np
import websockets

from voice_server.audio_codec import mulaw_decode, mulaw_encode

from . import TEST_API_KEY
from .audio import flite_pcm
from .stream_peer import StreamPeer

RATE = 8000
FRAME = 160  # bytes = samples = 20 ms


class TwilioClient(StreamPeer):
    """Plays Twilio's part of a bidirectional Media Stream.  ``msgs``: everything
    received, with ``"_t"`` and ``"_item"`` (media)."""

    def __init__(self, ws, stream_sid: str) -> None:
        super().__init__(ws)
        self.sid = stream_sid
        self.cur_item: str | None = None  # media belongs to the item of the last mark
        self.audio: dict[str, list[bytes]] = {}
        self.play_end = 0.0  # when the audio received so far has played
        self.pending: list[tuple[float, str]] = []  # (due, mark name) to echo
        self.echoed: list[str] = []
        self.mic_q: asyncio.Queue = asyncio.Queue()
        self.chunk = 0
        self._tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._player()),
                       asyncio.ensure_future(self._mic())]

    @classmethod
    async def connect(cls, base_ws: str, params: dict | None = None, headers=None,
                      start: bool = True) -> "TwilioClient":
        hdrs = {"Authorization": f"Bearer {TEST_API_KEY}"} if headers is None else headers
        ws = await websockets.connect(base_ws + "/v1/telephony/twilio",
                                      additional_headers=hdrs, max_size=None)
        c = cls(ws, "MZ" + "0" * 30)
        if start:
            await c.start(params)
        return c

    async def send(self, msg) -> None:
        await self.ws.send(msg if isinstance(msg, (str, bytes)) else json.dumps(msg))

    async def start(self, params: dict | None = None) -> None:
        await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self.send({"event": "start", "sequenceNumber": "1", "streamSid": self.sid, "start": {
            "streamSid": self.sid, "accountSid": "AC" + "0" * 32, "callSid": "CA" + "1" * 32,
            "tracks": ["inbound"], "customParameters": params or {},
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})

    def media_msg(self, frame: bytes) -> dict:
        self.chunk += 1
        return {"event": "media", "sequenceNumber": str(self.chunk + 1), "streamSid": self.sid,
                "media": {"track": "inbound", "chunk": str(self.chunk),
                          "timestamp": str(self.chunk * 20),
                          "payload": base64.b64encode(frame).decode()}}

    async def _mic(self) -> None:
        """20 ms of mu-law per tick, in real time: queued speech, else silence."""
        t0, k, cur, done = time.monotonic(), 0, b"", None
        while True:
            if not cur and not self.mic_q.empty():
                cur, done = self.mic_q.get_nowait()
            frame, cur = (cur[:FRAME], cur[FRAME:]) if cur else (b"\xff" * FRAME, b"")
            frame += b"\xff" * (FRAME - len(frame))
            await self.send(self.media_msg(frame))
            if not cur and done is not None:
                done.set_result(time.monotonic())
                done = None
            k += 1
            await asyncio.sleep(max(0.0, t0 + k * 0.02 - time.monotonic()))

    def say(self, text: str) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.mic_q.put_nowait((mulaw_encode(flite_pcm(text, RATE)), fut))
        return fut

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                m = json.loads(raw)
                now = time.monotonic()
                m["_t"] = now
                assert m.get("streamSid") == self.sid, m
                ev = m["event"]
                if ev == "media":
                    data = base64.b64decode(m["media"]["payload"])
                    m["_item"] = self.cur_item
                    self.audio.setdefault(self.cur_item, []).append(data)
                    self.play_end = max(self.play_end, now) + len(data) / RATE
                elif ev == "mark":
                    name = m["mark"]["name"]
                    self.cur_item = name.split(":")[0]
                    self.pending.append((max(self.play_end, now), name))
                elif ev == "clear":
                    self.play_end = now
                    self.pending = [(now, n) for _, n in self.pending]
                self.msgs.append(m)
                self.new.set()
        except websockets.ConnectionClosed:
            pass  # the server ended the stream; tests check how with wait()/msgs
        except Exception as exc:  # noqa: BLE001 - kept, raised by wait() and close()
            self.failure = exc
        finally:
            self.closed = True
            self.new.set()

    async def _player(self) -> None:
        while True:
            now = time.monotonic()
            while self.pending and self.pending[0][0] <= now:
                _, name = self.pending.pop(0)
                self.echoed.append(name)
                with contextlib.suppress(Exception):
                    await self.send({"event": "mark", "streamSid": self.sid,
                                     "mark": {"name": name}})
            await asyncio.sleep(0.01)

    def kind_of(self, msg: dict) -> str:
        return msg["event"]

    def marks(self, start: int = 0) -> list[str]:
        return [m["mark"]["name"] for m in self.msgs[start:] if m["event"] == "mark"]

    def pcm(self, item: str) -> np.ndarray:
        return mulaw_decode(b"".join(self.audio.get(item, [])))

    async def stop(self) -> None:
        await self.send({"event": "stop", "sequenceNumber": "9999", "streamSid": self.sid,
                         "stop": {"accountSid": "AC" + "0" * 32, "callSid": "CA" + "1" * 32}})


__all__ = ["TwilioClient"]
