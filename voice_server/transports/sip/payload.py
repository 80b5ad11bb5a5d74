"""What an RTP audio payload is: G.711 (PCMU, PCMA) and G.722, 20 ms a packet.

G.711 goes through the server's own tables (:mod:`voice_server.audio_codec`);
G.722 through the ``G722`` extension, which keeps encoder and decoder state,
so each call makes its own :class:`PayloadCodec`.  G.722's RTP clock runs at
8 kHz although its audio is 16 kHz (RFC 3551 section 4.5.2).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from ...audio_codec import alaw_decode, alaw_encode, mulaw_decode, mulaw_encode

PTIME_MS = 20


@dataclass(frozen=True)
class PayloadFormat:
    """A static RTP audio format (RFC 3551 table 4)."""
    name: str
    payload_type: int
    sample_rate: int  # of the audio
    clock_rate: int = 8000  # of the RTP timestamps

    @property
    def frame_samples(self) -> int:
        return self.sample_rate * PTIME_MS // 1000

    @property
    def timestamp_step(self) -> int:
        return self.clock_rate * PTIME_MS // 1000


PCMU = PayloadFormat("PCMU", 0, 8000)
PCMA = PayloadFormat("PCMA", 8, 8000)
G722 = PayloadFormat("G722", 9, 16000)
FORMATS = {f.name: f for f in (PCMU, PCMA, G722)}


class PayloadCodec:
    """One call's encoder and decoder for its negotiated format."""

    def __init__(self, fmt: PayloadFormat) -> None:
        self.format = fmt
        self._g722 = None
        if fmt is G722:
            from G722 import G722 as Engine  # C extension: imported only when negotiated
            self._g722 = (Engine(16000, 64000), Engine(16000, 64000))

    def decode(self, payload: bytes) -> np.ndarray:
        """Payload -> int16 PCM at ``format.sample_rate``."""
        if self.format is PCMU:
            return mulaw_decode(payload)
        if self.format is PCMA:
            return alaw_decode(payload)
        return np.frombuffer(self._g722[1].decode(payload).tobytes(), np.int16).copy()

    def encode(self, pcm: np.ndarray) -> bytes:
        """int16 PCM at ``format.sample_rate`` -> payload."""
        if self.format is PCMU:
            return mulaw_encode(pcm)
        if self.format is PCMA:
            return alaw_encode(pcm)
        return self._g722[0].encode(array("h", np.asarray(pcm, np.int16).tobytes()))


__all__ = ["PayloadFormat", "PayloadCodec", "PCMU", "PCMA", "G722", "FORMATS", "PTIME_MS"]
