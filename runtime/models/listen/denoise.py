"""Noise suppression on the listen stage's 16 kHz input, before VAD and ASR.

``noise_reduction`` (the Realtime API's ``audio.input.noise_reduction.type``)
picks one per stream:

* ``near_field`` (a handset or headset close to the mouth) and
  ``far_field`` (a speakerphone, a laptop across the room) - see
  :data:`KINDS` for the denoiser and strength each uses, chosen on
  ``benchmarks/noise_bench.py`` (docs/PERFORMANCE.md);
* None: the audio goes through untouched.

Four denoisers, all stateful per stream, all taking float32 in [-1, 1] at
16 kHz in any chunk size and returning what they have finished (they work
in blocks, so up to one block waits for the next chunk):

* :class:`WebRtcDenoiser` - WebRTC's noise suppressor (``webrtc-noise-gain``):
  16 kHz natively, levels 1 (mild) to 4 (strongest), no gain control here.
* :class:`RnnoiseDenoiser` - RNNoise (``pyrnnoise``'s bundled ``librnnoise``,
  called through its ctypes module only): a small recurrent network at
  48 kHz, so the audio is resampled up and back (soxr, streaming).  Measured
  worse and 40x dearer here, so no Realtime setting uses it; ``pyrnnoise``
  comes with the ``test`` extra, for the benchmark's comparison.
* :class:`~runtime.models.listen.gtcrn_denoiser.GtcrnDenoiser` - GTCRN, a
  small neural enhancer trained to keep one voice and remove the rest
  (babble included), 16 ms frames on onnxruntime (:mod:`.gtcrn_denoiser`).
* :class:`~runtime.models.listen.dtln_denoiser.DtlnDenoiser` - DTLN, a
  two-stage recurrent enhancer, 8 ms steps on onnxruntime, with part of the
  input mixed back in (``dtln``: 70% enhanced; ``dtln-full``: enhanced
  only) because Whisper reads fully enhanced speech worse
  (:mod:`.dtln_denoiser`).

Measured on Whisper tiny.en (docs/PERFORMANCE.md, "Real phone lines"):
every enhancer used alone makes recognition worse; DTLN mixed at 70% lowers
WER on babble at 5 dB (wide band 40.7% -> 36.3%, phone line 57.1% -> 47.2%)
with clean speech unchanged, but that is short of issue 41's 30% relative,
it makes wide-band pink noise at 5 dB worse, and it costs about 0.05 core
per caller, so neither Realtime setting maps to it yet.  Also measured and
not shipped (heavier and no better here): Hush (DeepFilterNet3 with a
background-talker head), DeepFilterNet3's 48 kHz streaming graph, and
NSNet2 (whole utterances only); runtime/models/listen/MODELS.md.
"""

from __future__ import annotations

from typing import Optional, Protocol

import numpy as np
import soxr

RATE = 16000
BLOCK = RATE // 100  # 10 ms: both denoisers work in 10 ms blocks
NOISE_REDUCTION_TYPES = ("near_field", "far_field")


class Denoiser(Protocol):
    def process(self, audio: np.ndarray) -> np.ndarray:
        """float32 16 kHz in, the finished part out (same scale)."""


class _Blocks:
    """Cuts a stream into 10 ms blocks; the remainder waits for more."""

    def __init__(self, block: int) -> None:
        self.block = block
        self.rest = np.zeros(0, np.float32)

    def split(self, audio: np.ndarray) -> np.ndarray:
        """The whole blocks as rows of a 2-D array."""
        buf = np.concatenate([self.rest, audio]) if self.rest.size else audio
        n = buf.size // self.block * self.block
        self.rest = buf[n:].copy()
        return buf[:n].reshape(-1, self.block)


def _to_int16(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)


class WebRtcDenoiser:
    def __init__(self, level: int) -> None:
        from webrtc_noise_gain import AudioProcessor

        self._ap = AudioProcessor(0, level)  # no automatic gain: the VAD sees true levels
        self._blocks = _Blocks(BLOCK)

    def process(self, audio: np.ndarray) -> np.ndarray:
        blocks = self._blocks.split(audio)
        if not blocks.size:
            return np.zeros(0, np.float32)
        out = [np.frombuffer(self._ap.Process10ms(_to_int16(b).tobytes()).audio, np.int16)
               for b in blocks]
        return np.concatenate(out).astype(np.float32) / 32768.0


class RnnoiseDenoiser:
    RNN_RATE = 48000

    def __init__(self) -> None:
        from pyrnnoise import rnnoise  # the ctypes binding alone: no plotting imports

        self._lib = rnnoise
        self._state = rnnoise.create()
        # soxr's better filters hold back 60+ ms in blocks: live input takes the
        # low-latency ones (cubic up, nothing to alias; "LQ" down, ~20 ms)
        self._up = soxr.ResampleStream(RATE, self.RNN_RATE, 1, dtype="float32", quality="QQ")
        self._down = soxr.ResampleStream(self.RNN_RATE, RATE, 1, dtype="float32", quality="LQ")
        self._blocks = _Blocks(rnnoise.FRAME_SIZE)

    def process(self, audio: np.ndarray) -> np.ndarray:
        blocks = self._blocks.split(self._up.resample_chunk(audio))
        if not blocks.size:
            return np.zeros(0, np.float32)
        out = np.empty(blocks.shape, np.float32)
        for i, b in enumerate(blocks):
            out[i] = self._lib.process_mono_frame(self._state, _to_int16(b))[0]
        return self._down.resample_chunk(out.reshape(-1) / 32768.0)

    def __del__(self) -> None:
        state, self._state = getattr(self, "_state", None), None
        if state is not None:
            self._lib.destroy(state)


# what each Realtime setting runs (measured: benchmarks/noise_bench.py); the
# engine names themselves are accepted too, for side-by-side comparisons
KINDS = {"near_field": "webrtc-1", "far_field": "webrtc-2"}
ENGINES = ("webrtc-1", "webrtc-2", "webrtc-3", "webrtc-4", "rnnoise", "gtcrn", "dtln",
           "dtln-full")


def make_denoiser(kind: Optional[str]) -> Optional[Denoiser]:
    """The denoiser for a ``noise_reduction`` value (None: none); ValueError
    for a name that is neither a type nor an engine."""
    if kind is None:
        return None
    engine = KINDS.get(kind, kind)
    if engine == "rnnoise":
        return RnnoiseDenoiser()
    if engine == "gtcrn":
        from runtime.models.listen.gtcrn_denoiser import GtcrnDenoiser
        return GtcrnDenoiser()
    if engine in ("dtln", "dtln-full"):
        from runtime.models.listen.dtln_denoiser import DtlnDenoiser
        return DtlnDenoiser() if engine == "dtln" else DtlnDenoiser(wet=1.0)
    if engine in ENGINES:
        return WebRtcDenoiser(int(engine.rpartition("-")[2]))
    raise ValueError(f"noise_reduction must be one of {NOISE_REDUCTION_TYPES + ENGINES} "
                     f"or None, got {kind!r}")


__all__ = ["Denoiser", "WebRtcDenoiser", "RnnoiseDenoiser", "make_denoiser", "KINDS",
           "ENGINES", "NOISE_REDUCTION_TYPES"]
