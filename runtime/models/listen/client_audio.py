"""What a client may send as listen audio, brought to mono float32 at the edge.

Clients differ in sample type and channel layout; ``to_mono_float32`` is the
one place a chunk's payload is converted (or refused with a ``BAD_INPUT``
that says why), so the stream behind it only ever sees mono float32 samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.errors import ErrorCode, StageError

MAX_CHANNELS = 8


def to_mono_float32(payload: Any) -> np.ndarray:
    """Bring whatever a client sent to mono float32 in [-1, 1], or say clearly why not.

    Clients differ (browsers send float32, telephony int16, numpy users
    float64, some stereo); converting the unambiguous cases is friendlier than
    rejecting them, while integer widths we would have to guess the scale of
    are refused.
    """
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raw = bytes(payload)
        if len(raw) % 2:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: byte payload must be int16 PCM (even length), got {len(raw)} bytes")
        payload = np.frombuffer(raw, dtype="<i2")
    elif not isinstance(payload, np.ndarray):
        if isinstance(payload, (list, tuple)):
            try:
                payload = np.asarray(payload, dtype=np.float32)
            except (TypeError, ValueError):
                raise StageError(ErrorCode.BAD_INPUT, "listen: list payload is not numeric audio") from None
        else:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: expected a numpy int16/float32 array, got {type(payload).__name__}")
    a = payload
    if a.size == 0:
        return np.zeros(0, dtype=np.float32)
    if a.ndim == 2:
        rows, cols = a.shape
        if cols <= MAX_CHANNELS and (rows >= cols or rows == 0):
            a = a.mean(axis=1) if cols > 1 else a[:, 0]        # [frames, channels]
        elif rows <= MAX_CHANNELS:
            a = a.mean(axis=0) if rows > 1 else a[0]           # [channels, frames]
        else:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: cannot tell channels from frames in shape {payload.shape}")
    elif a.ndim > 2:
        raise StageError(ErrorCode.BAD_INPUT, f"listen: audio must be 1-D mono, got shape {a.shape}")
    a = a.reshape(-1)
    kind = payload.dtype
    if kind == np.int16:
        out = a.astype(np.float32) / 32768.0
    elif kind in (np.float32, np.float64, np.float16):
        out = a.astype(np.float32)
        if not np.isfinite(out).all():
            out = np.nan_to_num(out, nan=0.0, posinf=1.0, neginf=-1.0)
        np.clip(out, -1.0, 1.0, out=out)
    else:
        raise StageError(ErrorCode.BAD_INPUT,
                         f"listen: unsupported sample type {kind}; send int16 PCM or float32 in [-1, 1]")
    return np.ascontiguousarray(out, dtype=np.float32)
