"""Calls the agent places: dial a SIP URI, and what became of the call.

``POST /v1/sip/calls`` (:mod:`.dial_api`) hands a :class:`DialRequest` to
:meth:`.endpoint.SipEndpoint.dial`, which sends the INVITE (our offer: the
configured codecs and telephone-event) from the UDP listener, or over TLS
for a ``sips:`` URI or one with ``;transport=tls`` (:func:`transport_of`;
``sip.tls`` on), straight to the URI's host or through
``sip.outbound_proxy`` (a trunk; a ``tel:`` URI needs one), and follows it
in a :class:`PlacedCall`:

``dialing`` -> ``ringing`` (a 18x) -> ``answered`` (200 OK: the session
starts on the callee's answer, as an answered incoming call's does; with
``answering_machine`` its first words tell a person from a machine) ->
``ended``; or a final ``busy`` (486, 600), ``no_answer`` (nobody answered
within ``ring_timeout_s``: CANCEL; 408, 480, 487) or ``failed`` (any other
refusal, no route, no free RTP port, the server full), or ``cancelled``
(the operator hung up while it rang).  The SIP status and
the session id are kept with it, and with call records on every attempt is
in the records database as it goes (:func:`kept_in`): busy and unanswered
ones too.  Once answered the call is an ordinary
:class:`.call.SipCall`: barge-in, keys, call actions, transfer, the call
record (transport ``sip``).

:class:`OutboundDialog` gives aiosipua's outgoing call the few things a
SipCall asks of its dialog (send in-dialog requests, hang up).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:   # the SIP stack loads only when SIP is on
    from aiosipua import SipRequest, SipResponse, SipUAC
    from aiosipua.outgoing_call import OutgoingCall

log = logging.getLogger("voice_server.transports.sip")

BUSY = frozenset({486, 600})
NO_ANSWER = frozenset({408, 480, 487})
STATUSES = ("dialing", "ringing", "answered", "ended", "busy", "no_answer", "failed",
            "cancelled")
KEPT = 500  # placed calls remembered for GET (the oldest finished ones go first)


class DialRequest(BaseModel):
    """The body of ``POST /v1/sip/calls``."""
    model_config = ConfigDict(extra="forbid")

    to: str = Field(max_length=256)
    from_user: str = Field("agent", max_length=64, pattern=r"^[A-Za-z0-9_.+-]+$")
    session: dict = Field(default_factory=dict)       # a Realtime session object, as accept's
    ring_timeout_s: float = Field(30.0, ge=1.0, le=300.0)
    answering_machine: bool = False

    @field_validator("to")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not v.startswith(("sip:", "sips:", "tel:")) or len(v) < 5 or \
                any(c in v for c in " <>\r\n"):
            raise ValueError("to must be a sip:, sips: or tel: URI")
        return v


@dataclass
class PlacedCall:
    """One call the agent placed, as ``GET /v1/sip/calls/{id}`` shows it.

    Its status moves only through :meth:`ring`, :meth:`answer` and
    :meth:`settle`; each change is told to ``observer`` (the endpoint keeps
    the call record with it: every attempt, answered or not, is recorded)."""
    id: str
    to: str
    status: str = "dialing"
    sip_status: Optional[int] = None
    reason: str = ""
    session_id: Optional[str] = None
    created_at: float = field(default_factory=time.time)
    answered_at: Optional[float] = None
    ended_at: Optional[float] = None
    observer: Optional[Callable[["PlacedCall"], None]] = field(default=None, repr=False,
                                                                compare=False)

    @property
    def finished(self) -> bool:
        return self.status not in ("dialing", "ringing", "answered")

    def ring(self) -> None:
        """A provisional answer (18x): the callee's phone rings."""
        if self.status == "dialing":
            self.status = "ringing"
            self._changed()

    def answer(self, session_id: str) -> None:
        """200 OK: the call's session ``session_id`` has started."""
        if self.finished:
            return
        self.status, self.sip_status = "answered", 200
        self.session_id, self.answered_at = session_id, time.time()
        self._changed()

    def settle(self, status: str, sip_status: Optional[int] = None, reason: str = "") -> None:
        """A final outcome (the first one stands)."""
        if self.finished:
            return
        self.status, self.reason = status, reason
        if sip_status is not None:
            self.sip_status = sip_status
        self.ended_at = time.time()
        self._changed()

    def _changed(self) -> None:
        if self.observer is not None:
            self.observer(self)

    def as_json(self) -> dict:
        return {"id": self.id, "object": "sip.call", "to": self.to, "status": self.status,
                "sip_status": self.sip_status, "reason": self.reason or None,
                "session_id": self.session_id, "created_at": round(self.created_at, 3),
                "answered_at": self.answered_at and round(self.answered_at, 3),
                "ended_at": self.ended_at and round(self.ended_at, 3)}


def kept_in(store) -> Callable[[PlacedCall], None]:
    """A placed call's observer that keeps it in the call records
    (:meth:`voice_server.records.store.CallStore.put_placed`): every attempt,
    with its outcome, SIP status and target, whether or not it became a session."""
    def keep(placed: PlacedCall) -> None:
        try:
            store.submit(store.put_placed, placed.as_json())
        except RuntimeError:   # the store has closed (the server is stopping): the call goes on
            log.warning("sip %s: the call records are closed; %s not kept", placed.id,
                        placed.status)
    return keep


def outcome_of(status: int) -> str:
    """A final non-2xx status as a placed call's outcome."""
    if status in BUSY:
        return "busy"
    if status in NO_ANSWER:
        return "no_answer"
    return "failed"


def transport_of(uri: str) -> str:
    """``tls`` for a ``sips:`` URI or one with ``;transport=tls`` (RFC 3261
    section 19.1), else ``udp``."""
    if uri.startswith("sips:"):
        return "tls"
    params = uri.split("?", 1)[0].split(";")[1:]
    return "tls" if any(p.strip().lower() == "transport=tls" for p in params) else "udp"


def route_of(uri: str, proxy: Optional[tuple[str, int]]) -> tuple[str, int]:
    """Where the INVITE goes: the proxy, else the ``sip:`` URI's own host and
    port (5060; 5061 over TLS); ValueError for a ``tel:`` URI with no proxy."""
    if proxy is not None:
        return proxy
    if uri.startswith("tel:"):
        raise ValueError("a tel: URI needs sip.outbound_proxy (a trunk) to route it")
    hostport = uri.split("@", 1)[-1].split(";", 1)[0].split("?", 1)[0]
    if hostport.startswith(("sip:", "sips:")):   # no user part
        hostport = hostport.split(":", 1)[1]
    host, _, port = hostport.rpartition(":") if hostport.count(":") == 1 else (hostport, "", "")
    if not host or (port and not port.isdigit()):
        raise ValueError(f"cannot route {uri!r}: no host")
    return host, int(port or (5061 if transport_of(uri) == "tls" else 5060))


def ack_of_refusal(invite: "SipRequest", response: "SipResponse") -> "SipRequest":
    """The ACK of a non-2xx final answer to our INVITE (RFC 3261 section
    17.1.1.3: the INVITE's Request-URI, top Via, From and Route, the answer's
    To).  aiosipua's UAC does not send it, and a callee that never gets it
    retransmits its 486 for 32 s."""
    from aiosipua import SipRequest
    ack = SipRequest(method="ACK", uri=invite.uri)
    ack.headers.append("Via", invite.headers.get_first("via"))
    for name in ("From", "Call-ID"):
        ack.headers.set_single(name, invite.headers.get_first(name.lower()))
    ack.headers.set_single("To", response.headers.get_first("to"))
    ack.headers.set_single("CSeq", f"{invite.cseq.seq if invite.cseq else 1} ACK")
    ack.headers.set_single("Max-Forwards", "70")
    for route in invite.headers.get("route"):
        ack.headers.append("Route", route)
    return ack


class OutboundDialog:
    """aiosipua's outgoing call with the surface a SipCall uses of an incoming one."""

    def __init__(self, call: "OutgoingCall", uac: "SipUAC") -> None:
        self.call = call
        self.uac = uac

    @property
    def dialog(self):
        return self.call.dialog

    @property
    def transport(self):
        return self.call.transport

    @property
    def source_addr(self) -> tuple[str, int]:
        return self.call.remote_addr

    @property
    def call_id(self) -> str:
        return self.call.call_id

    @property
    def invite(self):
        return self.call.invite

    def hangup(self) -> None:
        self.call.hangup(self.uac)


__all__ = ["DialRequest", "PlacedCall", "OutboundDialog", "kept_in", "outcome_of", "route_of",
           "transport_of", "STATUSES",
           "ack_of_refusal"]
