"""Audio codecs and resampling helpers for the voice server.

* G.711 mu-law and A-law (ITU-T G.711), implemented here with numpy lookup
  tables built once at import from the reference algorithms (the classic
  Sun Microsystems / CCITT formulation):

  - mu-law: 14-bit magnitude (one's complement for negatives, as the ITU-T
    G.191 reference ``ulaw_compress``), bias 33 (0x84 at 16 bit), 8 segments,
    bits inverted on the wire.  ``0 -> 0xFF``, ``-1 -> 0x7F``, ``32767 -> 0x80``,
    ``-32768 -> 0x00``; ``0xFF`` and ``0x7F`` both decode to 0.
  - A-law: 13-bit magnitude, 8 segments, even bits inverted (xor 0x55).
    ``0 -> 0xD5``, ``-1 -> 0x55``, ``32767 -> 0xAA``, ``-32768 -> 0x2A``;
    ``0xD5`` decodes to +8 and ``0x55`` to -8.

  Encoders take int16 arrays (any shape) and return ``bytes``; decoders take
  ``bytes``/``bytearray``/``memoryview``/uint8 arrays and return int16.

* PCM16 resampling with soxr: :func:`resample` (one shot) and
  :class:`StreamResampler` (stateful, so consecutive chunks join without
  clicks; call :meth:`StreamResampler.flush` at the end of a stream to get the
  filter's tail).

* Wire-format helpers used by the session core: :func:`decode_wire_audio` and
  :func:`encode_wire_audio` for the Realtime formats ``audio/pcm`` (little
  endian PCM16), ``audio/pcmu`` and ``audio/pcma`` (8 kHz G.711).
"""

from __future__ import annotations

import numpy as np
import soxr

__all__ = [
    "mulaw_encode", "mulaw_decode", "alaw_encode", "alaw_decode",
    "resample", "StreamResampler", "low_latency_quality", "pcm16_from_bytes", "pcm16_to_bytes",
    "decode_wire_audio", "encode_wire_audio", "wire_sample_rate",
    "PCM", "PCMU", "PCMA", "G711_RATE",
]

PCM = "audio/pcm"
PCMU = "audio/pcmu"
PCMA = "audio/pcma"
G711_RATE = 8000

# --------------------------------------------------------------------------
# G.711 tables
# --------------------------------------------------------------------------

_MU_BIAS = 0x84
_MU_CLIP = 32635


