"""Issue 41 end to end on the phone lines, whose callers send no session.update:
the server's ``phone_voice_lock`` / ``phone_noise_reduction`` (the defaults of
every phone and SIP call) and a call's custom parameters turn the lock on the
caller's voice and noise suppression on, on the shared test server
(conftest.py).

People's recordings (voice_server/testing/voice_lock_script.py) over SIP on
a wide-band G.722 line (SIPp, RTP from :class:`RtpPeer`): the caller speaks
twice and gets a turn each time (and is enrolled), another person's
recording opens no turn (no user item; the listen stage counts it as someone
else), the caller again gets a turn; and the same over an 8 kHz line
(Twilio Media Streams), where the lock has the telephone line's bars.
Telnyx's custom parameters are seen to reach the listen stage.  Replies are
off (``create_response`` false in the phone defaults here): the features are
the listen side's.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest

from voice_server.audio_codec import mulaw_encode, resample
from voice_server.settings import ServerSettings
from voice_server.transports.sip.endpoint import SipEndpoint
from voice_server.transports.sip.payload import G722
from voice_server.transports.sip.settings import SipSettings
from voice_server.testing.phone_clients import PhoneClient
from voice_server.testing.rtp_peer import RtpPeer
from voice_server.testing.sipp import OFFER_G722, SippCall, free_port, sipp_available
from voice_server.testing.twilio_client import TwilioClient
from voice_server.testing.voice_lock_script import (caller_other_caller, listen_stats,
                                                    until_stats, user_turns)
from voice_server.testing.waiting import answered_call, until

pytestmark = pytest.mark.timeout(120)

# what an operator writes under extra.server (validated as the YAML is)
PHONE_LISTEN_SIDE = ServerSettings.from_sources({"server": {
    "phone_voice_lock": True, "phone_noise_reduction": "near_field",
    "turn_detection": {"type": "server_vad", "create_response": False}}}, env={})
CHANGED = ("phone_voice_lock", "phone_noise_reduction", "turn_detection")


def with_listen_side(settings: ServerSettings) -> ServerSettings:
    return settings.model_copy(update={k: getattr(PHONE_LISTEN_SIDE, k) for k in CHANGED})


@contextlib.contextmanager
def phone_defaults(srv):
    """The shared server's phone endpoints run with PHONE_LISTEN_SIDE while inside."""
    eps = list(srv.app.state.phone.values())
    old = [ep.settings for ep in eps]
    for ep in eps:
        ep.settings = with_listen_side(ep.settings)
    try:
        yield
    finally:
        for ep, s in zip(eps, old):
            ep.settings = s


def the_call(endpoint, before: frozenset = frozenset()):
    """The endpoint's call not among ``before`` (the calls an earlier test on
    the shared server may not have finished ending)."""
    return next((c for k, c in endpoint.calls.items() if k not in before), None)


async def test_twilio_caller_other_person_caller(server):
    """An 8 kHz line: the lock judges with the telephone line's bars."""
    before = frozenset(server.app.state.twilio.calls)
    with phone_defaults(server):  # held while the call's session takes them
        c = await TwilioClient.connect(f"ws://127.0.0.1:{server.port}")
        try:
            call = await until(lambda: the_call(server.app.state.twilio, before), 20, "the call")
            s = call.session.settings
            assert s.voice_lock is True and s.noise_reduction == "near_field", s

            async def say(pcm16k: np.ndarray) -> None:   # the client's mic: real time, then silence
                done = asyncio.get_running_loop().create_future()
                c.mic_q.put_nowait((mulaw_encode(resample(pcm16k, 16000, 8000)), done))
                await done

            got = await caller_other_caller(
                server, say, lambda: user_turns(call.session.conversation.items),
                "alsa-Front_Center", "near_field")
            assert not any("center" in t.lower() for t in got), got
            assert (await listen_stats(server)).get("voice_narrowband") == 1
        finally:
            await c.close()


async def test_telnyx_custom_parameters_reach_the_listen_stage(server):
    """No server default: the number's custom parameters turn both on."""
    before = frozenset(server.app.state.phone["telnyx"].calls)
    c = await PhoneClient.connect(f"ws://127.0.0.1:{server.port}", "telnyx",
                                  {"voice_lock": "true", "noise_reduction": "far_field"})
    try:
        call = await until(lambda: the_call(server.app.state.phone["telnyx"], before), 20,
                           "the call")
        await until(lambda: call.session.settings.voice_lock is True
                    and call.session.settings.noise_reduction == "far_field", 20,
                    "the custom parameters' session.update")
        await until_stats(server, lambda s: s.get("streams_noise_reduction_far_field") == 1
                          and s.get("streams_voice_lock") == 1, 30, "the call's listen stream")
    finally:
        await c.close()


async def test_a_bad_custom_parameter_is_refused_and_the_call_goes_on(server):
    before = frozenset(server.app.state.phone["telnyx"].calls)
    c = await PhoneClient.connect(f"ws://127.0.0.1:{server.port}", "telnyx",
                                  {"voice_lock": "sometimes", "instructions": "Be brief."})
    try:
        call = await until(lambda: the_call(server.app.state.phone["telnyx"], before), 20,
                           "the call")
        # the bad field is refused, its error logged (a phone line has no error
        # channel); the update's other fields apply
        await until(lambda: call._error_log.count >= 1, 20, "the refused field's error")
        await until(lambda: call.session.settings.instructions == "Be brief.", 20, "the rest")
        assert call.session.settings.voice_lock is None
        assert not c.closed and the_call(server.app.state.phone["telnyx"], before) is call
    finally:
        await c.close()


@pytest.fixture(scope="module")
def sip_endpoint(server):
    assert sipp_available(), "SIPp (sip-tester) missing: run `make setup`"
    settings = with_listen_side(server.app.state.settings).model_copy(update={
        "sip": SipSettings(enabled=True, port=free_port(), rtp_ports=(34100, 34138))})
    ep = SipEndpoint(server.pipeline, settings)
    server.call(ep.start)
    yield ep
    server.call(ep.close)


async def test_sip_wideband_caller_other_person_caller(server, sip_endpoint):
    """A G.722 line is wide band: the lock applies."""
    ep = sip_endpoint
    peer = await RtpPeer.open(mic_format=G722)
    caller = asyncio.ensure_future(SippCall(ep.sip.port, peer.port, offer=OFFER_G722).invite()
                                   .await_bye(90000).arun(120))
    mic = None
    try:
        call = await answered_call(ep)
        await until(lambda: call.session is not None, 20, "the call's session")
        s = call.session.settings
        assert s.voice_lock is True and s.noise_reduction == "near_field", s
        peer.remote = ("127.0.0.1", call.port)
        mic = asyncio.ensure_future(peer.mic())

        async def say(pcm16k: np.ndarray) -> None:   # PCMU in real time, then silence
            _, ended = peer.say(pcm16k, 16000)
            await ended

        got = await caller_other_caller(
            server, say, lambda: user_turns(call.session.conversation.items),
            "alsa-Front_Center", "near_field")
        assert not any("center" in t.lower() for t in got), got
        await server.acall(call.control.hang_up, "done")
        result = await caller
        assert result.ok, result.errors or result.stderr
    finally:
        if mic is not None:
            mic.cancel()
        caller.cancel()
        peer.close()
