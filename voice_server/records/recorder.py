"""One session's call record, fed by its runner, written by the call store.

The runner (every transport) hands it what the client was sent and what the
server heard, on the event loop; it keeps nothing but two small audio
buffers, and queues each write on the store's worker thread::

    rec = CallRecorder(store, session, transport, clock_ms=runner.clock())
    runner.turns.observers.append(rec.turn_times)   # per-turn moments (metrics.TurnTimer)
    rec.event(ev, now_ms)                    # every event sent to the client
    rec.caller_audio(pcm16k, now_ms)         # what the listen stage is fed (or a
                                             # push-to-talk buffer, at its commit)
    rec.agent_audio(pcm, rate, now_ms)       # agent audio handed to the transport
    rec.close(now_ms)                        # the call ended

The transcript comes from the events the client saw: every conversation
item (messages, function calls and their outputs) as added and as done,
the caller's words from their transcription, an interrupted reply's played
position from ``conversation.item.truncated``, and each response's status
and usage from ``response.done``.  Times are ms since the call started, on
the session clock (the runner's).

The recording places each piece of audio on that clock: the caller's where
it arrived (it ends at the moment it was fed), the agent's where it was
sent, each channel never overlapping itself (the listener plays a reply's
chunks one after another, so a chunk sent early follows the one before).
Events-mode replies (``response.output_audio.delta``) are decoded from the
event; stream transports hand their PCM over.  Both channels are 16 kHz.
"""

from __future__ import annotations

import base64
import time

import numpy as np

from ..audio_codec import StreamResampler, decode_wire_audio
from .store import RECORDING_RATE_HZ, CallStore

FLUSH_SAMPLES = RECORDING_RATE_HZ // 2   # a channel's audio goes to disk every 0.5 s
AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")
ITEM_EVENTS = ("conversation.item.added", "conversation.item.created", "conversation.item.done",
               "response.output_item.done")
TRANSCRIPTS = ("conversation.item.input_audio_transcription.completed",)
# the turn's moments (metrics.TurnTimer) as stored: name in the record <- name in the timer
TURN_TIMINGS = {"speech_stopped_ms": "speech_stopped", "transcript_ms": "transcript",
                "response_started_ms": "response_started", "first_token_ms": "first_token",
                "first_audio_ms": "first_audio", "done_ms": "done",
                "barge_in_speech_ms": "barge_in_speech"}


