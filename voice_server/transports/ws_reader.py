"""The one receive loop of the server's WebSocket transports.

``/v1/realtime`` (:mod:`voice_server.transports.realtime_ws`) and the phone
bridges (:mod:`voice_server.transports.phone`) read their socket the same way: receive,
a disconnect ends the loop, a text frame goes to the transport's text handler, a
binary frame to its binary handler (which rejects it, except on Vonage's
binary audio).  Keeping
that loop in one place keeps the two from drifting apart - e.g. one of them
forgetting to route binary frames through the session's rate limit, or
letting a handler bug end the connection.

A handler that raises is logged and the loop goes on: the exception is a
server bug, not something the client did, and one bad message must not end
the session (the session core reports every client mistake itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from typing import Awaitable, Callable, Optional, Union

from starlette.websockets import WebSocket

log = logging.getLogger("voice_server.transports.ws_reader")

TextHandler = Callable[[str], Union[Awaitable[None], None]]
BytesHandler = Callable[[bytes], None]


async def read_websocket(ws: WebSocket, on_text: TextHandler, on_bytes: BytesHandler, *,
                         stop: Optional[Callable[[], bool]] = None,
                         label: Union[str, Callable[[], str]] = "websocket") -> None:
    """Feed ``ws``'s messages to ``on_text`` (sync or async) / ``on_bytes``
    until the client disconnects or, checked after each message, ``stop()``
    is true.  ``label`` (or a function returning it, for a name learnt later)
    names the connection in the log line of a handler that raised."""
    while True:
        msg = await ws.receive()
        t = msg["type"]
        if t == "websocket.disconnect":
            return
        if t != "websocket.receive":
            continue
        try:
            text = msg.get("text")
            if text is not None:
                r = on_text(text)
                if inspect.isawaitable(r):
                    await r
            elif msg.get("bytes") is not None:
                on_bytes(msg["bytes"])
        except Exception:  # noqa: BLE001 - one bad message must not end the session
            log.exception("%s: message handling failed", label() if callable(label) else label)
        if stop is not None and stop():
            return


async def until_first(*aws: Awaitable) -> None:
    """Run ``aws`` side by side until the first one ends (the client's reader,
    or the session's own end), then cancel and wait for the others - also when
    this call itself is cancelled."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
                with contextlib.suppress(BaseException):
                    await t


__all__ = ["read_websocket", "until_first"]
