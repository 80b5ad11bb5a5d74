"""SIP over TLS (``sip.tls``) against real TLS peers on 127.0.0.1.

Debian's SIPp is built without TLS, so the peer is
:class:`~voice_server.testing.sip_tls_peer.TlsSipPeer`: Python's ``ssl`` and
SIP written out as text, with an :class:`RtpPeer` for the media.  The
certificate is made for the test (``self_signed``) in a temporary folder.

One endpoint (UDP, TCP and TLS) on the shared test server serves every
test but the mutual-TLS one: a call is answered over TLS (the 200 OK with
SDP on the caller's connection, our Contact ``transport=tls``), the agent's
voice arrives over RTP, BYE ends it either way, and nothing is left; a
plain-text client, a client that distrusts our certificate and one that
never finishes its handshake are dropped and logged, and the next call is
answered, held and resumed by re-INVITEs and ended by the caller (and one
cancelled while it rings gets 487); a call the agent places to a ``;transport=tls`` URI goes out over
TLS (and one to a callee whose certificate we do not trust fails).  The
settings name a missing file, a file that is not PEM and a key that is not
the certificate's.  Every wait is bounded; nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

import pytest
from pydantic import ValidationError

from voice_server.transports.sip.endpoint import SipEndpoint
from voice_server.transports.sip.settings import SipSettings, TlsSettings
from voice_server.testing.rtp_peer import RtpPeer
from voice_server.testing.sip_tls_peer import TlsCaller, TlsSipPeer, answer, sdp, self_signed
from voice_server.testing.sipp import SPEECH_PCAP, free_port
from voice_server.testing.waiting import answered_call, until

from .test_sip import nothing_left
from .test_sip_outbound import api

pytestmark = [pytest.mark.timeout(180)]
LOG = "voice_server.transports.sip"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Our certificate and key, and another pair nobody trusts."""
    folder = tmp_path_factory.mktemp("sip-tls")
    return self_signed(folder, "ours"), self_signed(folder, "stranger")


def tls_settings(certs, **extra) -> TlsSettings:
    (crt, key), _ = certs
    return TlsSettings(port=free_port(), certfile=str(crt), keyfile=str(key), ca_file=str(crt),
                       **{"handshake_timeout_s": 5.0, **extra})


def start_endpoint(server, rtp: tuple[int, int], tls: TlsSettings, **sip) -> SipEndpoint:
    settings = server.app.state.settings.model_copy(update={
        "sip": SipSettings(enabled=True, port=free_port(), rtp_ports=rtp, tls=tls, **sip)})
    ep = SipEndpoint(server.pipeline, settings)
    server.call(ep.start)
    return ep


@pytest.fixture(scope="module")
def tls_ep(server, certs):
    ep = start_endpoint(server, (34400, 34438), tls_settings(certs))
    yield ep
    server.call(ep.close)


def trusting(certs) -> ssl.SSLContext:
    """A client context that trusts our certificate (and checks the host name)."""
    return ssl.create_default_context(cafile=str(certs[0][0]))


async def all_closed(server, ep: SipEndpoint) -> None:
    await nothing_left(server, ep)
    await until(lambda: ep.tls.connections == 0, 15, "the TLS connections to close")


def test_settings_name_a_missing_file_a_bad_one_and_a_key_that_does_not_match(certs, tmp_path):
    (crt, key), (other_crt, other_key) = certs
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    for kwargs, said in (
            ({"certfile": str(tmp_path / "nope.crt"), "keyfile": str(key)}, "no such file"),
            ({"certfile": str(junk), "keyfile": str(key)}, "tls.certfile"),
            ({"certfile": str(crt), "keyfile": str(junk)}, "holds no PEM private key"),
            ({"certfile": str(crt), "keyfile": str(other_key)}, "is not the private key"),
            ({"certfile": str(crt), "keyfile": str(key), "ca_file": str(junk)}, "tls.ca_file"),
            ({"certfile": str(crt), "keyfile": str(key), "verify_client": True}, "ca_file")):
        with pytest.raises(ValidationError, match=said):
            SipSettings(enabled=True, tls=kwargs)
    ok = SipSettings(enabled=True, tls={"certfile": str(crt), "keyfile": str(key)})
    assert ok.tls.port == 5061 and not ok.tls.verify_client
    assert SipSettings(enabled=True, transports=[], tls=ok.tls).transports == ()  # TLS only
    with pytest.raises(ValidationError, match="transports"):
        SipSettings(enabled=True, transports=[])
    with pytest.raises(ValidationError, match="tls.port"):
        SipSettings(enabled=True, port=5061, tls={"certfile": str(crt), "keyfile": str(key)})


