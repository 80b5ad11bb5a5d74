"""The "speak" stage: streamed reply text in, one audio chunk per clause out.

Speaking clause by clause lets the first words play while the LLM is still
writing the rest of the reply. Output chunk per clause: a
:class:`runtime.models.voice_contract.SpeakChunk`::

    {"audio": np.ndarray int16 mono, "sample_rate": int, "text": str, "duration_ms": float}

``text`` is the clause as the LLM wrote it; markdown is only stripped from
what goes to the synthesiser.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ErrorCode, StageError
from runtime.executor import ChunkExecutor, WorkItem
from runtime.models.speak.clauses import ClauseSegmenter, strip_markdown
from runtime.models.speak.pauses import spoken_with_pause
from runtime.models.speak.spoken_form import spoken_form
from runtime.models.speak.spoken_form_locale import spoken_form_in
from runtime.models.speak.tts_base import Synthesizer, speakable
from runtime.models.speak.voices import (ESPEAK_LANGUAGES, catalogue, check_language_voices, language_of,
                                         resolve_voice)
from runtime.models.voice_contract import (SPEAK_LANGUAGE, SPEAK_SPEED, SPEAK_VOICE, THINK_EVENT_TYPES,
                                          SpeakChunk, speak_chunk, think_text)

ENGINES = ("hibari", "flite", "espeak", "kokoro")
# The widest speed range a client may ask for: /v1/audio/speech's (the Realtime
# API's audio.output.speed is 0.25..1.5; the session checks that one).
MIN_SPEED, MAX_SPEED = 0.25, 4.0


def make_synthesizer(engine: str, voice: str | None = None, **kw: Any) -> Synthesizer:
    """Build the configured engine; imported lazily so one missing library only breaks its engine."""
    if engine == "hibari":
        from runtime.models.speak.tts_hibari import HibariSynthesizer
        return HibariSynthesizer(voice, threads=int(kw.get("threads") or 1))
    if engine == "flite":
        from runtime.models.speak.tts_flite import FliteSynthesizer
        return FliteSynthesizer(voice)
    if engine == "espeak":
        from runtime.models.speak.tts_espeak import EspeakSynthesizer
        return EspeakSynthesizer(voice, rate_wpm=kw.get("rate_wpm"),
                                 language=str(kw.get("language") or "en"))
    if engine == "kokoro":
        from runtime.models.speak.tts_kokoro import KokoroSynthesizer
        language = str(kw.get("language") or "ja")
        return KokoroSynthesizer(voice, threads=int(kw.get("threads") or 1), language=language,
                                 espeak_voice=ESPEAK_LANGUAGES.get(language, language))
    raise ValueError(f"unknown TTS engine {engine!r}; choose one of {', '.join(ENGINES)}")


def words_of(text: str, language: str) -> str:
    """Numbers, money, dates... as the words of ``language`` (English: spoken_form's rules)."""
    return spoken_form(text) if language == "en" else spoken_form_in(text, language)


def text_of(payload: Any) -> str:
    """Accept a delta (str), a whole reply (list of str) or UTF-8 bytes; anything else is the caller's bug."""
    if payload is None:
        return ""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, (bytes, bytearray)):
        try:
            return bytes(payload).decode("utf-8")
        except UnicodeDecodeError:
            raise StageError(ErrorCode.BAD_INPUT, "speak: bytes payload is not UTF-8 text") from None
    if isinstance(payload, (list, tuple)):
        # a think chunk with tool-call or usage events in it: only its text is spoken
        if all(isinstance(p, str) or (isinstance(p, dict) and p.get("type") in THINK_EVENT_TYPES)
               for p in payload):
            return think_text(payload)
        raise StageError(ErrorCode.BAD_INPUT,
                         "speak: a list payload must contain only str and think events")
    raise StageError(ErrorCode.BAD_INPUT,
                     f"speak: expected text (str or list[str]), got {type(payload).__name__}")


