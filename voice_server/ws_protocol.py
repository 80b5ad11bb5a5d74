"""uvicorn's WebSocket protocol, with an explanation before a 1009 close.

A message above ``ServerSettings.ws_max_message_bytes`` (uvicorn's
``ws_max_size``) is refused by the websockets sans-I/O parser, below the
application: it fails the connection with close code 1009 and the ASGI app
only sees a disconnect.  A Realtime client then gets a bare 1009 and no
reason it can show.  DESIGN.md (errors) wants every client mistake explained
in-band, so this module makes the protocol layer send one Realtime ``error``
event first::

    {"type": "error", "event_id": "event_...", "error": {"type":
     "invalid_request_error", "code": "message_too_large", "message":
     "... limit of N bytes ...", "param": null, "event_id": null}}

then the 1009 close (websockets' own short reason, e.g. "frame with N bytes
exceeds limit of M bytes").  The shape is the session core's
(:func:`voice_server.session.server_events.error_body`).

Where: :class:`ExplainingServerProtocol` overrides websockets'
``ServerProtocol.fail`` - the one place every oversize path ends (a single
frame, a fragmented message, a permessage-deflate frame that inflates too
far).  :class:`ExplainingWebSocketProtocol` is uvicorn's sans-I/O protocol
(what ``ws="auto"`` picks when websockets is installed) using it; pass it as
``uvicorn.Config(ws=...)`` (:func:`voice_server.app.uvicorn_config` does).

Not on the Twilio media stream (:data:`voice_server.twilio.STREAM_PATH`):
Media Streams has no error message, and a JSON message of an unknown kind is
at best logged by Twilio as a protocol warning - the bare 1009 is all a
telephony peer can use.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import unquote

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import CloseCode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

from .session.server_events import IdFactory, error_body
from .twilio import STREAM_PATH as TWILIO_STREAM_PATH

log = logging.getLogger("voice_server.ws_protocol")

NO_ERROR_EVENT_PATHS = (TWILIO_STREAM_PATH,)  # protocols without an ``error`` event


def message_too_large_event(limit: int | None) -> dict[str, Any]:
    """The ``error`` event sent before a 1009 close (Realtime error shape)."""
    size = f"the limit of {limit} bytes" if limit is not None else "the server's limit"
    return {"type": "error", "event_id": IdFactory().new("event"),
            "error": error_body("invalid_request_error", "message_too_large",
                                f"The WebSocket message is larger than {size}; the server "
                                "closes the connection (1009). Send audio in smaller "
                                "input_audio_buffer.append events.")}


class ExplainingServerProtocol(ServerProtocol):
    """websockets' server protocol that sends a ``message_too_large`` error
    event before failing the connection with 1009 (see the module doc)."""

    error_events: bool = True  # False: the peer's protocol has no error event

    def fail(self, code: CloseCode | int, reason: str = "") -> None:
        # Only while OPEN (a close frame not yet sent: after it no data frame
        # may follow) and not in the middle of a fragmented outgoing message
        # (uvicorn never fragments, but a text frame there would be a protocol
        # error).  Anything going wrong here must not stop the close itself.
        if code == CloseCode.MESSAGE_TOO_BIG and self.error_events \
                and self.state is State.OPEN and not self.expect_continuation_frame:
            try:
                ev = message_too_large_event(self.max_message_size)
                self.send_text(json.dumps(ev, separators=(",", ":")).encode())
            except Exception:  # noqa: BLE001
                log.exception("could not send the message_too_large event")
        super().fail(code, reason)


class ExplainingWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol with :class:`ExplainingServerProtocol`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn builds its ServerProtocol (extensions, max_size, logger) in
        # __init__; re-classing that object keeps every one of those settings
        # as uvicorn chose them instead of copying its constructor call here.
        # The subclass adds behaviour only (no state, no __init__).  Another
        # uvicorn layout: plain uvicorn behaviour (a bare 1009), never a failure.
        if type(self.conn) is ServerProtocol:
            self.conn.__class__ = ExplainingServerProtocol
        elif not isinstance(self.conn, ExplainingServerProtocol):
            log.warning("uvicorn's WebSocket connection is a %r: no message_too_large event "
                        "before 1009", type(self.conn))

    def handle_connect(self, event: Request) -> None:
        if isinstance(self.conn, ExplainingServerProtocol):
            path = unquote(event.path.partition("?")[0])
            self.conn.error_events = not any(path == p or path.startswith(p + "/")
                                             for p in NO_ERROR_EVENT_PATHS)
        super().handle_connect(event)


__all__ = ["ExplainingWebSocketProtocol", "ExplainingServerProtocol",
           "message_too_large_event", "NO_ERROR_EVENT_PATHS"]
