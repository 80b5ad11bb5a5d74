"""The graceful drain on SIGTERM / SIGINT, over the session registry.

``voice_server.app.serve`` installs it (:func:`install_signal_drain`)::

    await drain(pipeline, grace_s=10)

1. ``draining = True``: :class:`DrainGate` (an ASGI middleware) answers every
   new HTTP request and WebSocket upgrade with 503 (``Retry-After``); only
   ``/metrics`` and ``/health/live`` still answer (a draining server is alive:
   its liveness probe must not get it killed before the drain ends, while
   ``/health/ready`` and ``/health`` say 503 so balancers stop sending calls).
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

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from .session_registry import registry_for

log = logging.getLogger("voice_server.drain")

SHUTDOWN_CODE = "server_shutting_down"
SHUTDOWN_MESSAGE = "The server is shutting down; this session will be closed."


class DrainGate:
    """ASGI middleware: while the registry is draining, new requests get 503."""

    def __init__(self, app, pipeline, allow: tuple[str, ...] = ("/metrics", "/health/live")) -> None:
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
    listen = {rid for r in runners for rid, kind in r.live_requests.items() if kind == "listen"}
    live = getattr(getattr(pipeline, "coordinator", None), "live", None)
    if live is None:
        live = {rid: None for r in runners for rid in r.live_requests}
    busy = [rid for rid in list(live) if rid not in listen]
    busy += [1 for r in runners if r.response_pending_submit]  # about to submit
    busy += [1 for r in runners if r.output_pending]  # generated, still being paced out
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
        if not r.draining:  # opened while the drain began
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


__all__ = ["install_signal_drain", "drain", "DrainGate", "SHUTDOWN_CODE"]
