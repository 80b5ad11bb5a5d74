"""Request ids, and the replica each one reaches.

Every process routes a request to replica ``request_id % replicas`` of each
group on its route, so no routing table travels with a request.  That spreads
unrelated requests evenly, but a conversation's turns are several requests
(the words prefilled while the caller speaks, the prepared reply, the spoken
reply, the ``forget`` when the call ends), and what the think stage keeps of a
conversation (its KV cells) lives in one replica: turns that land on another
one decode the whole history again, and a ``forget`` sent elsewhere leaves the
cells behind.

So a request may name an ``affinity`` (a session id).  Its id is then the
next one congruent to that key's residue modulo the least common multiple of
all the groups' replica counts, which puts it on the same replica of every
group as the key's earlier requests, with nothing new on the wire.  A new key
takes the next residue in turn, so conversations spread like requests do.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Iterable

# Keys remembered (least recently used dropped first): far more than the
# sessions one server holds; a forgotten key only starts over on a new residue.
MAX_KEYS = 65536


class RequestIds:
    """Unique, increasing request ids; equal affinities share replicas."""

    def __init__(self, replica_counts: Iterable[int], start: int | None = None,
                 max_keys: int = MAX_KEYS) -> None:
        self.period = math.lcm(1, *replica_counts)
        self._next = time.time_ns() // 1000 if start is None else int(start)
        self._residues: OrderedDict[str, int] = OrderedDict()
        self._turn = 0
        self.max_keys = max_keys

    def next(self, affinity: str | None = None) -> int:
        rid = self._next
        if affinity is not None and self.period > 1:
            residue = self._residues.get(affinity)
            if residue is None:
                residue = self._turn
                self._turn = (self._turn + 1) % self.period
                if len(self._residues) >= self.max_keys:
                    self._residues.popitem(last=False)
            self._residues[affinity] = residue
            self._residues.move_to_end(affinity)
            rid += (residue - rid) % self.period
        self._next = rid + 1
        return rid


__all__ = ["MAX_KEYS", "RequestIds"]
