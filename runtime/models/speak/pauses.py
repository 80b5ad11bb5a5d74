"""The silence around each clause a voice speaks.

Speech engines pad every text they are given with silence at both ends
(hibari ~0.3 s before and 0.3-0.5 s after, flite ~0.2 s, espeak-ng none),
which suits a sentence said on its own.  The speak stage hands them one clause
at a time, so the padding lands in the wrong places:

- before a reply's first word it is latency the caller hears: the audio has
  started, the voice has not (hibari: ~0.3 s of every turn);
- at a clause break inside a sentence (the eager first clause: "Your order |
  shipped this morning") it is a pause of over half a second that turns one
  sentence into two; Whisper then hears "Your order. Ship this morning."

So each clause's own silence is cut away and the pause after it is set by how
the clause ends, as a reader pauses: longer after a full stop than after a
comma, none inside a sentence.
"""

from __future__ import annotations

import numpy as np

FRAME_MS = 10
# A 10 ms frame is voiced when its RMS is within FLOOR_DB of the clause's
# loudest frame: above flite's noise floor (~-55 dB) and hibari's onset ramp,
# below the softest consonants (a fricative onset sits near -35 dB).
FLOOR_DB = -45.0
# Kept on both sides of the voiced part, so soft onsets and releases stay whole.
MARGIN_MS = 30
SENTENCE_PAUSE_MS = 300
CLAUSE_PAUSE_MS = 150
# with the full-width (CJK) stops and commas, which Japanese clauses end with
SENTENCE_END = ".!?\u3002\uff01\uff1f"
CLAUSE_END = ",;:\u2014\u2013\u3001\uff0c\uff1b\uff1a"
CLOSERS = "\"')]}\u201d\u2019\u300d\u300f\uff09"


def pause_after_ms(text: str) -> int:
    """The pause a reader makes after ``text``: a sentence's, a clause's, or none
    when the clause was cut inside a sentence."""
    tail = text.rstrip().rstrip(CLOSERS)
    if not tail:
        return 0
    if tail[-1] in SENTENCE_END:
        return SENTENCE_PAUSE_MS
    if tail[-1] in CLAUSE_END:
        return CLAUSE_PAUSE_MS
    return 0


def voiced_span(audio: np.ndarray, rate: int) -> tuple[int, int]:
    """[start, end) sample indexes of the voiced part with its margins; (0, 0) when silent."""
    frame = max(1, rate * FRAME_MS // 1000)
    n = audio.size // frame
    if n == 0:
        return (0, 0)
    frames = audio[: n * frame].astype(np.float64).reshape(n, frame)
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    peak = float(rms.max())
    if peak <= 0.0:
        return (0, 0)
    voiced = np.flatnonzero(rms >= peak * 10 ** (FLOOR_DB / 20))
    margin = rate * MARGIN_MS // 1000
    start = max(0, int(voiced[0]) * frame - margin)
    end = min(audio.size, (int(voiced[-1]) + 1) * frame + margin)
    return (start, end)


def spoken_with_pause(audio: np.ndarray, rate: int, text: str, speed: float = 1.0) -> np.ndarray:
    """``audio`` (one clause, mono int16) without the engine's own silence, then
    the pause its ending calls for (shorter at a faster ``speed``, as the words
    are); empty when the engine produced only silence."""
    start, end = voiced_span(audio, rate)
    if end <= start:
        return audio[:0]
    pause = np.zeros(int(rate * pause_after_ms(text) / 1000 / max(speed, 0.25)), dtype=audio.dtype)
    return np.concatenate([audio[start:end], pause])
