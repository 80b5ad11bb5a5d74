"""The endpoint registered with a registrar: Kamailio (Debian ``kamailio``) is
the PBX or trunk proxy.  The server registers its address-of-record there
(``sip.register``), and a caller (SIPp) who dials that address through
Kamailio reaches the agent: the INVITE is routed by the registration alone.
When the server stops it unregisters."""

from __future__ import annotations

import asyncio

import pytest
from aiosipua.registration import RegistrationState

from voice_server.transports.sip.endpoint import SipEndpoint
from voice_server.transports.sip.settings import RegisterSettings, SipSettings
from voice_server.testing.kamailio import kamailio, kamailio_available
from voice_server.testing.rtp_peer import RtpPeer
from voice_server.testing.sipp import SippCall, free_port, sipp_available
from .test_sip import nothing_left, until

# `make setup` installs both peers: missing is a failure, not a skip
assert sipp_available() and kamailio_available(), "SIPp or Kamailio missing: run `make setup`"
pytestmark = [pytest.mark.timeout(120)]


async def test_registered_through_kamailio_and_called_through_it(server):
    kport = free_port()
    with kamailio(kport):
        settings = server.app.state.settings.model_copy(update={"sip": SipSettings(
            enabled=True, port=free_port(), rtp_ports=(34200, 34238), registration=RegisterSettings(
                registrar=f"127.0.0.1:{kport}", aor="sip:agent@127.0.0.1", expires=60))})
        ep = SipEndpoint(server.pipeline, settings)
        server.call(ep.start)
        peer = await RtpPeer.open()
        try:
            await until(lambda: ep.registration.state is RegistrationState.REGISTERED, 20,
                        "the registration")
            result = await SippCall(kport, peer.port).invite().pause(1500).bye().arun(60)
            assert result.ok, result.errors or result.stderr
            await nothing_left(server, ep)
        finally:
            peer.close()
            server.call(ep.close)
        assert ep.registration.state is not RegistrationState.REGISTERED   # unregistered


def test_register_settings_are_checked():
    with pytest.raises(ValueError, match="aor"):
        RegisterSettings(registrar="pbx.example", aor="agent@pbx.example")
    with pytest.raises(ValueError, match="together"):
        RegisterSettings(registrar="pbx.example", aor="sip:a@pbx.example", user="a")
    with pytest.raises(ValueError, match="host:port"):
        RegisterSettings(registrar="pbx.example:99999", aor="sip:a@pbx.example")
    assert RegisterSettings(registrar="pbx.example", aor="sip:a@pbx.example").registrar_addr \
        == ("pbx.example", 5060)
