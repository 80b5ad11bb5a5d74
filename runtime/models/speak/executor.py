"""The "speak" stage: streamed reply text in, one audio chunk per clause out.

Speaking clause by clause lets the first words play while the LLM is still
writing the rest of the reply. Output chunk per clause: a
:class:`runtime.models.voice_contract.SpeakChunk`::

    {"audio": np.ndarray int16 mono, "sample_rate": int, "text": str, "duration_ms": float}

``text`` is the clause as the LLM wrote it; markdown is only stripped from
what goes to the synthesiser.
"""

from __future__ import annotations

from typing import Any

from runtime.errors import ErrorCode, StageError
from runtime.executor import ChunkExecutor, WorkItem
from runtime.models.speak.clauses import ClauseSegmenter, strip_markdown
from runtime.models.speak.tts_base import Synthesizer, speakable
from runtime.models.voice_contract import THINK_EVENT_TYPES, SpeakChunk, speak_chunk, think_text

ENGINES = ("flite", "espeak")


def make_synthesizer(engine: str = "flite", voice: str | None = None, **kw: Any) -> Synthesizer:
    """Build the configured engine; imported lazily so one missing C library only breaks its engine."""
    if engine == "flite":
        from runtime.models.speak.tts_flite import FliteSynthesizer
        return FliteSynthesizer(voice)
    if engine == "espeak":
        from runtime.models.speak.tts_espeak import EspeakSynthesizer
        return EspeakSynthesizer(voice, rate_wpm=kw.get("rate_wpm"))
    raise ValueError(f"unknown TTS engine {engine!r}; choose one of {', '.join(ENGINES)}")


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


class SpeakExecutor(ChunkExecutor):
    """Chunk executor: clause segmentation + in-process TTS per request.

    YAML args: ``engine`` ("flite" | "espeak"), ``voice`` (engine's voice
    name), ``max_clause_chars`` (120), ``first_clause_words`` (6),
    ``rate_wpm`` (espeak only).
    """

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.engine = str(args.get("engine", "flite"))
        self.voice = args.get("voice")
        self.max_clause_chars = int(args.get("max_clause_chars", 120))
        self.first_clause_words = int(args.get("first_clause_words", 6))
        self.synth: Synthesizer | None = None
        self._segmenters: dict[int, ClauseSegmenter] = {}
        self._clauses = 0
        self._audio_ms = 0.0

    def load(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown TTS engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        self.synth = make_synthesizer(self.engine, self.voice, rate_wpm=self.args.get("rate_wpm"))

    def stats(self) -> dict:
        return {"streams": len(self._segmenters), "clauses": self._clauses,
                "audio_ms": round(self._audio_ms, 1), "engine": self.engine}

    def open(self, request_id: int, params: dict) -> None:
        if self.synth is None:
            self.load()
        self._segmenters[request_id] = ClauseSegmenter(self.max_clause_chars, self.first_clause_words)

    def release(self, request_id: int) -> None:
        self._segmenters.pop(request_id, None)

    def _speak(self, clause: str) -> SpeakChunk | None:
        spoken = speakable(strip_markdown(clause))
        if not spoken:
            return None
        assert self.synth is not None
        audio = self.synth.synthesize(spoken)
        if audio.size == 0:
            return None
        chunk = speak_chunk(audio, int(self.synth.sample_rate), clause)
        self._clauses += 1
        self._audio_ms += chunk["duration_ms"]
        return chunk

    def process(self, items: list[WorkItem]) -> list[list[Any]]:
        results: list[Any] = []
        for item in items:
            try:
                seg = self._segmenters.get(item.request_id)
                if seg is None:
                    self.open(item.request_id, item.params)
                    seg = self._segmenters[item.request_id]
                clauses = seg.push(text_of(item.payload))
                if item.final:
                    clauses += seg.flush()
                out = [c for c in (self._speak(cl) for cl in clauses) if c is not None]
                results.append(out)
            except Exception as exc:     # one request's failure must not fail its batch-mates
                results.append(exc)
        return results
