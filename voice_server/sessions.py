"""The registry of live sessions, and the graceful drain that uses it.

Every :class:`voice_server.runner.SessionRunner` registers itself when it
starts and unregisters when it has closed (``SessionRunner.start`` /
``close``), whatever the transport; the registry is per pipeline::

    reg = registry_for(pipeline)
    reg.list()          # [{"id", "transport", "state", "active_response_id", ...}, ...]
    reg.draining        # True once a drain began: no new sessions or requests

Registering also counts the session in the Prometheus gauges
(:func:`voice_server.metrics.session_opened` / ``session_closed``).

Drain (``voice_server.app.serve`` runs it on SIGTERM / SIGINT)::

    await drain(pipeline, grace_s=10)

1. ``draining = True``: :class:`DrainGate` (an ASGI middleware) answers every
   new HTTP request and WebSocket upgrade with 503 (``Retry-After``); only
   ``/metrics`` still answers.
2. Every session gets an ``error`` event, code ``server_shutting_down``; from
   then on it starts no new response (one the session core asks for fails at
   once with ``stage_unavailable``).
3. Running turns (responses, transcriptions, HTTP requests in the pipeline)
   may finish until ``grace_s`` passes (or ``force`` is set).
4. Whatever still runs is cancelled with events (``response.done``, status
   ``cancelled``, reason ``server_shutting_down``) and every session is closed
   with code 1001 (going away).

The caller then stops the server and closes the pipeline (stage processes,
socket files, shared-memory segments).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from runtime.heap import HeapTrimmer

from . import metrics

log = logging.getLogger("voice_server.sessions")

SHUTDOWN_CODE = "server_shutting_down"
SHUTDOWN_MESSAGE = "The server is shutting down; this session will be closed."


_trimmer = HeapTrimmer(min_interval_s=30.0)


class SessionRegistry:
    def __init__(self) -> None:
        self.runners: dict[str, Any] = {}
        self.draining = False

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
    if runner.closed or getattr(runner, "_closing", None) is not None:
        state = "closing"
    elif s.active_response_id is not None:
        state = "responding"
    elif getattr(s, "_speech_item", None) is not None:
        state = "user_speaking"
    else:
        state = "idle"
    if getattr(runner, "draining", False) and state != "closing":
        state = "draining:" + state
    started = getattr(runner, "started_at", None)
    return {
        "id": s.session_id,
        "transport": getattr(runner, "transport", "other"),
        "state": state,
        "active_response_id": s.active_response_id,
        "started_at": None if started is None else round(started, 3),
        "age_s": None if started is None else round(time.time() - started, 3),
        "live_requests": {str(rid): kind for rid, kind in list(runner._live.items())},
        "model": getattr(s.settings, "model", None),
    }


# ----------------------------------------------------------------------------- drain
class DrainGate:
    """ASGI middleware: while the registry is draining, new requests get 503."""

    def __init__(self, app, pipeline, allow: tuple[str, ...] = ("/metrics",)) -> None:
        self.app = app
        self.registry = registry_for(pipeline)
        self.allow = allow

    async def __call__(self, scope, receive, send) -> None:
        t = scope["type"]
        if not self.registry.draining or t not in ("http", "websocket") \
                or scope.get("path") in self.allow:
            await self.app(scope, receive, send)
            return
        body = {"error": {"type": "server_error", "code": SHUTDOWN_CODE,
                          "message": "The server is shutting down; try another instance.",
                          "param": None}}
        resp = JSONResponse(body, status_code=503, headers={"Retry-After": "5",
                                                            "Connection": "close"})
        if t == "http":
            await resp(scope, receive, send)
            return
        ws = WebSocket(scope, receive, send)
        try:
            await ws.send_denial_response(resp)
        except RuntimeError:  # no denial-response extension: close before accept (403)
            await ws.close(1013)


def _busy(pipeline, runners: list) -> list[int]:
    """Request ids that are turns in progress (everything but sessions' listen streams)."""
    listen = {rid for r in runners for rid, kind in list(r._live.items()) if kind == "listen"}
    live = getattr(getattr(pipeline, "coordinator", None), "live", None)
    if live is None:
        live = {rid: None for r in runners for rid in r._live}
    busy = [rid for rid in list(live) if rid not in listen]
    busy += [1 for r in runners if r._responses and not r._live]  # about to submit
    return busy


async def drain(pipeline, grace_s: float = 10.0, *, force: asyncio.Event | None = None,
                close_timeout_s: float = 5.0) -> dict:
    """Drain every session of ``pipeline`` (see the module docstring); returns a summary."""
    reg = registry_for(pipeline)
    reg.draining = True
    t0 = time.monotonic()
    for r in list(reg.runners.values()):
        r.begin_drain(SHUTDOWN_CODE, SHUTDOWN_MESSAGE)
    force = force or asyncio.Event()
    deadline = t0 + grace_s
    while time.monotonic() < deadline and not force.is_set():
        if not _busy(pipeline, list(reg.runners.values())):
            break
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(force.wait(), 0.05)
    left = _busy(pipeline, list(reg.runners.values()))
    runners = list(reg.runners.values())
    log.info("drain: %d session(s), %d turn(s) still running after %.1f s; closing",
             len(runners), len(left), time.monotonic() - t0)
    for r in runners:
        if not getattr(r, "draining", False):  # opened while the drain began
            r.begin_drain(SHUTDOWN_CODE, SHUTDOWN_MESSAGE)
    if runners:
        done, pending = await asyncio.wait(
            [asyncio.ensure_future(r.shutdown(1001, "server shutting down")) for r in runners],
            timeout=close_timeout_s)
        for t in pending:
            t.cancel()
    # HTTP requests that still run in the pipeline: abort them (their handlers report it)
    live = getattr(getattr(pipeline, "coordinator", None), "live", None) or {}
    for rid in list(live):
        with contextlib.suppress(Exception):
            pipeline.abort(rid, SHUTDOWN_CODE)
    return {"sessions": len(runners), "aborted": len(left),
            "seconds": round(time.monotonic() - t0, 3)}


def install_signal_drain(pipeline, grace_s: float, stop, signals=None):
    """SIGTERM/SIGINT -> :func:`drain`, then ``stop()`` (e.g. uvicorn's should_exit).

    A second signal cuts the grace period short.  Returns a function that removes
    the handlers.  Call from the running loop (the main thread).
    """
    import signal as _signal
    loop = asyncio.get_running_loop()
    signals = signals or (_signal.SIGTERM, _signal.SIGINT)
    force = asyncio.Event()
    state: dict = {"task": None}

    async def run() -> None:
        try:
            summary = await drain(pipeline, grace_s, force=force)
            log.warning("drained: %s", summary)
        except Exception:  # noqa: BLE001 - stop anyway
            log.exception("drain failed; stopping anyway")
        finally:
            stop()

    def on_signal(sig) -> None:
        if state["task"] is None:
            log.warning("%s: draining (no new sessions; running turns get %.1f s)",
                        getattr(sig, "name", sig), grace_s)
            state["task"] = asyncio.ensure_future(run())
        else:
            force.set()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)

    def remove() -> None:
        for sig in signals:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    remove.state = state
    return remove


__all__ = ["SessionRegistry", "install_signal_drain", "registry_for", "register", "unregister", "describe", "drain",
           "DrainGate", "SHUTDOWN_CODE"]