def _segment(values: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the first segment end >= value (len(ends) when above all)."""
    return np.searchsorted(ends, values, side="left")


def _build_mulaw_encode_table() -> np.ndarray:
    x = np.arange(-32768, 32768, dtype=np.int64)
    sign = np.where(x < 0, 0x80, 0x00)
    # one's-complement magnitude for negatives, as in the ITU-T G.191 reference
    # (``~x``): -1 maps to the same magnitude as 0, hence 0x7F.
    mag = np.minimum(np.where(x < 0, -x - 1, x), _MU_CLIP) + _MU_BIAS
    # exponent = position of the highest set bit above bit 7, 0..7
    exponent = np.zeros_like(mag)
    for e in range(1, 8):
        exponent = np.where(mag >= (0x80 << e), e, exponent)
    mantissa = (mag >> (exponent + 3)) & 0x0F
    code = ~(sign | (exponent << 4) | mantissa) & 0xFF
    table = np.empty(65536, dtype=np.uint8)
    table[x.astype(np.uint16)] = code.astype(np.uint8)  # index by uint16 view
    return table


def _build_mulaw_decode_table() -> np.ndarray:
    u = (~np.arange(256, dtype=np.int64)) & 0xFF
    t = ((u & 0x0F) << 3) + _MU_BIAS
    t = t << ((u & 0x70) >> 4)
    out = np.where(u & 0x80, _MU_BIAS - t, t - _MU_BIAS)
    return out.astype(np.int16)


_A_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int64)


def _build_alaw_encode_table() -> np.ndarray:
    x = np.arange(-32768, 32768, dtype=np.int64)
    pcm = x >> 3  # 13-bit, arithmetic shift (floor)
    mask = np.where(pcm >= 0, 0xD5, 0x55)
    mag = np.where(pcm >= 0, pcm, -pcm - 1)
    seg = _segment(mag, _A_SEG_END)
    shift = np.where(seg < 2, 1, seg)
    aval = (np.minimum(seg, 7) << 4) | ((mag >> shift) & 0x0F)
    aval = np.where(seg >= 8, 0x7F, aval)
    code = (aval ^ mask) & 0xFF
    table = np.empty(65536, dtype=np.uint8)
    table[x.astype(np.uint16)] = code.astype(np.uint8)
    return table


def _build_alaw_decode_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int64) ^ 0x55
    t = (a & 0x0F) << 4
    seg = (a & 0x70) >> 4
    t = np.where(seg == 0, t + 8, t + 0x108)
    t = np.where(seg > 1, t << np.maximum(seg - 1, 0), t)
    out = np.where(a & 0x80, t, -t)
    return out.astype(np.int16)


_MULAW_ENC = _build_mulaw_encode_table()
_MULAW_DEC = _build_mulaw_decode_table()
_ALAW_ENC = _build_alaw_encode_table()
_ALAW_DEC = _build_alaw_decode_table()


def _as_int16(pcm) -> np.ndarray:
    arr = np.asarray(pcm)
    if arr.dtype != np.int16:
        raise TypeError(f"expected int16 PCM, got {arr.dtype}")
    return arr


def _as_uint8(data) -> np.ndarray:
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"expected uint8 codes, got {data.dtype}")
        return data
    return np.frombuffer(bytes(data) if isinstance(data, memoryview) else data, dtype=np.uint8)


def mulaw_encode(pcm: np.ndarray) -> bytes:
    """int16 PCM -> G.711 mu-law bytes."""
    return _MULAW_ENC[_as_int16(pcm).reshape(-1).view(np.uint16)].tobytes()


def mulaw_decode(data) -> np.ndarray:
    """G.711 mu-law bytes -> int16 PCM."""
    return _MULAW_DEC[_as_uint8(data)]


def alaw_encode(pcm: np.ndarray) -> bytes:
    """int16 PCM -> G.711 A-law bytes."""
    return _ALAW_ENC[_as_int16(pcm).reshape(-1).view(np.uint16)].tobytes()


def alaw_decode(data) -> np.ndarray:
    """G.711 A-law bytes -> int16 PCM."""
    return _ALAW_DEC[_as_uint8(data)]


# --------------------------------------------------------------------------
# PCM16 helpers and resampling
# --------------------------------------------------------------------------

def pcm16_from_bytes(data: bytes) -> np.ndarray:
    """Little-endian PCM16 bytes -> int16 array (ValueError on odd length)."""
    if len(data) % 2:
        raise ValueError("PCM16 byte count must be even")
    return np.frombuffer(data, dtype="<i2").astype(np.int16, copy=False)


def pcm16_to_bytes(pcm: np.ndarray) -> bytes:
    return np.asarray(pcm, dtype=np.int16).astype("<i2", copy=False).tobytes()


def resample(pcm: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """One-shot int16 resampling (whole signal, no state)."""
    pcm = _as_int16(pcm).reshape(-1)
    if in_rate == out_rate or pcm.size == 0:
        return pcm.copy()
    return np.asarray(soxr.resample(pcm, in_rate, out_rate), dtype=np.int16)


def low_latency_quality(in_rate: int, out_rate: int) -> str:
    """soxr quality for live input: soxr's better filters work in blocks and
    hold back 20-100 ms (worst when upsampling from 8 kHz), which would delay
    voice activity detection.  Upsampling uses "QQ" (cubic: no block delay,
    nothing to alias); downsampling uses "LQ" (anti-aliased, ~20 ms steady)."""
    return "QQ" if out_rate > in_rate else "LQ"


class StreamResampler:
    """Stateful int16 mono resampler: chunk boundaries stay seamless.

    The filter has a delay (about 15-30 ms with the default "MQ" quality,
    60+ ms with "HQ" at 8 kHz), so early calls may return fewer samples than
    the ratio suggests; :meth:`flush` returns the remaining tail.  With equal
    rates it is a pass-through.
    """

    def __init__(self, in_rate: int, out_rate: int, quality: str = "MQ") -> None:
        self.in_rate = int(in_rate)
        self.out_rate = int(out_rate)
        self.quality = quality
        self.samples_in = 0
        self.samples_out = 0
        self._stream = None
        if self.in_rate != self.out_rate:
            self._stream = soxr.ResampleStream(self.in_rate, self.out_rate, 1,
                                               dtype="int16", quality=quality)

    def process(self, pcm: np.ndarray) -> np.ndarray:
        pcm = _as_int16(pcm).reshape(-1)
        self.samples_in += pcm.size
        if self._stream is None:
            out = pcm.copy()
        else:
            out = np.asarray(self._stream.resample_chunk(pcm, last=False), dtype=np.int16)
        self.samples_out += out.size
        return out

    def flush(self) -> np.ndarray:
        if self._stream is None:
            return np.zeros(0, dtype=np.int16)
        out = np.asarray(self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True),
                         dtype=np.int16)
        self.samples_out += out.size
        self._stream = soxr.ResampleStream(self.in_rate, self.out_rate, 1, dtype="int16",
                                           quality=self.quality)
        return out


# --------------------------------------------------------------------------
# Realtime wire formats
# --------------------------------------------------------------------------

def wire_sample_rate(fmt_type: str, rate: int | None = None) -> int:
    """Sample rate of a Realtime audio format (G.711 is always 8 kHz)."""
    if fmt_type in (PCMU, PCMA):
        return G711_RATE
    if fmt_type == PCM:
        return int(rate or 24000)
    raise ValueError(f"unknown audio format {fmt_type!r}")


def decode_wire_audio(data: bytes, fmt_type: str) -> np.ndarray:
    """Wire bytes in ``fmt_type`` -> int16 PCM at :func:`wire_sample_rate`."""
    return _codec(fmt_type)[0](data)


def encode_wire_audio(pcm: np.ndarray, fmt_type: str) -> bytes:
    """int16 PCM (already at the format's rate) -> wire bytes."""
    return _codec(fmt_type)[1](pcm)


def _codec(fmt_type: str):
    try:
        return {PCM: (pcm16_from_bytes, pcm16_to_bytes), PCMU: (mulaw_decode, mulaw_encode),
                PCMA: (alaw_decode, alaw_encode)}[fmt_type]
    except KeyError:
        raise ValueError(f"unknown audio format {fmt_type!r}") from None
