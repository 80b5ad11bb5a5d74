"""aiosipua's SIP listeners, adapted in two places.

UDP: aiosipua's datagram protocol asserts that its transport is an
``asyncio.DatagramTransport``, which uvloop's (the server's loop under
uvicorn) is not; the assertion fails in ``connection_made`` and logs a
traceback at every start although nothing is wrong.  :class:`DatagramListener`
binds with a protocol that only hands datagrams on.

TCP: RFC 3261 section 18.2.2: over a connection-oriented transport the response
goes back over the connection the request came on.  aiosipua's TCP transport
routes responses by the top Via's host and port, which is the peer's
listening port, not its connection's source port (SIPp and most phones
connect from another port).  Stamping ``received`` and ``rport`` with the
connection's address on every request (RFC 3581 does the same for UDP)
makes the Via routing name that connection.
"""

from __future__ import annotations

import asyncio
import logging

from aiosipua import (SipMessage, SipRequest, TcpSipTransport, UdpSipTransport, parse_via,
                      stringify_via)

log = logging.getLogger("voice_server.transports.sip")


def stamp_connection(request: SipRequest, addr: tuple[str, int]) -> None:
    """Point the top Via at ``addr``, the connection the request came on."""
    vias = request.headers.get("via")
    if not vias:
        return
    top = parse_via(vias[0])
    top.params["received"] = addr[0]
    top.params["rport"] = str(addr[1])
    request.headers.remove("Via")
    for v in [stringify_via(top), *vias[1:]]:
        request.headers.append("Via", v)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, owner: "DatagramListener") -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr) -> None:
        self.owner._dispatch(data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable from a gone peer
        log.debug("SIP UDP error: %r", exc)


class DatagramListener(UdpSipTransport):
    """:class:`UdpSipTransport` bound with :class:`_Datagrams` (module docstring)."""

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._udp_transport, _ = await loop.create_datagram_endpoint(
            lambda: _Datagrams(self), local_addr=self.local_addr)


class ConnectionTcpTransport(TcpSipTransport):
    """:class:`TcpSipTransport` whose responses use the request's connection."""

    def _dispatch(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            msg = SipMessage.parse(data)
            if isinstance(msg, SipRequest):
                stamp_connection(msg, addr)
        except Exception:  # noqa: BLE001 - any malformed message: logged, dropped
            log.warning("unreadable SIP message over TCP from %s", addr)
            return
        if self.on_message is not None:
            try:
                self.on_message(msg, addr)
            except Exception:  # noqa: BLE001 - one bad request must not end the connection
                log.exception("SIP request from %s failed", addr)


__all__ = ["DatagramListener", "ConnectionTcpTransport", "stamp_connection"]
