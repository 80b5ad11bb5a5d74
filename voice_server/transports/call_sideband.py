"""``WS /v1/realtime?call_id=...``: a sideband connection to a live SIP call's
session, as OpenAI's Realtime SIP API has it.  The call's audio stays on its
line; the socket gets the session's events from the moment it attaches
(first a ``session.created`` with the session as it is now) and may send any
client event: ``session.update``, tools and their outputs, ``response.create``.

Access as on ``/v1/realtime`` (Origin policy, API key); the call already
holds its place among ``max_sessions``, so the sideband takes none.  An
unknown or not-yet-accepted call is refused before the upgrade (404 / 409,
OpenAI error JSON).  When the call ends the socket closes (1000); when the
socket closes the call goes on.  A sideband that does not read its events
(``MAX_QUEUED`` behind) is closed (1008), never the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from starlette.websockets import WebSocket, WebSocketState

from ..call_registry import CallRegistry, CallState
from .access import Refusal, bearer_token, denial_response, key_matches, origin_refusal, \
    origin_allowed
from .ws_reader import read_websocket, until_first

log = logging.getLogger("voice_server.transports.call_sideband")

MAX_QUEUED = 5000


class _Outbox:
    """The sideband's events, waiting for its socket (bounded)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue(MAX_QUEUED)
        self.overflowed = False

    def put(self, ev: dict) -> None:
        try:
            self.queue.put_nowait(ev)
        except asyncio.QueueFull:
            self.overflowed = True


def _check(ws: WebSocket, registry: CallRegistry, settings, key: str | None, call_id: str):
    """The live call's runner, or the :class:`Refusal` to answer the upgrade with."""
    if not origin_allowed(ws.headers.get("origin"), ws.headers.get("host"),
                          settings.allowed_origins):
        raise origin_refusal()
    if settings.auth_required and not key_matches(key, settings.api_keys):
        raise Refusal(401, "invalid_api_key", "Send 'Authorization: Bearer <key>'.",
                      headers={"WWW-Authenticate": "Bearer"})
    call = registry.get(call_id)
    if call is None or call.state is CallState.ENDED:
        raise Refusal(404, "call_not_found", f"No call {call_id[:64]!r}.", "not_found_error")
    if call.state is not CallState.LIVE or call.runner is None or call.runner.closing:
        raise Refusal(409, "call_not_live", "Accept the call before attaching to it.")
    return call.runner


async def attach(ws: WebSocket, registry: CallRegistry, settings, key: str | None,
                 call_id: str, subprotocol: str | None) -> None:
    """Serve one sideband socket until it or the call ends."""
    try:
        runner = _check(ws, registry, settings, key or bearer_token(ws.headers), call_id)
    except Refusal as refusal:
        try:
            await ws.send_denial_response(denial_response(refusal))
        except RuntimeError:
            await ws.close(1008)
        return
    try:
        await ws.accept(subprotocol=subprotocol)
    except Exception:  # noqa: BLE001 - gone during the handshake
        return
    outbox = _Outbox()
    session = runner.session
    outbox.put({"type": "session.created", "event_id": session.ids.new("event"),
                "session": session.session_object()})
    unwatch = runner.watch(outbox.put)
    log.info("call %s: sideband attached (session %s)", call_id, session.session_id)

    async def write() -> None:
        while True:
            ev = await outbox.queue.get()
            if outbox.overflowed:
                await ws.close(1008, "sideband too slow: events overflowed")
                return
            await ws.send_text(json.dumps(ev, separators=(",", ":"), ensure_ascii=False))

    def on_bytes(_data: bytes) -> None:
        runner.reject_client_frame("binary_frames_not_supported",
                                   "Binary frames are not supported: send JSON text frames.")

    try:
        await until_first(write(), read_websocket(ws, runner.client_event, on_bytes,
                                                  label=f"sideband {call_id}"),
                          runner.wait_closed())
    finally:
        unwatch()
        if ws.application_state != WebSocketState.DISCONNECTED:
            with contextlib.suppress(Exception):
                await ws.close(1000)
        log.info("call %s: sideband detached", call_id)


__all__ = ["attach", "MAX_QUEUED"]
