"""Shared-memory segments, the owner's pool, and the reader's mapping cache.

Creating a segment per message costs page faults (~11 ms per 16 MB here), so
an owner keeps segments in size classes and lends them out again.  A lend has
an id; the reader sends the id back when it is done (release) and the owner
takes it back exactly once: a stale or duplicate release is ignored, which is
what makes "freed exactly once" hold even when an abort reclaims a lend whose
release is still on its way.

Segments live as files in /dev/shm opened directly (not through
multiprocessing.shared_memory, whose resource tracker unlinks segments it did
not create).  Names carry the pipeline's run token and the owner's tag so a
supervisor can remove everything a dead owner left.
"""

from __future__ import annotations

import itertools
from collections.abc import KeysView
import mmap
import os
from collections import OrderedDict
from dataclasses import dataclass, field

SHM_DIR = "/dev/shm"
MIN_CLASS = 1 << 16


def size_class(nbytes: int) -> int:
    size = MIN_CLASS
    while size < nbytes:
        size <<= 1
    return size


class Segment:
    """One named /dev/shm file mapped into this process."""

    def __init__(self, name: str, size: int, create: bool) -> None:
        self.name = name
        self.size = size
        path = os.path.join(SHM_DIR, name)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            else:
                self.size = size = os.fstat(fd).st_size
            self.buf = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    def unlink(self) -> None:
        try:
            os.unlink(os.path.join(SHM_DIR, self.name))
        except FileNotFoundError:
            pass

    def close(self) -> bool:
        """Unmap; False while numpy views still point into it."""
        try:
            self.buf.close()
            return True
        except BufferError:
            return False


@dataclass
class Lend:
    segment: Segment
    lend_id: int
    request_id: int
    nbytes: int


@dataclass
class PoolStats:
    segments: int = 0
    segment_bytes: int = 0
    lent: int = 0
    lent_bytes: int = 0
    reclaimed: int = 0
    stale_releases: int = 0
    by_request: dict = field(default_factory=dict)


class ShmPool:
    """Segments owned by one process, lent to readers and taken back."""

    def __init__(self, prefix: str, max_lent_bytes: int = 1 << 30,
                 max_cached_bytes: int = 512 << 20) -> None:
        self.prefix = prefix
        self.max_lent_bytes = max_lent_bytes
        self.max_cached_bytes = max_cached_bytes
        self._names = itertools.count()
        self._lend_ids = itertools.count(1)
        self._free: dict[int, list[Segment]] = {}
        self._lent: dict[int, Lend] = {}
        self._by_request: dict[int, set[int]] = {}
        self._cached_bytes = 0
        self.lent_bytes = 0
        self.reclaimed = 0
        self.stale_releases = 0

    def has_credit(self, nbytes: int) -> bool:
        return self.lent_bytes + nbytes <= self.max_lent_bytes or not self._lent

    def lend(self, nbytes: int, request_id: int) -> Lend | None:
        """A segment of at least nbytes, or None when the credit is spent."""
        if not self.has_credit(nbytes):
            return None
        cls = size_class(nbytes)
        free = self._free.get(cls)
        if free:
            seg = free.pop()
            self._cached_bytes -= seg.size
        else:
            seg = Segment(f"{self.prefix}-{next(self._names)}", cls, create=True)
        lend = Lend(seg, next(self._lend_ids), request_id, nbytes)
        self._lent[lend.lend_id] = lend
        self._by_request.setdefault(request_id, set()).add(lend.lend_id)
        self.lent_bytes += nbytes
        return lend

    def release(self, lend_id: int) -> int:
        """Take a lend back; returns the bytes freed (0 for a stale id)."""
        lend = self._lent.pop(lend_id, None)
        if lend is None:
            self.stale_releases += 1
            return 0
        ids = self._by_request.get(lend.request_id)
        if ids is not None:
            ids.discard(lend_id)
            if not ids:
                del self._by_request[lend.request_id]
        self.lent_bytes -= lend.nbytes
        self._give_back(lend.segment)
        return lend.nbytes

    def reclaim(self, request_id: int) -> tuple[int, int]:
        """Abort path: take back every lend of a request.  (count, bytes)."""
        ids = self._by_request.pop(request_id, ())
        freed = 0
        n = 0
        for lend_id in list(ids):
            lend = self._lent.pop(lend_id, None)
            if lend is not None:
                self.lent_bytes -= lend.nbytes
                freed += lend.nbytes
                n += 1
                self._give_back(lend.segment)
        self.reclaimed += n
        return n, freed

    def lent_request_ids(self) -> KeysView[int]:
        return self._by_request.keys()

    def _give_back(self, seg: Segment) -> None:
        if self._cached_bytes + seg.size > self.max_cached_bytes:
            seg.unlink()
            seg.close()
            return
        self._free.setdefault(seg.size, []).append(seg)
        self._cached_bytes += seg.size

    def stats(self) -> PoolStats:
        segs = sum(len(v) for v in self._free.values()) + len(self._lent)
        return PoolStats(segs, self._cached_bytes + sum(l.segment.size for l in self._lent.values()),
                         len(self._lent), self.lent_bytes, self.reclaimed, self.stale_releases,
                         {k: len(v) for k, v in self._by_request.items()})

    def close(self) -> None:
        segs = [l.segment for l in self._lent.values()]
        for free in self._free.values():
            segs.extend(free)
        for seg in segs:
            seg.unlink()
            seg.close()
        self._free.clear()
        self._lent.clear()
        self._by_request.clear()
        self.lent_bytes = 0
        self._cached_bytes = 0


class MappingCache:
    """Readers map an owner's segment once and keep the mapping (LRU-bounded)."""

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._maps: OrderedDict[str, Segment] = OrderedDict()
        self._closing: list[Segment] = []

    def get(self, name: str) -> Segment:
        seg = self._maps.get(name)
        if seg is not None:
            self._maps.move_to_end(name)
            return seg
        seg = Segment(name, 0, create=False)
        self._maps[name] = seg
        while len(self._maps) > self.max_entries:
            _, old = self._maps.popitem(last=False)
            if not old.close():
                self._closing.append(old)
        if self._closing:
            self._closing = [s for s in self._closing if not s.close()]
        return seg

    def forget(self, name: str) -> None:
        seg = self._maps.pop(name, None)
        if seg is not None and not seg.close():
            self._closing.append(seg)

    def close(self) -> None:
        for seg in list(self._maps.values()) + self._closing:
            seg.close()
        self._maps.clear()
        self._closing.clear()


def remove_segments(prefix: str) -> int:
    """Unlink every /dev/shm file whose name starts with prefix."""
    n = 0
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                n += 1
            except FileNotFoundError:
                pass
    return n


def list_segments(prefix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []
