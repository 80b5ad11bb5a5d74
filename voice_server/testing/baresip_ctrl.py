"""A client of baresip's ``ctrl_tcp`` module: JSON commands and events in
netstrings over one TCP connection.

The wire, as baresip's ``ctrl_tcp`` speaks it: every message is a netstring
(``<length>:<bytes>,``, the length in ASCII decimal) holding one JSON object.

* a command we send: ``{"command": "dial", "params": "sip:...", "token": "t1"}``
  (a command is what baresip's ``/help`` lists; ``params`` its argument);
* its response: ``{"response": true, "ok": true, "data": "...", "token": "t1"}``
  (``ok`` false when the command failed; ``data`` is the command's text output);
* an event, whenever one happens: ``{"event": true, "type": "CALL_ESTABLISHED",
  "class": "call", "peeruri": "...", "id": "...", "param": "..."}``.

:class:`NetstringReader` is the socket-free framing; :class:`BaresipControl`
the asyncio client that keeps every event and matches responses by token::

    ctl = await BaresipControl.connect(port)
    await ctl.command("dial", "sip:agent@127.0.0.1:5060")
    ev = await ctl.event("CALL_ESTABLISHED", timeout=20)
    await ctl.command("hangup")
    await ctl.close()
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Callable, Optional

MAX_MESSAGE = 1 << 20  # a longer netstring is a broken stream, not a message
MAX_DIGITS = len(str(MAX_MESSAGE))


class NetstringError(ValueError):
    """The stream is not netstrings (a bad length or a missing trailing comma)."""


class CommandFailed(RuntimeError):
    """baresip answered a command with ``ok: false``."""


class NetstringReader:
    """Bytes in (:meth:`feed`), whole payloads out; keeps a partial message."""

    def __init__(self) -> None:
        self.buffer = bytearray()  # received, not yet a whole netstring

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads completed by ``data``, in order; NetstringError when
        the stream is broken (the caller should drop the connection)."""
        self.buffer += data
        out = []
        while True:
            colon = self.buffer.find(b":", 0, MAX_DIGITS + 1)
            if colon < 0:   # the length is still coming, or it is not a length at all
                if self.buffer and (len(self.buffer) > MAX_DIGITS
                                    or not bytes(self.buffer).isdigit()):
                    raise NetstringError(f"no length before {bytes(self.buffer[:16])!r}")
                return out
            head = bytes(self.buffer[:colon])
            if not head.isdigit() or (len(head) > 1 and head.startswith(b"0")):
                raise NetstringError(f"bad length {head!r}")
            n = int(head)
            if n > MAX_MESSAGE:
                raise NetstringError(f"a {n}-byte message")
            end = colon + 1 + n
            if len(self.buffer) <= end:
                return out
            if self.buffer[end:end + 1] != b",":
                raise NetstringError("a netstring without its trailing comma")
            out.append(bytes(self.buffer[colon + 1:end]))
            del self.buffer[:end + 1]


def netstring(payload: bytes) -> bytes:
    return str(len(payload)).encode() + b":" + payload + b","


class BaresipControl(asyncio.Protocol):
    """One ``ctrl_tcp`` connection (module docstring)."""

    def __init__(self) -> None:
        self.transport: Optional[asyncio.Transport] = None
        self.reader = NetstringReader()
        self.events: list[dict] = []  # every event received, in order
        self.responses: dict[str, asyncio.Future] = {}  # token -> the command's response
        self.closed = asyncio.get_running_loop().create_future()  # the connection's end
        self._changed = asyncio.Event()  # set whenever an event arrives
        self._tokens = itertools.count(1)

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> "BaresipControl":
        loop = asyncio.get_running_loop()
        _, ctl = await loop.create_connection(cls, host, port)
        return ctl

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            payloads = self.reader.feed(data)
        except NetstringError as exc:
            self._fail(exc)
            return
        for payload in payloads:
            try:
                msg = json.loads(payload)
            except ValueError:
                continue  # not JSON: nothing of ours, the stream is still framed
            if not isinstance(msg, dict):
                continue
            if msg.get("event"):
                self.events.append(msg)
                self._changed.set()
            elif msg.get("response"):
                fut = self.responses.pop(str(msg.get("token")), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._fail(exc or ConnectionError("baresip closed the control connection"))

    def _fail(self, exc: BaseException) -> None:
        if self.transport is not None:
            self.transport.close()
        for fut in self.responses.values():
            if not fut.done():
                fut.set_exception(exc)
        self.responses.clear()
        if not self.closed.done():
            self.closed.set_result(exc)
        self._changed.set()

    # ------------------------------------------------------------ commands
    async def command(self, command: str, params: str = "", timeout: float = 10.0) -> str:
        """Run one command; its text output.  CommandFailed when baresip says
        it failed, ConnectionError when the connection is gone."""
        if self.closed.done():
            raise ConnectionError(f"the control connection is closed ({self.closed.result()})")
        token = f"t{next(self._tokens)}"
        fut = asyncio.get_running_loop().create_future()
        self.responses[token] = fut
        body = {"command": command, "params": params, "token": token}
        self.transport.write(netstring(json.dumps(body).encode()))
        msg = await asyncio.wait_for(fut, timeout)
        if not msg.get("ok"):
            raise CommandFailed(f"{command} {params}: {msg.get('data')!r}")
        return str(msg.get("data") or "")

    # ------------------------------------------------------------ events
    async def event(self, type_: str, timeout: float = 30.0, since: int = 0,
                    where: Callable[[dict], bool] = lambda ev: True) -> dict:
        """The first event of ``type_`` (among those from index ``since`` on)
        that ``where`` accepts, waiting for it up to ``timeout`` seconds;
        TimeoutError naming the events seen otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events[since:]:
                if ev.get("type") == type_ and where(ev):
                    return ev
            if self.closed.done():
                raise ConnectionError(f"no {type_} event before the control connection closed")
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [e.get("type") for e in self.events[since:]]
                raise TimeoutError(f"no {type_} event within {timeout} s (seen: {seen})")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def mark(self) -> int:
        """The index the next event will have (``since`` for :meth:`event`)."""
        return len(self.events)

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        await asyncio.wait([self.closed], timeout=2)


__all__ = ["BaresipControl", "NetstringReader", "NetstringError", "CommandFailed", "netstring"]
