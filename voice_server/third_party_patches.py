"""Every change this server makes to a third-party library, in one place.

Each patch exists because the library has no option for what the service
needs; each is applied to one object (or behind a context variable) rather
than globally where it can be, and each degrades to the library's own
behaviour, never to a failure, when the library's layout changes.  When a
library gains the option, delete the patch here.

uvicorn / websockets
    :class:`ExplainingWebSocketProtocol`: an ``error`` event
    ``message_too_large`` before the 1009 close of an oversized WebSocket
    message (:func:`voice_server.app.uvicorn_config` installs it).
aiortc
    :func:`guard_text_decoding`: a data-channel text message that is not
    UTF-8 no longer ends the call.  :func:`low_latency_audio_receiver`: the
    audio jitter buffer releases a frame after 1 packet instead of 4.
aioice
    :func:`offered_hosts`: the exact host addresses a peer connection offers
    as ICE candidates (aioice always leaves out 127.0.0.1).

uvicorn: the 1009 explanation
-----------------------------
uvicorn's WebSocket protocol, with an explanation before a 1009 close.

A message above ``ServerSettings.ws_max_message_bytes`` (uvicorn's
``ws_max_size``) is refused by the websockets sans-I/O parser, below the
application: it fails the connection with close code 1009 and the ASGI app
only sees a disconnect.  A Realtime client then gets a bare 1009 and no
reason it can show.  The error rules (docs/CONCEPTS.md) want every client mistake explained
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

Not on the phone bridges (:data:`voice_server.transports.phone.paths.PHONE_PATHS`):
no phone provider's stream has an error message, and a JSON message of an
unknown kind is at best logged by the provider as a protocol warning - the
bare 1009 is all a telephony peer can use.

aioice: the offered host addresses
----------------------------------
aioice has no per-connection option for the host addresses, so
:func:`install_host_override` wraps ``aioice.ice.get_host_addresses`` ONCE
with a function that consults a context variable.  Outside
:func:`offered_hosts` it returns exactly what aioice would (the wrapper is
inert); inside it (the server sets it around ``setLocalDescription`` of its
own peer connections only) it returns the configured addresses.  Other peer
connections in the process, other threads and other event loops are
unaffected::

    with offered_hosts(["127.0.0.1"]):
        await pc.setLocalDescription(answer)   # candidates: 127.0.0.1 only
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from typing import Any, Iterable, Iterator
from urllib.parse import unquote

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import CloseCode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

from .session.server_events import IdFactory, error_body
from .transports.phone.paths import PHONE_PATHS
from .transports.webrtc_ice import parse_hosts

log = logging.getLogger("voice_server.third_party_patches")


# ------------------------------------------------------------------ uvicorn / websockets
NO_ERROR_EVENT_PATHS = PHONE_PATHS  # protocols without an ``error`` event


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


# ------------------------------------------------------------------ aiortc
def guard_text_decoding(sctp) -> bool:
    """Hand a data-channel text message that is not valid UTF-8 over as bytes.

    aiortc decodes text messages (string PPID) inside its SCTP receive path;
    a UnicodeDecodeError there goes up through the DTLS transport's receive
    task and ends it - the client could kill its own call with one bad
    message, with no error event.  Re-tagged as binary, the message reaches
    :meth:`Call.on_channel_message`, which rejects it (``invalid_json``) and
    the call goes on.  aiortc has no hook for this, so it wraps a private
    method of this one transport: returns False (and changes nothing) when
    this aiortc version lays it out differently.
    """
    try:
        from aiortc.rtcsctptransport import WEBRTC_BINARY, WEBRTC_STRING
        original = sctp._receive
    except (ImportError, AttributeError) as exc:
        log.warning("data-channel UTF-8 guard not applied: %r", exc)
        return False

    async def receive(stream_id: int, pp_id: int, data: bytes) -> None:
        if pp_id == WEBRTC_STRING:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                pp_id = WEBRTC_BINARY
        await original(stream_id, pp_id, data)

    sctp._receive = receive
    return True


def low_latency_audio_receiver(receiver) -> bool:
    """Cut aiortc's audio receive delay from 4 packets (80 ms) to 1 (20 ms).

    aiortc's RTCRtpReceiver holds audio in a jitter buffer that releases a
    frame only after four later packets arrived (``prefetch=4``), 80 ms of
    constant extra latency on every frame - for the server that means end of
    speech is seen 80 ms late.  On loopback/LAN there is little jitter to
    absorb; the receiver's buffer is swapped for one with ``prefetch=1``
    (reordering within 16 packets is still handled).  aiortc exposes no option
    for this, so it touches a private attribute: returns False (and changes
    nothing) when this aiortc version lays it out differently.
    """
    try:
        from aiortc.jitterbuffer import JitterBuffer
        attr = "_RTCRtpReceiver__jitter_buffer"
        old = getattr(receiver, attr, None)
        if old is None or getattr(receiver, "_RTCRtpReceiver__kind", None) != "audio":
            return False
        setattr(receiver, attr, JitterBuffer(capacity=old.capacity, prefetch=1))
        return True
    except Exception as exc:  # noqa: BLE001 - an optimisation, never a failure
        log.debug("low-latency jitter buffer not applied: %r", exc)
        return False


# ------------------------------------------------------------------ aioice
_HOSTS: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "voice_agent_ice_hosts", default=None)
_installed = False


def install_host_override() -> None:
    """Wrap aioice's host-address lister with the context-variable override (idempotent)."""
    global _installed
    if _installed:
        return
    import aioice.ice as ice

    original = ice.get_host_addresses

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        hosts = _HOSTS.get()
        if hosts is None:
            return original(use_ipv4, use_ipv6)
        return [h for h in hosts if (use_ipv6 if ":" in h else use_ipv4)]

    get_host_addresses.__wrapped__ = original  # type: ignore[attr-defined]
    ice.get_host_addresses = get_host_addresses
    _installed = True


@contextlib.contextmanager
def offered_hosts(hosts: Iterable[str] | None) -> Iterator[None]:
    """Inside: ICE gathering (in this context and tasks created from it) offers
    exactly ``hosts``.  ``None`` or empty: aioice's own choice."""
    hosts = parse_hosts(hosts) if hosts else []
    if not hosts:
        yield
        return
    install_host_override()
    token = _HOSTS.set(tuple(hosts))
    try:
        yield
    finally:
        _HOSTS.reset(token)


__all__ = ["ExplainingWebSocketProtocol", "ExplainingServerProtocol",
           "message_too_large_event", "NO_ERROR_EVENT_PATHS", "guard_text_decoding",
           "low_latency_audio_receiver", "offered_hosts", "install_host_override"]
