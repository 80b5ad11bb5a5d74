"""An enhancer's ONNX graph as an onnxruntime session on one thread.

A denoiser runs one stream's frames in order, and the listen stage's other
work (VAD, recognition, verdicts) needs the rest of the cores: one intra-op
thread, and a missing file is the operator's to fetch with ``make setup``.
"""

from __future__ import annotations

from pathlib import Path

from runtime.errors import ErrorCode, StageError


def enhancer_session(path: Path, fetch_module: str, *, spinning: bool = True):
    """``path``'s session (``StageError`` naming ``make setup`` and
    ``python -m fetch_module`` when it is missing); ``spinning`` False: its
    thread sleeps between operators instead of spinning on a core."""
    import onnxruntime as ort

    if not path.is_file():
        raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                         f"{path} not found: run `make setup` (or python -m {fetch_module})")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


__all__ = ["enhancer_session"]
