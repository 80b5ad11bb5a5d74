"""The SIP endpoint against real SIP peers: SIPp (Debian ``sip-tester``) does the
signalling over UDP or TCP, an :class:`RtpPeer` on 127.0.0.1 is the caller's RTP
(SIPp names its port in the SDP).  The endpoint runs on the shared test server's
pipeline and loop, built as ``build_app`` builds it (the app's own wiring is
checked in test_sip_app.py), with settings of its own per test (ports,
max_sessions, allow_from).

Every wait is bounded and nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from voice_server.session.items import chat_messages
from voice_server.session.call_actions import CallActionsSetting
from voice_server.session_registry import registry_for
from voice_server.transports.sip.endpoint import SipEndpoint
from voice_server.transports.sip.incoming import IncomingCall, Reject
from voice_server.transports.sip.settings import SipSettings
from voice_server.testing.rtp_peer import RtpPeer
from voice_server.testing.waiting import answered_call, until
from voice_server.testing.sipp import (OFFER_G729, OFFER_PCMU, SIPP_SHARE, SPEECH_PCAP,
                                       SippCall, free_port, sipp_available)

# `make setup` installs SIPp: missing is a failure, not a skip
assert sipp_available(), "SIPp (sip-tester) missing: run `make setup`"

_ranges = iter(range(33000, 34000, 40))


@pytest.fixture(scope="module")
def sip_endpoint(server):
    """``make(max_sessions=..., **sip)``: a started SipEndpoint on the shared server."""
    made: list[SipEndpoint] = []

    def make(max_sessions: int = 8, **sip) -> SipEndpoint:
        lo = next(_ranges)
        settings = server.app.state.settings.model_copy(update={
            "max_sessions": max_sessions,
            "sip": SipSettings(enabled=True, port=free_port(), rtp_ports=(lo, lo + 38), **sip)})
        ep = SipEndpoint(server.pipeline, settings)
        server.call(ep.start)
        made.append(ep)
        return ep

    yield make
    for ep in made:
        server.call(ep.close)


async def nothing_left(server, ep: SipEndpoint) -> None:
    """No call, ringing INVITE, RTP port, session or admission place is left."""
    await until(lambda: not ep.calls and not ep.by_sip_id and not ep.ringing
                and not ep.ports.in_use, 10, "the endpoint to forget its calls")
    reg = registry_for(server.pipeline)
    await until(lambda: reg.pending == 0 and not [r for r in reg.runners.values()
                                                  if r.transport == "sip"], 10,
                "the sessions to close")


def reply_texts(call) -> list[str]:
    return [m["content"] for m in chat_messages(list(call.session.conversation.items))
            if m["role"] == "assistant" and m.get("content")]


async def test_spoken_turn_barge_in_keys_out_wrong_source_and_agent_bye(server, sip_endpoint):
    ep = sip_endpoint()
    peer = await RtpPeer.open()
    stranger = await RtpPeer.open("127.0.0.2")
    caller = asyncio.ensure_future(SippCall(ep.sip.port, peer.port).invite()
                                   .await_bye(90000).arun(120))
    try:
        call = await answered_call(ep)
        assert call.plan.format.name == "PCMA" and call.headers  # the INVITE's headers kept
        assert any(h["name"].lower() == "call-id" for h in call.headers)
        peer.remote = stranger.remote = ("127.0.0.1", call.port)
        # a spoken turn: the agent's voice comes back over RTP
        await peer.send_pcap(SPEECH_PCAP)
        await until(lambda: peer.voiced_frames() > 10, 60, "the agent's reply")
        # barge-in over RTP: the caller talks over the reply; its queued audio is
        # dropped and the agent's RTP falls silent while the caller still talks
        barge = asyncio.ensure_future(peer.send_pcap(SPEECH_PCAP))
        await until(lambda: call.media.flushed_frames > 0, 20, "the flush")
        await until(lambda: peer.last_frames_silent(10), 10, "the agent to fall silent")
        await barge
        # RTP from another address is ignored (counted), the call goes on
        await stranger.send_pcap(SIPP_SHARE / "dtmf_2833_5.pcap", source=stranger)
        await until(lambda: call.dropped > 0, 10, "the stranger's RTP to be dropped")
        assert "5" not in call.keys_pressed
        # DTMF out: RFC 4733 events on the call's RTP
        assert await server.acall(call.control.send_dtmf, "1#")
        await until(lambda: peer.keys() == "1#", 10, "the agent's keys")
        assert reply_texts(call)  # the session answered at least once
        # the agent hangs up: SIPp gets a BYE and answers it
        await server.acall(call.control.hang_up, "done")
        result = await caller
        assert result.ok, result.errors or result.stderr
        assert call.end_reason == "done"
        await nothing_left(server, ep)
    finally:
        caller.cancel()
        peer.close()
        stranger.close()


async def test_keys_in_hold_resume_and_caller_bye_over_tcp(server, sip_endpoint):
    ep = sip_endpoint()
    peer = await RtpPeer.open()
    script = (SippCall(ep.sip.port, peer.port, transport="tcp", offer=OFFER_PCMU).invite()
              .pause(300).keys("12#").pause(300)
              .reinvite("sendonly", "recvonly").pause(1500)
              .reinvite("sendrecv", "sendrecv").pause(500).bye())
    caller = asyncio.ensure_future(script.arun(60))
    try:
        call = await answered_call(ep)
        assert call.info.transport == "tcp" and call.plan.format.name == "PCMU"
        await until(lambda: call.held, 20, "the hold")
        assert not call.media.sending and call.runner is not None and not call.finished
        await until(lambda: call.finished or (not call.held and call.media.sending), 20,
                    "the resume")
        result = await caller
        assert result.ok, result.errors or result.stderr
        assert call.keys_pressed == ["1", "2", "#"]
        assert call.end_reason == "caller hung up"
        await nothing_left(server, ep)
    finally:
        caller.cancel()
        peer.close()


async def test_transfer_by_refer_completed_and_refused(server, sip_endpoint):
    ep = sip_endpoint()
    peer = await RtpPeer.open()
    try:
        # the caller's side accepts the REFER and reports the target answered (200):
        # completed, and the agent leaves the call (BYE)
        caller = asyncio.ensure_future(SippCall(ep.sip.port, peer.port).invite()
                                       .transfer(200).await_bye().arun(60))
        call = await answered_call(ep)
        outcome = await server.acall(call.control.transfer, "sip:desk@127.0.0.1", timeout=60)
        assert (outcome.status, outcome.sip_status) == ("completed", 200)
        result = await caller
        assert result.ok, result.errors or result.stderr
        assert call.end_reason == "transferred"
        # a refused REFER: failed with its status, the call goes on
        caller = asyncio.ensure_future(SippCall(ep.sip.port, peer.port).invite()
                                       .transfer(refuse=403).await_bye().arun(60))
        call = await until(lambda: next((c for c in ep.calls.values() if not c.finished),
                                        None), 20, "the second call")
        outcome = await server.acall(call.control.transfer, "tel:+15550100", timeout=60)
        assert (outcome.status, outcome.sip_status) == ("failed", 403) and not call.finished
        assert (await server.acall(call.control.transfer, "http://nope")).status == "failed"
        await server.acall(call.control.hang_up, "done")
        result = await caller
        assert result.ok, result.errors or result.stderr
        await nothing_left(server, ep)
    finally:
        peer.close()


async def test_the_agent_ends_the_call_itself_after_its_goodbye(server, sip_endpoint):
    """The model's own ``end_call`` (turned on for phone calls): the goodbye is
    played out on the RTP clock, then the caller gets our BYE."""
    settings = server.app.state.settings.model_copy(update={
        "phone_call_actions": CallActionsSetting.model_validate({"end_call": True}),
        "sip": SipSettings(enabled=True, port=free_port(), rtp_ports=(34300, 34338))})
    ep = SipEndpoint(server.pipeline, settings)
    server.call(ep.start)
    peer = await RtpPeer.open()
    caller = asyncio.ensure_future(SippCall(ep.sip.port, peer.port).invite()
                                   .await_bye(60000).arun(90))
    try:
        call = await answered_call(ep)
        peer.remote = ("127.0.0.1", call.port)
        seen: list[dict] = []
        await server.acall(call.runner.watch, seen.append)
        await server.acall(call.runner.client_event, {
            "type": "response.create", "response": {
                "instructions": "Say goodbye, then end the call.",
                "tool_choice": {"type": "function", "name": "end_call"}}})
        result = await caller          # our BYE came, and SIPp answered it
        assert result.ok, result.errors or result.stderr
        assert call.end_reason == "end_call", call.end_reason
        outputs = [e["item"] for e in seen if e.get("type") == "conversation.item.added"
                   and e["item"].get("type") == "function_call_output"]
        assert outputs and '"ended"' in outputs[-1]["output"], [e.get("type") for e in seen]
        await nothing_left(server, ep)
    finally:
        caller.cancel()
        peer.close()
        server.call(ep.close)


async def test_cancel_while_ringing_and_the_hook_refusing(server, sip_endpoint):
    ep = sip_endpoint()
    decided = asyncio.Event()

    async def never(call: IncomingCall):  # the operator never decides: the caller gives up
        await asyncio.sleep(3600)

    ep.on_incoming = never
    peer = await RtpPeer.open()
    try:
        result = await SippCall(ep.sip.port, peer.port, expect=None).invite().arun(30)
        assert result.ok, result.errors or result.stderr   # 180, CANCEL: 200, INVITE: 487
        await nothing_left(server, ep)

        async def refuse(call: IncomingCall):
            decided.set()
            return Reject(603, "Decline")

        ep.on_incoming = refuse
        result = await SippCall(ep.sip.port, peer.port, expect=603).invite().arun(30)
        assert result.ok and decided.is_set(), result.errors or result.stderr
        await nothing_left(server, ep)
    finally:
        peer.close()


async def test_clear_final_answers_no_codec_busy_forbidden(server, sip_endpoint):
    peer = await RtpPeer.open()
    try:
        ep = sip_endpoint()
        r = await SippCall(ep.sip.port, peer.port, offer=OFFER_G729, expect=488).invite().arun(30)
        assert r.ok, r.errors or r.stderr
        walled = sip_endpoint(allow_from=("10.0.0.0/8",))
        r = await SippCall(walled.sip.port, peer.port, expect=403).invite().arun(30)
        assert r.ok, r.errors or r.stderr
        # past max_sessions: one call takes the only place, a burst of three gets 486
        busy = sip_endpoint(max_sessions=1)
        first = asyncio.ensure_future(SippCall(busy.sip.port, peer.port).invite()
                                      .await_bye(60000).arun(90))
        call = await until(lambda: next(iter(busy.calls.values()), None), 20, "the first call")
        burst = await asyncio.gather(*(SippCall(busy.sip.port, peer.port, expect=486)
                                       .invite().arun(30) for _ in range(3)))
        assert all(r.ok for r in burst), [r.errors or r.stderr for r in burst]
        await server.acall(call.control.hang_up, "done")
        assert (await first).ok
        for e in (ep, walled, busy):
            await nothing_left(server, e)
    finally:
        if "first" in locals():
            first.cancel()
        peer.close()


async def test_rtp_timeout_hangs_up_a_dead_call_never_a_held_one(server, sip_endpoint):
    ep = sip_endpoint(rtp_timeout_s=1.0)
    peer = await RtpPeer.open()  # SIPp sends no RTP at all in this call
    # held (inactive) longer than the timeout: no BYE may come (SIPp would fail on it);
    # resumed and still silent: the agent hangs up
    script = (SippCall(ep.sip.port, peer.port).invite().reinvite("inactive", "inactive")
              .pause(2500).reinvite("sendrecv", "sendrecv").await_bye(20000))
    try:
        result = await script.arun(60)
        assert result.ok, result.errors or result.stderr
        await nothing_left(server, ep)
    finally:
        peer.close()


def _udp_exchange(port: int, data: bytes, wait: float = 1.0) -> bytes:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(wait)
    try:
        s.sendto(data, ("127.0.0.1", port))
        return s.recvfrom(65535)[0]
    except socket.timeout:
        return b""
    finally:
        s.close()


def _request(method: str, port: int, *, call_id: str = "nobody@test", extra: str = "") -> bytes:
    return (f"{method} sip:agent@127.0.0.1:{port} SIP/2.0\r\n"
            "Via: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK-raw-1;rport\r\n"
            "From: <sip:c@127.0.0.1>;tag=a\r\nTo: <sip:agent@127.0.0.1>;tag=b\r\n"
            f"Call-ID: {call_id}\r\nCSeq: 2 {method}\r\nMax-Forwards: 70\r\n{extra}"
            "Content-Length: 0\r\n\r\n").encode()


async def test_bad_input_gets_clear_answers_and_leaves_nothing(server, sip_endpoint):
    ep = sip_endpoint(users={"pbx": "secret"})
    port = ep.sip.port
    ask = lambda data, wait=1.0: asyncio.to_thread(_udp_exchange, port, data, wait)  # noqa: E731
    # a BYE for a call we do not know: 481
    assert (await ask(_request("BYE", port))).startswith(b"SIP/2.0 481")
    # a request without its Call-ID: 400
    no_id = _request("OPTIONS", port).replace(b"Call-ID: nobody@test\r\n", b"")
    assert (await ask(no_id)).startswith(b"SIP/2.0 400")
    # garbage, a half message, a stray response: dropped or a 4xx, never a crash
    for junk in (b"\x00\xff" * 300, b"INVITE sip:x SIP/2.0\r\nVia: nonsense\r\n",
                 b"SIP/2.0 200 OK\r\n\r\n", b"x"):
        answer = await ask(junk, 0.3)
        assert answer == b"" or answer.startswith(b"SIP/2.0 4"), answer[:80]
    # digest auth configured: an INVITE without credentials is challenged (401)
    peer = await RtpPeer.open()
    try:
        r = await SippCall(port, peer.port, expect=401).invite().arun(30)
        assert r.ok, r.errors or r.stderr
    finally:
        peer.close()
    # the endpoint still answers
    assert (await ask(_request("OPTIONS", port, call_id="alive@test"))).startswith(b"SIP/2.0 200")
    await nothing_left(server, ep)
