"""Smart Turn v3.2: does the speaker sound finished?

A pause alone is a poor sign that someone has finished speaking: people stop
mid-sentence to think ("I would like to order a ...") and a fixed silence
window either cuts them off or makes every reply late.  Smart Turn (Daily,
BSD-2-Clause) is a small Whisper-encoder classifier trained to hear, from the
words and the intonation of the last 8 seconds, whether a turn is complete, so
the listen stage can answer quickly after a finished sentence and keep
listening through a hesitation.

The graph is taken out of the pipecat-ai wheel by ``make setup``
(:mod:`runtime.models.listen.fetch_smart_turn`); its input is Whisper's log-mel
features of exactly 8 s of 16 kHz audio, and it ends in a sigmoid, so its
output already is the probability that the turn is complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from runtime.errors import ErrorCode, StageError
from runtime.models.listen.log_mel import HOP, log_mel
from runtime.models.model_files import smart_turn_onnx
from runtime.models.voice_contract import LISTEN_RATE_HZ

WINDOW_S = 8
WINDOW_SAMPLES = WINDOW_S * LISTEN_RATE_HZ
THRESHOLD = 0.5                 # the model's own cut: above it, the turn is complete
_VARIANCE_EPS = 1e-7            # the model was trained on unit-variance waveforms


def last_window(audio: np.ndarray) -> np.ndarray:
    """The last 8 s of the turn, zeros in front when it is shorter.

    The model was trained on turns padded on the left, so the end of speech
    always sits at the right edge of its window, where it looks for it.
    """
    x = np.asarray(audio, dtype=np.float32)
    if x.size >= WINDOW_SAMPLES:
        return x[-WINDOW_SAMPLES:]
    return np.concatenate([np.zeros(WINDOW_SAMPLES - x.size, np.float32), x])


def features(windows: np.ndarray) -> np.ndarray:
    """(batch, 80, 800) model input from (batch, WINDOW_SAMPLES) windows.

    Each window is scaled to zero mean and unit variance first, as in the
    model's training, so loud and quiet callers look the same to it.
    """
    w = windows.astype(np.float64)
    w = (w - w.mean(axis=1, keepdims=True)) / np.sqrt(w.var(axis=1, keepdims=True) + _VARIANCE_EPS)
    return log_mel(w)


def _checked(audio: np.ndarray, index: int) -> np.ndarray:
    if not isinstance(audio, np.ndarray):
        raise TypeError(f"audio {index}: expected a numpy array, got {type(audio).__name__}")
    if audio.ndim != 1:
        raise ValueError(f"audio {index}: expected mono samples (1-D), got shape {audio.shape}")
    if audio.size < HOP:
        raise ValueError(f"audio {index}: {audio.size} samples is under 10 ms; "
                         "there is no turn to judge yet")
    if not np.issubdtype(audio.dtype, np.floating):
        raise TypeError(f"audio {index}: expected float samples in [-1, 1], got {audio.dtype} "
                        "(divide int16 PCM by 32768)")
    if not np.isfinite(audio).all():
        raise ValueError(f"audio {index}: contains NaN or infinite samples")
    return audio


class SmartTurn:
    """Probability that a turn is complete, for one turn or a batch of them.

    One ONNX Runtime session, sequential, with ``threads`` intra-op threads:
    a call is ~100 ms of one core, and the listen stage runs it beside other
    callers' work, so by default it takes one core rather than all of them.
    ``run`` on an ONNX Runtime session is thread-safe, so one instance may be
    shared by the threads of a stage.
    """

    def __init__(self, model_path: str | None = None, threads: int = 1) -> None:
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        path = Path(model_path) if model_path else smart_turn_onnx()
        if not path.is_file():
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             f"Smart Turn model not found at {path}; fix: make setup")
        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(str(path), sess_options=options,
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:    # onnxruntime raises its own exception types
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             f"Smart Turn model at {path} does not load ({exc}); "
                             "fix: delete it and run make setup") from None
        self.path = str(path)
        self.threads = threads

    def probability(self, audio: np.ndarray) -> float:
        """Probability that the turn in ``audio`` (16 kHz float32 mono, the turn so far) is complete."""
        return self.probabilities([audio])[0]

    def probabilities(self, audios: list[np.ndarray]) -> list[float]:
        """One probability per turn, from one run of the graph.

        Several callers pausing at the same moment cost one batched run
        instead of one run each.  Only the last 8 s of each turn is used.
        """
        if not audios:
            return []
        windows = np.stack([last_window(_checked(a, i)) for i, a in enumerate(audios)])
        (out,) = self._session.run(["logits"], {"input_features": features(windows)})
        return [float(p) for p in out[:, 0]]
