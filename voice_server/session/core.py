"""The sans-I/O session core: turn taking, response lifecycle, barge-in,
playback position and truncation.  One implementation reused unchanged by
every transport (OpenAI-Realtime WebSocket, WebRTC, Twilio).

The core owns no socket, no task and no clock.  Each input method takes an
event (and ``now_ms``, a monotonic clock in ms supplied by the caller) and
returns ``list[Command]`` (commands.py) to carry out in order.

Inputs
------
``Session(session_id, config=SessionSettings(), audio_out_mode="events"|"stream",
limits=ServerLimits(), dialect="ga"|"beta")``

* ``start(now_ms)`` -> ``session.created`` (+ ``ConfigureListen`` with VAD on).
  Calling any other input first starts the session implicitly, so a
  ``session.update`` sent before ``session.created`` works.
* ``client_event(raw: str|bytes|dict, now_ms)`` - one Realtime client event.
  Problems become an ``error`` event (``invalid_request_error``, code, param,
  the client's event_id); the session stays open.
* ``input_audio(pcm: int16 ndarray, sample_rate, now_ms)`` - audio from
  non-JSON transports; ``input_audio_buffer.append`` feeds the same path after
  decoding the session's input format.  Audio is resampled (streaming soxr)
  to 16 kHz; its sample count is the input timeline (ms) that the listen
  stage's times refer to.
* ``listen_event(ev: dict, now_ms)`` - listen-stage outputs:
  ``{"type":"speech_started","audio_start_ms"}``, ``{"type":"partial","text"}``
  (the full hypothesis so far), ``{"type":"speech_stopped","audio_end_ms"}``,
  ``{"type":"final","text","audio_start_ms","audio_end_ms"}``.
* ``response_chunk(response_id, stage, payload, now_ms)`` - ``"think"``: str
  text delta; ``"speak"``: ``{"audio": int16 ndarray, "sample_rate", "text",
  "duration_ms"}``.  Chunks of a response that is not the active one
  (finished, cancelled, unknown) are dropped silently.
* ``response_finished(response_id, status, error, now_ms, usage=None)`` -
  status ``completed|failed|cancelled``; error ``{"code","message","retryable"}``.
* ``transcription_result(item_id, text, now_ms, error=None)`` - the answer to
  a ``TranscribeBuffer`` command (error: same dict shape as above).
* ``playback_progress(item_id, played_ms, now_ms)`` - what the listener heard.
* ``tick(now_ms)`` - timers: server-VAD ``idle_timeout_ms``, the maximum
  session duration (``ServerLimits.max_session_s``) and the idle limit
  (``ServerLimits.idle_timeout_s``: no client event or audio -> ``error``
  ``idle_timeout`` + ``Close``).  ``client_event`` also enforces
  ``max_client_events_per_s`` (token bucket; excess -> ``rate_limit_exceeded``).
* ``reject_client_frame(code, message, now_ms)`` - a frame the transport
  could not turn into an event (binary WebSocket frame, oversized or
  non-UTF-8 data-channel message): an ``error`` with ``code``, counted as
  traffic and rate limited exactly like ``client_event``.
* ``disconnect(now_ms)`` - client gone: ``CancelResponse`` for the active
  response and ``StopListen``; afterwards every method returns ``[]``.

Outputs: ``SendEvent``, ``FeedListen``, ``ConfigureListen``, ``StopListen``,
``TranscribeBuffer``, ``StartResponse``, ``CancelResponse``, ``AudioOut``,
``FlushAudio``, ``Close`` (see commands.py).

Turn taking
-----------
* Server VAD (default): the listen stream runs continuously (FeedListen for
  every input chunk).  speech_started -> ``input_audio_buffer.speech_started``
  (and barge-in, below); speech_stopped -> ``speech_stopped``, ``committed``,
  ``conversation.item.added`` (user ``input_audio``, transcript null); final ->
  transcription ``delta``/``completed``, ``conversation.item.done`` and, with
  ``create_response``, a response built from the final transcript.  An empty
  final creates no response.  While the user is speaking again, or another
  utterance still awaits its final, the auto-response waits and then answers
  all of them at once.
* Push-to-talk (``turn_detection: null``): ``StopListen``; audio is kept in
  a bounded 16 kHz buffer; ``input_audio_buffer.commit`` -> ``committed``,
  ``conversation.item.added`` and ``TranscribeBuffer(item_id, pcm16k)``; the
  runner answers with ``transcription_result``.  A ``response.create`` sent
  before the transcript arrives is announced at once (``response.created``)
  but its ``StartResponse`` is held until every pending transcription is in.
  A manual commit also works under server VAD (same path).

Barge-in
--------
speech_started while a response is active and ``interrupt_response`` is true
returns, in that one call: ``CancelResponse(reason="turn_detected")``,
(stream mode) ``FlushAudio`` + ``output_audio_buffer.cleared``,
``input_audio_buffer.speech_started``, the pending ``*.done`` events and
``response.done`` (``cancelled``/``turn_detected``).  The response is then
finished for good: later chunks for it are dropped.  The assistant item keeps
the audio/transcript sent - or, when ``playback_progress`` told us what was
heard, is truncated to that (``conversation.item.truncated`` follows).
``response.cancel`` does the same with ``client_cancelled`` (no flush: per
the WebRTC API, ``output_audio_buffer.clear`` cuts the audio).
"""

from __future__ import annotations

import base64
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from ..audio_codec import (PCM, StreamResampler, decode_wire_audio, encode_wire_audio,
                           low_latency_quality, resample)
from .client_events import ItemIn, decode_base64_audio, parse_client_event
from .commands import (AudioOut, CancelResponse, Close, Command, ConfigureListen, FeedListen,
                       FlushAudio, SendEvent, StartResponse, StopListen, TranscribeBuffer)
from .errors import ClientError, from_validation_error
from .config import (ServerLimits, SessionSettings, _max_tokens, _modalities,
                     apply_session_update, session_to_wire)