def test_our_messages_name_the_transport_and_tls_uris_route_to_5061():
    from aiosipua import SipMessage

    from voice_server.transports.sip.listeners import name_transport
    from voice_server.transports.sip.outbound import route_of, transport_of
    bye = SipMessage.parse(
        b"BYE sip:c@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.2:5061;branch=z9hG4bK1;rport\r\n"
        b"Via: SIP/2.0/TLS proxy:5061;branch=z9hG4bK0\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:c@h>"
        b";tag=2\r\nCall-ID: x\r\nCSeq: 2 BYE\r\nContact: <sip:10.0.0.2:5061>;expires=60\r\n"
        b"Content-Length: 0\r\n\r\n")
    name_transport(bye, "tls")
    assert bye.headers.get("via") == ["SIP/2.0/TLS 10.0.0.2:5061;branch=z9hG4bK1;rport",
                                      "SIP/2.0/TLS proxy:5061;branch=z9hG4bK0"]
    assert bye.headers.get("contact") == ["<sip:10.0.0.2:5061;transport=tls>;expires=60"]
    ok = SipMessage.parse(b"SIP/2.0 200 OK\r\nVia: SIP/2.0/TCP 10.0.0.9:5060;branch=z9hG4bK2\r\n"
                          b"From: <sip:a@h>;tag=1\r\nTo: <sip:c@h>;tag=2\r\nCall-ID: x\r\n"
                          b"CSeq: 1 INVITE\r\nContact: <sip:h:5061;transport=TLS>\r\n"
                          b"Content-Length: 0\r\n\r\n")
    name_transport(ok, "tls")   # a response's Via is the peer's; a named transport stays
    assert ok.headers.get("via") == ["SIP/2.0/TCP 10.0.0.9:5060;branch=z9hG4bK2"]
    assert ok.headers.get("contact") == ["<sip:h:5061;transport=TLS>"]
    for uri, transport, route in (
            ("sips:bob@pbx.example", "tls", ("pbx.example", 5061)),
            ("sip:bob@10.0.0.5;transport=TLS", "tls", ("10.0.0.5", 5061)),
            ("sip:bob@10.0.0.5:5071;transport=tls", "tls", ("10.0.0.5", 5071)),
            ("sip:bob@10.0.0.5", "udp", ("10.0.0.5", 5060)),
            ("sip:10.0.0.5:5080", "udp", ("10.0.0.5", 5080))):
        assert (transport_of(uri), route_of(uri, None)) == (transport, route), uri


async def test_a_call_over_tls_is_answered_spoken_to_and_hung_up(server, tls_ep, certs):
    ep = tls_ep
    port = ep.sip.tls.port
    rtp = await RtpPeer.open()
    peer = await TlsSipPeer.connect(port, trusting(certs))
    try:
        caller = TlsCaller(peer, port)
        ok = await caller.invite(rtp.port)
        # every answer came back on the caller's TLS connection, the 200 with our SDP
        assert [m.status for m in peer.received] == [100, 180, 200], peer.received
        assert ok.header("content-type") == "application/sdp" and ok.audio_port()
        contact = ok.header("contact")
        assert f"127.0.0.1:{port};transport=tls>" in contact, contact
        call = await answered_call(ep)
        assert call.info.transport == "tls" and call.plan.format.name == "PCMA"
        # the caller speaks; the agent's voice comes back over RTP
        rtp.remote = ("127.0.0.1", ok.audio_port())
        await rtp.send_pcap(SPEECH_PCAP)
        await until(lambda: rtp.voiced_frames() > 10, 60, "the agent's reply")
        # the agent hangs up: its BYE comes over the same connection and says TLS
        await server.acall(call.control.hang_up, "done")
        bye = await caller.answer_bye()
        assert bye.header("via").startswith("SIP/2.0/TLS "), bye.header("via")
        assert bye.header("call-id") == caller.call_id
        await nothing_left(server, ep)
        assert call.end_reason == "done"
    finally:
        await peer.close()
        rtp.close()
    await all_closed(server, ep)


async def test_bad_clients_are_dropped_and_logged_and_the_next_call_is_answered(
        server, tls_ep, certs, caplog):
    ep = tls_ep
    port = ep.sip.tls.port
    with caplog.at_level(logging.WARNING, logger=LOG):
        # plain SIP over TCP on the TLS port: dropped
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"OPTIONS sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:9;"
                     b"branch=z9hG4bKplain\r\nContent-Length: 0\r\n\r\n")
        assert await TlsSipPeer(reader, writer).closed_by_peer()
        writer.close()
        # a client that does not trust our certificate gives up in the handshake
        with pytest.raises(ssl.SSLError):
            await TlsSipPeer.connect(port, ssl.create_default_context())
        # a client that never starts its handshake is dropped after handshake_timeout_s
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await TlsSipPeer(reader, writer).closed_by_peer()
        writer.close()
        await until(lambda: sum("TLS handshake" in r.getMessage() for r in caplog.records) >= 3,
                    15, "the three failed handshakes to be logged")
    await until(lambda: ep.tls.connections == 0, 15, "the dropped connections to go")
    # the next call over TLS is answered (garbage on its connection first is only
    # logged); re-INVITEs hold and resume it, the caller's BYE ends it
    rtp = await RtpPeer.open()
    peer = await TlsSipPeer.connect(port, trusting(certs))
    try:
        await peer.send("NOT SIP AT ALL\n\n")
        caller = TlsCaller(peer, port)
        ok = await caller.invite(rtp.port)
        assert ok.status == 200 and "transport=tls" in ok.header("contact")
        call = await answered_call(ep)
        # a CANCEL that comes after the answer changes nothing (200, the call goes on)
        assert (await caller.cancel()).status == 200
        assert not call.finished and ep.uas["tls"].get_call(caller.call_id) is not None
        held = await caller.invite(rtp.port, "sendonly")
        assert held.status == 200 and "a=recvonly" in held.body, held
        await until(lambda: call.held, 10, "the hold")
        resumed = await caller.invite(rtp.port, "sendrecv")
        assert resumed.status == 200 and "a=sendrecv" in resumed.body, resumed
        await until(lambda: not call.held, 10, "the resume")
        assert (await caller.bye()).status == 200
        await until(lambda: call.finished, 10, "the call to end")
        assert call.end_reason == "caller hung up"
        await nothing_left(server, ep)
        # a call cancelled while it rings: 200 for the CANCEL, 487 for the INVITE; the
        # same for an INVITE and its CANCEL back to back (one read, often)
        decide = ep.on_incoming

        async def never(info):   # the operator never decides
            await asyncio.sleep(3600)

        ep.on_incoming = never
        try:
            ringing = TlsCaller(peer, port)
            await ringing.send_invite(rtp.port)
            await peer.expect(lambda m: m.status == 180 and
                              m.header("call-id") == ringing.call_id, 20, "the ringing")
            assert (await ringing.cancel()).status == 200
            assert (await ringing.final()).status == 487
            hasty = TlsCaller(peer, port)
            await hasty.send_invite(rtp.port)
            assert (await hasty.cancel()).status == 200
            assert (await hasty.final()).status == 487
            await nothing_left(server, ep)
        finally:
            ep.on_incoming = decide
    finally:
        await peer.close()
        rtp.close()
    await all_closed(server, ep)


async def test_a_caller_gone_before_the_answer_leaves_nothing(server, certs):
    """Its answers are lost (not raised into the call's code); the call it left
    behind ends by itself when no RTP comes."""
    ep = start_endpoint(server, (34540, 34578), tls_settings(certs), rtp_timeout_s=1.0)
    port = ep.sip.tls.port
    ended: list[str] = []
    ep.on_ended = ended.append   # told each answered call's id once it is over
    rtp = await RtpPeer.open()
    try:
        gone = await TlsSipPeer.connect(port, trusting(certs))
        await TlsCaller(gone, port).send_invite(rtp.port)
        await gone.close()
        await until(lambda: ended, 30, "the call answered to nobody to time out")
        await all_closed(server, ep)
    finally:
        rtp.close()
        server.call(ep.close)


async def test_mutual_tls_drops_a_caller_without_a_certificate(server, certs):
    ep = start_endpoint(server, (34500, 34538), tls_settings(certs, verify_client=True),
                        transports=())   # TLS only
    assert set(ep.uas) == {"tls"}
    port = ep.sip.tls.port
    (crt, key), _ = certs
    try:
        try:   # TLS 1.3: the client is done before the server refuses it
            anonymous = await TlsSipPeer.connect(port, trusting(certs))
        except ssl.SSLError:
            pass
        else:
            assert await anonymous.closed_by_peer()
            await anonymous.close()
        ctx = trusting(certs)
        ctx.load_cert_chain(str(crt), str(key))
        known = await TlsSipPeer.connect(port, ctx)
        host, lport = known.local
        await known.send(f"OPTIONS sip:agent@127.0.0.1:{port};transport=tls SIP/2.0\n"
                         f"Via: SIP/2.0/TLS {host}:{lport};branch=z9hG4bKmtls;rport\n"
                         "From: <sip:pbx@127.0.0.1>;tag=m1\nTo: <sip:agent@127.0.0.1>\n"
                         "Call-ID: mtls@test\nCSeq: 1 OPTIONS\nMax-Forwards: 70\n\n")
        assert (await known.next()).status == 200
        await known.close()
        await until(lambda: ep.tls.connections == 0, 15, "the TLS connections to close")
    finally:
        server.call(ep.close)


