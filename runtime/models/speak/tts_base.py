"""What every speech synthesiser in the speak stage promises.

The speak stage swaps engines by config, so it needs one tiny interface and
one shared rule for text that has nothing to say: engines disagree about
emoji and stray punctuation (silence, a spelled-out "grinning face", or a
crash), so that decision is made here, before any engine sees the text.
"""

from __future__ import annotations

import unicodedata

import numpy as np


def speakable(text: str) -> str:
    """Text reduced to what an English voice can pronounce; "" when nothing is left.

    NFKD + ASCII folds accents (cafe) and full-width forms to letters the
    voices know and drops emoji and symbols that would otherwise be read out
    by name or crash a C front end.
    """
    folded = unicodedata.normalize("NFKD", text or "").encode("ascii", "ignore").decode("ascii")
    folded = "".join(ch if ch.isprintable() else " " for ch in folded)
    folded = " ".join(folded.split())
    return folded if any(ch.isalnum() for ch in folded) else ""


class Synthesizer:
    """Text in, mono int16 PCM at ``sample_rate`` out."""

    sample_rate: int = 16000
    name: str = "base"

    def synthesize(self, text: str, speed: float = 1.0) -> np.ndarray:
        """Synthesise ``text`` at ``speed`` (1.0: the voice's own pace; the
        Realtime API's ``audio.output.speed``); empty when nothing is speakable."""
        clean = speakable(text)
        if not clean:
            return np.zeros(0, dtype=np.int16)
        return self._synthesize(clean, float(speed))

    def _synthesize(self, text: str, speed: float) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        """Release engine resources (no-op for engines with process-wide state)."""