from .input_buffer import RATE as LISTEN_RATE, InputBuffer
from .items import Content, Conversation, Item, Segment
from .server_events import (EventFactory, IdFactory, content_part, error_body,
                            response_object, zero_usage)

_RUNTIME_ERROR_CODES = {"bad_input", "unsupported", "resource_exhausted", "timeout",
                        "stage_unavailable", "cancelled", "internal"}


@dataclass
class _Response:
    id: str
    modalities: list
    max_tokens: int | None
    instructions: str | None
    metadata: dict | None
    in_conversation: bool
    cause_event_id: str | None
    output_format: Any
    voice: str
    input_messages: list | None = None
    started: bool = False  # StartResponse emitted
    done: bool = False
    item: Item | None = None
    text: str = ""  # output_text (text modality)
    transcript: str = ""  # audio transcript sent
    think_text: str = ""
    seg_end_ms: float = 0.0
    resampler: StreamResampler | None = None
    out_samples: int = 0
    first_audio_ms: float | None = None
    buffer_started: bool = False
    playback_stopped: bool = False

    @property
    def audio(self) -> bool:
        return "audio" in self.modalities


class Session:
    def __init__(self, session_id: str, config: SessionSettings | None = None,
                 audio_out_mode: str = "events", limits: ServerLimits | None = None,
                 dialect: str = "ga") -> None:
        if audio_out_mode not in ("events", "stream"):
            raise ValueError("audio_out_mode must be 'events' or 'stream'")
        self.session_id = session_id
        self.settings = config or SessionSettings()
        self.audio_out_mode = audio_out_mode
        self.limits = limits or ServerLimits()
        self.ids = IdFactory()
        self._ev = EventFactory(self.ids, dialect)
        self.conversation = Conversation()
        self.conversation_id = self.ids.new("conv")
        self.started = False
        self.closed = False
        self._start_ms: float | None = None
        # input path
        self._in_resampler: StreamResampler | None = None
        self._in_samples = 0  # 16 kHz samples on the input timeline
        self._buffer = InputBuffer(self.limits.max_buffered_input_s)
        self._buffer_full_reported = False
        self._listening: dict | None = None  # last ConfigureListen params
        # VAD turn state
        self._speech_item: str | None = None
        self._speech_start_ms = 0
        self._awaiting_final: deque[str] = deque()
        self._partial: dict[str, str] = {}  # latest hypothesis per item
        self._partial_sent: dict[str, str] = {}  # transcript text already sent as deltas
        self._unanswered = False
        self._pending_transcripts: dict[str, int] = {}  # item_id -> content_index
        # responses
        self._active: _Response | None = None
        self._last_audio: _Response | None = None
        self._idle_deadline: float | None = None
        # operator limits on client traffic (ServerLimits.idle_timeout_s, max_client_events_per_s)
        self._last_traffic_ms: float | None = None
        self._tokens = float(self.limits.client_events_burst)
        self._tokens_ms: float | None = None

    # ------------------------------------------------------------------ utils
    def _send(self, type_: str, **fields) -> SendEvent:
        return SendEvent(self._ev.make(type_, **fields))

    def _error(self, type_: str, code: str | None, message: str, param: str | None = None,
               cause: str | None = None) -> SendEvent:
        return self._send("error", error=error_body(type_, code, message, param, cause))

    def _client_error(self, err: ClientError) -> SendEvent:
        return self._error("invalid_request_error", err.code, err.message, err.param,
                           err.event_id)

    def _ensure_started(self, now_ms: float) -> list[Command]:
        return [] if self.started else self.start(now_ms)

    @property
    def active_response_id(self) -> str | None:
        return self._active.id if self._active else None

    # ------------------------------------------------------------------ start
    def start(self, now_ms: float) -> list[Command]:
        if self.started or self.closed:
            return []
        self.started = True
        self._start_ms = now_ms
        out: list[Command] = [self._send("session.created", session=self._session_wire())]
        out += self._sync_listen(None)
        return out

    def _session_wire(self) -> dict:
        expires = 0
        if self._start_ms is not None:
            expires = int((self._start_ms / 1000.0) + self.limits.max_session_s)
        return session_to_wire(self.settings, self.session_id, expires)

    def _sync_listen(self, old: SessionSettings | None) -> list[Command]:
        td = self.settings.turn_detection
        if td is None:
            if self._listening is not None:
                self._listening = None
                return [StopListen()]
            return []
        params = td.listen_params()
        if params != self._listening:
            self._listening = params
            return [ConfigureListen(dict(params))]
        return []

    # ----------------------------------------------------------- client events
    def client_event(self, raw, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        out = self._ensure_started(now_ms)
        self._last_traffic_ms = now_ms
        if not self._take_token(now_ms):
            eid = raw.get("event_id") if isinstance(raw, dict) else None
            out.append(self._rate_limited(eid if isinstance(eid, str) else None))
            return out
        try:
            ev = parse_client_event(raw)
        except ClientError as err:
            out.append(self._client_error(err))
            return out
        handler = getattr(self, "_on_" + ev.type.replace(".", "_"))
        try:
            out += handler(ev, now_ms)
        except ClientError as err:
            err.event_id = ev.event_id
            out.append(self._client_error(err))
        return out

    def reject_client_frame(self, code: str, message: str, now_ms: float) -> list[Command]:
        """A client frame the transport could not even hand over as an event
        (a binary WebSocket frame, a data-channel message that is not UTF-8 or
        is too large): an ``error`` (``invalid_request_error``, ``code``) and
        the session stays open.

        It goes through the same accounting as :meth:`client_event` - it is
        client traffic for the idle timeout and takes a rate token, so a flood
        of rejected frames gets ``rate_limit_exceeded`` like a flood of events
        - which a transport calling ``send_error`` itself would bypass."""
        if self.closed:
            return []
        out = self._ensure_started(now_ms)
        self._last_traffic_ms = now_ms
        if not self._take_token(now_ms):
            out.append(self._rate_limited(None))
        else:
            out.append(self._error("invalid_request_error", code, message))
        return out

    def _rate_limited(self, cause: str | None) -> SendEvent:
        return self._error("invalid_request_error", "rate_limit_exceeded",
                           f"Too many client events: at most "
                           f"{self.limits.max_client_events_per_s:g} per second (bursts "
                           f"of {self.limits.client_events_burst}); this event was "
                           "dropped.", None, cause)

    def _on_session_update(self, ev, now_ms) -> list[Command]:
        old = self.settings
        self.settings = apply_session_update(old, ev.session, self.limits)
        out: list[Command] = [self._send("session.updated", session=self._session_wire())]
        if old.turn_detection is not None and self.settings.turn_detection is None:
            self._buffer.clear()  # the PTT buffer starts empty
        out += self._sync_listen(old)
        return out

    def _on_input_audio_buffer_append(self, ev, now_ms) -> list[Command]:
        data = decode_base64_audio(ev.audio, "audio", self.limits.max_append_b64_bytes)
        fmt = self.settings.input_format
        if fmt.type == PCM and len(data) % 2:
            raise ClientError("invalid_audio_length", "Invalid 'audio': PCM16 audio must have an "
                              "even number of bytes.", "audio")
        if not data:
            return []
        pcm = decode_wire_audio(data, fmt.type)
        return self._ingest(pcm, fmt.sample_rate, now_ms)

    def _on_input_audio_buffer_commit(self, ev, now_ms) -> list[Command]:
        ms = self._buffer.duration_ms
        if ms < self.limits.min_commit_ms:
            raise ClientError("input_audio_buffer_commit_empty",
                              f"Error committing input audio buffer: buffer too small. Expected "
                              f"at least {self.limits.min_commit_ms:g}ms of audio, but buffer "
                              f"only has {ms:.2f}ms of audio.")
        pcm = self._buffer.take_all()
        self._buffer_full_reported = False
        item = Item(self.ids.new("item"), "user", [Content("input_audio")], status="in_progress")
        prev = self.conversation.add(item)
        self._pending_transcripts[item.id] = 0
        return [self._send("input_audio_buffer.committed", previous_item_id=prev, item_id=item.id),
                self._send("conversation.item.added", previous_item_id=prev, item=item.wire()),
                TranscribeBuffer(item.id, pcm)]

    def _on_input_audio_buffer_clear(self, ev, now_ms) -> list[Command]:
        self._buffer.clear()
        self._buffer_full_reported = False
        return [self._send("input_audio_buffer.cleared")]

    def _build_item(self, it: ItemIn, allow_transcribe: bool, param: str = "item"):
        """ItemIn -> (Item, (content_index, pcm16k) | None).  No side effects."""
        if it.type != "message":
            raise ClientError("invalid_value", f"Invalid value for '{param}.type': {it.type!r}. "
                              "Only 'message' items are supported.", f"{param}.type")
        if it.role not in ("user", "assistant", "system"):
            raise ClientError("invalid_value" if it.role is not None else
                              "missing_required_parameter",
                              f"Invalid value for '{param}.role': {it.role!r}. Supported values "
                              "are: 'user', 'assistant', 'system'.", f"{param}.role")
        allowed = {"user": {"input_text": "input_text", "text": "input_text",
                            "input_audio": "input_audio"},
                   "assistant": {"output_text": "output_text", "text": "output_text",
                                 "output_audio": "output_audio", "audio": "output_audio"},
                   "system": {"input_text": "input_text", "text": "input_text"}}[it.role]
        content: list[Content] = []
        transcribe = None
        for i, c in enumerate(it.content):
            p = f"{param}.content[{i}]"
            kind = allowed.get(c.type)
            if kind is None:
                raise ClientError("invalid_value", f"Invalid value for '{p}.type': {c.type!r} "
                                  f"for role {it.role!r}. Supported values are: "
                                  f"{', '.join(repr(k) for k in allowed)}.", f"{p}.type")
            if kind in ("input_text", "output_text"):
                if c.text is None:
                    raise ClientError("missing_required_parameter",
                                      f"Missing required parameter: '{p}.text'.", f"{p}.text")
                if len(c.text) > self.limits.max_item_text_chars:
                    raise ClientError("string_above_max_length", f"Invalid '{p}.text': string "
                                      "too long.", f"{p}.text")
                content.append(Content(kind, text=c.text))
                continue
            if c.transcript is not None and len(c.transcript) > self.limits.max_item_text_chars:
                raise ClientError("string_above_max_length", f"Invalid '{p}.transcript': "
                                  "string too long.", f"{p}.transcript")
            if kind == "input_audio" and c.transcript is None and c.audio:
                if not allow_transcribe or transcribe is not None:
                    raise ClientError("invalid_value", f"Invalid '{p}': input_audio needs a "
                                      "transcript here.", f"{p}.transcript")
                data = decode_base64_audio(c.audio, f"{p}.audio",
                                           self.limits.max_append_b64_bytes)
                fmt = self.settings.input_format
                if fmt.type == PCM and len(data) % 2:
                    raise ClientError("invalid_audio_length", f"Invalid '{p}.audio': PCM16 "
                                      "audio must have an even number of bytes.", f"{p}.audio")
                pcm = resample(decode_wire_audio(data, fmt.type), fmt.sample_rate, LISTEN_RATE)
                transcribe = (i, pcm)
                content.append(Content(kind, transcript=None))
                continue
            content.append(Content(kind, transcript=c.transcript or ""))
        item_id = it.id or self.ids.new("item")
        status = "in_progress" if transcribe else "completed"
        return Item(item_id, it.role, content, status=status), transcribe

    def _on_conversation_item_create(self, ev, now_ms) -> list[Command]:
        if ev.item.id is not None and ev.item.id in self.conversation:
            raise ClientError("invalid_value", f"Invalid 'item.id': an item with id "
                              f"'{ev.item.id}' already exists.", "item.id")
        if ev.previous_item_id is not None and ev.previous_item_id not in self.conversation:
            raise ClientError("invalid_value", f"Invalid 'previous_item_id': no item with id "
                              f"'{ev.previous_item_id}'.", "previous_item_id")
        item, transcribe = self._build_item(ev.item, allow_transcribe=True)
        prev = self.conversation.add(item, ev.previous_item_id)
        out: list[Command] = [self._send("conversation.item.added", previous_item_id=prev,
                                         item=item.wire())]
        if transcribe is not None:
            self._pending_transcripts[item.id] = transcribe[0]
            out.append(TranscribeBuffer(item.id, transcribe[1]))
        else:
            out.append(self._send("conversation.item.done", previous_item_id=prev,
                                  item=item.wire()))
        return out

    def _find_item(self, item_id: str) -> Item | None:
        item = self.conversation.get(item_id)
        if item is None and self._active and self._active.item and \
                self._active.item.id == item_id:
            item = self._active.item
        return item

    def _on_conversation_item_truncate(self, ev, now_ms) -> list[Command]:
        item = self.conversation.get(ev.item_id)
        if item is None:
            raise ClientError("invalid_value", f"Invalid 'item_id': no item with id "
                              f"'{ev.item_id}'.", "item_id")
        if item.role != "assistant" or ev.content_index >= len(item.content) or \
                item.content[ev.content_index].type != "output_audio":
            raise ClientError("invalid_value", "Invalid 'content_index': only assistant audio "
                              "content can be truncated.", "content_index")
        if ev.audio_end_ms > item.max_truncate_ms():
            raise ClientError("invalid_value", f"Invalid 'audio_end_ms': audio content of "
                              f"{item.max_truncate_ms()}ms is shorter than {ev.audio_end_ms}ms.",
                              "audio_end_ms")
        out: list[Command] = []
        r = self._active
        if r is not None and r.item is item:
            # the client stopped playing this item: stop producing it
            out += self._cancel_active("client_cancelled", now_ms, flush=False,
                                       reason_cmd="item_truncated")
        item.truncate(ev.audio_end_ms, ev.content_index)
        out.append(self._send("conversation.item.truncated", item_id=item.id,
                              content_index=ev.content_index, audio_end_ms=ev.audio_end_ms))
        return out

    def _on_conversation_item_delete(self, ev, now_ms) -> list[Command]:
        item = self.conversation.get(ev.item_id)
        if item is None:
            raise ClientError("invalid_value", f"Invalid 'item_id': no item with id "
                              f"'{ev.item_id}'.", "item_id")
        if self._active is not None and self._active.item is item:
            raise ClientError("invalid_value", "Invalid 'item_id': the item belongs to the "
                              "response in progress; cancel it first.", "item_id")
        self.conversation.delete(item.id)
        out: list[Command] = [self._send("conversation.item.deleted", item_id=item.id)]
        if item.id in self._awaiting_final:
            self._awaiting_final.remove(item.id)
        if self._pending_transcripts.pop(item.id, None) is not None:
            out += self._maybe_start_waiting()
        return out

    def _on_conversation_item_retrieve(self, ev, now_ms) -> list[Command]:
        item = self.conversation.get(ev.item_id)
        if item is None:
            raise ClientError("invalid_value", f"Invalid 'item_id': no item with id "
                              f"'{ev.item_id}'.", "item_id")
        return [self._send("conversation.item.retrieved", item=item.wire())]

    def _on_response_create(self, ev, now_ms) -> list[Command]:
        if self._active is not None:
            raise ClientError("conversation_already_has_active_response",
                              f"Conversation already has an active response in progress: "
                              f"{self._active.id}. Wait until the response is finished before "
                              "creating a new one.")
        p = ev.response
        s = self.settings
        modalities = s.output_modalities
        max_tokens = s.max_output_tokens
        instructions = s.instructions
        metadata = None
        in_conv = True
        input_messages = None
        if p is not None:
            if p.modalities is not None:
                modalities = _modalities(p.modalities, "response.modalities")
            if p.output_modalities is not None:
                modalities = _modalities(p.output_modalities, "response.output_modalities")
            for key in ("max_response_output_tokens", "max_output_tokens"):
                v = getattr(p, key)
                if v is not None:
                    max_tokens = _max_tokens(v, f"response.{key}", self.limits)
            if p.instructions is not None:
                if len(p.instructions) > self.limits.max_instructions_chars:
                    raise ClientError("string_above_max_length", "Invalid "
                                      "'response.instructions': string too long. Expected at "
                                      f"most {self.limits.max_instructions_chars} characters.",
                                      "response.instructions")
                instructions = p.instructions
            if p.metadata is not None:
                metadata = self._check_metadata(p.metadata)
            if p.conversation not in (None, "auto", "none"):
                raise ClientError("invalid_value", "Invalid 'response.conversation': supported "
                                  "values are 'auto' and 'none'.", "response.conversation")
            in_conv = p.conversation != "none"
            if p.input is not None:
                input_messages = self._input_messages(p.input)
        return self._create_response(now_ms, ev.event_id, modalities, max_tokens,
                                     instructions or None, metadata, in_conv, input_messages)

    def _check_metadata(self, md: dict) -> dict:
        lim = self.limits
        if len(md) > lim.max_metadata_keys:
            raise ClientError("invalid_value", f"Invalid 'response.metadata': at most "
                              f"{lim.max_metadata_keys} keys.", "response.metadata")
        for k, v in md.items():
            if len(k) > lim.max_metadata_key_chars or len(v) > lim.max_metadata_value_chars:
                raise ClientError("string_above_max_length", f"Invalid 'response.metadata': "
                                  f"key or value too long ({k[:64]!r}).", "response.metadata")
        return dict(md)

    def _input_messages(self, items: list) -> list[dict]:
        msgs = []
        for i, raw in enumerate(items):
            param = f"response.input[{i}]"
            if raw.get("type") == "item_reference":
                ref = self.conversation.get(raw.get("id")) if isinstance(raw.get("id"), str) \
                    else None
                if ref is None:
                    raise ClientError("invalid_value", f"Invalid '{param}.id': no such item.",
                                      f"{param}.id")
                item = ref
            else:
                try:
                    it = ItemIn.model_validate(raw)
                except ValidationError as exc:
                    raise from_validation_error(exc, param) from None
                item, _ = self._build_item(it, allow_transcribe=False, param=param)
            text = item.text()
            if text:
                msgs.append({"role": item.role, "content": text})
        return msgs

    def _on_response_cancel(self, ev, now_ms) -> list[Command]:
        r = self._active
        if r is None or (ev.response_id is not None and ev.response_id != r.id):
            raise ClientError("response_cancel_not_active",
                              "Cancellation failed: no active response found.")
        return self._cancel_active("client_cancelled", now_ms, flush=False)

    def _on_output_audio_buffer_clear(self, ev, now_ms) -> list[Command]:
        r = self._active if (self._active and self._active.item) else self._last_audio
        if r is None:
            return []
        out: list[Command] = []
        if self.audio_out_mode == "stream" and r.item is not None:
            out.append(FlushAudio(r.item.id))
            out += self._truncate_to_played(r, before_done=False)
        out.append(self._send("output_audio_buffer.cleared", response_id=r.id))
        r.playback_stopped = True
        return out

    # ------------------------------------------------------------- input audio
    def input_audio(self, pcm: np.ndarray, sample_rate: int, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        pcm = np.asarray(pcm)
        if pcm.dtype != np.int16:
            raise TypeError("input_audio expects int16 PCM")
        out = self._ensure_started(now_ms)
        self._last_traffic_ms = now_ms
        out += self._ingest(pcm.reshape(-1), int(sample_rate), now_ms)
        return out

    def _take_token(self, now_ms: float) -> bool:
        """Token bucket of ``ServerLimits.max_client_events_per_s``."""
        rate = self.limits.max_client_events_per_s
        if rate <= 0:
            return True
        burst = float(max(self.limits.client_events_burst, 1))
        if self._tokens_ms is not None:
            self._tokens = min(burst, self._tokens + max(now_ms - self._tokens_ms, 0.0) * rate
                               / 1000.0)
        self._tokens_ms = now_ms
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _ingest(self, pcm: np.ndarray, rate: int, now_ms: float) -> list[Command]:
        if self._in_resampler is None or self._in_resampler.in_rate != rate:
            self._in_resampler = StreamResampler(rate, LISTEN_RATE,
                                                 low_latency_quality(rate, LISTEN_RATE))
        pcm16 = self._in_resampler.process(pcm)
        if pcm16.size == 0:
            return []
        self._in_samples += pcm16.size
        out: list[Command] = []
        if self.settings.turn_detection is not None:
            out.append(FeedListen(pcm16))
            self._buffer.append(pcm16, self._in_samples, ring=True)
        else:
            ok = self._buffer.append(pcm16, self._in_samples, ring=False)
            if not ok and not self._buffer_full_reported:
                self._buffer_full_reported = True
                out.append(self._error("invalid_request_error", "input_audio_buffer_full",
                                       f"Input audio buffer is full ("
                                       f"{self.limits.max_buffered_input_s:g}s); later audio "
                                       "is dropped until commit or clear.", "audio"))
        return out

    @property
    def input_ms(self) -> float:
        """Position of the input timeline (ms of input audio received)."""
        return self._in_samples * 1000.0 / LISTEN_RATE

    # ------------------------------------------------------------ listen stage
    def listen_event(self, ev: dict, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        out = self._ensure_started(now_ms)
        t = ev.get("type")
        vad = self.settings.turn_detection is not None
        if t == "speech_started" and vad:
            out += self._speech_started(int(ev.get("audio_start_ms", 0)), now_ms)
        elif t == "partial" and vad:
            out += self._partial_text(str(ev.get("text", "")))
        elif t == "speech_stopped" and (vad or self._speech_item):
            if self._speech_item is None:
                return out  # stray stop
            out += self._commit_speech(int(ev.get("audio_end_ms", 0)))
        elif t == "final" and (vad or self._speech_item or self._awaiting_final):
            out += self._final(str(ev.get("text", "")), int(ev.get("audio_start_ms", 0)),
                               int(ev.get("audio_end_ms", 0)), now_ms)
        return out

    def _speech_started(self, audio_start_ms: int, now_ms: float) -> list[Command]:
        if self._speech_item is not None:
            return []  # already in speech
        self._speech_item = self.ids.new("item")
        self._speech_start_ms = audio_start_ms
        self._idle_deadline = None
        started = self._send("input_audio_buffer.speech_started", audio_start_ms=audio_start_ms,
                             item_id=self._speech_item)
        td = self.settings.turn_detection
        if self._active is not None and td is not None and td.interrupt_response:
            return self._cancel_active("turn_detected", now_ms, flush=True, between=[started])
        return [started]

    def _partial_text(self, text: str) -> list[Command]:
        target = self._speech_item or (self._awaiting_final[0] if self._awaiting_final else None)
        if target is None:
            return []
        self._partial[target] = text
        if target in self.conversation:
            return self._transcript_delta(target, text)
        return []

    def _transcript_delta(self, item_id: str, text: str) -> list[Command]:
        sent = self._partial_sent.get(item_id, "")
        if self.settings.transcription_model is None or not text.startswith(sent) \
                or len(text) <= len(sent):
            return []
        self._partial_sent[item_id] = text
        return [self._send("conversation.item.input_audio_transcription.delta", item_id=item_id,
                           content_index=0, delta=text[len(sent):])]

    def _commit_speech(self, audio_end_ms: int) -> list[Command]:
        item_id = self._speech_item
        self._speech_item = None
        item = Item(item_id, "user", [Content("input_audio")], status="in_progress")
        prev = self.conversation.add(item)
        self._awaiting_final.append(item_id)
        self._buffer.drop_until_ms(audio_end_ms)
        out: list[Command] = [
            self._send("input_audio_buffer.speech_stopped", audio_end_ms=audio_end_ms,
                       item_id=item_id),
            self._send("input_audio_buffer.committed", previous_item_id=prev, item_id=item_id),
            self._send("conversation.item.added", previous_item_id=prev, item=item.wire()),
        ]
        if self._partial.get(item_id):
            out += self._transcript_delta(item_id, self._partial[item_id])
        return out

    def _final(self, text: str, start_ms: int, end_ms: int, now_ms: float) -> list[Command]:
        out: list[Command] = []
        if not self._awaiting_final:
            if self._speech_item is None:
                # a final with no speech events: synthesize them
                out += self._speech_started(start_ms, now_ms)
            out += self._commit_speech(end_ms)
        item_id = self._awaiting_final.popleft()
        self._partial.pop(item_id, None)
        item = self.conversation.get(item_id)
        if item is None:  # deleted meanwhile
            self._partial_sent.pop(item_id, None)
            return out
        text = text.strip()
        out += self._complete_transcript(item, 0, text, (end_ms - start_ms) / 1000.0)
        if text:
            self._unanswered = True
        out += self._maybe_auto_respond(now_ms)
        return out

    def _complete_transcript(self, item: Item, content_index: int, text: str,
                             seconds: float, error: dict | None = None) -> list[Command]:
        out: list[Command] = []
        on = self.settings.transcription_model is not None
        if error is not None:
            if on:
                out.append(self._send(
                    "conversation.item.input_audio_transcription.failed", item_id=item.id,
                    content_index=content_index,
                    error={"type": "server_error", "code": error.get("code", "internal"),
                           "message": error.get("message", "transcription failed"),
                           "param": None}))
        else:
            out += self._transcript_delta(item.id, text) if content_index == 0 else []
            if on:
                out.append(self._send(
                    "conversation.item.input_audio_transcription.completed", item_id=item.id,
                    content_index=content_index, transcript=text,
                    usage={"type": "duration", "seconds": round(max(seconds, 0.0), 3)}))
        self._partial_sent.pop(item.id, None)
        item.content[content_index].transcript = text
        item.status = "completed"
        out.append(self._send("conversation.item.done",
                              previous_item_id=self.conversation.previous_of(item.id),
                              item=item.wire()))
        return out

    def _maybe_auto_respond(self, now_ms: float) -> list[Command]:
        td = self.settings.turn_detection
        if td is None or not td.create_response or not self._unanswered or \
                self._speech_item is not None or self._awaiting_final or \
                self._active is not None:
            return []
        s = self.settings
        return self._create_response(now_ms, None, s.output_modalities, s.max_output_tokens,
                                     s.instructions or None, None, True, None)

    def transcription_result(self, item_id: str, text: str | None, now_ms: float,
                             error: dict | None = None) -> list[Command]:
        if self.closed or item_id not in self._pending_transcripts:
            return []
        idx = self._pending_transcripts.pop(item_id)
        item = self.conversation.get(item_id)
        out: list[Command] = []
        if item is not None:
            secs = 0.0
            out += self._complete_transcript(item, idx, (text or "").strip(), secs, error)
        out += self._maybe_start_waiting()
        return out

    # -------------------------------------------------------------- responses
    def _create_response(self, now_ms, cause, modalities, max_tokens, instructions,
                         metadata, in_conv, input_messages) -> list[Command]:
        s = self.settings
        r = _Response(id=self.ids.new("resp"), modalities=list(modalities),
                      max_tokens=max_tokens, instructions=instructions, metadata=metadata,
                      in_conversation=in_conv, cause_event_id=cause,
                      output_format=s.output_format, voice=s.voice,
                      input_messages=input_messages)
        self._active = r
        self._unanswered = False
        self._idle_deadline = None
        out: list[Command] = [self._send("response.created",
                                         response=self._response_wire(r, "in_progress"))]
        if not (self._pending_transcripts and input_messages is None):
            out.append(self._start_cmd(r))
        return out

    def _start_cmd(self, r: _Response) -> StartResponse:
        r.started = True
        msgs = r.input_messages if r.input_messages is not None else self.conversation.messages()
        return StartResponse(r.id, msgs, list(r.modalities), r.max_tokens, r.instructions,
                             r.metadata)

    def _maybe_start_waiting(self) -> list[Command]:
        r = self._active
        if r is not None and not r.started and not r.done and not self._pending_transcripts:
            return [self._start_cmd(r)]
        return []

    def _response_wire(self, r: _Response, status: str, details: dict | None = None,
                       usage: dict | None = None) -> dict:
        return response_object(
            r.id, status, status_details=details,
            output=[r.item.wire()] if r.item else [],
            conversation_id=self.conversation_id if r.in_conversation else None,
            modalities=r.modalities, max_output_tokens=r.max_tokens,
            output_format=r.output_format.wire(), voice=r.voice, usage=usage,
            metadata=r.metadata)

    def _ensure_item(self, r: _Response) -> list[Command]:
        if r.item is not None:
            return []
        kind = "output_audio" if r.audio else "output_text"
        item = Item(self.ids.new("item"), "assistant",
                    [Content(kind, text="" if kind == "output_text" else None,
                             transcript="" if kind == "output_audio" else None)],
                    status="in_progress", response_id=r.id)
        r.item = item
        out: list[Command] = [self._send("response.output_item.added", response_id=r.id,
                                         output_index=0, item=item.wire())]
        if r.in_conversation:
            prev = self.conversation.add(item)
            out.append(self._send("conversation.item.added", previous_item_id=prev,
                                  item=item.wire()))
        out.append(self._send("response.content_part.added", response_id=r.id, item_id=item.id,
                              output_index=0, content_index=0,
                              part=content_part("audio" if r.audio else "text", "")))
        return out

    def response_chunk(self, response_id: str, stage: str, payload, now_ms: float) \
            -> list[Command]:
        r = self._active
        if self.closed or r is None or r.id != response_id or r.done or not r.started:
            return []
        if stage == "think":
            if not isinstance(payload, str) or not payload:
                return []
            if r.audio:
                r.think_text += payload
                return []
            out = self._ensure_item(r)
            r.text += payload
            r.item.content[0].text = r.text
            out.append(self._send("response.output_text.delta", response_id=r.id,
                                  item_id=r.item.id, output_index=0, content_index=0,
                                  delta=payload))
            return out
        if stage == "speak":
            if not r.audio or not isinstance(payload, dict):
                return []
            return self._speak(r, payload, now_ms)
        return []

    def _speak(self, r: _Response, payload: dict, now_ms: float) -> list[Command]:
        audio = np.asarray(payload.get("audio", np.zeros(0, np.int16)))
        if audio.dtype != np.int16:
            audio = np.clip(np.round(audio.astype(np.float64) *
                                     (32767.0 if audio.dtype.kind == "f" else 1.0)),
                            -32768, 32767).astype(np.int16)
        audio = audio.reshape(-1)
        sr = int(payload.get("sample_rate", 16000))
        text = str(payload.get("text") or "")
        if audio.size == 0 and not text:
            return []
        out = self._ensure_item(r)
        item = r.item
        if text and r.transcript and not r.transcript[-1].isspace() and not text[0].isspace():
            text = " " + text
        dur = audio.size * 1000.0 / sr
        item.segments.append(Segment(r.seg_end_ms, r.seg_end_ms + dur, text))
        r.seg_end_ms += dur
        if audio.size:
            if r.first_audio_ms is None:
                r.first_audio_ms = now_ms
            if self.audio_out_mode == "stream":
                if not r.buffer_started:
                    r.buffer_started = True
                    out.append(self._send("output_audio_buffer.started", response_id=r.id))
                out.append(AudioOut(r.id, item.id, audio, sr))
                item.audio_ms += dur
            else:
                out += self._audio_delta(r, audio, sr)
        if text:
            r.transcript += text
            item.content[0].transcript = r.transcript
            out.append(self._send("response.output_audio_transcript.delta", response_id=r.id,
                                  item_id=item.id, output_index=0, content_index=0, delta=text))
        self._last_audio = r
        return out

    def _audio_delta(self, r: _Response, audio: np.ndarray, sr: int,
                     flush: bool = False) -> list[Command]:
        fmt = r.output_format
        out: list[Command] = []
        pcm = np.zeros(0, np.int16)
        if r.resampler is not None and (flush or r.resampler.in_rate != sr):
            pcm = r.resampler.flush()  # tail of the previous rate
        if not flush:
            if r.resampler is None or r.resampler.in_rate != sr:
                r.resampler = StreamResampler(sr, fmt.sample_rate)
            pcm = np.concatenate([pcm, r.resampler.process(audio)])
        if pcm.size == 0:
            return out
        r.out_samples += pcm.size
        r.item.audio_ms = r.out_samples * 1000.0 / fmt.sample_rate
        data = encode_wire_audio(pcm, fmt.type)
        out.append(self._send("response.output_audio.delta", response_id=r.id, item_id=r.item.id,
                              output_index=0, content_index=0,
                              delta=base64.b64encode(data).decode("ascii")))
        return out

    def _done_events(self, r: _Response, status: str, details: dict | None,
                     usage: dict | None) -> list[Command]:
        """Close every open part of ``r`` and emit response.done (exactly once)."""
        r.done = True
        if self._active is r:
            self._active = None
        out: list[Command] = []
        item = r.item
        if item is not None:
            common = dict(response_id=r.id, item_id=item.id, output_index=0, content_index=0)
            if r.audio:
                transcript = item.content[0].transcript or ""
                out.append(self._send("response.output_audio.done", **common))
                out.append(self._send("response.output_audio_transcript.done",
                                      transcript=transcript, **common))
                part = content_part("audio", transcript)
            else:
                out.append(self._send("response.output_text.done", text=r.text, **common))
                part = content_part("text", r.text)
            out.append(self._send("response.content_part.done", part=part, **common))
            item.status = "completed" if status == "completed" else "incomplete"
            out.append(self._send("response.output_item.done", response_id=r.id, output_index=0,
                                  item=item.wire()))
            if r.in_conversation and item.id in self.conversation:
                out.append(self._send("conversation.item.done",
                                      previous_item_id=self.conversation.previous_of(item.id),
                                      item=item.wire()))
        out.append(self._send("response.done", response=self._response_wire(
            r, status, details, usage if usage is not None else zero_usage())))
        return out

    def _truncate_to_played(self, r: _Response, before_done: bool) -> list[Command]:
        """Stream mode: cut the item to what was heard (when known)."""
        item = r.item
        if item is None or item.played_ms is None or not r.audio:
            return []
        end = int(item.played_ms)
        if end >= item.max_truncate_ms():
            return []
        item.truncate(end)
        if r.transcript:
            r.transcript = item.content[0].transcript or ""
        if before_done:
            return []
        return [self._send("conversation.item.truncated", item_id=item.id, content_index=0,
                           audio_end_ms=end)]

    def _cancel_active(self, reason: str, now_ms: float, flush: bool,
                       between: list | None = None, reason_cmd: str | None = None) \
            -> list[Command]:
        r = self._active
        out: list[Command] = []
        if r is None:
            return list(between or [])
        if r.started:
            out.append(CancelResponse(r.id, reason_cmd or reason))
        truncated_end = None
        if flush and self.audio_out_mode == "stream" and r.item is not None and r.audio:
            out.append(FlushAudio(r.item.id))
            if r.buffer_started:
                out.append(self._send("output_audio_buffer.cleared", response_id=r.id))
            r.playback_stopped = True
            if r.item.played_ms is not None and int(r.item.played_ms) < r.item.max_truncate_ms():
                truncated_end = int(r.item.played_ms)
                self._truncate_to_played(r, before_done=True)
        out += list(between or [])
        out += self._done_events(r, "cancelled", {"type": "cancelled", "reason": reason}, None)
        if truncated_end is not None and r.in_conversation:
            out.append(self._send("conversation.item.truncated", item_id=r.item.id,
                                  content_index=0, audio_end_ms=truncated_end))
        self._set_idle_deadline(r, now_ms)
        return out

    def response_finished(self, response_id: str, status: str, error: dict | None,
                          now_ms: float, usage: dict | None = None) -> list[Command]:
        r = self._active
        if self.closed or r is None or r.id != response_id or r.done:
            return []
        out: list[Command] = []
        if status == "completed":
            if r.audio and r.item is not None and self.audio_out_mode == "events":
                out += self._audio_delta(r, np.zeros(0, np.int16), 0, flush=True)
            out += self._done_events(r, "completed", None, usage)
        elif status == "cancelled":
            out += self._done_events(r, "cancelled", {"type": "cancelled", "reason": None}, usage)
        else:
            err = error or {}
            code = err.get("code") if err.get("code") in _RUNTIME_ERROR_CODES else "internal"
            etype = "invalid_request_error" if code == "bad_input" else "server_error"
            msg = str(err.get("message") or "The response failed.")
            out.append(self._error(etype, code, msg, None, r.cause_event_id))
            out += self._done_events(r, "failed", {"type": "failed",
                                                   "error": {"type": etype, "code": code}}, usage)
        self._set_idle_deadline(r, now_ms)
        out += self._maybe_stop_playback(r)
        return out

    # --------------------------------------------------------------- playback
    def playback_progress(self, item_id: str, played_ms: float, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        item = self._find_item(item_id)
        if item is None or item.role != "assistant":
            return []
        played = min(float(played_ms), item.audio_ms)
        item.played_ms = played if item.played_ms is None else max(item.played_ms, played)
        r = self._last_audio if self._last_audio and self._last_audio.item is item else None
        if r is not None and r.done and r.first_audio_ms is not None:
            td = self.settings.turn_detection
            if td is not None and td.idle_timeout_ms and self._idle_deadline is not None:
                remaining = max(item.audio_ms - item.played_ms, 0.0)
                self._idle_deadline = now_ms + remaining + td.idle_timeout_ms
            return self._maybe_stop_playback(r)
        return []

    def _maybe_stop_playback(self, r: _Response) -> list[Command]:
        item = r.item
        if self.audio_out_mode != "stream" or not r.done or not r.buffer_started or \
                r.playback_stopped or item is None or item.played_ms is None:
            return []
        if item.played_ms + 1.0 >= item.audio_ms:
            r.playback_stopped = True
            return [self._send("output_audio_buffer.stopped", response_id=r.id)]
        return []

    # ----------------------------------------------------------------- timers
    def _set_idle_deadline(self, r: _Response, now_ms: float) -> None:
        td = self.settings.turn_detection
        if td is None or not td.idle_timeout_ms:
            self._idle_deadline = None
            return
        end = now_ms
        if r.first_audio_ms is not None and r.item is not None:
            end = max(end, r.first_audio_ms + r.item.audio_ms)
        self._idle_deadline = end + td.idle_timeout_ms

    def tick(self, now_ms: float) -> list[Command]:
        if self.closed or not self.started:
            return []
        if now_ms - self._start_ms >= self.limits.max_session_s * 1000.0:
            return self._expire(now_ms)
        idle_s = self.limits.idle_timeout_s
        if self._active is not None:  # a reply in progress is not idleness
            self._last_traffic_ms = now_ms
        elif idle_s > 0 and \
                now_ms - (self._last_traffic_ms or self._start_ms) >= idle_s * 1000.0:
            return self._expire(now_ms, "idle_timeout",
                                f"No client events or audio for {idle_s:g} seconds.")
        td = self.settings.turn_detection
        if td is None or not td.idle_timeout_ms or self._idle_deadline is None or \
                now_ms < self._idle_deadline or self._active is not None or \
                self._speech_item is not None or self._awaiting_final:
            return []
        self._idle_deadline = None
        pos = int(self.input_ms)
        item = Item(self.ids.new("item"), "user", [Content("input_audio", transcript="")])
        prev = self.conversation.add(item)
        out: list[Command] = [
            self._send("input_audio_buffer.timeout_triggered", audio_start_ms=pos,
                       audio_end_ms=pos, item_id=item.id),
            self._send("input_audio_buffer.committed", previous_item_id=prev, item_id=item.id),
            self._send("conversation.item.added", previous_item_id=prev, item=item.wire()),
            self._send("conversation.item.done", previous_item_id=prev, item=item.wire()),
        ]
        s = self.settings
        if td.create_response:
            out += self._create_response(now_ms, None, s.output_modalities, s.max_output_tokens,
                                         s.instructions or None, None, True, None)
        return out

    def _expire(self, now_ms: float, code: str = "session_expired",
                message: str | None = None) -> list[Command]:
        out: list[Command] = []
        if self._active is not None:
            out += self._cancel_active("client_cancelled", now_ms, flush=True,
                                       reason_cmd=code)
        out.append(self._error("invalid_request_error", code, message or
                               f"Your session hit the maximum duration of "
                               f"{self.limits.max_session_s:g} seconds."))
        if self._listening is not None:
            self._listening = None
            out.append(StopListen())
        out.append(Close(1000, code))
        self.closed = True
        return out

    def disconnect(self, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        self.closed = True
        out: list[Command] = []
        r = self._active
        if r is not None:
            if r.started:
                out.append(CancelResponse(r.id, "disconnected"))
            r.done = True
            self._active = None
        if self._listening is not None:
            self._listening = None
            out.append(StopListen())
        return out
