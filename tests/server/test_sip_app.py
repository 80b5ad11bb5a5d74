"""The app's own wiring of the SIP endpoint: off by default; when on, the app's
lifespan binds it at startup and closes it (port freed) at shutdown.  Built by
``build_app`` over the shared server's pipeline, on that server's loop."""

from __future__ import annotations

import asyncio
import socket

from voice_server.app import build_app
from voice_server.settings import ServerSettings
from voice_server.testing.sipp import free_port, udp_port_taken
from voice_server.transports.sip.settings import SipSettings


def _options(port: int) -> bytes:
    msg = (f"OPTIONS sip:agent@127.0.0.1:{port} SIP/2.0\r\n"
           "Via: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK-app-1;rport\r\n"
           "From: <sip:c@127.0.0.1>;tag=a\r\nTo: <sip:agent@127.0.0.1>\r\n"
           "Call-ID: app@test\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\n"
           "Content-Length: 0\r\n\r\n").encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.sendto(msg, ("127.0.0.1", port))
        return s.recvfrom(65535)[0]
    except socket.timeout:
        return b""
    finally:
        s.close()


def test_sip_is_off_by_default_and_the_lifespan_runs_it_when_on(server):
    assert not ServerSettings().sip.enabled
    port = free_port()

    async def cycle():
        off = build_app(server.pipeline, ServerSettings())
        on = build_app(server.pipeline, ServerSettings(sip=SipSettings(
            enabled=True, port=port, rtp_ports=(34600, 34640))))
        async with on.router.lifespan_context(on):
            answer = await asyncio.to_thread(_options, port)
        return off.state.sip, answer

    off, answer = server.call(cycle)
    assert off is None
    assert answer.startswith(b"SIP/2.0 200"), answer[:80]
    assert not udp_port_taken(port)  # closed with the app
