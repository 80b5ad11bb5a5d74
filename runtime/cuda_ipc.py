"""CUDA IPC transport: a torch CUDA tensor crosses processes on one GPU as a handle.

torch's own sharing path pickles; here the handle's parts (bytes and ints) go
into the msgpack descriptor and the receiver rebuilds the tensor with
``torch.multiprocessing.reductions.rebuild_cuda_tensor``.  The sender keeps
the tensor alive until the receiver releases the lend (same release path as
shared memory, lend ids from ``LEND_BASE`` up), or until an abort reclaims it.

A stage that forwards a tensor it received this way cannot hand the handle
on: torch refuses to share storage that arrived over IPC.  ``export`` then
copies the tensor into a fresh one owned by the forwarding process and lends
that; the received tensor is released upstream as soon as the stage drops it.
"""

from __future__ import annotations

import itertools
from typing import Any

LEND_BASE = 1 << 40


class KeepAlive:
    """Sender-side references that keep exported CUDA storage valid."""

    def __init__(self) -> None:
        self._ids = itertools.count(LEND_BASE)
        self._held: dict[int, tuple[int, Any]] = {}

    def hold(self, request_id: int, tensor: Any) -> int:
        lid = next(self._ids)
        self._held[lid] = (request_id, tensor)
        return lid

    def release(self, lid: int) -> int:
        entry = self._held.pop(lid, None)
        if entry is None:
            return 0
        return int(entry[1].untyped_storage().nbytes())

    def reclaim(self, request_id: int) -> tuple[int, int]:
        lids = [lid for lid, (rid, _) in self._held.items() if rid == request_id]
        freed = sum(self.release(lid) for lid in lids)
        return len(lids), freed

    def __len__(self) -> int:
        return len(self._held)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def is_received_storage_error(exc: BaseException) -> bool:
    """torch's refusal to re-share IPC-received storage (its own words since 1.x)."""
    return isinstance(exc, RuntimeError) and "received from another process" in str(exc)


def share(tensor: Any) -> tuple[Any, tuple]:
    """(the tensor that is lent, its storage's IPC handle parts).

    The tensor itself when torch will share it; a fresh copy when it arrived
    over CUDA IPC (see the module doc).  The copy keeps shape and values;
    ``clone`` is ordered on the current stream, and the handle's event makes
    the receiver wait for it.
    """
    try:
        return tensor, tensor.untyped_storage()._share_cuda_()
    except RuntimeError as exc:
        if not is_received_storage_error(exc):
            raise
    fresh = tensor.clone()
    return fresh, fresh.untyped_storage()._share_cuda_()


def export(tensor: Any, request_id: int, keepalive: KeepAlive, owner: str = "") -> dict:
    """Descriptor for a CUDA tensor; the storage stays alive in ``keepalive``."""
    tensor, parts = share(tensor)
    (device, handle, size_bytes, offset_bytes, ref_handle, ref_offset,
     event_handle, event_sync) = parts
    lid = keepalive.hold(request_id, tensor)
    return {
        "tr": "cuda_ipc", "k": "pt", "own": owner, "lid": lid,
        "dt": _dtype_name(tensor.dtype), "sh": list(tensor.shape),
        "st": list(tensor.stride()), "so": int(tensor.storage_offset()),
        "dev": int(device), "h": bytes(handle), "sz": int(size_bytes), "off": int(offset_bytes),
        "rh": bytes(ref_handle), "ro": int(ref_offset),
        "eh": bytes(event_handle) if event_handle else b"", "es": bool(event_sync),
        "n": int(tensor.numel() * tensor.element_size()),
    }


def open_tensor(desc: dict) -> Any:
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    return rebuild_cuda_tensor(
        torch.Tensor, tuple(desc["sh"]), tuple(desc["st"]), desc["so"],
        torch.UntypedStorage, getattr(torch, desc["dt"]), desc["dev"], desc["h"],
        desc["sz"], desc["off"], False, desc["rh"], desc["ro"], desc["eh"] or None, desc["es"])

