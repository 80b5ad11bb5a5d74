"""Silero VAD (v5/v6 ONNX graph) driven directly through onnxruntime.

The ``silero_vad`` Python package imports torch at import time, which would
add hundreds of MB and seconds of start-up to a stage that only needs a 2 MB
ONNX graph; so we take just the model file from the wheel and keep the
recurrent state ourselves.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path

import numpy as np
import onnxruntime as ort

from runtime.models.voice_contract import LISTEN_RATE_HZ

FRAME_SAMPLES = 512          # the graph is trained on 32 ms windows at 16 kHz
CONTEXT_SAMPLES = 64         # v5+ graphs expect the previous window's tail prepended
FRAME_MS = FRAME_SAMPLES * 1000 / LISTEN_RATE_HZ


def model_path() -> Path:
    """Locate the ONNX file inside the installed wheel without importing the package."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = Path(loc) / "data" / "silero_vad.onnx"
            if p.is_file():
                return p
    if spec is None:
        from runtime.errors import ErrorCode, StageError

        raise StageError(ErrorCode.STAGE_UNAVAILABLE, "the silero VAD model ships in the silero-vad wheel, "
                         "which is not installed; fix: .venv/bin/pip install --no-deps 'silero-vad>=5.1,<7'")
    # Fallback: importlib.resources imports the package __init__, which pulls torch;
    # only reached when the wheel layout is unexpected.
    return Path(str(importlib.resources.files("silero_vad") / "data" / "silero_vad.onnx"))


def make_session(threads: int = 1) -> ort.InferenceSession:
    """One small sequential session: the graph is tiny, so extra threads only add sync cost."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(str(model_path()), sess_options=opts,
                                providers=["CPUExecutionProvider"])


class SileroVAD:
    """Speech probability for consecutive 512-sample frames of one audio stream.

    The graph is recurrent, so each stream needs its own instance (or a
    ``reset()`` between streams); a session may be shared between instances.
    """

    def __init__(self, session: ort.InferenceSession | None = None, threads: int = 1) -> None:
        self.session = session if session is not None else make_session(threads)
        self._sr = np.array(LISTEN_RATE_HZ, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Forget the stream: a fresh state avoids carrying one talker's history into the next."""
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)

    @staticmethod
    def probs(vads: "list[SileroVAD]", frames: np.ndarray) -> np.ndarray:
        """One frame for each of several streams in a single graph run.

        Why: per call the graph costs ~0.45 ms whatever the batch (on this
        machine; 8 streams take ~1.1 ms together), so a listen stage serving
        many calls spends most of its VAD time on call overhead unless the
        streams share runs.  Each stream keeps its own recurrent state and
        context; ``vads`` must be distinct streams on one session.
        """
        if len(vads) == 1:
            return np.array([vads[0].prob(frames[0])], dtype=np.float32)
        frames = np.asarray(frames, dtype=np.float32).reshape(len(vads), FRAME_SAMPLES)
        x = np.concatenate([np.stack([v._context for v in vads]), frames], axis=1)
        state = np.concatenate([v._state for v in vads], axis=1)
        out, state = vads[0].session.run(None, {"input": x, "state": state, "sr": vads[0]._sr})
        for i, v in enumerate(vads):
            v._state = state[:, i:i + 1, :].copy()
            v._context = frames[i, -CONTEXT_SAMPLES:].copy()
        return np.asarray(out, dtype=np.float32).reshape(-1)

    def prob(self, frame: np.ndarray) -> float:
        """Probability (0..1) that this 32 ms frame (float32 in [-1, 1]) is speech."""
        frame = np.asarray(frame, dtype=np.float32).reshape(-1)
        if frame.shape[0] != FRAME_SAMPLES:
            raise ValueError(f"SileroVAD expects {FRAME_SAMPLES} samples, got {frame.shape[0]}")
        x = np.concatenate([self._context, frame])[None, :]
        out, state = self.session.run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._state = state
        self._context = frame[-CONTEXT_SAMPLES:].copy()
        return float(out.reshape(-1)[0])
