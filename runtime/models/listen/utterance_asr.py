"""How one caller's utterances are recognised, on the recognition thread.

The listen stage's voice-activity state machine calls the same five hooks
whatever the engine (``begin``, ``feed``, ``pause``, ``resume``, ``end`` /
``drop``); the engine-specific part is here:

* :class:`SpeculativeSegments` (Whisper): the utterance's audio is collected
  and sent for recognition at the first silent frame, *before* the silence
  window has decided that the turn is over; when speech resumes that job is
  abandoned and the utterance goes on.  So the final transcript is usually
  ready when the end of speech is decided and turn latency does not grow by
  a recognition call.
* :class:`StreamingDecoder` (pocketsphinx): audio is decoded as it arrives,
  giving partial transcripts; the final comes when the utterance ends.

Results come back through :class:`~runtime.models.listen.asr_thread.RecognitionThread`
and are turned into events here (``partial`` / ``final``), on the loop thread.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

from runtime.models.listen.asr_thread import Call, Reading, RecognitionThread, Segment
from runtime.models.listen.language import LanguageLock
from runtime.models.voice_contract import (Final, ListenEvent, final_event, interim_event,
                                           language_event, onset_dropped_event, partial_event,
                                           turn_likely_over_event)


def _read(value: Any) -> tuple[str, str | None]:
    """A recogniser's result (a str, a :class:`~runtime.models.listen.whisper_asr.Heard`
    with its alternative reading, or an exception) -> (text, alternative)."""
    if isinstance(value, BaseException):
        # One failed recognition must not end the caller's listen stream: the
        # turn goes on with an empty transcript and the stage log says why.
        print(f"[listen] recognition failed: {value!r}", file=sys.stderr, flush=True)
        return "", None
    if isinstance(value, tuple):
        return str(value[0]).strip(), value[1]
    return str(value).strip(), None


def _final(value: Any, times: tuple[int, int]) -> Final:
    text, alternative = _read(value)
    return final_event(text, times[0], times[1], alternative, getattr(value, "language", None))


class SpeculativeSegments:
    """Whole-segment recognition started at silence onset, abandoned if speech resumes."""

    def __init__(self, key: int, thread: RecognitionThread, speculative: bool = True,
                 language: LanguageLock | None = None) -> None:
        self.key = key
        self.thread = thread
        self.speculative = speculative
        # the stream's "this utterance began over the agent's reply" (set by the
        # stream): its pause's, end's or blip's reading of a short sound gets a
        # second one with Whisper's whole window (whisper_asr.py); not its
        # early readings, which the words at its end would then wait behind
        self.over_reply: Callable[[], bool] = lambda: False
        # the stream's "its line sounds noisy" (line_noise.py), asked of every
        # segment: the stage may read a noisy line with a stronger recogniser
        self.noisy: Callable[[], bool] = lambda: False
        # the stream's language (language.py): asked of each segment, and
        # told what each ended utterance was heard in
        self.language = language
        self.heard_language: str | None = None     # of the latest reading (None: not said)
        self.parts: list[np.ndarray] = []
        self.gen = 0                               # bumps whenever queued work goes stale
        self.spec: int | None = None               # generation of the live speculative job
        self.ready: dict[int, Any] = {}            # speculative results not yet needed
        self.awaiting: dict[int, tuple[int, int]] = {}   # ended utterances: gen -> (start, end) ms
        self.blips: dict[int, tuple[int, int]] = {}      # sounds too short for speech, being read
        self.counters = {"speculative": 0, "speculative_used": 0, "speculative_wasted": 0,
                         "blips_read": 0}

    @property
    def pending(self) -> bool:
        return bool(self.awaiting or self.blips)

    def _submit(self) -> int:
        self.gen += 1
        gen = self.gen
        audio = np.concatenate(self.parts) if len(self.parts) > 1 else self.parts[0]
        self.thread.submit(Segment(self.key, gen, audio,
                                   lambda: gen == self.gen or gen in self.awaiting,
                                   language=self._asker(), over_reply=self.over_reply(),
                                   noisy=self.noisy()))
        return gen

    def _asker(self):
        """What a segment asks of the recogniser about its language: read when
        it runs (None: an English-only model or pocketsphinx, nothing to ask)."""
        lock = self.language
        return None if lock is None or not lock.multilingual else lock.ask

    def _ended(self, value: Any, times: tuple[int, int]) -> list[ListenEvent]:
        """An ended utterance's ``final``, after a ``language`` event when its
        words locked or switched the stream's language."""
        out: list[ListenEvent] = []
        lock = self.language
        if lock is not None and not isinstance(value, BaseException) and _read(value)[0]:
            seconds = max(0, times[1] - times[0]) / 1000.0
            if lock.observe(getattr(value, "heard", None), getattr(value, "heard_p", None),
                            seconds):
                out.append(language_event(lock.language, lock.probability or 0.0))
        return out + [_final(value, times)]

    def begin(self, audio: np.ndarray) -> None:
        self._abandon()
        self.parts = [audio] if audio.size else []

    def feed(self, frame: np.ndarray) -> None:
        self.parts.append(frame)

    def pause(self) -> None:
        if self.speculative and self.parts:
            self._abandon()
            self.spec = self._submit()
            self.counters["speculative"] += 1

    def resume(self) -> None:
        self._abandon()

    def peek(self) -> None:
        """Transcribe the utterance so far while it goes on (an ``interim``): an
        early reading, which the recognition thread runs after every transcript
        and may drop; a pause before it runs makes it stale (its own job says more)."""
        if not self.parts:
            return
        gen = self.gen
        audio = np.concatenate(self.parts)
        self.thread.submit(Segment(self.key, ("peek", gen), audio, lambda: gen == self.gen,
                                   reading=Reading.EARLY, language=self._asker(),
                                   noisy=self.noisy()))

    def end(self, start_ms: int, end_ms: int) -> list[ListenEvent]:
        """The utterance is over: reuse the speculative job if it saw all of it."""
        if self.spec is not None and self.spec == self.gen:
            gen = self.spec
            self.counters["speculative_used"] += 1
        elif self.parts:
            gen = self._submit()
        else:
            return [_final("", (start_ms, end_ms))]
        self.spec = None
        self.parts = []
        if gen in self.ready:
            return self._ended(self.ready.pop(gen), (start_ms, end_ms))
        self.awaiting[gen] = (start_ms, end_ms)
        return []

    def drop(self) -> None:
        self._abandon()
        self.parts = []

    def blip(self, start_ms: int, end_ms: int) -> list[ListenEvent]:
        """A sound too short to be speech, but long enough for a word: read it,
        and say ``onset_dropped`` with its words once they are known."""
        if not self.parts:
            return [onset_dropped_event()]
        self._abandon()
        self.gen += 1
        gen = self.gen
        self.blips[gen] = (start_ms, end_ms)
        audio = np.concatenate(self.parts)
        self.parts = []
        self.counters["blips_read"] += 1
        self.thread.submit(Segment(self.key, ("blip", gen), audio, lambda: gen in self.blips,
                                   language=self._asker(), over_reply=self.over_reply(),
                                   noisy=self.noisy()))
        return []

    def _abandon(self) -> None:
        if self.spec is not None:
            self.counters["speculative_wasted"] += 1
            self.ready.pop(self.spec, None)
            self.spec = None
            self.gen += 1

    def result(self, tag: Any, value: Any) -> list[ListenEvent]:
        if getattr(value, "language", None) and (not isinstance(tag, tuple) or tag[0] == "peek"):
            self.heard_language = value.language
        if isinstance(tag, tuple) and tag[0] == "blip":
            times = self.blips.pop(tag[1], None)
            if times is None:
                return []
            return [onset_dropped_event(_read(value)[0], *times)]
        if isinstance(tag, tuple):          # a peek
            if tag[1] == self.gen and not isinstance(value, BaseException):
                text, alternative = _read(value)
                return [interim_event(text, False, alternative)]
            return []
        if tag in self.awaiting:
            return self._ended(value, self.awaiting.pop(tag))
        if tag == self.spec:
            self.ready[tag] = value
            if isinstance(value, BaseException):
                return []
            text, alternative = _read(value)
            out: list[ListenEvent] = [interim_event(text, True, alternative)]
            if text:
                # The words are known before the turn is: a reply can be prepared.
                out.append(turn_likely_over_event(text))
            return out
        return []


