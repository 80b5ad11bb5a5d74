"""Streaming speech recognition with pocketsphinx 5 and its bundled en-us model.

Building a ``Decoder`` loads the acoustic model and dictionary (~0.4 s), so a
stream keeps one decoder and only opens/closes utterances on it; per-utterance
cost is then just ``start_utt``.
"""

from __future__ import annotations

import numpy as np
try:
    from pocketsphinx import Decoder
except ImportError:  # one clear line instead of a traceback from the stage process
    from runtime.errors import ErrorCode, StageError

    raise StageError(ErrorCode.STAGE_UNAVAILABLE, "pocketsphinx is not installed; fix: "
                     ".venv/bin/pip install 'pocketsphinx>=5,<6'") from None

from runtime.models.voice_contract import LISTEN_RATE_HZ


def make_decoder() -> Decoder:
    """A decoder on the wheel's default en-us model, with logging silenced.

    pocketsphinx writes a screenful of INFO lines per decoder to stderr, which
    would drown the stage's own logs.
    """
    return Decoder(loglevel="FATAL", samprate=LISTEN_RATE_HZ)


class StreamingRecognizer:
    """One utterance at a time on a reusable decoder; partial hypotheses as audio arrives."""

    def __init__(self, decoder: Decoder | None = None) -> None:
        self.decoder = decoder if decoder is not None else make_decoder()
        self._active = False
        self._last = ""

    @property
    def active(self) -> bool:
        """True between start() and finish(): callers need it to decide whether to flush."""
        return self._active

    def start(self) -> None:
        """Open an utterance; an unfinished one is abandoned rather than leaking into this one."""
        if self._active:
            self.decoder.end_utt()
        self.decoder.start_utt()
        self._active = True
        self._last = ""

    def feed(self, pcm: np.ndarray) -> str | None:
        """Decode 16 kHz int16 mono samples; return the hypothesis only when it changed.

        Returning ``None`` for "no news" lets callers emit partials without
        deduplicating them themselves.
        """
        if not self._active:
            self.start()
        pcm = np.ascontiguousarray(pcm, dtype=np.int16)
        if pcm.size == 0:
            return None
        self.decoder.process_raw(pcm.tobytes(), False, False)
        hyp = self.decoder.hyp()
        text = hyp.hypstr.strip() if hyp is not None else ""
        if text and text != self._last:
            self._last = text
            return text
        return None

    def finish(self) -> str:
        """Close the utterance and return the final transcript ("" when nothing was recognised)."""
        if not self._active:
            return ""
        self.decoder.end_utt()
        self._active = False
        hyp = self.decoder.hyp()
        text = hyp.hypstr.strip() if hyp is not None else ""
        self._last = ""
        return text
