"""A reply generated before its turn is committed, held until it is wanted.

Preemptive generation: when the listen stage has the words of a turn that looks
over (``turn_likely_over``) the session asks for a ``PrepareReply``; this
object submits think -> speak at once and keeps every event it yields in
memory, sending nothing to the client.  When the turn is committed and the
session starts a response whose request is the same (same messages,
instructions, token limit, route), the runner adopts it: the held events are
replayed in order and the rest stream through as usual, so the reply starts
up to a silence window sooner.  If the speaker goes on, or the committed
request differs, it is dropped through the distributed abort (no event reaches
the client) and its think tokens are counted as wasted.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

from runtime.models.voice_contract import THINK


def request_key(payload: dict, route: list[str], params: dict | None = None) -> str:
    """What must match for a prepared reply to stand in for a started one
    (``params``: the speak stage's voice and pace, for a spoken reply)."""
    return json.dumps([payload, route, params or {}], sort_keys=True, default=str)


class PreparedReply:
    """One held request: its runtime handle's events, buffered for a later reader."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.events: list[Any] = []
        self.request_id: int | None = None
        self.submitted = asyncio.Event()     # set once the submit returned (or failed)
        self.error: BaseException | None = None
        self.adopted = False
        self.think_chunks = 0
        self._new = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def run(self, submit) -> None:
        """Submit, then hold every event until the request ends (the caller's task)."""
        try:
            h = await submit()
        except BaseException as exc:  # noqa: BLE001 - an adopter sees it; a dropped one is moot
            self.error = exc
            self.submitted.set()
            return
        self.request_id = h.request_id
        self.submitted.set()
        try:
            async for ev in h:
                if ev.kind == "chunk" and ev.stage == THINK:
                    self.think_chunks += 1
                self.events.append(ev)
                self._new.set()
        finally:
            self._new.set()      # a reader waiting for more learns that there is no more

    async def replay(self) -> AsyncIterator[Any]:
        """Every event, held ones first, until the terminal one (like iterating the handle)."""
        i = 0
        while True:
            while i < len(self.events):
                ev = self.events[i]
                i += 1
                yield ev
                if ev.kind != "chunk":
                    return
            if self.task is not None and self.task.done():
                return
            self._new.clear()
            await self._new.wait()