class StreamingDecoder:
    """Incremental decoding with partial hypotheses (pocketsphinx)."""

    def __init__(self, key: int, thread: RecognitionThread, recognizer: Any) -> None:
        self.key = key
        self.thread = thread
        self.rec = recognizer
        self.gen = 0
        self.open = False
        self.awaiting: dict[int, tuple[int, int]] = {}
        self.counters: dict[str, int] = {}

    @property
    def pending(self) -> bool:
        return bool(self.awaiting)

    @staticmethod
    def _pcm16(x: np.ndarray) -> np.ndarray:
        return (np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)

    def begin(self, audio: np.ndarray) -> None:
        self.drop()
        self.gen += 1
        self.open = True
        rec, pcm = self.rec, self._pcm16(audio)

        def start() -> str | None:
            rec.start()
            return rec.feed(pcm)

        self.thread.submit(Call(self.key, ("partial", self.gen), start))

    def feed(self, frame: np.ndarray) -> None:
        pcm = self._pcm16(frame)
        self.thread.submit(Call(self.key, ("partial", self.gen), lambda: self.rec.feed(pcm)))

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def peek(self) -> None:
        pass     # partials say the words as they come

    def end(self, start_ms: int, end_ms: int) -> list[ListenEvent]:
        self.open = False
        self.awaiting[self.gen] = (start_ms, end_ms)
        self.thread.submit(Call(self.key, ("final", self.gen), self.rec.finish))
        return []

    def drop(self) -> None:
        if self.open:               # a blip: its words are not wanted
            self.open = False
            self.thread.submit(Call(self.key, ("dropped", self.gen), self.rec.finish))

    def blip(self, start_ms: int, end_ms: int) -> list[ListenEvent]:
        """Its partials are no good on a word-sized sound (~32% WER on people):
        dropped unread."""
        self.drop()
        return [onset_dropped_event()]

    def result(self, tag: Any, value: Any) -> list[ListenEvent]:
        kind, gen = tag
        if kind == "final" and gen in self.awaiting:
            return [_final(value, self.awaiting.pop(gen))]
        if kind == "partial" and gen == self.gen and self.open and value \
                and not isinstance(value, BaseException):
            return [partial_event(value)]
        return []
