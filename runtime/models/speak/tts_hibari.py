"""hibari-tts: a small neural voice (int8 ONNX, distilled from Kokoro-82M) on onnxruntime.

Why this engine is the default: side by side with flite on this machine it
was rated more natural (DNSMOS 3.38 against 2.68), Whisper heard it back
better (0.8% WER against 11.5%) and it cost no more CPU per audio second
(0.012 against 0.013), for ~180 MB more memory (benchmarks/tts_bench.py,
docs/PERFORMANCE.md).  It pads every text with ~0.3 s of silence at each
end; the speak stage cuts that (pauses.py).

Offline only.  hibari downloads any voice other than its bundled one on first
use; a voice server must never reach out at run time, so voices are resolved
here with ``download_missing=False`` and the model path is handed to
``Hibari`` directly, which then never calls the downloader.  A voice that is
not on disk is a ``ValueError`` at load, naming what is installed.
"""

from __future__ import annotations

import threading

import numpy as np

from runtime.models.speak.tts_base import Synthesizer

DEFAULT_VOICE = "heart"
# hibari's model takes any speed > 0; its authors tested 0.5..2.0, the Realtime
# API allows 0.25..1.5 (0.25 is still intelligible: durations x4).
MIN_SPEED, MAX_SPEED = 0.25, 2.0
FULL_SCALE = 32767.0


def _voices_module():
    from hibari import voices
    return voices


def known_voices() -> list[str]:
    """Every voice in hibari's registry, installed or not."""
    return list(_voices_module().VOICES)


def installed_voices() -> dict[str, str]:
    """hibari voices usable without a network (the bundled one and any already in its
    cache), name -> gender."""
    voices = _voices_module()
    out = {}
    for name, info in voices.VOICES.items():
        try:
            voices.voice_path(name, download_missing=False)
        except FileNotFoundError:
            continue
        out[name] = str(info.get("gender", ""))
    return out


def voice_model_path(name: str) -> str:
    """The ONNX file of an installed voice; ValueError (never a download) otherwise."""
    voices = _voices_module()
    if name not in voices.VOICES:
        raise ValueError(f"unknown hibari voice {name!r}; installed: {', '.join(installed_voices())}")
    try:
        return voices.voice_path(name, download_missing=False)
    except FileNotFoundError:
        raise ValueError(f"hibari voice {name!r} is not installed (only {', '.join(installed_voices())} "
                         f"are; voices are never downloaded at run time)") from None


class HibariSynthesizer(Synthesizer):
    """hibari voice (default ``heart``, 24 kHz) with ``threads`` onnxruntime threads."""

    name = "hibari"

    def __init__(self, voice: str | None = None, threads: int = 1, seed: int = 0) -> None:
        from hibari import Hibari
        self.voice = voice or DEFAULT_VOICE
        self.threads = max(1, int(threads))
        # A fixed seed makes the noise component, so the same clause always sounds the same.
        self.seed = seed
        self._tts = Hibari(voice=self.voice, model=voice_model_path(self.voice), threads=self.threads)
        self.sample_rate = int(self._tts.sample_rate)
        # The session and its run() are shared state of one onnxruntime session;
        # the speak stage is single-threaded, the lock is for tests and tools.
        self._lock = threading.Lock()
        # hibari loads its G2P (lexicon, tagger, OOV net: ~0.3 s) on first use;
        # pay that at load, not on the first caller's first words.
        self._synthesize("Ready.", 1.0)

    def _synthesize(self, text: str, speed: float) -> np.ndarray:
        speed = min(MAX_SPEED, max(MIN_SPEED, float(speed)))
        with self._lock:
            # One array per sentence; the speak stage hands over a clause at a time,
            # so this is almost always one array.
            parts = list(self._tts.stream(text, speed=speed, seed=self.seed))
        if not parts:
            return np.zeros(0, dtype=np.int16)
        audio = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return np.clip(np.round(audio * FULL_SCALE), -32768, 32767).astype(np.int16)
