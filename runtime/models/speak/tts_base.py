"""What every speech synthesiser in the speak stage promises.

The speak stage swaps engines by config, so it needs one tiny interface and
one shared rule for text that has nothing to say: engines disagree about
emoji and stray punctuation (silence, a spelled-out "grinning face", or a
crash), so that decision is made here, before any engine sees the text.
"""

from __future__ import annotations

import unicodedata

import numpy as np


# Unicode major categories a non-English voice is given: letters, marks, numbers,
# punctuation, separators (symbols S* and controls C* are dropped).
_KEPT = frozenset("LMNPZ")


def speakable(text: str, language: str | None = "en") -> str:
    """Text reduced to what a voice of ``language`` can pronounce; "" when nothing is left.

    English voices (``language`` "en" or None): NFKD + ASCII folds accents
    (cafe) and full-width forms to letters the voices know and drops emoji and
    symbols that would otherwise be read out by name or crash a C front end.
    Any other language keeps the letters, marks and digits of every script
    (ñ, ß, kana, kanji) after NFKC, which turns full-width digits and
    half-width kana into the forms front ends read, and drops the same symbols.
    """
    if language in (None, "en"):
        folded = unicodedata.normalize("NFKD", text or "").encode("ascii", "ignore").decode("ascii")
        folded = "".join(ch if ch.isprintable() else " " for ch in folded)
    else:
        folded = "".join(ch if unicodedata.category(ch)[0] in _KEPT else " "
                         for ch in unicodedata.normalize("NFKC", text or ""))
    folded = " ".join(folded.split())
    return folded if any(ch.isalnum() for ch in folded) else ""


class Synthesizer:
    """Text in, mono int16 PCM at ``sample_rate`` out."""

    sample_rate: int = 16000
    name: str = "base"
    language: str = "en"     # ISO-639-1: what speakable() keeps for this voice

    def synthesize(self, text: str, speed: float = 1.0) -> np.ndarray:
        """Synthesise ``text`` at ``speed`` (1.0: the voice's own pace; the
        Realtime API's ``audio.output.speed``); empty when nothing is speakable."""
        clean = speakable(text, self.language)
        if not clean:
            return np.zeros(0, dtype=np.int16)
        return self._synthesize(clean, float(speed))

    def _synthesize(self, text: str, speed: float) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        """Release engine resources (no-op for engines with process-wide state)."""
