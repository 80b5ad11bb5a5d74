"""A real SIP call (SIPp, UDP, and its RTP) under the OpenAI-shaped control
plane, driven by the official ``openai`` SDK: the INVITE rings until the
operator, told by the signed ``realtime.call.incoming`` webhook, accepts it
(``client.realtime.calls.accept``); the sideband attaches to the live call
(``client.realtime.connect(call_id=...)``); ``hangup`` sends the caller a BYE;
a rejected call gets the operator's status; ``refer`` sends the caller a REFER
to the operator's target; nothing is left in the registry.

The endpoint is wired as ``build_app`` wires it (:func:`registry_hook`), on
the shared test server's pipeline and call registry."""

from __future__ import annotations

import asyncio

import pytest

from voice_server.call_registry import CallState
from voice_server.call_webhook import CallWebhook
from voice_server.transports.sip.endpoint import SipEndpoint
from voice_server.transports.sip.registered import registry_hook
from voice_server.transports.sip.settings import SipSettings
from voice_server.testing.rtp_peer import RtpPeer
from voice_server.testing.sipp import SippCall, free_port, sipp_available
from voice_server.webhook_signing import new_secret
from .test_sip import nothing_left, until
from .test_sip_call_control import Receiver, _client

# `make setup` installs SIPp: missing is a failure, not a skip
assert sipp_available(), "SIPp (sip-tester) missing: run `make setup`"
pytestmark = [pytest.mark.timeout(120)]


async def test_webhook_accept_sideband_and_hangup_of_a_real_sip_call(server):
    registry = server.app.state.sip_calls
    settings = server.app.state.settings.model_copy(update={
        "sip": SipSettings(enabled=True, port=free_port(), rtp_ports=(34100, 34138))})
    holder: dict = {}
    ringing, ended = registry_hook(registry, lambda call_id: holder["ep"].call(call_id))
    ep = holder["ep"] = SipEndpoint(server.pipeline, settings, on_incoming=ringing,
                                    on_ended=ended)
    server.call(ep.start)
    secret, hook, old = new_secret(), Receiver(), registry.notify
    registry.notify = CallWebhook(hook.url, secret)
    client = _client(server)
    peer = await RtpPeer.open()
    try:
        caller = asyncio.ensure_future(
            SippCall(ep.sip.port, peer.port, headers=("X-Account: 42",)).invite()
            .await_bye(60000).arun(90))
        await until(lambda: hook.got, 20, "the webhook")
        event = client.webhooks.unwrap(*hook.got[0], secret=secret)
        assert event.type == "realtime.call.incoming"
        call_id = event.data.call_id
        assert ("X-Account", "42") in [(h.name, h.value) for h in event.data.sip_headers]
        assert registry.get(call_id).state is CallState.PENDING      # ringing: 180 only
        await client.realtime.calls.accept(call_id, type="realtime",
                                           instructions="You answer for Acme.")
        live = registry.get(call_id)
        assert live.state is CallState.LIVE and live.runner is ep.call(call_id).runner
        assert live.runner.session.settings.instructions == "You answer for Acme."
        async with client.realtime.connect(call_id=call_id) as conn:
            first = await conn.recv()
            assert first.type == "session.created"
            await client.realtime.calls.hangup(call_id)
        result = await caller                  # SIPp got the BYE and answered it
        assert result.ok, result.errors or result.stderr
        await nothing_left(server, ep)
        await until(lambda: registry.get(call_id) is None, 10, "the registry to forget it")
        # rejected by the operator: the caller gets that status
        hook.got.clear()
        caller = asyncio.ensure_future(SippCall(ep.sip.port, peer.port, expect=486).invite()
                                       .arun(60))
        await until(lambda: hook.got, 20, "the second webhook")
        call_id = client.webhooks.unwrap(*hook.got[0], secret=secret).data.call_id
        await client.realtime.calls.reject(call_id, status_code=486)
        result = await caller
        assert result.ok, result.errors or result.stderr
        await nothing_left(server, ep)
        assert registry.get(call_id) is None
        # referred by the operator: the caller gets the REFER, reports the target
        # answered, and the agent leaves the call
        hook.got.clear()
        caller = asyncio.ensure_future(SippCall(ep.sip.port, peer.port).invite()
                                       .transfer(200, target="tel:+14155550123").await_bye()
                                       .arun(60))
        await until(lambda: hook.got, 20, "the third webhook")
        call_id = client.webhooks.unwrap(*hook.got[0], secret=secret).data.call_id
        await client.realtime.calls.accept(call_id, type="realtime")
        await client.realtime.calls.refer(call_id, target_uri="tel:+14155550123")
        result = await caller
        assert result.ok, result.errors or result.stderr
        await nothing_left(server, ep)
        await until(lambda: registry.get(call_id) is None, 10, "the registry to forget it")
    finally:
        registry.notify = old
        peer.close()
        await client.close()
        hook.close()
        server.call(ep.close)
