"""Turn taking: input audio onto the 16 kHz timeline, the listen stage's
events (speech started / stopped, partial and final transcripts), barge-in,
committing user items and the automatic response.  Part of
:class:`voice_server.session.Session` (core.py), split out by section."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from runtime.errors import ErrorCode
from runtime.models.voice_contract import (FINAL, INTERIM, LANGUAGE, LISTEN_RATE_HZ, ONSET, ONSET_DROPPED,
                                           PARTIAL, SPEECH_PAUSED, SPEECH_RESUMED, SPEECH_STARTED,
                                           SPEECH_STOPPED, TURN_CONTINUES, TURN_LIKELY_OVER,
                                           final_event, speech_stopped_event)

from ..audio_codec import StreamResampler, low_latency_quality
from .backchannel import starts_with
from .commands import Command, DropPreparedReply, FeedListen, PrefillConversation, PrepareReply
from .items import Content, Item


@dataclass
class TurnState:
    """What the caller's turns leave open between events; the session holds
    one (``Session._turn``) and this module writes it, with interruption.py
    for a reply talked over and responses.py for the answer."""

    speech_item: str | None = None     # the utterance the listen stage hears now (its item id)
    speech_start_ms: int = 0           # where it started on the input timeline
    awaiting_final: deque[str] = field(default_factory=deque)  # stopped, transcript still due
    partial: dict[str, str] = field(default_factory=dict)       # latest hypothesis per item
    partial_sent: dict[str, str] = field(default_factory=dict)  # transcript already sent as deltas
    unanswered: bool = False           # a user turn no response has answered yet
    pending_transcripts: dict[str, int] = field(default_factory=dict)  # committed: item -> content
    prepared: bool = False             # a reply is being prepared during the pause (PrepareReply)
    paused_for_onset: bool = False     # the reply was paused when the caller made a sound
    heard_language: str | None = None  # the language of the last final (its item carries it)


@dataclass
class InputAudio:
    """The caller's audio on its way in (``_ingest``); the session holds one
    (``Session._input``) and this module writes it."""

    # the input's rate to 16 kHz: made at the first chunk, made again when the rate changes
    resampler: StreamResampler | None = None
    samples: int = 0  # 16 kHz samples received: the input timeline (input_ms)


class Turns:
    def input_audio(self, pcm: np.ndarray, sample_rate: int, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        pcm = np.asarray(pcm)
        if pcm.dtype != np.int16:
            raise TypeError("input_audio expects int16 PCM")
        out = self._client_traffic(now_ms)
        return out + self._ingest(pcm.reshape(-1), int(sample_rate), now_ms)

    def _ingest(self, pcm: np.ndarray, rate: int, now_ms: float) -> list[Command]:
        audio_in = self._input
        if audio_in.resampler is None or audio_in.resampler.in_rate != rate:
            audio_in.resampler = StreamResampler(rate, LISTEN_RATE_HZ,
                                                 low_latency_quality(rate, LISTEN_RATE_HZ))
        pcm16 = audio_in.resampler.process(pcm)
        if pcm16.size == 0:
            return []
        audio_in.samples += pcm16.size
        if self._lead is not None:   # the line's jitter, as the caller's audio arrives
            self._lead.arrival(self.input_ms, now_ms)
            self._resize_lead(now_ms)
        out: list[Command] = []
        if self._machine is not None:
            out += self._machine_heard(pcm16, now_ms)
        if self.settings.turn_detection is not None:
            if self._echo is not None:
                pcm16 = self._echo.process(pcm16, now_ms)   # the reply's own voice is not the caller
            out.append(FeedListen(pcm16))
            self._buffer.append(pcm16, audio_in.samples, ring=True)
            # speech over a reply that goes on long enough interrupts it (every transport)
            out += self._check_decision(now_ms)
        else:
            ok = self._buffer.append(pcm16, audio_in.samples, ring=False)
            if not ok and self._buffer.report_full():
                out.append(self._error("invalid_request_error", "input_audio_buffer_full",
                                       f"Input audio buffer is full ("
                                       f"{self.limits.max_buffered_input_s:g}s); later audio "
                                       "is dropped until commit or clear.", "audio"))
        return out

    @property
    def input_rate(self) -> int | None:
        """The rate the caller's audio comes at (None before any): 8000 on a
        telephone line, which the listen stage is told (voice_contract.LINE_RATE)."""
        r = self._input.resampler
        return None if r is None else int(r.in_rate)

    @property
    def input_ms(self) -> float:
        """Position of the input timeline (ms of input audio received)."""
        return self._input.samples * 1000.0 / LISTEN_RATE_HZ

    def listen_event(self, ev: dict, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        out = self._ensure_started(now_ms)
        t = ev.get("type")
        vad = self.settings.turn_detection is not None
        if self._machine is not None and t in (SPEECH_STARTED, SPEECH_STOPPED):
            if t == SPEECH_STARTED:
                self._machine.speech_started(float(ev.get("audio_start_ms", 0)))
            else:
                self._machine.speech_stopped(float(ev.get("audio_end_ms", 0)))
        if t == SPEECH_STARTED and vad:
            out += self._speech_started(int(ev.get("audio_start_ms", 0)), now_ms)
        elif t == PARTIAL and vad:
            out += self._partial_text(str(ev.get("text", "")))
            out += self._words_heard(str(ev.get("text", "")), False, now_ms)
        elif t == INTERIM and vad:
            out += self._words_heard(str(ev.get("text", "")), bool(ev.get("paused")), now_ms,
                                     str(ev.get("alternative") or ""))
            if not ev.get("paused"):
                out += self._prefill_words(str(ev.get("text", "")))
        elif t in (SPEECH_PAUSED, SPEECH_RESUMED) and vad:
            out += self._speaker_paused(t == SPEECH_PAUSED, now_ms, int(ev.get("audio_end_ms", 0)))
        elif t == SPEECH_STOPPED and (vad or self._turn.speech_item):
            if self._turn.speech_item is None:
                return out  # stray stop
            if self._interruption.deciding is not None:
                return out + self._deciding_stopped(int(ev.get("audio_end_ms", 0)))
            out += self._commit_speech(int(ev.get("audio_end_ms", 0)))
        elif t == LANGUAGE:
            out += self._language_changed(str(ev.get("language") or ""), "detected",
                                          ev.get("probability"))
        elif t == FINAL and (vad or self._turn.speech_item or self._turn.awaiting_final):
            self._turn.heard_language = ev.get("language") or None
            text, start, end = (str(ev.get("text", "")), int(ev.get("audio_start_ms", 0)),
                                int(ev.get("audio_end_ms", 0)))
            if self._dropped_final():
                return out
            if self._interruption.deciding is not None and not self._turn.awaiting_final:
                return out + self._deciding_final(text, start, end, now_ms,
                                                  str(ev.get("alternative") or ""))
            out += self._final(text, start, end, now_ms)
        elif t == ONSET and vad:
            out += self._onset(now_ms)
        elif t == ONSET_DROPPED and vad:
            out += self._onset_dropped(now_ms, str(ev.get("text") or ""),
                                       int(ev.get("audio_start_ms", 0)),
                                       int(ev.get("audio_end_ms", 0)))
        elif t == TURN_LIKELY_OVER and vad:
            out += self._prepare_reply(str(ev.get("text", "")).strip())
        elif t == TURN_CONTINUES and vad:
            out += self._drop_prepared()
        return out

    def _onset(self, now_ms: float) -> list[Command]:
        """The caller started to make a sound while a reply plays: pause it at once
        (not cancel: a cough or a click must not end the reply).  speech_started,
        which needs min_speech_ms of speech, then cancels it as before; a sound
        too short to be speech (onset_dropped) resumes it where it stopped."""
        td = self.settings.turn_detection
        if td is None or not td.interrupt_response or self._responses.active is None \
                or self.output_paused:
            return []
        out = self.pause_output(now_ms)
        self._turn.paused_for_onset = bool(out) or self.output_paused
        return out

    def _onset_dropped(self, now_ms: float, text: str = "", start_ms: int = 0,
                       end_ms: int = 0) -> list[Command]:
        """A sound too short to be speech: the paused reply goes on, unless its
        words are a command that takes the turn alone ("Stop.", "Wait.", "No."):
        that is an interruption however short, and the word the next user turn."""
        if not self._turn.paused_for_onset:
            return []
        self._turn.paused_for_onset = False
        if self._responses.active is not None and \
                starts_with(text, self._interruption.interruption_phrases):
            return self._start_deciding(start_ms, now_ms) + \
                self._deciding_final(text, start_ms, end_ms, now_ms)
        return self.resume_output(now_ms)

    def _prepare_reply(self, text: str) -> list[Command]:
        """Preemptive generation: start the reply this turn would get while the
        silence window is still deciding; the runner holds it (see PrepareReply)."""
        td, turn = self.settings.turn_detection, self._turn
        if not text or td is None or not td.create_response or self._responses.active is not None \
                or turn.speech_item is None or turn.awaiting_final or turn.pending_transcripts \
                or self._holding_for_machine:
            return []
        s = self.settings
        turn.prepared = True
        system, tools = self._system_text(s.instructions), self._tool_params()
        msgs = self._context_messages(system, s.max_output_tokens, tools[0], pending=text,
                                      strict=False) + [{"role": "user", "content": text}]
        return [PrepareReply(msgs, list(s.output_modalities), s.max_output_tokens, system,
                             *tools, voice=s.voice, speed=s.speed, language=self.language)]

    def _drop_prepared(self) -> list[Command]:
        if not self._turn.prepared:
            return []
        self._turn.prepared = False
        return [DropPreparedReply()]

    def listen_lost(self, now_ms: float) -> list[Command]:
        """The listen stream failed: an utterance being spoken gets its end and
        every utterance awaiting a transcript an empty final, so nothing waits
        for a stage that will not answer (the runner opens a new stream)."""
        out: list[Command] = []
        if self._turn.speech_item is not None:
            out += self.listen_event(speech_stopped_event(int(self.input_ms)), now_ms)
        for _ in range(len(self._turn.awaiting_final) + (self._interruption.deciding is not None)):
            pos = int(self.input_ms)
            out += self.listen_event(final_event("", pos, pos), now_ms)
        return out

    def _speech_started(self, audio_start_ms: int, now_ms: float) -> list[Command]:
        if self._turn.speech_item is not None:
            return []  # already in speech
        td = self.settings.turn_detection
        if td is not None and td.interrupt_response and self.interruptions.resume_backchannels \
                and self._agent_speaking():
            return self._start_deciding(audio_start_ms, now_ms)   # interruption.py
        self._turn.speech_item = self.ids.new("item")
        self._turn.speech_start_ms = audio_start_ms
        self._silence.hold()     # noise (an empty final) goes on counting from where it was
        self._turn.paused_for_onset = False   # real speech: the reply is cancelled below
        started = self._send("input_audio_buffer.speech_started", audio_start_ms=audio_start_ms,
                             item_id=self._turn.speech_item)
        if td is None or not td.interrupt_response:
            return [started] + self._prefill_conversation()
        if self._responses.active is not None:
            return self._cancel_active("turn_detected", now_ms, flush=True, between=[started])
        return [started] + self._interrupt_playback() + self._prefill_conversation()

    def _prefill_conversation(self) -> list[Command]:
        """While the caller speaks, the think stage can decode everything of the
        reply's prompt but their words (the session's first turn without
        instructions has nothing to decode: the system prompt is cached)."""
        td, s = self.settings.turn_detection, self.settings
        if td is None or not td.create_response or self._responses.active is not None \
                or not (self.conversation.items or s.instructions):
            return []
        return [self._prefill(s)]

    def _prefill(self, s, words: str = "") -> PrefillConversation:
        """The prompt the reply will have, up to the caller's ``words``."""
        system, tools = self._system_text(s.instructions), self._tool_params()
        msgs = self._context_messages(system, s.max_output_tokens, tools[0], pending=words,
                                      strict=False)
        return PrefillConversation(msgs, system, *tools, words=words)

    def _prefill_words(self, text: str) -> list[Command]:
        """The words so far of a turn still being spoken go into the reply's
        prompt ahead of the pause.  Their last word is left out: cut by the
        transcript's end, it is the one most likely to read differently at the
        pause, and the think stage reuses a prompt only up to the first change."""
        words = text.split()[:-1]
        if self._turn.speech_item is None or self._interruption.deciding is not None or not words:
            return []
        td, s = self.settings.turn_detection, self.settings
        if td is None or not td.create_response or self._responses.active is not None:
            return []
        return [self._prefill(s, " ".join(words))]

    def _partial_text(self, text: str) -> list[Command]:
        turn = self._turn
        target = turn.speech_item or (turn.awaiting_final[0] if turn.awaiting_final else None)
        if target is None:
            return []
        self._turn.partial[target] = text
        if target in self.conversation:
            return self._transcript_delta(target, text)
        return []

    def _transcript_delta(self, item_id: str, text: str) -> list[Command]:
        sent = self._turn.partial_sent.get(item_id, "")
        if self.settings.transcription_model is None or not text.startswith(sent) \
                or len(text) <= len(sent):
            return []
        self._turn.partial_sent[item_id] = text
        return [self._send("conversation.item.input_audio_transcription.delta", item_id=item_id,
                           content_index=0, delta=text[len(sent):])]

    def _commit_speech(self, audio_end_ms: int) -> list[Command]:
        item_id = self._turn.speech_item
        self._turn.speech_item = None
        self._turn.prepared = False   # the runner adopts or drops it when the response starts
        item = Item(item_id, "user", [Content("input_audio")], status="in_progress")
        prev = self.conversation.add(item)
        self._turn.awaiting_final.append(item_id)
        self._buffer.drop_until_ms(audio_end_ms)
        out: list[Command] = [
            self._send("input_audio_buffer.speech_stopped", audio_end_ms=audio_end_ms,
                       item_id=item_id),
            self._send("input_audio_buffer.committed", previous_item_id=prev, item_id=item_id),
            self._send("conversation.item.added", previous_item_id=prev, item=item.wire()),
        ]
        if self._turn.partial.get(item_id):
            out += self._transcript_delta(item_id, self._turn.partial[item_id])
        return out

    def _final(self, text: str, start_ms: int, end_ms: int, now_ms: float) -> list[Command]:
        out: list[Command] = []
        if not self._turn.awaiting_final:
            if self._turn.speech_item is None:
                # a final with no speech events: synthesize them
                out += self._speech_started(start_ms, now_ms)
            out += self._commit_speech(end_ms)
        item_id = self._turn.awaiting_final.popleft()
        self._turn.partial.pop(item_id, None)
        item = self.conversation.get(item_id)
        if item is None:  # deleted meanwhile
            self._turn.partial_sent.pop(item_id, None)
            return out
        text = text.strip()
        item.language = self._turn.heard_language if text else None
        out += self._complete_transcript(item, 0, text, (end_ms - start_ms) / 1000.0)
        if text:
            self._turn.unanswered = True
            self._silence.caller_spoke()
        else:
            self._silence.noise(reply_active=self._responses.active is not None)
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
                    error={"type": "server_error", "code": error.get("code", ErrorCode.INTERNAL.value),
                           "message": error.get("message", "transcription failed"),
                           "param": None}))
        else:
            out += self._transcript_delta(item.id, text) if content_index == 0 else []
            if on:
                heard = {"voice_agent": {"language": item.language}} \
                    if item.language and self.extension_events else {}
                out.append(self._send(
                    "conversation.item.input_audio_transcription.completed", item_id=item.id,
                    content_index=content_index, transcript=text,
                    usage={"type": "duration", "seconds": round(max(seconds, 0.0), 3)}, **heard))
        self._turn.partial_sent.pop(item.id, None)
        item.content[content_index].transcript = text
        item.status = "completed"
        out.append(self._send("conversation.item.done",
                              previous_item_id=self.conversation.previous_of(item.id),
                              item=item.wire(self.extension_events)))
        return out

    def _language_changed(self, language: str, source: str,
                          probability: float | None = None) -> list[Command]:
        """The session's language is now ``language`` (``pinned`` by the client,
        or ``detected`` by the listen stage): the next replies are asked to
        answer in it and spoken in it; the client hears of it in
        ``voice_agent.language.changed``."""
        if not language or language == self.language:
            return []
        previous, self.language = self.language, language
        if not self.extension_events:
            return []
        p = None if probability is None else round(float(probability), 3)
        return [self._send("voice_agent.language.changed", language=language, previous=previous,
                           source=source, probability=p)]

    def _maybe_auto_respond(self, now_ms: float) -> list[Command]:
        td = self.settings.turn_detection
        if td is None or not td.create_response or not self._turn.unanswered or \
                self._turn.speech_item is not None or self._turn.awaiting_final or \
                self._responses.active is not None or self._holding_for_machine:
            return []
        return self._auto_response(now_ms)

    def transcription_result(self, item_id: str, text: str | None, now_ms: float,
                             error: dict | None = None,
                             language: str | None = None) -> list[Command]:
        """A committed buffer's (or a client audio item's) transcript; ``language``:
        what the listen stage heard it in (the item carries it)."""
        if self.closed or item_id not in self._turn.pending_transcripts:
            return []
        idx = self._turn.pending_transcripts.pop(item_id)
        item = self.conversation.get(item_id)
        out: list[Command] = []
        if item is not None:
            secs = 0.0
            if idx == 0 and text:
                item.language = language
            out += self._complete_transcript(item, idx, (text or "").strip(), secs, error)
        out += self._maybe_start_waiting()
        return out
