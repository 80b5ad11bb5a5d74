"""What the runner's two helpers (listening and replies) need of the runner.

:class:`voice_server.runner.SessionRunner` owns the session, the pipeline, the
outbox and the table of live requests; :mod:`voice_server.listening` and
:mod:`voice_server.replies` each carry out one family of commands against the
pipeline and report back through this interface.  A protocol, so neither
helper imports the runner that imports them.
"""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import Any, Coroutine, Protocol


class RequestKind(str, Enum):
    """What a live pipeline request of a session is (``SessionRunner.live_requests``)."""

    LISTEN = "listen"            # the session's microphone stream
    TRANSCRIBE = "transcribe"    # push-to-talk: one committed buffer
    PREFILL = "prefill"          # the caller's words decoded while they speak
    PREPARED = "prepared"        # a reply generated during the pause, held
    RESPONSE = "response"        # the reply the client is receiving


class RunnerHost(Protocol):
    session: Any            # voice_server.session.Session
    pipeline: Any           # runtime.pipeline.Pipeline
    opt: Any                # voice_server.runner.RunnerOptions
    stats: dict
    turns: Any              # voice_server.metrics.TurnTimer
    live: dict[int, RequestKind]

    @property
    def closed(self) -> bool: ...

    @property
    def draining(self) -> bool: ...

    def clock(self) -> float: ...

    def dispatch(self, cmds: list) -> None: ...

    def spawn(self, coro: Coroutine, name: str) -> asyncio.Task: ...

    def abort_request(self, rid: int, reason: str) -> None: ...

    def push_server_error(self, code: str, message: str) -> None: ...

    def close_soon(self, code: int, reason: str) -> None: ...
