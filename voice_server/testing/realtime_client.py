"""A minimal Realtime client over ``websockets``: collects every server event
and lets a test wait for one that matches (:class:`RTClient`)."""

from __future__ import annotations

import asyncio
import json
import time

import websockets

from . import TEST_API_KEY
from .events import NoMatch, next_match


class RTClient:
    def __init__(self, ws) -> None:
        self.ws = ws
        self.events: list[dict] = []
        self.times: list[float] = []
        self._new = asyncio.Event()
        self._task = asyncio.ensure_future(self._read())
        self.closed: BaseException | None = None

    @classmethod
    async def connect(cls, url: str, key: str | None = TEST_API_KEY, **kw) -> "RTClient":
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        ws = await websockets.connect(url + "?model=test", additional_headers=headers,
                                      max_size=None, **kw)
        return cls(ws)

    async def _read(self) -> None:
        try:
            async for m in self.ws:
                self.events.append(json.loads(m))
                self.times.append(time.monotonic())
                self._new.set()
        except Exception as exc:  # noqa: BLE001
            self.closed = exc
        finally:
            self.closed = self.closed or ConnectionError("closed")
            self._new.set()

    async def send(self, ev: dict | str) -> None:
        await self.ws.send(ev if isinstance(ev, str) else json.dumps(ev))

    async def wait(self, type_: str, pred=None, timeout: float = 20.0, start: int = 0) -> dict:
        """First event (index >= start) of this type matching pred."""
        try:
            return (await next_match(
                self.events, self._new,
                lambda ev: ev["type"] == type_ and (pred is None or pred(ev)), start, timeout,
                closed=lambda: self.closed is not None))[1]
        except NoMatch as e:
            what = "connection closed" if e.closed else "timeout"
            raise AssertionError(f"{what} waiting for {type_}; last events: "
                                 f"{[e['type'] for e in self.events[-15:]]}") from None

    def index(self, ev: dict) -> int:
        return next(i for i, e in enumerate(self.events) if e is ev)

    def of_type(self, type_: str, start: int = 0) -> list[dict]:
        return [e for e in self.events[start:] if e["type"] == type_]

    def types(self, start: int = 0) -> list[str]:
        return [e["type"] for e in self.events[start:]]

    async def close(self) -> None:
        await self.ws.close()
        self._task.cancel()
        try:
            await self._task
        except BaseException:  # noqa: BLE001
            pass
