"""A SIP peer over TLS for tests, and the throwaway certificate it needs.

Debian's SIPp is built without TLS, so the TLS tests speak SIP themselves:
:class:`TlsSipPeer` holds one TLS connection (Python's ``ssl``) and writes
each request or answer as text, the way a phone or a PBX puts it on the
wire; it reads what comes back with Content-Length framing into
:class:`SipText`.  It is deliberately not built on the server's SIP stack,
so a mistake there cannot hide itself.  The caller's or callee's RTP is an
:class:`~voice_server.testing.rtp_peer.RtpPeer`, named in the SDP here.

:func:`self_signed` makes a certificate and key for 127.0.0.1 in a folder the
test owns (``cryptography``); nothing is kept after the test.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

COMPACT = {"v": "via", "m": "contact", "i": "call-id", "f": "from", "t": "to",
           "l": "content-length", "c": "content-type"}


def self_signed(folder: Path, name: str = "sip") -> tuple[Path, Path]:
    """A fresh certificate for 127.0.0.1 and ``localhost`` (one day) and its
    key, as ``<name>.crt`` / ``<name>.key`` in ``folder``."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"voice-agent test {name}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    crt, pem = folder / f"{name}.crt", folder / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    pem.chmod(0o600)
    return crt, pem


@dataclass
class SipText:
    """One SIP message as read off the wire."""
    start: str
    headers: list[tuple[str, str]]
    body: str = ""

    def header(self, name: str) -> Optional[str]:
        """The first value of ``name`` (compact forms too), or None."""
        values = self.all(name)
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if COMPACT.get(k.lower(), k.lower()) == name]

    @property
    def status(self) -> Optional[int]:
        return int(self.start.split()[1]) if self.start.startswith("SIP/2.0 ") else None

    @property
    def method(self) -> Optional[str]:
        return None if self.status is not None else self.start.split()[0]

    @property
    def to_tag(self) -> str:
        m = re.search(r";\s*tag=([^;\s>]+)", self.header("to") or "")
        return m.group(1) if m else ""

    def audio_port(self) -> int:
        """The port of the SDP's ``m=audio`` line."""
        m = re.search(r"^m=audio (\d+) ", self.body, re.M)
        assert m, f"no m=audio in {self.body!r}"
        return int(m.group(1))


def sdp(rtp_port: int, session: int, direction: str = "sendrecv", version: int = 1) -> str:
    """A PCMA + telephone-event offer or answer naming ``rtp_port`` on 127.0.0.1
    (PCMA: SIPp's speech capture, which the tests play, is A-law)."""
    return (f"v=0\r\no=peer {session} {version} IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\n"
            f"t=0 0\r\nm=audio {rtp_port} RTP/AVP 8 101\r\na=rtpmap:8 PCMA/8000\r\n"
            "a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=ptime:20\r\n"
            f"a={direction}\r\n")


