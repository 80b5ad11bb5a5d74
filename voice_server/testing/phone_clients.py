"""Phone providers' side of a bidirectional media stream, for tests: Telnyx,
Plivo, Exotel and Vonage, each written from the provider's public
documentation (docs/CLIENTS.md says which page), independently of the
server's codecs (:mod:`voice_server.transports.phone`).

A :class:`PhoneClient` opens a real WebSocket to ``/v1/telephony/<provider>``,
sends the provider's opening messages, then flite speech (or silence) in
real time in the provider's frames; it "plays" the audio it receives at real
time and answers each mark/checkpoint/notify once the audio before it has
played, as the provider does.  On a clear it drops what it holds and does
what the provider documents (Telnyx returns the queued marks, Plivo answers
``clearedAudio``, Vonage ``websocket:cleared``).  The provider-specific part
is a :class:`Wire`; everything else is shared.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import websockets

from voice_server.audio_codec import (alaw_decode, alaw_encode, mulaw_decode, mulaw_encode,
                                      pcm16_from_bytes, pcm16_to_bytes)

from . import TEST_API_KEY
from .audio import flite_pcm
from .stream_peer import StreamPeer


@dataclass
class Heard:
    """One message from the server, as the client understood it."""
    kind: str  # media | mark | clear | digits | other
    name: Optional[str] = None  # mark name
    data: bytes = b""  # media bytes (line format)
    raw: object = None
    t: float = 0.0  # arrival (monotonic)
    item: Optional[str] = None  # the reply item of the last mark before it


class Wire:
    """The provider-specific part: messages to send, and how to read the server's."""
    provider = ""
    rate = 8000
    sample_bytes = 1
    frame_ms = 20  # inbound media per message
    echo_marks_on_clear = False  # return queued marks at once on clear
    ack_clear: Optional[dict] = None  # message answering a clear

    def __init__(self) -> None:
        self.seq = 0
        self.stream_id = ""

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def encode(self, pcm: np.ndarray) -> bytes:
        return pcm16_to_bytes(pcm)

    def decode(self, data: bytes) -> np.ndarray:
        return pcm16_from_bytes(data)

    def silence_frame(self) -> bytes:
        return self.encode(np.zeros(self.rate * self.frame_ms // 1000, np.int16))

    def opening(self, params: dict) -> list:
        raise NotImplementedError

    def media(self, frame: bytes):
        raise NotImplementedError

    def read(self, raw) -> Heard:
        raise NotImplementedError

    def mark_played(self, name: str) -> dict:
        raise NotImplementedError

    def dtmf(self, digit: str) -> dict:
        raise NotImplementedError

    def end(self) -> Optional[dict]:
        """The provider's end-of-stream message (None: it just closes the socket)."""
        return None


class TelnyxWire(Wire):
    """Telnyx "Stream call media over WebSocket": PCMA here (PCMU is the default)."""
    provider = "telnyx"
    echo_marks_on_clear = True  # "A clear frame also returns queued marks"

    def __init__(self, encoding: str = "PCMA") -> None:
        super().__init__()
        self.encoding = encoding
        self.stream_id = "32DE0DEA-53CB-4B21-89A4-9E1819C043BC"

    def encode(self, pcm):
        return alaw_encode(pcm) if self.encoding == "PCMA" else mulaw_encode(pcm)

    def decode(self, data):
        return alaw_decode(data) if self.encoding == "PCMA" else mulaw_decode(data)

    def opening(self, params):
        return [{"event": "connected", "version": "1.0.0"},
                {"event": "start", "sequence_number": str(self.next_seq()),
                 "stream_id": self.stream_id,
                 "start": {"user_id": "3E6F995F-85F7-4705-9741-53B116D28237",
                           "call_control_id": "v3:call-control-id",
                           "call_session_id": "ff55a038-6f5d-11ef-9692-02420aeffb1f",
                           "from": "+13122010094", "to": "+13122123456",
                           "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
                           "custom_parameters": params,
                           "media_format": {"encoding": self.encoding, "sample_rate": 8000,
                                            "channels": 1}}}]

    def media(self, frame):
        n = self.next_seq()
        return {"event": "media", "sequence_number": str(n), "stream_id": self.stream_id,
                "media": {"track": "inbound", "chunk": str(n), "timestamp": str(n * 20),
                          "payload": base64.b64encode(frame).decode()}}

    def read(self, raw):
        m = json.loads(raw)
        ev = m["event"]
        if ev == "media":
            return Heard("media", data=base64.b64decode(m["media"]["payload"]), raw=m)
        if ev == "mark":
            return Heard("mark", name=m["mark"]["name"], raw=m)
        if ev == "clear":
            return Heard("clear", raw=m)
        return Heard("other", raw=m)

    def mark_played(self, name):
        return {"event": "mark", "sequence_number": str(self.next_seq()),
                "stream_id": self.stream_id, "mark": {"name": name}}

    def dtmf(self, digit):
        return {"event": "dtmf", "stream_id": self.stream_id,
                "occurred_at": "2026-12-04T05:00:00.000000Z",
                "sequence_number": str(self.next_seq()), "dtmf": {"digit": digit}}

    def end(self):
        return {"event": "stop", "sequence_number": str(self.next_seq()),
                "stream_id": self.stream_id,
                "stop": {"user_id": "3E6F995F-85F7-4705-9741-53B116D28237",
                         "call_control_id": "v3:call-control-id"}}


class PlivoWire(Wire):
    """Plivo "Stream Event Protocol": ``audio/x-l16`` at 8 kHz (Plivo's default)."""
    provider = "plivo"
    sample_bytes = 2

    def __init__(self) -> None:
        super().__init__()
        self.stream_id = "87654321-4321-4321-4321-cba987654321"

    @property
    def ack_clear(self):
        return {"sequenceNumber": self.next_seq(), "event": "clearedAudio",
                "streamId": self.stream_id}

    def opening(self, params):
        extra = ";".join(f"{k}={v}" for k, v in params.items())
        return [{"event": "start", "sequenceNumber": self.next_seq(),
                 "start": {"callId": "12345678-1234-1234-1234-123456789abc",
                           "streamId": self.stream_id, "accountId": "MAXXXXXXXXXXXXXXXXXX",
                           "tracks": ["inbound"],
                           "mediaFormat": {"encoding": "audio/x-l16", "sampleRate": 8000}},
                 "extra_headers": extra}]

    def media(self, frame):
        n = self.next_seq()
        return {"event": "media", "sequenceNumber": n, "streamId": self.stream_id,
                "media": {"track": "inbound", "timestamp": str(int(time.time() * 1000)),
                          "chunk": n, "payload": base64.b64encode(frame).decode()},
                "extra_headers": ""}

    def read(self, raw):
        m = json.loads(raw)
        ev = m["event"]
        if ev == "playAudio":
            media = m["media"]
            assert media["contentType"] == "audio/x-l16" and int(media["sampleRate"]) == 8000, m
            return Heard("media", data=base64.b64decode(media["payload"]), raw=m)
        if ev == "checkpoint":
            assert m["streamId"] == self.stream_id, m
            return Heard("mark", name=m["name"], raw=m)
        if ev == "clearAudio":
            assert m["streamId"] == self.stream_id, m
            return Heard("clear", raw=m)
        if ev == "sendDTMF":
            return Heard("digits", name=m["dtmf"], raw=m)
        return Heard("other", raw=m)

    def mark_played(self, name):
        return {"event": "playedStream", "sequenceNumber": self.next_seq(),
                "streamId": self.stream_id, "name": name}

    def dtmf(self, digit):
        return {"event": "dtmf", "sequenceNumber": self.next_seq(), "streamId": self.stream_id,
                "dtmf": {"track": "inbound", "digit": digit,
                         "timestamp": str(int(time.time() * 1000))}, "extra_headers": ""}


class ExotelWire(Wire):
    """Exotel AgentStream (Voicebot applet): 16-bit PCM at 8 kHz, 100 ms a message."""
    provider = "exotel"
    sample_bytes = 2
    frame_ms = 100

    def __init__(self) -> None:
        super().__init__()
        self.stream_id = "MZ" + "a" * 24

    def opening(self, params):
        return [{"event": "connected"},
                {"event": "start", "sequence_number": str(self.next_seq()),
                 "stream_sid": self.stream_id,
                 "start": {"stream_sid": self.stream_id, "call_sid": "CA" + "b" * 24,
                           "account_sid": "AC" + "c" * 24, "from": "+919876543210",
                           "to": "+918047491899", "custom_parameters": params,
                           "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000",
                                            "bit_rate": "16"}}}]

    def media(self, frame):
        n = self.next_seq()
        return {"event": "media", "sequence_number": str(n), "stream_sid": self.stream_id,
                "media": {"chunk": str(n), "timestamp": str(n * 100),
                          "payload": base64.b64encode(frame).decode()}}

    def read(self, raw):
        m = json.loads(raw)
        ev = m["event"]
        if ev in ("media", "mark", "clear"):
            assert m["stream_sid"] == self.stream_id, m
        if ev == "media":
            data = base64.b64decode(m["media"]["payload"])
            assert len(data) % 320 == 0 and len(data) >= 3200, len(data)  # Exotel's chunk rule
            return Heard("media", data=data, raw=m)
        if ev == "mark":
            return Heard("mark", name=m["mark"]["name"], raw=m)
        if ev == "clear":
            return Heard("clear", raw=m)
        return Heard("other", raw=m)

    def mark_played(self, name):
        return {"event": "mark", "sequence_number": str(self.next_seq()),
                "stream_sid": self.stream_id, "mark": {"name": name}}

    def dtmf(self, digit):
        return {"event": "dtmf", "sequence_number": str(self.next_seq()),
                "stream_sid": self.stream_id, "dtmf": {"digit": digit, "duration": "100"}}

    def end(self):
        return {"event": "stop", "sequence_number": str(self.next_seq()),
                "stream_sid": self.stream_id,
                "stop": {"call_sid": "CA" + "b" * 24, "account_sid": "AC" + "c" * 24,
                         "reason": "callended"}}


class VonageWire(Wire):
    """Vonage Voice WebSocket: binary 16-bit PCM at 16 kHz, 20 ms frames."""
    provider = "vonage"
    rate = 16000
    sample_bytes = 2
    ack_clear = {"event": "websocket:cleared"}

    def opening(self, params):
        return [{"event": "websocket:connected", "content-type": "audio/l16;rate=16000",
                 **params}]

    def media(self, frame):
        return frame  # a binary frame

    def read(self, raw):
        if isinstance(raw, bytes):
            assert len(raw) == 640, len(raw)  # exactly 20 ms at 16 kHz
            return Heard("media", data=raw, raw=raw)
        m = json.loads(raw)
        if m.get("action") == "notify":
            return Heard("mark", name=m["payload"]["name"], raw=m)
        if m.get("action") == "clear":
            return Heard("clear", raw=m)
        return Heard("other", raw=m)

    def mark_played(self, name):
        return {"event": "websocket:notify", "payload": {"name": name}}

    def dtmf(self, digit):
        return {"event": "websocket:dtmf", "digit": digit, "duration": 260}


WIRES = {"telnyx": TelnyxWire, "plivo": PlivoWire, "exotel": ExotelWire, "vonage": VonageWire}


class PhoneClient(StreamPeer):
    """One provider's side of a call (module docstring).  ``msgs``: every
    message received, as :class:`Heard` with ``t`` (arrival) and ``item`` (the
    reply item of the last mark)."""

    def __init__(self, ws, wire: Wire) -> None:
        super().__init__(ws)
        self.wire = wire
        self.cur_item: Optional[str] = None
        self.audio: dict[str, list[bytes]] = {}
        self.play_end = 0.0  # when the audio received so far has played
        self.pending: list[tuple[float, str]] = []  # (due, mark name) to answer
        self.answered: list[str] = []
        self.answered_at: dict[str, float] = {}  # mark name -> when it was answered (played)
        self.mic_q: asyncio.Queue = asyncio.Queue()

    @classmethod
    async def connect(cls, base_ws: str, provider: str, params: dict | None = None,
                      headers=None, start: bool = True) -> "PhoneClient":
        hdrs = {"Authorization": f"Bearer {TEST_API_KEY}"} if headers is None else headers
        ws = await websockets.connect(f"{base_ws}/v1/telephony/{provider}",
                                      additional_headers=hdrs, max_size=None)
        c = cls(ws, WIRES[provider]())
        c._tasks = [asyncio.ensure_future(c._read()), asyncio.ensure_future(c._player())]
        if start:
            await c.start(params)
        return c

    async def send(self, msg) -> None:
        await self.ws.send(msg if isinstance(msg, (str, bytes)) else json.dumps(msg))

    async def start(self, params: dict | None = None) -> None:
        for m in self.wire.opening(params or {}):
            await self.send(m)
        self._tasks.append(asyncio.ensure_future(self._mic()))

    def say(self, text: str) -> asyncio.Future:
        """Queue flite speech; the future is the time its last frame was sent."""
        fut = asyncio.get_running_loop().create_future()
        self.mic_q.put_nowait((self.wire.encode(flite_pcm(text, self.wire.rate)), fut))
        return fut

    async def press(self, digit: str) -> None:
        await self.send(self.wire.dtmf(digit))

    async def _mic(self) -> None:
        """One frame per tick in real time: queued speech, else silence."""
        w = self.wire
        frame_bytes = w.rate * w.frame_ms // 1000 * w.sample_bytes
        quiet = w.silence_frame()
        t0, k, cur, done = time.monotonic(), 0, b"", None
        while True:
            if not cur and not self.mic_q.empty():
                cur, done = self.mic_q.get_nowait()
            frame, cur = (cur[:frame_bytes], cur[frame_bytes:]) if cur else (quiet, b"")
            frame += quiet[len(frame):]
            with contextlib.suppress(websockets.ConnectionClosed):
                await self.send(w.media(frame))
            if not cur and done is not None:
                done.set_result(time.monotonic())
                done = None
            k += 1
            await asyncio.sleep(max(0.0, t0 + k * w.frame_ms / 1000 - time.monotonic()))

    async def _read(self) -> None:
        w = self.wire
        try:
            async for raw in self.ws:
                h = self.wire.read(raw)
                now = time.monotonic()
                h.t, h.item = now, self.cur_item
                if h.kind == "media":
                    self.audio.setdefault(self.cur_item, []).append(h.data)
                    self.play_end = max(self.play_end, now) + \
                        len(h.data) / (w.rate * w.sample_bytes)
                elif h.kind == "mark":
                    self.cur_item = h.name.split(":")[0]
                    self.pending.append((max(self.play_end, now), h.name))
                elif h.kind == "clear":
                    self.play_end = now
                    self.pending = [(now, n) for _, n in self.pending] \
                        if w.echo_marks_on_clear else []
                    if w.ack_clear is not None:
                        await self.send(w.ack_clear)
                self.msgs.append(h)
                self.new.set()
        except websockets.ConnectionClosed:
            pass
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
                self.answered.append(name)
                self.answered_at[name] = now
                with contextlib.suppress(Exception):
                    await self.send(self.wire.mark_played(name))
            await asyncio.sleep(0.01)

    def kind_of(self, msg: Heard) -> str:
        return msg.kind

    def marks(self, start: int = 0) -> list[str]:
        return [m.name for m in self.msgs[start:] if m.kind == "mark"]

    def pcm(self, item: str) -> np.ndarray:
        return self.wire.decode(b"".join(self.audio.get(item, [])))

    async def end(self) -> None:
        """The provider ends the call: its end message, or (no such message) a close."""
        msg = self.wire.end()
        if msg is None:
            await self.ws.close()
        else:
            await self.send(msg)



__all__ = ["PhoneClient", "Wire", "Heard", "WIRES", "TelnyxWire", "PlivoWire", "ExotelWire",
           "VonageWire"]
