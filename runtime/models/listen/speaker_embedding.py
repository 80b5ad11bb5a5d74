"""A speaker's voice as a unit vector: CAM++ on onnxruntime, no torch.

The voice lock (voice_lock.py) compares each utterance with the caller's
enrolled voice; this turns 16 kHz audio into the vector it compares.  CAM++
was trained on 80-bin Kaldi log-mel fbank (25 ms window, 10 ms shift, povey
window, no dither), mean-normalised over the utterance, so the features are
computed by kaldi-native-fbank, a C++ reimplementation of Kaldi's, rather than
approximated.  The graph is the one ``make setup`` exported
(fetch_campplus.py); cosine similarity of two vectors is their dot product.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from runtime.errors import ErrorCode, StageError
from runtime.models.voice_contract import LISTEN_RATE_HZ

MEL_BINS = 80
# Under ~0.2 s the conv stack has too few frames to pool over; shorter audio
# is padded by repetition (a word said twice sounds like the same voice).
MIN_SAMPLES = LISTEN_RATE_HZ // 5


def fbank(audio: np.ndarray) -> np.ndarray:
    """(frames, 80) Kaldi log-mel fbank of 16 kHz float audio, mean-normalised per bin."""
    import kaldi_native_fbank as knf

    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = LISTEN_RATE_HZ
    opts.frame_opts.dither = 0.0          # deterministic: the same audio, the same vector
    opts.mel_opts.num_bins = MEL_BINS
    f = knf.OnlineFbank(opts)
    f.accept_waveform(LISTEN_RATE_HZ, np.asarray(audio, dtype=np.float32))
    f.input_finished()
    feats = np.stack([f.get_frame(i) for i in range(f.num_frames_ready)]).astype(np.float32)
    return feats - feats.mean(axis=0, keepdims=True)


class SpeakerEmbedder:
    """One onnxruntime session of CAM++, made by the first ``embed``.

    Checked at once, loaded late: the listen stage makes one when a session
    first asks for the lock, on its loop, which every caller's audio goes
    through; loading there (~0.3 s of CPU) would hold all of them.  The first
    ``embed`` is an enrolment on the stage's niced thread (no verdict comes
    before a voice is enrolled), so the load runs there.  onnxruntime allows
    ``run`` from several threads at once (verdicts and enrolments have a
    thread each)."""

    def __init__(self, path: str | Path | None = None, threads: int = 1) -> None:
        from runtime.models.model_files import campplus_file

        self.path = Path(path) if path is not None else campplus_file()
        if not self.path.is_file():
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             f"listen: speaker embedding model {self.path} not found: run `make "
                             "setup` (or python -m runtime.models.listen.fetch_campplus)")
        self.threads = max(1, int(threads))
        self._session = None
        self._loading = threading.Lock()

    def _loaded(self):
        with self._loading:
            if self._session is None:
                import onnxruntime as ort

                so = ort.SessionOptions()
                so.intra_op_num_threads = self.threads
                so.inter_op_num_threads = 1
                self._session = ort.InferenceSession(str(self.path), so,
                                                     providers=["CPUExecutionProvider"])
            return self._session

    def embed(self, audio: np.ndarray) -> np.ndarray:
        """The unit-length 192-dim voice vector of 16 kHz mono float32 ``audio``."""
        x = np.asarray(audio, dtype=np.float32).reshape(-1)
        if x.size == 0:
            raise ValueError("speaker embedding of no audio")
        if x.size < MIN_SAMPLES:
            x = np.tile(x, -(-MIN_SAMPLES // x.size))
        feats = fbank(x)[None]
        session = self._loaded()
        vec = session.run(None, {session.get_inputs()[0].name: feats})[0][0].astype(np.float32)
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec
