"""The endpoint registered with a registrar: Kamailio (Debian ``kamailio``) is
the PBX or trunk proxy.  The server registers its address-of-record there
(``sip.register``), and a caller (SIPp) who dials that address through
Kamailio reaches the agent: the INVITE is routed by the registration alone.
When the server stops it unregisters.

Kamailio either takes every REGISTER, or asks as a PBX does (401 with a
``qop="auth"`` digest challenge, checked against a password in its config):
with the right password the agent registers, is refreshed on the short
interval the registrar grants (challenged again each time) and is called;
with a wrong one it is not registered, says why (log, ``GET
/v1/sip/registration``), keeps trying and takes calls as before.

Socket-free below: aiosipua's registration as we correct it (a stale
nonce, our own binding's interval, the refresh schedule)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiosipua import SipMessage, SipUAC
from aiosipua.auth import SipDigestAuth
from aiosipua.registration import RegistrationState

from voice_server.transports.sip.endpoint import SipEndpoint
from voice_server.transports.sip.registration import AgentRegistration, refresh_after
from voice_server.transports.sip.registration_api import registration_routes
from voice_server.transports.sip.settings import RegisterSettings, SipSettings
from voice_server.testing.kamailio import kamailio, kamailio_available
from voice_server.testing.rtp_peer import RtpPeer
from voice_server.testing.sipp import SippCall, free_port, sipp_available
from .test_sip import _request, _udp_exchange, nothing_left, until
from .test_sip_outbound import api

# `make setup` installs both peers: missing is a failure, not a skip
assert sipp_available() and kamailio_available(), "SIPp or Kamailio missing: run `make setup`"
pytestmark = [pytest.mark.timeout(120)]

PASSWORD = "right-secret"


def registered_endpoint(server, kport: int, rtp: int, **register) -> SipEndpoint:
    """A started SipEndpoint on the shared server that registers at Kamailio."""
    settings = server.app.state.settings.model_copy(update={"sip": SipSettings(
        enabled=True, port=free_port(), rtp_ports=(rtp, rtp + 38),
        registration=RegisterSettings(registrar=f"127.0.0.1:{kport}",
                                      aor="sip:agent@127.0.0.1", **register))})
    ep = SipEndpoint(server.pipeline, settings)
    server.call(ep.start)
    return ep


async def registration_status(server, ep: SipEndpoint) -> tuple[int, dict]:
    from starlette.applications import Starlette
    app = Starlette(routes=registration_routes(lambda: ep, ep.settings))
    async with api(server, app) as client:
        r = await client.get("/v1/sip/registration")
    return r.status_code, r.json()


async def test_registered_through_kamailio_and_called_through_it(server):
    kport = free_port()
    with kamailio(kport):
        ep = registered_endpoint(server, kport, 34200, expires=60)
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


async def test_digest_registration_is_refreshed_and_routes_a_call(server):
    """Kamailio challenges every REGISTER (401, qop=auth) and grants 10 s: the
    agent answers with the right credentials, is called through it, and its
    refresh (challenged again) is accepted before the binding lapses."""
    kport = free_port()
    with kamailio(kport, password=PASSWORD, max_expires=10) as k:
        ep = registered_endpoint(server, kport, 34240, user="agent", password=PASSWORD,
                                 expires=60)
        peer = await RtpPeer.open()
        caller = None
        try:
            await until(lambda: ep.registration.state is RegistrationState.REGISTERED, 20,
                        "the registration")
            status, body = await registration_status(server, ep)
            assert status == 200 and body["state"] == "registered", body
            assert body["expires_s"] == 10 and body["last_error"] is None, body
            log = k.log()
            assert "REGISTER challenged" in log
            authorized = [line for line in log.splitlines() if "REGISTER authorized" in line]
            assert authorized and 'username="agent"' in authorized[0]
            assert "qop=auth" in authorized[0] and "nc=00000001" in authorized[0]
            assert 'realm="127.0.0.1"' in authorized[0] and "cnonce=" in authorized[0]
            # dialled at the address-of-record, through the registrar: the agent answers
            caller = asyncio.ensure_future(
                SippCall(kport, peer.port).invite().pause(1500).bye().arun(60))
            await until(lambda: ep.calls, 20, "the call to reach the agent")
            result = await caller
            assert result.ok, result.errors or result.stderr
            await nothing_left(server, ep)
            # the refresh, due at 5 s of the 10 granted, is challenged and accepted
            await until(lambda: ep.registration.refreshes >= 1, 30, "a refresh")
            assert ep.registration.state is RegistrationState.REGISTERED
            assert ep.registration.last_error is None
            assert k.log().count("REGISTER authorized") >= 2
            assert "REGISTER refused" not in k.log()
        finally:
            if caller is not None:
                caller.cancel()
            peer.close()
            server.call(ep.close)
        assert ep.registration.state is RegistrationState.UNREGISTERED  # Expires: 0, answered


async def test_a_wrong_password_fails_cleanly_and_is_tried_again(server, caplog):
    kport = free_port()
    caplog.set_level(logging.INFO, logger="voice_server.transports.sip")
    with kamailio(kport, password=PASSWORD) as k:
        ep = registered_endpoint(server, kport, 34280, user="agent", password="wrong",
                                 retry_s=1)
        peer = await RtpPeer.open()
        try:
            await until(lambda: ep.registration.last_error is not None, 20, "the refusal")
            assert ep.registration.state is RegistrationState.FAILED
            assert "REGISTER refused" in k.log()   # it checked our answer, and it was wrong
            errors = [r for r in caplog.records if r.levelno == logging.ERROR
                      and "registration of sip:agent@127.0.0.1" in r.getMessage()]
            assert errors and "refused the credentials of user 'agent'" in \
                errors[0].getMessage() and "password" in errors[0].getMessage()
            await until(lambda: ep.registration.attempts >= 3, 20, "the retries")
            # read between two attempts: each retry says "registering" while it runs
            await until(lambda: ep.registration.state is RegistrationState.FAILED, 20,
                        "the state between retries")
            status, body = await registration_status(server, ep)
            assert status == 200 and body["state"] in ("failed", "registering"), body
            assert body["expires_s"] is None
            assert body["last_error"]["status"] == 401 and body["registered_at"] is None
            assert "password" in body["last_error"]["message"] and body["next_attempt_at"]
            # Kamailio has no binding for the agent: a call to it is not routed
            result = await SippCall(kport, peer.port, expect=404).invite().arun(30)
            assert result.ok, result.errors or result.stderr
            # the endpoint itself goes on: its listener answers
            reply = await asyncio.to_thread(_udp_exchange, ep.sip.port,
                                            _request("OPTIONS", ep.sip.port), 5.0)
            assert reply.startswith(b"SIP/2.0 200")
        finally:
            peer.close()
            server.call(ep.close)
        assert ep.registration.state is RegistrationState.FAILED


async def test_the_registration_api_without_registration(server):
    from starlette.applications import Starlette
    app = Starlette(routes=registration_routes(lambda: None, server.app.state.settings))
    async with api(server, app) as client:
        r = await client.get("/v1/sip/registration")
        assert r.status_code == 404 and r.json()["error"]["code"] == "sip_disabled"
    settings = server.app.state.settings.model_copy(update={"sip": SipSettings(enabled=True)})
    ep = SipEndpoint(server.pipeline, settings)   # never started: it registers nowhere
    app = Starlette(routes=registration_routes(lambda: ep, settings))
    async with api(server, app) as client:
        r = await client.get("/v1/sip/registration")
        assert r.status_code == 404 and r.json()["error"]["code"] == "registration_off"
        r = await client.get("/v1/sip/registration", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401


def test_register_settings_are_checked():
    with pytest.raises(ValueError, match="aor"):
        RegisterSettings(registrar="pbx.example", aor="agent@pbx.example")
    with pytest.raises(ValueError, match="together"):
        RegisterSettings(registrar="pbx.example", aor="sip:a@pbx.example", user="a")
    with pytest.raises(ValueError, match="host:port"):
        RegisterSettings(registrar="pbx.example:99999", aor="sip:a@pbx.example")
    with pytest.raises(ValueError, match="retry_s"):
        RegisterSettings(registrar="pbx.example", aor="sip:a@pbx.example", retry_s=0)
    assert RegisterSettings(registrar="pbx.example", aor="sip:a@pbx.example").registrar_addr \
        == ("pbx.example", 5060)


# ------------------------------------------------------------------ socket-free
def test_the_refresh_goes_out_before_the_binding_lapses():
    assert refresh_after(300) == 270 and refresh_after(3600) == 3240   # 90%, as aiosipua
    assert refresh_after(30) == 25 and refresh_after(10) == 5          # 5 s to spare
    assert refresh_after(4) == 2                                       # half way at least
    for granted in range(1, 4000):
        assert granted / 2 <= refresh_after(granted) < granted


class Wire:
    """The UAC's transport, kept socket-free for the unit below: what is sent stays here."""
    local_addr = ("127.0.0.1", 5070)
    reliable = False

    def __init__(self) -> None:
        self.sent: list = []

    def send(self, msg, addr) -> None:
        self.sent.append(msg)


