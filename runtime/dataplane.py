"""Payloads travel by descriptor; the transport is chosen per edge, never by stage code.

``DataPlane.pack`` turns a payload into a msgpack-able descriptor (plus, for
the ``frame`` transport, one extra ZMQ frame); ``DataPlane.unpack`` turns it
back.  Transports:

* ``inline``   small payloads inside the control message (always used below
  ``inline_max`` bytes, and for everything that is not an array)
* ``shm``      a segment lent from the sender's :class:`ShmPool`; the reader
  gets a zero-copy numpy view and releases the lend when the view dies
* ``frame``    the raw bytes as a separate zero-copy ZMQ frame (tcp:// edges
  between hosts, where shared memory cannot reach)
* ``cuda_ipc`` a CUDA IPC handle for a torch CUDA tensor (one GPU, two processes)
* ``local``    fused stages hand the object over by reference; never packed.

Buffer ownership: each received shm payload is a :class:`Lease`.  Exactly one
party returns it: the reader when its view is garbage-collected, or nobody
when the reader forwards the very same array downstream (the lease travels on
with the descriptor), or the owner's abort path (``ShmPool.reclaim``), after
which the reader's late release is ignored as stale.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime import cuda_ipc
from runtime.shm import MappingCache, ShmPool

KIND_NDARRAY = "nd"
KIND_TENSOR = "pt"
KIND_BYTES = "by"

TRANSPORTS = ("inline", "shm", "frame", "cuda_ipc", "local")


@dataclass
class Lease:
    """A reader's hold on an owner's segment."""

    owner: str
    segment: str
    lend_id: int
    nbytes: int
    forwarded: bool = False
    released: bool = False


class DataPlane:
    """Per-process packing/unpacking state: the pool it owns and the maps it reads."""

    def __init__(self, owner_endpoint: str, pool: ShmPool | None, inline_max: int = 64 << 10) -> None:
        self.owner_endpoint = owner_endpoint
        self.pool = pool
        self.inline_max = inline_max
        self.maps = MappingCache()
        # (owner endpoint, lend id) pairs whose views died; drained by the I/O loop.
        self.pending_releases: deque[tuple[str, int]] = deque()
        self._leases: dict[int, Lease] = {}  # id(array) -> lease, while the array lives
        self._lock = threading.Lock()
        self.on_release_ready = None  # optional callback (coordinator wakes its loop)
        self.cuda_keepalive = cuda_ipc.KeepAlive()

    # ---- sending -------------------------------------------------------------------
    def pack(self, payload: Any, request_id: int, transport: str) -> tuple[Any, list]:
        """Return (descriptor, extra_frames).  None means: no credit, retry later."""
        torch_mod = _torch()
        if torch_mod is not None and isinstance(payload, torch_mod.Tensor):
            if payload.is_cuda:
                if transport == "cuda_ipc":
                    return cuda_ipc.export(payload, request_id, self.cuda_keepalive, self.owner_endpoint), []
                payload = payload.detach().cpu()
            arr = payload.detach().numpy()
            kind = KIND_TENSOR
        elif isinstance(payload, np.ndarray) and not payload.dtype.hasobject:
            arr = payload
            kind = KIND_NDARRAY
        elif isinstance(payload, (bytes, bytearray, memoryview)) and len(payload) > self.inline_max:
            arr = np.frombuffer(payload, dtype=np.uint8)
            kind = KIND_BYTES
        else:
            return {"tr": "inline", "v": payload}, []

        if arr.nbytes <= self.inline_max:
            return {"tr": "inline", "v": payload if kind != KIND_BYTES else bytes(payload)}, []
        head = {"k": kind, "dt": arr.dtype.str, "sh": list(arr.shape), "n": int(arr.nbytes)}
        if transport == "shm":
            lease = self._leases.get(id(arr))
            if lease is not None and lease.segment and not lease.released and not lease.forwarded:
                # The very array we received: hand the lease on, no copy.
                lease.forwarded = True
                head.update(tr="shm", seg=lease.segment, lid=lease.lend_id, own=lease.owner)
                return head, []
        if transport == "shm" and self.pool is not None:
            lend = self.pool.lend(arr.nbytes, request_id)
            if lend is None:
                return None, []
            dst = np.ndarray(arr.shape, dtype=arr.dtype, buffer=lend.segment.buf)
            np.copyto(dst, arr, casting="no")
            del dst
            head.update(tr="shm", seg=lend.segment.name, lid=lend.lend_id, own=self.owner_endpoint)
            return head, []
        head["tr"] = "frame"
        return head, [np.ascontiguousarray(arr)]

    # ---- receiving -----------------------------------------------------------------
    def unpack(self, desc: dict, frames: list) -> Any:
        try:
            return self._unpack(desc, frames)
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"malformed payload descriptor: {type(exc).__name__}: {exc}") from None

    def _unpack(self, desc: dict, frames: list) -> Any:
        tr = desc["tr"]
        if tr not in TRANSPORTS or tr == "local":
            raise ValueError(f"unknown transport {tr!r}")
        if tr == "inline":
            return desc["v"]
        if tr == "cuda_ipc":
            tensor = cuda_ipc.open_tensor(desc)
            self._track(tensor, Lease(desc["own"], "", desc["lid"], desc["n"]))
            return tensor
        dtype = np.dtype(desc["dt"])
        shape = tuple(desc["sh"])
        if tr == "frame":
            frame = frames.pop(0)
            buf = frame.buffer if hasattr(frame, "buffer") else frame
            arr = np.frombuffer(buf, dtype=dtype).reshape(shape)
        elif tr == "shm":
            seg = self.maps.get(desc["seg"])
            arr = np.ndarray(shape, dtype=dtype, buffer=seg.buf)
            self._track(arr, Lease(desc["own"], desc["seg"], desc["lid"], desc["n"]))
        else:
            raise ValueError(f"unknown transport {tr!r}")
        return self._wrap(arr, desc["k"])

    def _track(self, obj: Any, lease: Lease) -> None:
        key = id(obj)
        self._leases[key] = lease
        weakref.finalize(obj, self._view_died, key, lease)

    @staticmethod
    def _wrap(arr: np.ndarray, kind: str) -> Any:
        if kind == KIND_TENSOR:
            import torch

            return torch.from_numpy(arr) if arr.flags.writeable else torch.from_numpy(arr.copy())
        if kind == KIND_BYTES:
            return arr.tobytes()
        return arr

    def _view_died(self, key: int, lease: Lease) -> None:
        with self._lock:
            if self._leases.get(key) is lease:
                del self._leases[key]
        if lease.forwarded or lease.released:
            return
        lease.released = True
        self.pending_releases.append((lease.owner, lease.lend_id))
        cb = self.on_release_ready
        if cb is not None:
            cb()

    def discard(self, desc: dict) -> None:
        """Release the buffer behind a descriptor that will never be unpacked
        (a late message for an aborted request)."""
        if desc.get("tr") in ("shm", "cuda_ipc"):
            self.pending_releases.append((desc["own"], desc["lid"]))

    def take_releases(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        q = self.pending_releases
        while q:
            owner, lid = q.popleft()
            out.setdefault(owner, []).append(lid)
        return out

    # ---- owner side ----------------------------------------------------------------
    def release_lends(self, lend_ids: list[int]) -> int:
        freed = 0
        for lid in lend_ids:
            if lid >= cuda_ipc.LEND_BASE:
                freed += self.cuda_keepalive.release(lid)
            elif self.pool is not None:
                freed += self.pool.release(lid)
        return freed

    def close(self) -> None:
        self.maps.close()
        if self.pool is not None:
            self.pool.close()


def _torch():
    import sys

    return sys.modules.get("torch")

