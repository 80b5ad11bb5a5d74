"""The audio format of one phone line: encoding and sample rate, and the
byte arithmetic every bridge needs (decode, encode, frame sizes, silence).

Phone providers carry G.711 (mu-law, A-law, 8 kHz, one byte a sample) or
16-bit little-endian linear PCM (8, 16 or 24 kHz).  A codec names the line's
format once, when the call starts; the bridge and the playout only ever ask
the :class:`LineFormat`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from ...audio_codec import (alaw_decode, alaw_encode, mulaw_decode, mulaw_encode,
                            pcm16_from_bytes, pcm16_to_bytes)


class Encoding(Enum):
    MULAW = "mulaw"
    ALAW = "alaw"
    L16 = "l16"  # 16-bit signed little-endian PCM


_SILENCE = {Encoding.MULAW: b"\xff", Encoding.ALAW: b"\xd5", Encoding.L16: b"\x00\x00"}


class LineAudioError(ValueError):
    """Bytes that are not whole samples of the line's format."""


@dataclass(frozen=True)
class LineFormat:
    encoding: Encoding
    rate: int  # samples per second

    @property
    def sample_bytes(self) -> int:
        return 2 if self.encoding is Encoding.L16 else 1

    def frame_bytes(self, ms: int) -> int:
        """Bytes of ``ms`` milliseconds of audio."""
        return self.rate * ms // 1000 * self.sample_bytes

    def ms_of(self, n_bytes: int) -> int:
        return n_bytes * 1000 // (self.rate * self.sample_bytes)

    def silence(self, n_bytes: int) -> bytes:
        """``n_bytes`` of digital silence (n_bytes a whole number of samples)."""
        return _SILENCE[self.encoding] * (n_bytes // self.sample_bytes)

    def decode(self, data: bytes) -> np.ndarray:
        """Wire bytes -> int16 PCM at :attr:`rate`; :class:`LineAudioError`
        when they are not whole samples."""
        if self.encoding is Encoding.MULAW:
            return mulaw_decode(data)
        if self.encoding is Encoding.ALAW:
            return alaw_decode(data)
        if len(data) % 2:
            raise LineAudioError(f"{len(data)} bytes is not a whole number of 16-bit samples")
        return pcm16_from_bytes(data)

    def encode(self, pcm: np.ndarray) -> bytes:
        """int16 PCM already at :attr:`rate` -> wire bytes."""
        if self.encoding is Encoding.MULAW:
            return mulaw_encode(pcm)
        if self.encoding is Encoding.ALAW:
            return alaw_encode(pcm)
        return pcm16_to_bytes(pcm)


MULAW_8K = LineFormat(Encoding.MULAW, 8000)
ALAW_8K = LineFormat(Encoding.ALAW, 8000)

__all__ = ["Encoding", "LineFormat", "LineAudioError", "MULAW_8K", "ALAW_8K"]
