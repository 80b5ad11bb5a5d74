"""The response lifecycle: create, start (``StartResponse``), the thinker's
text, tool calls (function_calls.py) and the speaker's audio as events or
``AudioOut``, finish, fail and cancel (``CancelResponse`` + ``response.done``).  Part of
:class:`voice_server.session.Session` (core.py), split out by section."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime.errors import ErrorCode
from runtime.models.voice_contract import (ERROR_CODES, LENGTH, SPEAK, THINK, USAGE, SpeakChunk,
                                           think_events)

from ..audio_codec import StreamResampler, encode_wire_audio
from .commands import (AudioOut, CancelResponse, Command, FlushAudio, ResumeAudio, SendEvent,
                       StartResponse)
from .items import Content, Item, Segment
from .server_events import content_part, response_object, token_usage, zero_usage
from .tools import chat_tool_choice, chat_tools, choice_misfit, choice_still_valid
from .truncation import CONTEXT_LENGTH_EXCEEDED, ContextTooLong


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
    tools: list | None = None  # chat-completions shape (tools.py); None: no tools
    tool_choice: Any = None
    started: bool = False  # StartResponse emitted
    done: bool = False
    item: Item | None = None  # the message (audio or text) item
    outputs: list = field(default_factory=list)  # every output item, in order
    calls: dict = field(default_factory=dict)  # thinker's call index -> function_call item
    text: str = ""  # output_text (text modality)
    transcript: str = ""  # audio transcript sent
    think_text: str = ""
    seg_end_ms: float = 0.0
    resampler: StreamResampler | None = None
    out_samples: int = 0
    first_audio_ms: float | None = None
    buffer_started: bool = False
    playback_stopped: bool = False
    # generation completed while the pacer still held audio: response.done
    # waits for the last of it (pump_output); the usage to report then
    generated: bool = False
    usage: dict | None = None
    tokens: dict | None = None   # the thinker's usage event (response.done's usage)

    @property
    def audio(self) -> bool:
        return "audio" in self.modalities

    @property
    def msg_index(self) -> int:
        return self.outputs.index(self.item)


@dataclass
class ResponseState:
    """The session's responses between events; the session holds one
    (``Session._responses``) and this module writes it."""

    # the response being made or still released: set when it is created, None
    # again at its response.done (or when the client disconnects)
    active: _Response | None = None
    # the last response the speaker sent audio or words for (set at each chunk); kept
    # after it ends for what the listener still plays (playback.py) and the goodbye
    last_audio: _Response | None = None
    usage_input_ms: float = 0.0  # input timeline reported as heard by the last response.done


class Responses:
    def _auto_response(self, now_ms: float) -> list[Command]:
        """A response the server starts itself (a turn ended, a check-in, a
        message for a machine): the session's settings, into the conversation."""
        s = self.settings
        return self._create_response(now_ms, cause=None, modalities=s.output_modalities,
                                     max_tokens=s.max_output_tokens,
                                     instructions=s.instructions or None, metadata=None,
                                     in_conv=True, input_messages=None)

    def _create_response(self, now_ms, *, cause, modalities, max_tokens, instructions,
                         metadata, in_conv, input_messages, tools: list | None = None,
                         tool_choice=None, actions: bool = True) -> list[Command]:
        """``tools`` / ``tool_choice``: a ``response.create``'s overrides
        (Realtime shape, checked); None: the session's.  The session's choice
        is checked here against the session's tools (clients set it before
        the tools it names): one that does not fit gets an ``error`` and the
        response goes on under ``auto``.  ``actions``: the call actions on
        offer (agent_actions.py) go with the tools."""
        s = self.settings
        out: list[Command] = []
        if tools is None and tool_choice is None:
            err = choice_misfit(s.tool_choice, s.tools + self._action_tools(),
                                "session.tool_choice")
            if err is not None:
                out.append(self._error("invalid_request_error", err.code, err.message +
                                       " This response is made under tool_choice 'auto'.",
                                       err.param, cause))
        think_tools, think_choice = self._tool_params(tools, tool_choice, actions=actions)
        r = _Response(id=self.ids.new("resp"), modalities=list(modalities),
                      max_tokens=max_tokens, instructions=self._system_text(instructions),
                      metadata=metadata, in_conversation=in_conv, cause_event_id=cause,
                      output_format=s.output_format, voice=s.voice,
                      input_messages=input_messages,
                      tools=think_tools, tool_choice=think_choice)
        self._responses.active = r
        self._pacer.reset()
        self._turn.unanswered = False
        self._silence.count_until(None)
        out.append(self._send("response.created", response=self._response_wire(r, "in_progress")))
        out.append(self._rate_limits(r, now_ms))
        if not (self._turn.pending_transcripts and input_messages is None):
            out += self._start(r)
        return out

    def _rate_limits(self, r: _Response, now_ms: float) -> SendEvent:
        """``rate_limits.updated`` after response.created, as the API sends it,
        with this server's own limits: ``requests``, the client-event bucket
        (``max_client_events_per_s`` / ``client_events_burst``: what is left
        and how long until it is full again; left out when unlimited), and
        ``tokens``, the output tokens this response may use of the operator's
        ``max_output_tokens_cap`` (a per-response cap: nothing to reset)."""
        limits = []
        bucket = self._bucket
        if bucket.rate_per_s > 0:
            limits.append({"name": "requests", "limit": int(bucket.capacity),
                           "remaining": int(bucket.level(now_ms)),
                           "reset_seconds": round(bucket.full_in_s(), 3)})
        cap = self.limits.max_output_tokens_cap
        limits.append({"name": "tokens", "limit": cap, "remaining": min(r.max_tokens or cap, cap),
                       "reset_seconds": 0})
        return self._send("rate_limits.updated", rate_limits=limits)

    def _tool_params(self, tools: list | None = None, tool_choice=None, *,
                     actions: bool = True) -> tuple:
        """The tools and tool choice a response takes to the thinker, in the
        chat-completions shape: the overrides, else the session's, and the
        call actions on offer (a session choice that does not fit them is
        ``auto``); (None, None) without tools."""
        s = self.settings
        tools = (s.tools if tools is None else tools) + (self._action_tools() if actions else [])
        if not tools:
            return None, None
        if tool_choice is None:
            tool_choice = s.tool_choice if choice_still_valid(s.tool_choice, tools) else "auto"
        return chat_tools(tools), chat_tool_choice(tool_choice)

    def _start(self, r: _Response) -> list[Command]:
        """``StartResponse`` with the messages in the model's context; under
        ``truncation: disabled`` a conversation that does not fit fails the
        response instead (``context_length_exceeded``)."""
        if r.input_messages is not None:
            msgs = r.input_messages
        else:
            try:
                msgs = self._context_messages(r.instructions, r.max_tokens, r.tools)
            except ContextTooLong as e:
                return self._fail(r, "invalid_request_error", CONTEXT_LENGTH_EXCEEDED,
                                  f"The conversation (about {e.chars} characters) does not fit "
                                  f"the model's context (about {e.room} characters after the "
                                  "instructions and tools) and session.truncation is "
                                  "'disabled': delete items (conversation.item.delete) or set "
                                  "truncation to 'auto'.")
        r.started = True
        return [StartResponse(r.id, msgs, list(r.modalities), r.max_tokens, r.instructions,
                              r.metadata, r.tools, r.tool_choice, voice=r.voice,
                              speed=self.settings.speed, language=self.language)]

    def _fail(self, r: _Response, etype: str, code: str, message: str,
              usage: dict | None = None) -> list[Command]:
        """An ``error`` (caused by the response's client event) and ``response.done``
        ``failed``."""
        return [self._error(etype, code, message, None, r.cause_event_id)] + \
            self._done_events(r, "failed", {"type": "failed",
                                            "error": {"type": etype, "code": code}}, usage)

    def _maybe_start_waiting(self) -> list[Command]:
        r = self._responses.active
        if r is not None and not r.started and not r.done and not self._turn.pending_transcripts:
            return self._start(r)
        return []

    def _response_wire(self, r: _Response, status: str, details: dict | None = None,
                       usage: dict | None = None) -> dict:
        return response_object(
            r.id, status, status_details=details,
            output=[it.wire() for it in r.outputs],
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
        out = self._add_output_item(r, item)
        out.append(self._send("response.content_part.added", response_id=r.id, item_id=item.id,
                              output_index=r.msg_index, content_index=0,
                              part=content_part("audio" if r.audio else "text", "")))
        return out

    def response_chunk(self, response_id: str, stage: str, payload, now_ms: float) \
            -> list[Command]:
        r = self._responses.active
        if self.closed or r is None or r.id != response_id or r.done or not r.started:
            return []
        if stage == THINK:
            out: list[Command] = []
            for ev in think_events(payload):
                if isinstance(ev, str):
                    out += self._think_text(r, ev)
                elif ev.get("type") == USAGE:
                    r.tokens = ev
                else:
                    out += self._tool_call_event(r, ev)
            return out
        if stage == SPEAK:
            if not r.audio or not isinstance(payload, dict):
                return []
            return self._speak(r, payload, now_ms)
        return []

    def _think_text(self, r: _Response, text: str) -> list[Command]:
        if r.audio:  # the speaker's chunks carry it, as a transcript of the audio
            r.think_text += text
            return []
        out = self._ensure_item(r)
        r.text += text
        r.item.content[0].text = r.text
        out.append(self._send("response.output_text.delta", response_id=r.id,
                              item_id=r.item.id, output_index=r.msg_index, content_index=0,
                              delta=text))
        return out

    def _speak(self, r: _Response, payload: SpeakChunk, now_ms: float) -> list[Command]:
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
        held: list[tuple[Command, float]] = []
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
                    held.append((self._send("output_audio_buffer.started", response_id=r.id),
                                 0.0))
                held += [(AudioOut(r.id, item.id, part, sr), part.size * 1000.0 / sr)
                         for part in self._slices(audio, sr)]
                item.audio_ms += dur
            else:
                held += self._audio_delta(r, audio, sr)
        if text:
            r.transcript += text
            item.content[0].transcript = r.transcript
            held.append((self._send("response.output_audio_transcript.delta", response_id=r.id,
                                    item_id=item.id, output_index=r.msg_index,
                                    content_index=0, delta=text), 0.0))
        self._responses.last_audio = r
        self._pacer.hold([c for c, _ in held], [ms for _, ms in held])
        return out + self._pacer.release(now_ms)

    def _slices(self, pcm: np.ndarray, sr: int) -> list[np.ndarray]:
        """Audio cut to the pacer's step (``output_slice_ms``) when pacing, so
        the listener is never more than one step beyond the lead."""
        step = int(sr * self.output_slice_ms / 1000) if self._pacer.paced else 0
        if step <= 0 or pcm.size <= step:
            return [pcm]
        return [pcm[i:i + step] for i in range(0, pcm.size, step)]

    def _audio_delta(self, r: _Response, audio: np.ndarray, sr: int,
                     flush: bool = False) -> list[tuple[Command, float]]:
        """``response.output_audio.delta`` events, each with its audio ms."""
        fmt = r.output_format
        out: list[tuple[Command, float]] = []
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
        for part in self._slices(pcm, fmt.sample_rate):
            data = encode_wire_audio(part, fmt.type)
            out.append((self._send("response.output_audio.delta", response_id=r.id,
                                   item_id=r.item.id, output_index=r.msg_index,
                                   content_index=0,
                                   delta=base64.b64encode(data).decode("ascii")),
                        part.size * 1000.0 / fmt.sample_rate))
        return out

    def _done_events(self, r: _Response, status: str, details: dict | None,
                     usage: dict | None) -> list[Command]:
        """Close every open part of ``r`` and emit response.done (exactly once).
        A reply the thinker's token budget cut (its usage event says ``length``)
        ends ``incomplete`` with reason ``max_output_tokens``, as the API's does."""
        if status == "completed" and r.tokens is not None and r.tokens.get("finish_reason") == LENGTH:
            status, details = "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}
        r.done = True
        if self._responses.active is r:
            self._responses.active = None
        self._action_response_done(r, status)
        out: list[Command] = []
        for item in r.outputs:
            if item is r.item:
                out += self._message_done_events(r, status)
            else:
                self._close_unfinished_call(item)
        if usage is None and r.tokens is not None:
            t = r.tokens
            usage = token_usage(*(int(t.get(k) or 0) for k in
                                  ("input_tokens", "cached_tokens", "output_tokens")))
        usage = usage if usage is not None else zero_usage()
        if self.extension_events:
            usage = {**usage, "voice_agent": self._audio_usage(r)}
        out.append(self._send("response.done", response=self._response_wire(
            r, status, details, usage)))
        return out

    def _audio_usage(self, r: _Response) -> dict:
        """usage's extension: the caller's audio the server took in since the
        previous response.done (what this turn listened to) and the reply's
        audio made, in seconds (speech is recognised and synthesised, not
        tokenised, so the API's audio token counts stay 0)."""
        heard_ms = self.input_ms - self._responses.usage_input_ms
        self._responses.usage_input_ms = self.input_ms
        spoken_ms = r.item.audio_ms if r.item is not None and r.audio else 0.0
        return {"input_audio_seconds": round(heard_ms / 1000.0, 3),
                "output_audio_seconds": round(spoken_ms / 1000.0, 3)}

    def _message_done_events(self, r: _Response, status: str) -> list[Command]:
        item = r.item
        out: list[Command] = []
        common = dict(response_id=r.id, item_id=item.id, output_index=r.msg_index,
                      content_index=0)
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
        return out + self._item_done_events(r, item)

    def _cancel_active(self, reason: str, now_ms: float, flush: bool,
                       between: list | None = None, reason_cmd: str | None = None) \
            -> list[Command]:
        r = self._responses.active
        out: list[Command] = []
        if r is None:
            return list(between or [])
        if r.started and not r.generated:
            out.append(CancelResponse(r.id, reason_cmd or reason))
        cut = self._pacer.holding  # audio made that the listener will never get
        paused_item = self._drop_held(r)
        truncated_end = None
        if flush and self.audio_out_mode == "stream" and r.item is not None and r.audio:
            out.append(FlushAudio(r.item.id))
            if r.buffer_started:
                out.append(self._send("output_audio_buffer.cleared", response_id=r.id))
            r.playback_stopped = True
            if r.item.played_ms is not None and int(r.item.played_ms) < r.item.max_truncate_ms():
                truncated_end = int(r.item.played_ms)
                self._truncate_to_played(r, before_done=True)
        elif paused_item is not None:
            out.append(ResumeAudio(paused_item))  # not flushed: let the track go on
        out += list(between or [])
        out += self._done_events(r, "cancelled", {"type": "cancelled", "reason": reason}, None)
        if truncated_end is not None and r.in_conversation:
            out.append(self._send("conversation.item.truncated", item_id=r.item.id,
                                  content_index=0, audio_end_ms=truncated_end))
        if flush and self.audio_out_mode == "events":
            out += self._truncate_to_model(r, now_ms, cut)
        self._set_idle_deadline(r, now_ms)
        return out

    def _abandon_active(self) -> list[Command]:
        """The client is gone: the active response, if any, ends without events
        (``CancelResponse`` while it is still generating)."""
        r = self._responses.active
        if r is None:
            return []
        r.done = True
        self._responses.active = None
        return [CancelResponse(r.id, "disconnected")] if r.started and not r.generated else []

    def _drop_held(self, r: _Response) -> str | None:
        """The reply ends early: forget the audio still held and cut its item
        to what was released (the listener never got the rest).  Returns the
        item a stream transport holds paused, if any."""
        paused_item = self._end_pause()
        if not self._pacer.holding:
            return paused_item
        self._pacer.drop()
        item = r.item
        if item is not None and r.audio and self._pacer.released_ms < item.audio_ms:
            item.truncate(self._pacer.released_ms)
            r.transcript = item.content[0].transcript or ""
        return paused_item

    def _unpause_transport(self, r: _Response) -> list[Command]:
        """The reply ended early without a flush: drop what is held and let a
        stream transport play (and then forget) the paused item's queue."""
        paused_item = self._drop_held(r)
        return [ResumeAudio(paused_item)] if paused_item is not None else []

    def _truncate_to_model(self, r: _Response, now_ms: float, cut: bool) -> list[Command]:
        """Events mode, paced: the server knows what the client has played
        (OutputPacer's playout model), so a barge-in truncates the item there
        without the client's ``conversation.item.truncate``.  ``audio_ms``
        stays what the client received, so a client that sends its own
        truncate for a position it reached meanwhile is still accepted.  ``cut``:
        held audio was dropped, so the item is cut even where the client
        played all it received."""
        item = r.item
        if not self._pacer.paced or item is None or not r.audio or not r.in_conversation:
            return []
        received = item.audio_ms
        end = min(int(self._pacer.played_ms(now_ms)), item.max_truncate_ms())
        if end >= item.max_truncate_ms() and not cut:
            return []
        item.truncate(end)
        item.audio_ms = received
        return [self._send("conversation.item.truncated", item_id=item.id, content_index=0,
                           audio_end_ms=end)]

    def response_finished(self, response_id: str, status: str, error: dict | None,
                          now_ms: float, usage: dict | None = None) -> list[Command]:
        r = self._responses.active
        if self.closed or r is None or r.id != response_id or r.done:
            return []
        out: list[Command] = []
        if status == "completed":
            if r.audio and r.item is not None and self.audio_out_mode == "events":
                tail = self._audio_delta(r, np.zeros(0, np.int16), 0, flush=True)
                self._pacer.hold([c for c, _ in tail], [ms for _, ms in tail])
                out += self._pacer.release(now_ms)
            if self._pacer.holding or self._pacer.paused:
                r.generated, r.usage = True, usage  # response.done after the last audio
                return out
            out += self._done_events(r, "completed", None, usage)
        elif status == "cancelled":
            out += self._unpause_transport(r)
            out += self._done_events(r, "cancelled", {"type": "cancelled", "reason": None}, usage)
        else:
            out += self._unpause_transport(r)
            err = error or {}
            code = err.get("code") if err.get("code") in ERROR_CODES else ErrorCode.INTERNAL.value
            etype = "invalid_request_error" if code == ErrorCode.BAD_INPUT.value else "server_error"
            msg = str(err.get("message") or "The response failed.")
            out += self._fail(r, etype, code, msg, usage)
        self._set_idle_deadline(r, now_ms)
        out += self._maybe_stop_playback(r)
        return out

    def pump_output(self, now_ms: float) -> list[Command]:
        """Release the held output that is due (call at :attr:`next_output_ms`);
        the reply's ``response.done`` follows its last audio."""
        if self.closed:
            return []
        if self._lead is not None:
            due = self._pacer.due_ms
            if due is not None and due > 0 and now_ms > due:
                self._lead.late(now_ms - due, now_ms)   # the pacer's own lateness
            self._resize_lead(now_ms)
        out = self._pacer.release(now_ms)
        r = self._responses.active
        if r is not None and r.generated and not r.done and not self._pacer.holding \
                and not self._pacer.paused:
            out += self._done_events(r, "completed", None, r.usage)
            self._set_idle_deadline(r, now_ms)
            out += self._maybe_stop_playback(r)
        return out

    @property
    def next_output_ms(self) -> float | None:
        """When :meth:`pump_output` has something to release (session clock);
        None while nothing is held or the output is paused."""
        return None if self.closed else self._pacer.due_ms

    def _set_idle_deadline(self, r: _Response, now_ms: float) -> None:
        td = self.settings.turn_detection
        if td is None or not td.idle_timeout_ms:
            self._silence.count_until(None)
            return
        end = now_ms
        if r.first_audio_ms is not None and r.item is not None:
            end = max(end, r.first_audio_ms + r.item.audio_ms)
        self._silence.count_until(end + td.idle_timeout_ms)