async def serve_callee(certs, which: int):
    """A TLS listener on 127.0.0.1 with certificate ``which`` (0: ours, 1: the
    stranger's); returns it and a queue of the peers that connect."""
    crt, key = certs[which]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    peers: asyncio.Queue = asyncio.Queue()

    async def connected(reader, writer):
        await peers.put(TlsSipPeer(reader, writer))

    return await asyncio.start_server(connected, "127.0.0.1", 0, ssl=ctx), peers


async def test_a_call_placed_over_tls(server, tls_ep, certs):
    ep = tls_ep
    rtp = await RtpPeer.open()
    callee_srv, peers = await serve_callee(certs, 0)
    callee_port = callee_srv.sockets[0].getsockname()[1]
    async with api(server, app_of(ep)) as client:
        try:
            r = await client.post("/v1/sip/calls", json={
                "to": f"sip:bob@127.0.0.1:{callee_port};transport=tls",
                "session": {"instructions": "Greet the person who answers in one sentence."}})
            assert r.status_code == 201, r.text
            call_id = r.json()["id"]
            callee = await asyncio.wait_for(peers.get(), 30)
            invite = await callee.expect(lambda m: m.method == "INVITE", 30, "the INVITE")
            assert invite.header("via").startswith("SIP/2.0/TLS "), invite.header("via")
            assert f":{ep.sip.tls.port};transport=tls>" in invite.header("contact")
            await callee.send(answer(invite, 180, "Ringing", to_tag="callee1") + "\n")
            await callee.send(answer(invite, 200, "OK", to_tag="callee1", extra=(
                f"Contact: <sip:bob@127.0.0.1:{callee_port};transport=tls>\n"
                "Content-Type: application/sdp\n\n") + sdp(rtp.port, 7)))
            ack = await callee.expect(lambda m: m.method == "ACK", 30, "the ACK")
            assert ack.header("via").startswith("SIP/2.0/TLS ")
            # (answered: the session is up, not only the call registered)
            await until(lambda: ep.placed_call(call_id).status == "answered", 20, "the answer")
            call = ep.call(call_id)
            assert call.info.transport == "tls"
            # the agent speaks first: its voice reaches the callee's RTP
            await server.acall(call.runner.client_event, {"type": "response.create"})
            await until(lambda: rtp.voiced_frames() > 10, 60, "the agent's voice")
            r = await client.post(f"/v1/sip/calls/{call_id}/hangup")
            assert r.status_code == 200, r.text
            bye = await callee.expect(lambda m: m.method == "BYE", 30, "our BYE")
            assert bye.header("via").startswith("SIP/2.0/TLS ")
            await callee.send(answer(bye, 200, "OK") + "\n")
            await until(lambda: ep.placed_call(call_id).status == "ended", 20, "ended")
            await all_closed(server, ep)
            assert not ep.uas["tls"].uac._calls
            await callee.close()
        finally:
            callee_srv.close()
            rtp.close()
        # a callee whose certificate we do not trust: the call fails, naming TLS
        stranger, _ = await serve_callee(certs, 1)
        try:
            port = stranger.sockets[0].getsockname()[1]
            r = await client.post("/v1/sip/calls", json={"to": f"sips:bob@127.0.0.1:{port}"})
            call_id = r.json()["id"]
            await until(lambda: ep.placed_call(call_id).finished, 30, "an outcome")
            info = ep.placed_call(call_id)
            assert info.status == "failed" and "TLS connection" in info.reason, info
            assert "certificate" in info.reason, info
        finally:
            stranger.close()
        await all_closed(server, ep)


def app_of(ep: SipEndpoint):
    """The dial API's own routes, bound to ``ep`` (as build_app binds them)."""
    from starlette.applications import Starlette

    from voice_server.transports.sip.dial_api import dial_routes
    return Starlette(routes=dial_routes(lambda: ep, ep.settings))
