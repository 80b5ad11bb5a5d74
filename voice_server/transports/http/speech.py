"""``POST /v1/audio/speech``: OpenAI's text-to-speech endpoint on the speak stage.

The body is checked once (:class:`SpeechAsk`), the text goes to the speak
stage sentence by sentence, and the first sentence's audio is sent while the
rest is synthesised.  Output is 16-bit little-endian mono PCM at
``speech_sample_rate`` (24 kHz by default, what OpenAI clients assume for
``pcm``), resampled from the TTS engine's rate (:class:`SpeechAudio`);
``X-Sample-Rate`` says the rate, ``X-Request-Id`` the runtime request id.
``stream_format: "audio"`` sends the bytes (after a streaming WAV header for
``wav``), ``"sse"`` sends ``speech.audio.delta`` events; what each does with
an error after the first byte is in :mod:`.streaming`.
"""

from __future__ import annotations

import base64
import logging
import re
import struct
from dataclasses import dataclass
from typing import Any, AsyncIterator

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from runtime.models.speak.voices import language_of
from runtime.models.voice_contract import SPEAK, SPEAK_LANGUAGE, SPEAK_SPEED, SPEAK_VOICE

from .context import ApiContext
from .errors import ApiError, cancelled_body, error_body
from .models import check_model
from .streaming import SSE_DONE, PipelineStream, StreamAborted, sse
from .turn import Turn, first_ok_event

log = logging.getLogger(__name__)

SPEECH_FORMATS = ("pcm", "wav")
OPENAI_ONLY_FORMATS = ("mp3", "opus", "aac", "flac")
STREAM_FORMATS = ("audio", "sse")


@dataclass(frozen=True)
class SpeechAsk:
    """A ``/v1/audio/speech`` body, checked field by field (OpenAI's names)."""

    text: str
    voice: str | None
    fmt: str                # response_format: wav or pcm
    stream_format: str      # audio (the bytes) or sse (speech.audio.delta events)
    speed: float
    # extension: the text's language (ISO-639-1); picks its voice when ``voice``
    # names no shipped voice (runtime/models/speak/voices.py)
    language: str | None = None

    @property
    def sentences(self) -> list[str]:
        return [s for s in re.split(r"(?<=[.!?;:])\s+", self.text) if s]

    @classmethod
    def parse(cls, data: dict, max_chars: int) -> "SpeechAsk":
        text = data.get("input")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "'input' must be a non-empty string", param="input", code="invalid_value")
        if len(text) > max_chars:
            raise ApiError(413, f"'input' is {len(text)} characters; the limit is {max_chars}",
                           param="input", code="input_too_long")
        voice = data.get("voice")
        if voice is not None and not isinstance(voice, (str, dict)):
            raise ApiError(400, "'voice' must be a string", param="voice", code="invalid_type")
        fmt = data.get("response_format", "wav")
        if fmt in OPENAI_ONLY_FORMATS:
            raise ApiError(400, f"response_format {fmt!r} is not supported here; use one of "
                                f"{', '.join(SPEECH_FORMATS)}", param="response_format", code="unsupported_value")
        if fmt not in SPEECH_FORMATS:
            raise ApiError(400, f"response_format must be one of {', '.join(SPEECH_FORMATS)}",
                           param="response_format", code="invalid_value")
        stream_format = data.get("stream_format", "audio")
        if stream_format not in STREAM_FORMATS:
            raise ApiError(400, f"stream_format must be one of {', '.join(STREAM_FORMATS)}",
                           param="stream_format", code="invalid_value")
        speed = data.get("speed", 1.0)
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0.25 <= speed <= 4.0:
            raise ApiError(400, "'speed' must be a number in 0.25..4.0", param="speed", code="invalid_value")
        try:
            language = language_of(data.get("language"))
        except ValueError as exc:
            raise ApiError(400, str(exc), param="language", code="invalid_value") from None
        return cls(text, voice.get("id") if isinstance(voice, dict) else voice, fmt, stream_format,
                   float(speed), language)


def wav_header(sample_rate: int, channels: int = 1, bits: int = 16) -> bytes:
    """A streaming WAV header: sizes unknown, so 0xFFFFFFFF as most players accept."""
    block = channels * bits // 8
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block, block, bits)
            + b"data" + struct.pack("<I", 0xFFFFFFFF))


class SpeechAudio:
    """The speak stage's chunks as 16-bit little-endian bytes at the server's
    output rate (resampled, streaming, when the voice speaks at another)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.n_bytes = 0
        self._resampler = None

    def chunk(self, ev: Any) -> bytes:
        audio = np.asarray(ev.payload["audio"], dtype=np.int16).reshape(-1)
        rate = int(ev.payload["sample_rate"])
        if rate != self.rate:
            if self._resampler is None:
                import soxr
                self._resampler = soxr.ResampleStream(rate, self.rate, 1, dtype="int16")
            audio = self._resampler.resample_chunk(audio)
        return self._count(audio)

    def flush(self) -> bytes:
        """What the resampler still holds, at the end."""
        if self._resampler is None:
            return b""
        return self._count(self._resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True))

    def _count(self, audio: np.ndarray) -> bytes:
        b = audio.astype("<i2").tobytes()
        self.n_bytes += len(b)
        return b


async def _speech_events(ev: Any, turn: Turn, audio: SpeechAudio,
                         n_chars: int) -> AsyncIterator[bytes]:
    """``stream_format=sse``: the audio as ``speech.audio.delta`` events, then
    ``speech.audio.done``; an error after the first byte arrives in-band."""
    try:
        while True:
            if ev.kind in ("chunk", "done"):
                b = audio.chunk(ev) if ev.kind == "chunk" else audio.flush()
                if b:
                    yield sse({"type": "speech.audio.delta", "audio": base64.b64encode(b).decode()})
                if ev.kind == "done":
                    yield sse({"type": "speech.audio.done",
                               "usage": {"input_characters": n_chars,
                                         "output_audio_seconds": round(audio.n_bytes / 2 / audio.rate, 3)}})
                    return
            else:
                info = ev.error
                yield sse(error_body(info) if info is not None or ev.kind == "error"
                          else cancelled_body(ev.reason), event="error")
                yield SSE_DONE
                return
            ev = await turn.next()
    finally:
        turn.abort("stream_closed")


async def _speech_bytes(ev: Any, turn: Turn, audio: SpeechAudio, wav: bool) -> AsyncIterator[bytes]:
    """The audio itself (after a WAV header for ``wav``).  Raw audio has no
    in-band errors: a failure after the first byte aborts the body."""
    try:
        if wav:
            yield wav_header(audio.rate)
        while True:
            if ev.kind in ("chunk", "done"):
                b = audio.chunk(ev) if ev.kind == "chunk" else audio.flush()
                if b:
                    yield b
                if ev.kind == "done":
                    return
            else:
                msg = ev.error.message if ev.error else f"cancelled ({ev.reason})"
                log.warning("speech request %s failed after the first byte; aborting the body "
                            "(raw audio has no in-band errors, use stream_format=sse): %s",
                            turn.rid, msg)
                raise StreamAborted(msg)
            ev = await turn.next()
    finally:
        turn.abort("stream_closed")


async def speech(ctx: ApiContext, request: Request) -> Response:
    """POST /v1/audio/speech."""
    ctx.check_auth(request)
    data = await ctx.read_json(request)
    check_model(ctx, data, SPEAK)
    ask = SpeechAsk.parse(data, int(ctx.setting("max_speech_chars")))
    p = ctx.live_pipeline([SPEAK])
    audio = SpeechAudio(int(ctx.setting("speech_sample_rate")))
    h = await p.submit(None, entry=SPEAK, route=[SPEAK], stream_input=True,
                       params={SPEAK_VOICE: ask.voice, SPEAK_SPEED: ask.speed,
                               SPEAK_LANGUAGE: ask.language},
                       deadline_s=ctx.deadline())
    turn = Turn(p, h)
    try:
        # sentence by sentence: the first is synthesised (and sent) while the rest waits
        for i, part in enumerate(ask.sentences):
            await h.send(part if i == len(ask.sentences) - 1 else part + " ")
        await h.end_input()
    except BaseException:
        turn.abort("client_disconnected")
        raise
    first = await first_ok_event(request, turn)
    headers = {"X-Request-Id": str(turn.rid), "X-Sample-Rate": str(audio.rate),
               "Cache-Control": "no-cache"}
    if ask.stream_format == "sse":
        body, media = _speech_events(first, turn, audio, len(ask.text)), "text/event-stream"
    else:
        body = _speech_bytes(first, turn, audio, wav=ask.fmt == "wav")
        media = "audio/wav" if ask.fmt == "wav" else "audio/pcm"
    return PipelineStream(body, lambda: turn.abort("client_disconnected"), headers=headers,
                          media_type=media)


__all__ = ["speech", "SpeechAsk", "SpeechAudio", "wav_header", "SPEECH_FORMATS", "STREAM_FORMATS"]