@dataclass
class TlsSipPeer:
    """One side of SIP over one TLS connection (module docstring)."""
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    received: list[SipText] = field(default_factory=list)  # everything read, in order
    _unread: list[SipText] = field(default_factory=list)   # read, not yet asked for

    @classmethod
    async def connect(cls, port: int, context: ssl.SSLContext,
                      host: str = "127.0.0.1") -> "TlsSipPeer":
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=host), 30)
        return cls(reader, writer)

    @property
    def local(self) -> tuple[str, int]:
        return self.writer.get_extra_info("sockname")[:2]

    async def send(self, text: str) -> None:
        """``text`` with LF or CRLF line ends; Content-Length is filled in."""
        head, _, body = text.replace("\r\n", "\n").partition("\n\n")
        body = body.replace("\n", "\r\n")
        wire = head.replace("\n", "\r\n") + f"\r\nContent-Length: {len(body.encode())}\r\n\r\n"
        self.writer.write(wire.encode() + body.encode())
        await self.writer.drain()

    async def next(self, timeout: float = 30.0) -> SipText:
        """The next message (EOFError when the connection closed)."""
        if self._unread:
            return self._unread.pop(0)
        return await asyncio.wait_for(self._read(), timeout)

    async def expect(self, pick, timeout: float = 30.0, what: str = "a message") -> SipText:
        """The first message ``pick(msg)`` accepts; the others stay unread."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for i, msg in enumerate(self._unread):
            if pick(msg):
                return self._unread.pop(i)
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"gave up waiting for {what}; got {self.received!r}")
            msg = await asyncio.wait_for(self._read(), left)
            if pick(msg):
                return msg
            self._unread.append(msg)

    async def closed_by_peer(self, timeout: float = 30.0) -> bool:
        """True once the other side closed the connection (EOF or a reset)."""
        try:
            while await asyncio.wait_for(self.reader.read(65536), timeout):
                pass
        except (ConnectionError, ssl.SSLError):
            pass
        return True

    async def _read(self) -> SipText:
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("utf-8", "replace").split("\r\n")
        headers = []
        for line in lines[1:]:
            if ":" in line:
                k, _, v = line.partition(":")
                headers.append((k.strip(), v.strip()))
        msg = SipText(lines[0], headers)
        n = int(msg.header("content-length") or 0)
        if n:
            msg.body = (await self.reader.readexactly(n)).decode("utf-8", "replace")
        self.received.append(msg)
        return msg

    async def close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 5)
        except (OSError, asyncio.TimeoutError):
            pass


class TlsCaller:
    """The caller's dialog over a :class:`TlsSipPeer`: INVITE (and re-INVITE),
    ACK, CANCEL, BYE, and the answer to the agent's BYE, each written out in
    full."""

    def __init__(self, peer: TlsSipPeer, server_port: int, user: str = "caller") -> None:
        self.peer = peer
        self.server_port = server_port
        self.user = user
        self.call_id = f"{secrets.token_hex(8)}@tls-test"
        self.tag = secrets.token_hex(4)
        self.cseq = 0
        self.remote_tag = ""
        self.invite_branch = ""   # the last INVITE's transaction (its CANCEL and non-2xx ACK)
        self.session = secrets.randbits(30)   # the SDP's o= session id

    def _request(self, method: str, *, extra: str = "", branch: str = "",
                 cseq: Optional[int] = None) -> str:
        host, port = self.peer.local
        to = f"<sip:agent@127.0.0.1:{self.server_port}>"
        if self.remote_tag:
            to += f";tag={self.remote_tag}"
        return (f"{method} sip:agent@127.0.0.1:{self.server_port};transport=tls SIP/2.0\n"
                f"Via: SIP/2.0/TLS {host}:{port};branch="
                f"{branch or 'z9hG4bK' + secrets.token_hex(6)};rport\n"
                f"From: <sip:{self.user}@127.0.0.1>;tag={self.tag}\nTo: {to}\n"
                f"Call-ID: {self.call_id}\nCSeq: {cseq or self.cseq} {method}\n"
                f"Max-Forwards: 70\n{extra}")

    async def send_invite(self, rtp_port: int, direction: str = "sendrecv") -> None:
        """An INVITE (a re-INVITE once answered): a PCMA offer naming ``rtp_port``."""
        self.cseq += 1
        self.invite_branch = "z9hG4bK" + secrets.token_hex(6)
        host, port = self.peer.local
        offer = sdp(rtp_port, self.session, direction, version=self.cseq)
        await self.peer.send(self._request("INVITE", branch=self.invite_branch, extra=(
            f"Contact: <sip:{self.user}@{host}:{port};transport=tls>\n"
            "Content-Type: application/sdp\n\n") + offer))

    async def final(self, timeout: float = 60.0) -> SipText:
        """The last INVITE's final answer, ACKed (RFC 3261 section 17.1.1.3
        for a refusal: the INVITE's own branch)."""
        cseq = f"{self.cseq} INVITE"
        final = await self.peer.expect(lambda m: (m.status or 0) >= 200 and
                                       m.header("cseq") == cseq, timeout,
                                       f"the final answer to {cseq}")
        self.remote_tag = self.remote_tag or final.to_tag
        await self.peer.send(self._request(
            "ACK", branch="" if final.status < 300 else self.invite_branch) + "\n")
        return final

    async def invite(self, rtp_port: int, direction: str = "sendrecv",
                     timeout: float = 60.0) -> SipText:
        """:meth:`send_invite`, then its :meth:`final` answer."""
        await self.send_invite(rtp_port, direction)
        return await self.final(timeout)

    async def cancel(self, timeout: float = 30.0) -> SipText:
        """CANCEL the ringing INVITE; returns the CANCEL's own answer."""
        await self.peer.send(self._request("CANCEL", branch=self.invite_branch) + "\n")
        return await self.peer.expect(lambda m: m.header("cseq") == f"{self.cseq} CANCEL"
                                      and m.status is not None, timeout, "the CANCEL's answer")

    async def bye(self, timeout: float = 30.0) -> SipText:
        self.cseq += 1
        await self.peer.send(self._request("BYE") + "\n")
        return await self.peer.expect(lambda m: m.header("cseq") == f"{self.cseq} BYE"
                                      and m.status is not None, timeout, "the BYE's answer")

    async def answer_bye(self, timeout: float = 30.0) -> SipText:
        """Wait for the agent's BYE and answer it 200; returns the BYE."""
        bye = await self.peer.expect(lambda m: m.method == "BYE", timeout, "the agent's BYE")
        await self.peer.send(answer(bye, 200, "OK") + "\n")
        return bye


def answer(request: SipText, status: int, reason: str, *, to_tag: str = "",
           extra: str = "") -> str:
    """A response to ``request`` (its Via, From, To, Call-ID and CSeq copied)."""
    lines = [f"SIP/2.0 {status} {reason}"]
    lines += [f"Via: {v}" for v in request.all("via")]
    to = request.header("to") or ""
    if to_tag and ";tag=" not in to:
        to += f";tag={to_tag}"
    lines += [f"From: {request.header('from')}", f"To: {to}",
              f"Call-ID: {request.header('call-id')}", f"CSeq: {request.header('cseq')}"]
    return "\n".join(lines) + "\n" + extra


__all__ = ["TlsSipPeer", "TlsCaller", "SipText", "self_signed", "sdp", "answer"]
