"""msgpack encoding of control messages.

Never pickle: a socket must not be able to run code.  Small numpy arrays and
torch CPU tensors nested anywhere inside a payload ride inline as msgpack
extension types (dtype, shape, raw bytes), so a dict such as
``{"audio": int16 array, "text": "..."}`` crosses a process boundary intact.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np

_EXT_NDARRAY = 1
_EXT_TENSOR = 2


def _torch():
    import sys

    return sys.modules.get("torch")


def _pack_array(arr: np.ndarray) -> bytes:
    # Header: dtype length, dtype string, ndim, shape as little-endian u64s.
    arr = np.ascontiguousarray(arr)
    dt = arr.dtype.str.encode()
    return b"".join((bytes((len(dt),)), dt, bytes((arr.ndim,)),
                     struct.pack(f"<{arr.ndim}Q", *arr.shape), arr.tobytes()))


def _unpack_array(data: bytes) -> np.ndarray:
    n = data[0]
    dtype = np.dtype(data[1:1 + n].decode())
    ndim = data[1 + n]
    off = 2 + n
    shape = struct.unpack_from(f"<{ndim}Q", data, off)
    return np.frombuffer(data, dtype=dtype, offset=off + 8 * ndim).reshape(shape)


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError("object arrays cannot cross a process boundary")
        return msgpack.ExtType(_EXT_NDARRAY, _pack_array(obj))
    torch = _torch()
    if torch is not None and isinstance(obj, torch.Tensor):
        return msgpack.ExtType(_EXT_TENSOR, _pack_array(obj.detach().cpu().numpy()))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} across a process boundary")


def _ext_hook(code: int, data: bytes) -> Any:
    if code in (_EXT_NDARRAY, _EXT_TENSOR):
        arr = _unpack_array(data)
        if code == _EXT_TENSOR:
            import torch

            return torch.from_numpy(arr.copy())
        return arr
    return msgpack.ExtType(code, data)


def dumps(msg: Any) -> bytes:
    return msgpack.packb(msg, default=_default, use_bin_type=True)


def loads(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
