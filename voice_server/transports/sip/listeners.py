"""aiosipua's SIP listeners, adapted, and SIP over TLS built on its TCP one.

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

Every message we send on a connection names that connection's transport:
the top Via of our requests (``SIP/2.0/TCP``, ``SIP/2.0/TLS``: RFC 3261
section 18.1.1; aiosipua writes ``UDP`` in every Via it builds) and the
Contact of anything we send (``;transport=tcp`` / ``tls``), so the peer's
in-dialog requests come back the way the call came in.

TLS (:class:`TlsListener`): the TCP listener with a TLS handshake on each
connection before the first SIP byte, and the same for the connections we
open to dial.  It accepts the sockets itself and hands each to
``loop.connect_accepted_socket`` with the TLS context, which raises when
the handshake fails: ``start_server(ssl=...)`` would drop a failed handshake
without a word, and a plain-text client, a client that distrusts our
certificate or one that never finishes the handshake must be logged.
(Upgrading an accepted stream with ``start_tls`` instead races under
uvloop: a ClientHello that arrives with the connection is read as plain
data and the handshake stalls.)  Each connection fails alone; the listener
and the other calls go on.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Union

from aiosipua import (SipMessage, SipRequest, SipResponse, TcpSipTransport, UdpSipTransport,
                      parse_via, stringify_via)

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


def name_transport(message: Union[SipRequest, SipResponse], transport: str) -> None:
    """Our top Via (a request's) and our Contact name ``transport`` (module docstring)."""
    if isinstance(message, SipRequest):
        vias = message.headers.get("via")
        if vias and parse_via(vias[0]).transport.upper() != transport.upper():
            top = parse_via(vias[0])
            top.transport = transport.upper()
            message.headers.remove("Via")
            for v in [stringify_via(top), *vias[1:]]:
                message.headers.append("Via", v)
    contact = message.headers.get_first("contact")
    if contact and contact.startswith("<") and ">" in contact:
        uri, rest = contact[1:].split(">", 1)
        if ";transport=" not in uri.lower():
            message.headers.set_single("Contact", f"<{uri};transport={transport.lower()}>{rest}")


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
    """:class:`TcpSipTransport` whose responses use the request's connection,
    and whose messages name it (module docstring)."""

    transport_name: ClassVar[str] = "tcp"

    def send(self, message: Union[SipRequest, SipResponse], addr: tuple[str, int]) -> None:
        """Send on ``addr``'s connection; when the peer has closed it, the
        message is lost, as a datagram to a peer that is gone would be (the
        call's own timers end it), instead of raising into whoever sent it."""
        name_transport(message, self.transport_name)
        if addr not in self._connections:
            log.info("SIP %s connection %s:%s is gone: %s not sent", self.transport_name,
                     addr[0], addr[1], _first_line(message))
            return
        super().send(message, addr)

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


@dataclass
class TlsListener(ConnectionTcpTransport):
    """SIP over TLS: :class:`ConnectionTcpTransport` with a handshake on every
    connection, ours (``listen_context``) and the ones we dial
    (``dial_context``; :meth:`connect`)."""

    transport_name: ClassVar[str] = "tls"

    listen_context: Optional[ssl.SSLContext] = None
    dial_context: Optional[ssl.SSLContext] = None
    handshake_timeout_s: float = 10.0
    # connections we opened to dial -> the calls still using each (closed at 0)
    _dialled: dict[tuple[str, int], int] = field(default_factory=dict, init=False, repr=False)
    _socket: Optional[socket.socket] = field(default=None, init=False, repr=False)
    _accepted: int = field(default=0, init=False, repr=False)  # callers' connections now
    # one dial at a time: two calls to one address must not open two connections
    _dial_lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    @property
    def connections(self) -> int:
        """Connections open now, in their handshake or after it, both ways."""
        return self._accepted + len(self._dialled)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.local_addr
        family = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                         flags=socket.AI_PASSIVE))[0][0]
        self._socket = socket.create_server((host, port), family=family)
        self._socket.setblocking(False)
        self._spawn(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._socket)
            except OSError as exc:   # out of file descriptors, say: the listener goes on
                log.warning("SIP TLS accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            self._spawn(self._connection(conn))

    async def _connection(self, conn: socket.socket) -> None:
        """One caller's connection: the handshake, then SIP as over TCP."""
        self._accepted += 1
        try:
            await self._serve(conn)
        finally:
            self._accepted -= 1

    async def _serve(self, conn: socket.socket) -> None:
        try:
            peer = conn.getpeername()[:2]
        except OSError:   # gone already
            conn.close()
            return
        reader = asyncio.StreamReader(limit=2 ** 16)
        protocol = asyncio.StreamReaderProtocol(reader)
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, conn, ssl=self.listen_context,
                ssl_handshake_timeout=self.handshake_timeout_s)
        except (OSError, asyncio.TimeoutError, EOFError) as exc:  # ssl.SSLError is an OSError
            log.warning("SIP TLS handshake with %s:%s failed, connection dropped: %s",
                        peer[0], peer[1], _why(exc))
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        try:
            await self._handle_connection(reader, writer)
        except ssl.SSLError as exc:   # a broken record, say: this connection ends
            log.warning("SIP TLS connection with %s:%s broken: %s", peer[0], peer[1],
                        _why(exc))
            transport.abort()

    async def connect(self, remote_addr: tuple[str, int]
                      ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TLS connection to a callee (the certificate checked for its host
        name), shared by the calls to that address: :meth:`release` it once
        per call.  Raises ``OSError`` (``ssl.SSLError`` among them) when the
        connection or the handshake fails."""
        async with self._dial_lock:
            conn = self._connections.get(remote_addr)
            if conn is None or conn[1].is_closing():
                conn = await asyncio.wait_for(asyncio.open_connection(
                    remote_addr[0], remote_addr[1], ssl=self.dial_context,
                    server_hostname=remote_addr[0],
                    ssl_handshake_timeout=self.handshake_timeout_s),
                    self.handshake_timeout_s * 2)
                self._connections[remote_addr] = conn
                self._spawn(self._handle_incoming(*conn, remote_addr))
            self._dialled[remote_addr] = self._dialled.get(remote_addr, 0) + 1
            return conn

    async def _handle_incoming(self, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter, addr: tuple[str, int]) -> None:
        try:
            await super()._handle_incoming(reader, writer, addr)
        except ssl.SSLError as exc:
            log.warning("SIP TLS connection to %s:%s broken: %s", addr[0], addr[1], _why(exc))
            self._connections.pop(addr, None)
            writer.transport.abort()

    async def stop(self) -> None:
        await super().stop()   # the accept loop and every connection's task first
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def release(self, remote_addr: tuple[str, int]) -> None:
        """A call that :meth:`connect` served is over; the last one closes the connection."""
        left = self._dialled.get(remote_addr, 0) - 1
        if left > 0:
            self._dialled[remote_addr] = left
            return
        self._dialled.pop(remote_addr, None)
        conn = self._connections.pop(remote_addr, None)
        if conn is not None:
            conn[1].close()


def _first_line(message: Union[SipRequest, SipResponse]) -> str:
    if isinstance(message, SipRequest):
        return message.method
    return f"{message.status_code} {message.reason_phrase}"


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, asyncio.TimeoutError):
        return "no handshake in time"
    if isinstance(exc, ConnectionResetError):   # what a client that distrusts us does
        return "the peer gave up (does it trust our certificate?)"
    return str(exc) or type(exc).__name__


__all__ = ["DatagramListener", "ConnectionTcpTransport", "TlsListener", "stamp_connection",
           "name_transport"]
