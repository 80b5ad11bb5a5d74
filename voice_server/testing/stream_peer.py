"""What the phone providers' test clients share (:class:`~.twilio_client.TwilioClient`,
:class:`~.phone_clients.PhoneClient`): the messages received, waiting for one
that matches, and closing - where a bad message from the server, kept by the
reader, fails the test."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Callable, Optional

from .events import NoMatch, next_match


class StreamPeer:
    """Subclasses set ``ws`` and ``_tasks``, append to ``msgs`` (and set
    ``new``), set ``closed`` when their reader ends and ``failure`` when the
    server sent something they could not read."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.msgs: list = []  # everything received, in order
        self.new = asyncio.Event()  # set on each arrival
        self.closed = False  # the server ended the stream
        self.failure: Optional[Exception] = None  # a bad message from the server
        self._tasks: list[asyncio.Task] = []

    def kind_of(self, msg) -> str:
        """How a received message is named in a timeout's report."""
        raise NotImplementedError

    async def wait(self, pred: Callable[[Any], bool], start: int = 0,
                   timeout: float = 30.0) -> tuple[int, Any]:
        """``(index, message)`` of the first message at ``index >= start`` that
        matches; AssertionError on timeout, on the stream's end or on a bad message."""
        try:
            return await next_match(self.msgs, self.new, pred, start, timeout,
                                    closed=lambda: self.closed)
        except NoMatch as e:
            self._raise_failure()
            if e.closed:
                raise AssertionError("stream closed while waiting") from None
            raise AssertionError(f"timeout; last: {[self.kind_of(m) for m in self.msgs[-8:]]}") \
                from None

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise AssertionError(f"bad message from the server: {self.failure!r}") \
                from self.failure


__all__ = ["StreamPeer"]