class _Channel:
    """One channel of the recording: its position on the call's timeline and
    the samples not yet handed to the store."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.written = 0                 # samples placed so far (16 kHz)
        self.pending: list[np.ndarray] = []
        self.pending_n = 0
        self.resampler: StreamResampler | None = None

    def place(self, pcm16k: np.ndarray, start_sample: int) -> None:
        """Put ``pcm16k`` at ``start_sample`` or right after the last piece,
        whichever is later; silence fills the gap."""
        gap = start_sample - self.written
        if gap > 0:
            self._add(np.zeros(gap, np.int16))
        self._add(pcm16k)

    def _add(self, pcm: np.ndarray) -> None:
        self.pending.append(pcm)
        self.pending_n += pcm.size
        self.written += pcm.size

    def take(self) -> bytes:
        data = np.concatenate(self.pending).astype("<i2").tobytes() if self.pending else b""
        self.pending, self.pending_n = [], 0
        return data


class CallRecorder:
    def __init__(self, store: CallStore, session, transport: str, clock_ms: float) -> None:
        self.store = store
        self.session = session          # read for the output format of audio deltas
        self.call_id: str = session.session_id
        self.start_ms = clock_ms        # the session clock at the call's start
        self.start_mono = time.monotonic()   # the same moment for TurnTimer's times
        self.recording = store.settings.recording
        self._turn_times: dict[str, dict] = {}   # response id -> moments, until its done
        self._channels = {"caller": _Channel("caller"), "agent": _Channel("agent")}
        self.closed = False
        store.submit(store.begin_call, self.call_id, transport,
                     getattr(session.settings, "model", None), time.time(), self.recording)

    # ------------------------------------------------------------ transcript
    def event(self, ev: dict, now_ms: float) -> None:
        """An event the client was sent."""
        t = ev.get("type")
        if t in AUDIO_DELTAS:
            if self.recording:
                fmt = self.session.settings.output_format
                self.agent_audio(decode_wire_audio(base64.b64decode(ev["delta"]), fmt.type),
                                 fmt.sample_rate, now_ms)
        elif t in ITEM_EVENTS:
            item = ev.get("item") or {}
            if item.get("id"):
                fields = _item_fields(item)
                fields["response_id"] = fields["response_id"] or ev.get("response_id")
                self.store.submit(self.store.put_item, self.call_id, item["id"],
                                  now_ms - self.start_ms, fields)
        elif t in TRANSCRIPTS:
            self.store.submit(self.store.put_item, self.call_id, ev["item_id"],
                              now_ms - self.start_ms, {"type": "message", "role": "user",
                                                       "text": ev.get("transcript") or ""})
        elif t == "conversation.item.truncated":
            self.store.submit(self.store.truncate_item, self.call_id, ev["item_id"],
                              int(ev["audio_end_ms"]))
        elif t == "response.done":
            self._response_done(ev.get("response") or {})

    def turn_times(self, response_id: str, moments: dict) -> None:
        """TurnTimer's observer: the moments of a turn whose response.done is
        being sent (this arrives just before :meth:`event` gets that event)."""
        self._turn_times[response_id] = moments

    def _response_done(self, resp: dict) -> None:
        moments = self._turn_times.pop(resp.get("id"), {})
        timings: dict = {"trigger": moments.get("trigger")}
        for name, key in TURN_TIMINGS.items():
            t = moments.get(key)
            timings[name] = None if t is None else round((t - self.start_mono) * 1000.0, 1)
        details = resp.get("status_details") or {}
        self.store.submit(self.store.put_turn, self.call_id, resp.get("id"), resp.get("status"),
                          details.get("reason"), timings, resp.get("usage"))

    # ------------------------------------------------------------ recording
    def caller_audio(self, pcm16k: np.ndarray, now_ms: float) -> None:
        """Audio the listen stage is fed (16 kHz), just arrived."""
        if self.recording and pcm16k.size:
            ch = self._channels["caller"]
            ch.place(pcm16k, self._sample_at(now_ms) - pcm16k.size)
            self._maybe_flush(ch)

    def agent_audio(self, pcm: np.ndarray, sample_rate: int, now_ms: float) -> None:
        """Agent audio handed to the transport (any rate)."""
        if not self.recording or pcm.size == 0:
            return
        ch = self._channels["agent"]
        if sample_rate != RECORDING_RATE_HZ:
            if ch.resampler is None or ch.resampler.in_rate != sample_rate:
                ch.resampler = StreamResampler(sample_rate, RECORDING_RATE_HZ)
            pcm = ch.resampler.process(np.asarray(pcm, np.int16).reshape(-1))
        ch.place(np.asarray(pcm, np.int16).reshape(-1), self._sample_at(now_ms))
        self._maybe_flush(ch)

    def _sample_at(self, now_ms: float) -> int:
        return max(int((now_ms - self.start_ms) * RECORDING_RATE_HZ / 1000.0), 0)

    def _maybe_flush(self, ch: _Channel, force: bool = False) -> None:
        if ch.pending_n >= FLUSH_SAMPLES or (force and ch.pending_n):
            self.store.submit(self.store.append_audio, self.call_id, ch.name, ch.take())

    # ------------------------------------------------------------ end
    def close(self, now_ms: float) -> None:
        if self.closed:
            return
        self.closed = True
        for ch in self._channels.values():
            self._maybe_flush(ch, force=True)
        self.store.submit(self.store.end_call, self.call_id, time.time())


def _item_fields(item: dict) -> dict:
    """The stored fields of a conversation item (its wire shape)."""
    kind = item.get("type")
    fields = {"type": kind, "status": item.get("status"), "response_id": item.get("response_id")}
    if kind == "function_call":
        fields.update(name=item.get("name"), call_ref=item.get("call_id"),
                      arguments=item.get("arguments"))
    elif kind == "function_call_output":
        fields.update(call_ref=item.get("call_id"), output=item.get("output"))
    else:
        fields["role"] = item.get("role")
        parts = [c.get("text") if c.get("text") is not None else c.get("transcript")
                 for c in item.get("content") or []]
        if any(p is not None for p in parts):
            fields["text"] = "".join(p or "" for p in parts)
    return fields


__all__ = ["CallRecorder", "TURN_TIMINGS"]
