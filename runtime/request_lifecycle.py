"""The coordinator's view of one request, and the handle its submitter holds.

PENDING -> RUNNING -> (COMPLETED | CANCELLED | FAILED).  The record is what
status endpoints and metrics read; the handle is an async stream of output
events that always ends with exactly one terminal event, so a caller can
tell completed from cancelled from failed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, AsyncIterator, Awaitable, Protocol

from runtime.errors import ErrorInfo



class RequestOwner(Protocol):
    """What a handle needs of the coordinator that made it; a protocol, so this
    module does not import the coordinator that imports it."""

    async def send_input(self, rec: "RequestRecord", payload: Any, end: bool, has_payload: bool = True,
                         params: dict | None = None) -> None: ...

    def abort(self, rid: int, reason: str = "cancelled") -> Awaitable[Any]: ...


class State(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (State.COMPLETED, State.CANCELLED, State.FAILED)


@dataclass
class OutputEvent:
    """kind: 'chunk' (payload from ``stage``) or a terminal 'done' | 'cancelled' | 'error'."""

    kind: str
    request_id: int
    stage: str | None = None
    payload: Any = None
    error: ErrorInfo | None = None
    reason: str | None = None

    @property
    def terminal(self) -> bool:
        return self.kind != "chunk"


@dataclass(slots=True)
class StageProgress:
    chunks: int = 0
    queue_ms: float = 0.0
    compute_ms: float = 0.0
    done: bool = False


@dataclass
class RequestRecord:
    request_id: int
    entry: str
    route: list[str]
    outputs: set[str]
    deadline: float
    state: State = State.PENDING
    t_submit: float = field(default_factory=time.monotonic)
    t_first_output: float | None = None
    t_end: float | None = None
    reason: str | None = None
    error: ErrorInfo | None = None
    ended_outputs: set[str] = field(default_factory=set)
    stages: dict[str, StageProgress] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None
    events: deque = field(default_factory=deque)
    waiter: asyncio.Future | None = None
    params: dict = field(default_factory=dict)
    input_seq: int = 0
    input_closed: bool = False

    def push(self, ev: OutputEvent) -> None:
        self.events.append(ev)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def view(self) -> "RequestView":
        """What ``summary`` shows of this request, in a small record of its own:
        the coordinator keeps one per finished request (``Coordinator.recent``)."""
        return RequestView(self.request_id, self.entry, self.route, self.state, self.reason,
                           self.error, self.t_submit, self.t_first_output, self.t_end, self.stages)

    def summary(self) -> dict:
        return self.view().summary()


@dataclass(slots=True)
class RequestView:
    """A request as ``GET /v1/requests/{id}`` shows it, and all the coordinator
    keeps of it once it has ended.

    Why not the record itself: a record also carries its output events (audio
    chunks of an aborted reply), its params (a think request's whole
    conversation), its waiter and timer, an event deque and two sets even when
    empty.  The coordinator keeps the finished requests of the last
    ``tombstones.ttl_s`` (up to RECENT_MAX), several per call, so each byte
    here is kept thousands of times.  ``stages`` is the record's own dict, so
    stage reports that arrive after the end still show up."""

    request_id: int
    entry: str
    route: list[str]
    state: State
    reason: str | None
    error: ErrorInfo | None
    t_submit: float
    t_first_output: float | None
    t_end: float | None
    stages: dict[str, StageProgress]

    def summary(self) -> dict:
        return {
            "request_id": self.request_id, "state": self.state.value, "entry": self.entry,
            "route": self.route, "reason": self.reason,
            "error": self.error.to_wire() if self.error else None,
            "age_ms": round((time.monotonic() - self.t_submit) * 1000, 3),
            "first_output_ms": round((self.t_first_output - self.t_submit) * 1000, 3) if self.t_first_output else None,
            "total_ms": round((self.t_end - self.t_submit) * 1000, 3) if self.t_end else None,
            "stages": {k: asdict(v) for k, v in self.stages.items()},
        }


class RequestHandle:
    """What ``submit`` returns: stream input in, iterate output events out."""

    def __init__(self, coord: RequestOwner, record: RequestRecord) -> None:
        self._coord = coord
        self._rec = record
        self.request_id = record.request_id

    @property
    def state(self) -> State:
        return self._rec.state

    async def send(self, payload: Any, params: dict | None = None) -> None:
        """Stream one more input chunk (submit with stream_input=True).

        ``params``: keys of the request's params to change from this chunk on,
        for settings of a long stream that follow the conversation (the listen
        stage's ``agent_speaking``).  The entry stage's executor sees them in
        ``WorkItem.params`` (chunks still queued there may see them a few ms
        early); the route and the stages after the entry keep the params the
        request was submitted with."""
        await self._coord.send_input(self._rec, payload, end=False, params=params)

    async def end_input(self, payload: Any = None) -> None:
        await self._coord.send_input(self._rec, payload, end=True, has_payload=payload is not None)

    def abort(self, reason: str = "cancelled") -> Awaitable[Any]:
        return self._coord.abort(self.request_id, reason)

    def __aiter__(self) -> AsyncIterator[OutputEvent]:
        return self.events()

    async def events(self) -> AsyncIterator[OutputEvent]:
        rec = self._rec
        while True:
            while rec.events:
                ev = rec.events.popleft()
                yield ev
                if ev.terminal:
                    return
            rec.waiter = asyncio.get_running_loop().create_future()
            try:
                await rec.waiter
            finally:
                rec.waiter = None

    async def next_event(self, timeout: float | None = None) -> OutputEvent:
        rec = self._rec
        if not rec.events:
            rec.waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(rec.waiter, timeout)
            finally:
                rec.waiter = None
        return rec.events.popleft()

    async def result(self) -> tuple[OutputEvent, list[OutputEvent]]:
        """Collect everything: (terminal event, chunk events)."""
        chunks: list[OutputEvent] = []
        while True:
            ev = await self.next_event()
            if ev.terminal:
                return ev, chunks
            chunks.append(ev)
