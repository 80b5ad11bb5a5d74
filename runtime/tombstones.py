"""Bounded memory of aborted request ids.

An abort can overtake its request, or land while a message for it is still in
a socket; every stage therefore remembers recent aborts so that late messages
are dropped.  The set is bounded in count and age: request ids are never
reused, so forgetting a very old id is safe, and a set that grew forever would
be a leak of its own.
"""

from __future__ import annotations

import time
from collections import OrderedDict


class Tombstones:
    def __init__(self, max_entries: int = 16384, ttl_s: float = 120.0) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._ids: OrderedDict[int, float] = OrderedDict()

    def add(self, request_id: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._ids[request_id] = now
        self._ids.move_to_end(request_id)
        self._trim(now)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def _trim(self, now: float) -> None:
        ids = self._ids
        while len(ids) > self.max_entries:
            ids.popitem(last=False)
        cutoff = now - self.ttl_s
        while ids:
            first = next(iter(ids.values()))
            if first >= cutoff:
                break
            ids.popitem(last=False)

    def expire(self, now: float | None = None) -> None:
        self._trim(time.monotonic() if now is None else now)

    def ids(self) -> list[int]:
        return list(self._ids)