def answer(request, status: int, reason: str, *headers: str):
    lines = [f"SIP/2.0 {status} {reason}", f"Via: {request.headers.get_first('via')}",
             f"From: {request.headers.get_first('from')}",
             f"To: {request.headers.get_first('to')};tag=registrar",
             f"Call-ID: {request.call_id}", f"CSeq: {request.headers.get_first('cseq')}",
             *headers, "Content-Length: 0", "", ""]
    return SipMessage.parse("\r\n".join(lines))


CHALLENGE = 'WWW-Authenticate: Digest realm="pbx.test", nonce="{}", qop="auth", algorithm=MD5'


async def test_a_stale_nonce_is_answered_and_our_own_binding_sets_the_refresh():
    wire = Wire()
    uac = SipUAC(wire)
    reg = AgentRegistration(uac, "sip:agent@pbx.test", ("127.0.0.1", 5060), expires=300,
                            auth=SipDigestAuth("agent", "pw"))
    failed: list = []
    reg.on_failed = lambda r, status, reason: failed.append(status)
    try:
        reg.register()
        uac.handle_response(answer(wire.sent[-1], 401, "Unauthorized", CHALLENGE.format("n1")),
                            ("127.0.0.1", 5060))
        creds = wire.sent[-1].get_header("authorization")
        assert 'nonce="n1"' in creds and "qop=auth" in creds and "nc=00000001" in creds
        # the registrar's nonce ran out meanwhile: answered again, with the new one
        uac.handle_response(answer(wire.sent[-1], 401, "Unauthorized",
                                   CHALLENGE.format("n2") + ", stale=true"), ("127.0.0.1", 5060))
        assert len(wire.sent) == 3 and 'nonce="n2"' in wire.sent[-1].get_header("authorization")
        assert not failed and reg.state is RegistrationState.REGISTERING
        # the 200 lists another device's binding first: ours decides the interval
        uac.handle_response(answer(wire.sent[-1], 200, "OK",
                                   "Contact: <sip:agent@10.0.0.9:5060>;expires=3000",
                                   f"Contact: <{reg.contact_uri}>;expires=120"),
                            ("127.0.0.1", 5060))
        assert reg.state is RegistrationState.REGISTERED and reg.granted_expires == 120
        # a refusal of the credentials themselves (no stale) fails at once
        reg.register()
        uac.handle_response(answer(wire.sent[-1], 401, "Unauthorized", CHALLENGE.format("n3")),
                            ("127.0.0.1", 5060))
        uac.handle_response(answer(wire.sent[-1], 401, "Unauthorized", CHALLENGE.format("n4")),
                            ("127.0.0.1", 5060))
        assert failed == [401] and reg.state is RegistrationState.FAILED
    finally:
        reg._cancel_timers()
