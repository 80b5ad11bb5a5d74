"""The socket between the server and its RTP process: msgpack messages both ways.

Each message is one msgpack array, ``[op, media_id, *args]`` (``media_id`` 0
for the link itself); a stream of them needs no framing of its own, since
msgpack's unpacker reads whole values off a byte stream.  Never pickle: the
two ends trust each other, but a socket is a socket.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Optional

import msgpack

log = logging.getLogger("voice_server.transports.sip")

Message = list  # [op, media_id, *args]


class MediaLink(asyncio.Protocol):
    """One end of the link: ``on_message`` for each message in, ``on_lost``
    once the other end is gone."""

    def __init__(self, on_message: Callable[[Message], None],
                 on_lost: Callable[[], None]) -> None:
        self._on_message = on_message
        self._on_lost = on_lost
        self._unpacker = msgpack.Unpacker(raw=False)
        self._transport: Optional[asyncio.Transport] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._unpacker.feed(data)
        for msg in self._unpacker:
            if not isinstance(msg, list) or len(msg) < 2:
                log.warning("RTP link: a message that is not [op, id, ...]: %r", msg)
                continue
            try:
                self._on_message(msg)
            except Exception:  # noqa: BLE001 - one bad message must not end the link
                log.exception("RTP link: %s failed", msg[0])

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._transport = None
        self._on_lost()

    @property
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def send(self, *msg: Any) -> None:
        """Queue one message (dropped once the link is closed)."""
        if self.open:
            self._transport.write(msgpack.packb(list(msg), use_bin_type=True))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


__all__ = ["MediaLink", "Message"]