@dataclass
class _Reply:
    """One request's state: its clause cutter, its voice and pace, the clauses
    cut but not yet spoken (more than one is ready when text arrives in a lump),
    and how much audio it has made since its first (what a listener playing it
    in real time has left)."""
    segmenter: ClauseSegmenter
    voice: str         # a catalogue name (voices.py)
    speed: float
    language: str      # what its numbers are read in: the request's language, else the voice's
    queue: deque[str] = field(default_factory=deque)
    started: float | None = None    # time.monotonic() of its first audio
    audio_ms: float = 0.0

    def audio_left_ms(self, now: float) -> float | None:
        """Audio made but not yet heard, were it played from its first chunk on."""
        return None if self.started is None else self.audio_ms - (now - self.started) * 1000.0


class SpeakExecutor(ChunkExecutor):
    """Chunk executor: clause segmentation, text made speakable, in-process TTS per request.

    YAML args: ``engine`` ("hibari" | "flite" | "espeak" | "kokoro": whose voice
    OpenAI names map to), ``voice`` (the default voice), ``preload_voices``
    (catalogue voices loaded at start, so a language's first reply does not pay
    its engine's load: Kokoro takes ~3 s), ``language_voices`` (a language's
    voice when the client names none or an OpenAI name, in place of the
    catalogue's: ``{es: es}`` speaks Spanish with espeak-ng's instant voice,
    not Kokoro's), ``threads`` (onnxruntime threads, hibari and Kokoro),
    ``max_clause_chars`` (120), ``first_clause_words`` (6), ``hurry_below_ms``
    (300: with less audio than this left to play, a clause breaks after
    ``hurry_words`` (3) words instead of at punctuation; 0: never), ``rate_wpm``
    (espeak only), ``normalize_text`` (true: numbers, money, times... as words).
    Request params: ``voice`` (any shipped voice of any engine, or an OpenAI
    voice name), ``language`` (ISO-639-1: picks the language's voice when no
    shipped voice is named; runtime.models.speak.voices has the rule) and
    ``speed`` (0.25..4.0).

    One clause is synthesised per call: a call that completes several (a whole
    reply at once) speaks the first and leaves the rest to :meth:`collect`,
    which the stage loop calls between reading its sockets, so an abort stops
    a long reply within one clause.
    """

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.engine = str(args.get("engine", "flite"))   # the lightest; configs name hibari
        self.voice = args.get("voice")
        self.preload_voices = [str(v) for v in args.get("preload_voices") or []]
        self.language_voices = dict(args.get("language_voices") or {})
        self.threads = int(args.get("threads", 1))
        self.max_clause_chars = int(args.get("max_clause_chars", 120))
        self.first_clause_words = int(args.get("first_clause_words", 6))
        self.hurry_below_ms = float(args.get("hurry_below_ms", 300.0))
        self.hurry_words = int(args.get("hurry_words", 3))
        self._hurried = 0   # clauses cut while a reply was short of audio (a slow writer)
        self.normalize_text = bool(args.get("normalize_text", True))
        self.synth: Synthesizer | None = None          # the default voice's
        self._synths: dict[str, Synthesizer] = {}       # every voice loaded, by name
        self._replies: dict[int, _Reply] = {}
        # Readable while some reply has clauses queued: the stage loop then calls collect().
        self._wakeup = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._signalled = False
        self._clauses = 0
        self._by_engine: dict[str, int] = {}   # clauses spoken, per engine
        self._audio_ms = 0.0

    def load(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown TTS engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        self.voice = resolve_voice(self.voice, self.engine)
        self.language_voices = check_language_voices(self.language_voices)
        self.synth = self._synth_for(self.voice)
        for name in self.preload_voices:
            self._synth_for(resolve_voice(name, self.engine, self.voice))
        if self.normalize_text:
            # number words come from inflect, whose import costs ~1 s of CPU: at
            # load, not on the first caller's first "$5"
            spoken_form("$1.50")

    def close(self) -> None:
        if self._wakeup >= 0:
            os.close(self._wakeup)
            self._wakeup = -1

    def _synth_for(self, voice: str) -> Synthesizer:
        if voice not in self._synths:
            v = catalogue()[voice]
            self._synths[voice] = make_synthesizer(v.engine, v.engine_voice, threads=self.threads,
                                                   rate_wpm=self.args.get("rate_wpm"),
                                                   language=v.language)
        return self._synths[voice]

    def stats(self) -> dict:
        return {"streams": len(self._replies), "clauses": self._clauses, "hurried": self._hurried,
                "queued": sum(len(r.queue) for r in self._replies.values()),
                "audio_ms": round(self._audio_ms, 1), "engine": self.engine,
                "clauses_by_engine": dict(self._by_engine)}

    def open(self, request_id: int, params: dict) -> None:
        if self.synth is None:
            self.load()
        try:
            language = language_of(params.get(SPEAK_LANGUAGE))
            voice = resolve_voice(params.get(SPEAK_VOICE), self.engine, self.voice, language,
                                  self.language_voices)
        except ValueError as exc:
            raise StageError(ErrorCode.BAD_INPUT, f"speak: {exc}") from None
        speed = params.get(SPEAK_SPEED, 1.0)
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) \
                or not MIN_SPEED <= speed <= MAX_SPEED:
            raise StageError(ErrorCode.BAD_INPUT, f"speak: 'speed' must be a number in "
                                                  f"{MIN_SPEED}..{MAX_SPEED}, got {speed!r}")
        self._synth_for(voice)
        self._replies[request_id] = _Reply(
            ClauseSegmenter(self.max_clause_chars, self.first_clause_words, self.hurry_words),
            voice, float(speed), language or catalogue()[voice].language)

    def release(self, request_id: int) -> None:
        self._replies.pop(request_id, None)
        self._rearm()

    def _speak(self, reply: _Reply, clause: str) -> SpeakChunk | None:
        text = strip_markdown(clause)
        synth = self._synths[reply.voice]
        spoken = speakable(words_of(text, reply.language) if self.normalize_text else text,
                           synth.language)
        if not spoken:
            return None
        rate = int(synth.sample_rate)
        audio = spoken_with_pause(synth.synthesize(spoken, reply.speed), rate, text, reply.speed)
        if audio.size == 0:
            return None
        chunk = speak_chunk(audio, rate, clause)
        self._clauses += 1
        self._by_engine[synth.name] = self._by_engine.get(synth.name, 0) + 1
        self._audio_ms += chunk["duration_ms"]
        if reply.started is None:
            reply.started = time.monotonic()
        reply.audio_ms += chunk["duration_ms"]
        return chunk

    def _next(self, reply: _Reply) -> list[SpeakChunk]:
        """Speak queued clauses until one gives audio (at most one chunk)."""
        while reply.queue:
            chunk = self._speak(reply, reply.queue.popleft())
            if chunk is not None:
                return [chunk]
        return []

    def process(self, items: list[WorkItem]) -> list[list[Any]]:
        results: list[Any] = []
        for item in items:
            try:
                reply = self._replies.get(item.request_id)
                if reply is None:
                    self.open(item.request_id, item.params)
                    reply = self._replies[item.request_id]
                left = reply.audio_left_ms(time.monotonic())
                reply.segmenter.hurry = (self.hurry_below_ms > 0 and left is not None
                                         and left < self.hurry_below_ms)
                clauses = reply.segmenter.push(text_of(item.payload))
                self._hurried += len(clauses) if reply.segmenter.hurry else 0
                reply.queue.extend(clauses)
                if item.final:
                    reply.queue.extend(reply.segmenter.flush())
                results.append(self._next(reply))
            except Exception as exc:     # one request's failure must not fail its batch-mates
                results.append(exc)
        self._rearm()
        return results

    # ---- the rest of a lump of text, one clause per reply per loop turn ----
    def wakeup_fd(self) -> int | None:
        return self._wakeup

    def has_results(self) -> bool:
        return any(r.queue for r in self._replies.values())

    def pending(self, request_id: int) -> bool:
        reply = self._replies.get(request_id)
        return reply is not None and bool(reply.queue)

    def collect(self) -> list[tuple[int, list[Any]]]:
        out: list[tuple[int, list[Any]]] = []
        for rid, reply in list(self._replies.items()):
            if not reply.queue:
                continue
            try:
                out.append((rid, self._next(reply)))
            except Exception as exc:     # noqa: BLE001 - fails this reply only
                reply.queue.clear()
                out.append((rid, exc))
        self._rearm()
        return out

    def _rearm(self) -> None:
        """Keep the descriptor readable exactly while clauses wait."""
        want = self.has_results()
        if want and not self._signalled:
            os.eventfd_write(self._wakeup, 1)
        elif not want and self._signalled:
            try:
                os.eventfd_read(self._wakeup)
            except BlockingIOError:
                pass
        self._signalled = want
