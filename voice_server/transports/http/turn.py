"""One runtime request as the HTTP layer sees it: events in, abort on the way out.

Chat completions and speech both submit one request to the pipeline and then
wait for its first event before they send a status line, so that a request the
runtime rejects is a real HTTP error (:func:`first_ok_event`), not a 200
followed by nothing.  While waiting, the client's disconnect is polled
(``DISCONNECT_POLL_S``) and aborts the request (``pipeline.abort``); after the
first byte :class:`voice_server.transports.http.streaming.PipelineStream`
listens instead.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.requests import ClientDisconnect, Request

from .errors import runtime_error

log = logging.getLogger(__name__)

DISCONNECT_POLL_S = 0.25


class Turn:
    """One runtime request as the HTTP layer sees it: events in, abort on the way out."""

    def __init__(self, pipeline: Any, handle: Any) -> None:
        self.pipeline = pipeline
        self.handle = handle
        self.rid = handle.request_id
        self.finished = False

    async def next(self, timeout: float | None = None):
        ev = await self.handle.next_event(timeout)
        if ev.terminal:
            self.finished = True
        return ev

    def abort(self, reason: str) -> None:
        if not self.finished:
            self.finished = True
            log.info("request %s aborted: %s", self.rid, reason)
            self.pipeline.abort(self.rid, reason)


async def first_event(request: Request, turn: Turn):
    """Wait for the runtime's first event; abort if the client leaves meanwhile."""
    while True:
        try:
            return await turn.next(DISCONNECT_POLL_S)
        except (asyncio.TimeoutError, TimeoutError):
            if await request.is_disconnected():
                turn.abort("client_disconnected")
                raise ClientDisconnect() from None


async def first_ok_event(request: Request, turn: Turn):
    """The runtime's first event, or the HTTP error it means (before the first
    byte a failure is a status); a client that leaves aborts the turn."""
    try:
        first = await first_event(request, turn)
    except BaseException:
        turn.abort("client_disconnected")
        raise
    if first.kind in ("error", "cancelled"):
        raise runtime_error(first)
    return first


__all__ = ["Turn", "first_event", "first_ok_event", "DISCONNECT_POLL_S"]
