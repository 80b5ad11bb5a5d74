"""The registry of live sessions, one per pipeline.

Every :class:`voice_server.runner.SessionRunner` registers itself when it
starts and unregisters when it has closed (``SessionRunner.start`` /
``close``), whatever the transport::

    reg = registry_for(pipeline)
    reg.list()          # [{"id", "transport", "state", "active_response_id", ...}, ...]
    reg.draining        # True once a drain began (voice_server.drain)
    reg.pending         # handshakes holding a place (voice_server.transports.access.admit)

Registering also counts the session in the Prometheus gauges
(:func:`voice_server.metrics.session_opened` / ``session_closed``).  The
registry backs ``GET /v1/sessions``, the ``max_sessions`` admission of every
transport and the drain.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any

from runtime.heap import HeapTrimmer

from . import metrics

log = logging.getLogger("voice_server.session_registry")

_trimmer = HeapTrimmer(min_interval_s=30.0)


class SessionRegistry:
    def __init__(self) -> None:
        self.runners: dict[str, Any] = {}
        self.draining = False
        self.pending = 0  # places held by sessions being opened (transports.access.admit)
        # the call store every runner records into (voice_server.records); None: off
        self.records: Any = None
        # the turn tracer every runner traces into (voice_server.traces); None: off
        self.traces: Any = None

    def register(self, runner) -> None:
        sid = runner.session.session_id
        if sid in self.runners:
            return
        self.runners[sid] = runner
        metrics.session_opened(getattr(runner, "transport", "other"))

    def unregister(self, runner) -> None:
        sid = runner.session.session_id
        if self.runners.get(sid) is runner:
            del self.runners[sid]
            metrics.session_closed(getattr(runner, "transport", "other"))
            # a closed session's buffers are free now; without a trim the server's
            # RSS stays at its busiest moment (runtime.heap)
            _trimmer.request()

    def get(self, session_id: str):
        return self.runners.get(session_id)

    def __len__(self) -> int:
        return len(self.runners)

    @property
    def places(self) -> int:
        """Places among ``max_sessions`` taken: live sessions plus handshakes in flight."""
        return len(self.runners) + self.pending

    def list(self) -> list[dict]:
        return [describe(r) for r in list(self.runners.values())]


_registries: "weakref.WeakKeyDictionary[Any, SessionRegistry]" = weakref.WeakKeyDictionary()
_plain: dict[int, SessionRegistry] = {}  # pipelines that cannot be weakly referenced


def registry_for(pipeline) -> SessionRegistry:
    try:
        reg = _registries.get(pipeline)
        if reg is None:
            reg = _registries[pipeline] = SessionRegistry()
        return reg
    except TypeError:
        return _plain.setdefault(id(pipeline), SessionRegistry())


def register(runner) -> None:
    registry_for(runner.pipeline).register(runner)


def unregister(runner) -> None:
    registry_for(runner.pipeline).unregister(runner)


def describe(runner) -> dict:
    s = runner.session
    if runner.closing:
        state = "closing"
    elif s.active_response_id is not None:
        state = "responding"
    elif s.user_speaking:
        state = "user_speaking"
    else:
        state = "idle"
    if runner.draining and state != "closing":
        state = "draining:" + state
    started = getattr(runner, "started_at", None)
    return {
        "id": s.session_id,
        "transport": runner.transport,
        "state": state,
        "active_response_id": s.active_response_id,
        "started_at": None if started is None else round(started, 3),
        "age_s": None if started is None else round(time.time() - started, 3),
        "live_requests": {str(rid): kind for rid, kind in runner.live_requests.items()},
        "model": getattr(s.settings, "model", None),
    }


__all__ = ["SessionRegistry", "registry_for", "register", "unregister", "describe"]
