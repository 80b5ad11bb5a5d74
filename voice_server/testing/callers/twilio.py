"""A simulated Twilio caller for benchmarks/realtime_bench.py (``--transport twilio``).

It plays Twilio's side of a bidirectional Media Stream against
``/v1/telephony/twilio`` and presents it through the bench's CallerTransport
interface (duck-typed: ``connect / send_audio / send_event / next_event /
close``), translating what telephony carries into the Realtime events the
bench's Caller measures:

* the caller's 24 kHz frames -> 8 kHz (a short causal FIR + decimate by 3,
  ~1 ms delay, so the client adds no resampler latency) -> mu-law ``media``;
* ``session.update`` -> the first one becomes the ``start`` message's
  customParameters (instructions, max_output_tokens); later ones cannot be
  carried by the protocol and are dropped;
* server ``media`` -> ``response.output_audio.delta`` (response_id = the item
  of the last mark: every reply opens with an ``<item>:0:start`` mark);
  ``response.done`` (completed) when the ``<item>:<ms>:end`` mark is echoed,
  i.e. once the caller has HEARD the whole reply (so the next question is not
  asked over it); ``clear`` -> ``response.done`` (cancelled) for the item
  playing: barge_in_ms is interrupting speech -> ``clear`` (the first clear:
  a pause clears too, and a reply resumed after a backchannel goes on
  sending deltas under the same id); each delta carries ``_ms`` (its audio)
  and each clear is also reported as ``twilio.clear`` (``item_id``), for
  what the caller heard (benchmarks/turn_bench.py ``phone_heard``);
* playback is simulated in real time: each mark is echoed once the audio
  before it has "played" (pending marks at once on ``clear``), as Twilio does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from urllib.parse import urlsplit

import numpy as np

from .base import CallerTransport, RealtimeWSTransport
from voice_server.audio_codec import mulaw_encode

IN_RATE = 24000
RATE = 8000
PATH = "/v1/telephony/twilio"


def _lowpass(taps: int = 49, cutoff_hz: float = 3600.0, rate: int = IN_RATE) -> np.ndarray:
    n = np.arange(taps) - (taps - 1) / 2
    h = 2 * cutoff_hz / rate * np.sinc(2 * cutoff_hz / rate * n) * np.hamming(taps)
    return h / h.sum()


class Decimator:
    """24 kHz -> 8 kHz, stateful across frames (causal FIR, then every 3rd sample)."""

    def __init__(self) -> None:
        self.h = _lowpass()
        self.hist = np.zeros(self.h.size - 1)
        self.phase = 0

    def process(self, pcm: np.ndarray) -> np.ndarray:
        x = np.concatenate([self.hist, pcm.astype(np.float64)])
        y = np.convolve(x, self.h, mode="valid")  # one output per input sample
        self.hist = x[-(self.h.size - 1):]
        out = y[self.phase::3]
        self.phase = (self.phase - pcm.size) % 3
        return np.clip(np.round(out), -32768, 32767).astype(np.int16)


class TwilioCallerTransport(CallerTransport):
    def __init__(self, url: str, key: str | None) -> None:
        p = urlsplit(url)  # the bench passes the realtime URL: same server, our path
        self.url = f"{p.scheme}://{p.netloc}{PATH}"
        self.key = key
        self.q: asyncio.Queue = asyncio.Queue()
        self.sid = "MZ" + "%030x" % (id(self) & ((1 << 120) - 1))
        self.started = False
        self.dec = Decimator()
        self.cur_item: str | None = None
        self.play_end = 0.0
        self.pending: list[tuple[float, str]] = []
        self.seq = 0
        self.sent_media = 0
        self.finished: set[str] = set()

    async def connect(self) -> None:
        import websockets
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        self.ws = await websockets.connect(self.url, additional_headers=headers, max_size=None)
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        self._tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._player())]
        self._emit({"type": "session.created"})

    async def _send(self, msg: dict) -> None:
        self.seq += 1
        msg.setdefault("sequenceNumber", str(self.seq))
        await self.ws.send(json.dumps(msg))

    def _emit(self, ev: dict) -> None:
        ev["_t"] = time.monotonic()
        self.q.put_nowait(ev)

    async def send_event(self, ev: dict) -> None:
        if ev.get("type") != "session.update" or self.started:
            return  # nothing in the protocol carries it mid-call
        s = ev.get("session") or {}
        params = {k: str(s[k]) for k in ("instructions", "max_output_tokens") if k in s}
        self.started = True
        await self._send({"event": "start", "streamSid": self.sid, "start": {
            "streamSid": self.sid, "accountSid": "AC" + "0" * 32, "callSid": "CA" + self.sid[2:],
            "tracks": ["inbound"], "customParameters": params,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": RATE, "channels": 1}}})

    async def send_audio(self, pcm24k: np.ndarray) -> None:
        pcm8 = self.dec.process(np.asarray(pcm24k, np.int16).reshape(-1))
        if not self.started:
            return
        self.sent_media += 1
        await self._send({"event": "media", "streamSid": self.sid, "media": {
            "track": "inbound", "chunk": str(self.sent_media),
            "timestamp": str(self.sent_media * 20),
            "payload": base64.b64encode(mulaw_encode(pcm8)).decode()}})

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self.ws:
                m = json.loads(raw)
                now = time.monotonic()
                ev = m.get("event")
                if ev == "media":
                    n = len(base64.b64decode(m["media"]["payload"]))
                    self.play_end = max(self.play_end, now) + n / RATE
                    if self.cur_item is not None:
                        self._emit({"type": "response.output_audio.delta",
                                    "response_id": self.cur_item, "item_id": self.cur_item,
                                    "_ms": n * 1000.0 / RATE})
                elif ev == "mark":
                    name = m["mark"]["name"]
                    item = name.split(":")[0]
                    self.pending.append((max(self.play_end, now), name))
                    if name.endswith(":start"):
                        self.cur_item = item
                    # ":end" -> response.done once echoed = played (see _player)
                elif ev == "clear":
                    self.play_end = now
                    self.pending = [(now, n) for _, n in self.pending]
                    self._emit({"type": "twilio.clear", "item_id": self.cur_item})
                    if self.cur_item is not None and self.cur_item not in self.finished:
                        self.finished.add(self.cur_item)
                        self._emit({"type": "response.done", "response": {
                            "id": self.cur_item, "status": "cancelled"}})

    async def _player(self) -> None:
        while True:
            now = time.monotonic()
            while self.pending and self.pending[0][0] <= now:
                _, name = self.pending.pop(0)
                item = name.split(":")[0]
                if name.endswith(":end") and item not in self.finished:
                    self.finished.add(item)
                    self._emit({"type": "response.done",
                                "response": {"id": item, "status": "completed"}})
                await self._send({"event": "mark", "streamSid": self.sid,
                                  "mark": {"name": name}})
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._send({"event": "stop", "streamSid": self.sid,
                              "stop": {"accountSid": "AC" + "0" * 32}})
        with contextlib.suppress(Exception):
            await self.ws.close()
        for t in getattr(self, "_tasks", []):
            t.cancel()
        await asyncio.gather(*getattr(self, "_tasks", []), return_exceptions=True)




class RealtimeWSPcmuTransport:
    """Control for the comparison: the OpenAI Realtime WebSocket carrying the
    same 8 kHz mu-law input as telephony (``audio/pcmu``; output stays PCM).
    ``twilio - ws-pcmu`` is what the bridge itself adds; ``ws-pcmu - ws`` is
    the narrowband input (VAD/ASR on telephone audio)."""

    def __init__(self, url: str, key: str | None) -> None:
        self.inner = RealtimeWSTransport(url, key)
        self.dec = Decimator()

    async def connect(self) -> None:
        await self.inner.connect()

    async def send_event(self, ev: dict) -> None:
        if ev.get("type") == "session.update":
            ev = json.loads(json.dumps(ev))
            ev["session"].setdefault("audio", {}).setdefault("input", {})["format"] = \
                {"type": "audio/pcmu"}
        await self.inner.send_event(ev)

    async def send_audio(self, pcm24k: np.ndarray) -> None:
        pcm8 = self.dec.process(np.asarray(pcm24k, np.int16).reshape(-1))
        await self.inner.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                             "audio": base64.b64encode(mulaw_encode(pcm8))
                                             .decode()}))

    async def next_event(self, timeout: float) -> dict | None:
        return await self.inner.next_event(timeout)

    async def close(self) -> None:
        await self.inner.close()


__all__ = ["TwilioCallerTransport", "RealtimeWSPcmuTransport", "Decimator"]
