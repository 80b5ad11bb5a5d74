"""The OpenAI-style WebRTC endpoint (POST /v1/realtime/calls) on the real CPU
pipeline, driven by a Python aiortc client (voice_server/testing/rtc_client.py):
flite speech goes up as an Opus mic track, events travel on ``oai-events``,
the agent's voice comes back on the remote track.

Loopback only: the shared server (conftest.py) is configured from the environment
``VOICE_AGENT_ICE_HOSTS=127.0.0.1`` (ServerSettings.from_sources) and offers
only that host candidate; the client uses no STUN server.  To be sure no other
interface is ever tried, run it in a network namespace with loopback only::

    unshare --net sh -c 'ip link set lo up && exec .venv/bin/python -m pytest tests/server/test_webrtc.py'
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx
import numpy as np
import pytest
import websockets

from voice_server.testing.audio import flite_pcm

from .conftest import API_KEY
from voice_server.session_registry import registry_for
from voice_server.testing.realtime_client import RTClient
from voice_server.testing.rtc_client import RTCClient
from voice_server.testing.twilio_client import TwilioClient
from voice_server.testing.response_status import answered

pytestmark = pytest.mark.timeout(120)

QUESTION = "what is the capital of france"
STORY = "tell me a long story about a dragon"
# long enough that the caller is still talking well after the cancel, so the
# stretch between the flush and the next reply can be checked for silence
INTERRUPT = "stop that story please and tell me instead what time it is right now in london"
RATE = 16000


@pytest.fixture
def rtc_server(server):
    return server


async def connect(srv, token=API_KEY) -> RTCClient:
    c = await RTCClient.connect(srv.base, token)
    await asyncio.wait_for(c.open.wait(), 10)
    return c


async def no_live_calls(srv, timeout: float = 10.0) -> dict:
    end = time.monotonic() + timeout
    while srv.app.state.webrtc.calls and time.monotonic() < end:
        await asyncio.sleep(0.1)
    assert not srv.app.state.webrtc.calls
    snap = await srv.settled(timeout)
    assert snap["live_requests"] == 0, snap
    return snap


async def test_spoken_turn_over_webrtc(rtc_server):
    c = await connect(rtc_server)
    try:
        assert c.status == 201 and c.location.startswith("/v1/realtime/calls/rtc_")
        created = await c.wait("session.created", 5)
        assert c.events[0] is created  # held until the channel opened, then first
        await asyncio.sleep(0.3)
        c.mic.say(flite_pcm(QUESTION, RATE), RATE)
        tr = await c.wait("conversation.item.input_audio_transcription.completed", 30)
        assert "capital" in tr["transcript"], tr
        done = await c.wait("response.done", 30)
        assert answered(done["response"]), done
        rid = done["response"]["id"]
        started = await c.wait("output_audio_buffer.started", 1)
        stopped = await c.wait("output_audio_buffer.stopped", 20)
        assert started["response_id"] == rid == stopped["response_id"]
        assert not c.of_type("response.output_audio.delta")  # audio goes on the track
        assert not c.of_type("error"), c.of_type("error")
        # the agent's voice arrived on the remote track, between started and stopped
        heard = c.audible(started["_t"] - 0.2, stopped["_t"] + 0.5)
        assert len(heard) >= 15, len(heard)  # >= 0.3 s of speech frames
        assert heard[-1] - heard[0] >= 0.3
        # stopped comes when the audio has been played out, not when generation ended
        assert stopped["_t"] >= heard[-1] - 0.15
        # nothing audible before the agent started
        assert not c.audible(0, started["_t"] - 0.2)
    finally:
        await c.close()
    await no_live_calls(rtc_server)


async def test_agent_voice_over_webrtc_is_heard_back(rtc_server):
    """The reply's audio as the WebRTC track delivers it (Opus at the track's rate,
    resampled once from the voice's 24 kHz) is heard back by Whisper as its words."""
    from runtime.models.listen.whisper_asr import WhisperASR
    from runtime.models.speak.spoken_form import spoken_form
    from voice_server.testing.wer import wer
    import soxr
    c = await connect(rtc_server)
    try:
        await c.wait("session.created", 5)
        # a reply in plain English words (the small test LLM answers a spoken
        # question about France in French now and then)
        c.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{
                "type": "input_text",
                "text": "Say that the store opens at nine tomorrow morning."}]}})
        c.send({"type": "response.create"})
        done = await c.wait("response.done", 30)
        started = await c.wait("output_audio_buffer.started", 1)
        stopped = await c.wait("output_audio_buffer.stopped", 20)
        pcm, rate = c.received(started["_t"] - 0.2, stopped["_t"] + 0.5)
        said = done["response"]["output"][0]["content"][0]["transcript"]
        x = soxr.resample(pcm.astype(np.float32) / 32768, rate, 16000)
        got = WhisperASR().transcribe([x])[0]
        print(f"said {said!r}, heard {got!r} ({rate} Hz)")
        assert wer(spoken_form(said), got) <= 0.25, (said, got)
    finally:
        await c.close()
    await no_live_calls(rtc_server)


async def test_barge_in_over_webrtc(rtc_server):
    c = await connect(rtc_server)
    try:
        sid = (await c.wait("session.created", 5))["session"]["id"]
        c.send({"type": "session.update", "session": {
            "type": "realtime", "max_output_tokens": 200,
            "instructions": "You tell long, detailed stories of many sentences."}})
        await c.wait("session.updated", 5)
        c.mic.say(flite_pcm(STORY, RATE), RATE)
        started = await c.wait("output_audio_buffer.started", 40)
        rid = started["response_id"]
        # Interrupt while the reply's second clause plays: a transcript delta goes
        # out once its clause has played, and on a loaded machine the clause after
        # the eager two-word first one can come late; a reply cut with nothing
        # unplayed has nothing to truncate (both seen in CI).
        first_clause = await c.wait(lambda e: e["type"] == "response.output_audio_transcript.delta"
                                    and e.get("response_id") == rid, 20)
        deadline = time.monotonic() + 20
        while not c.audible(first_clause["_t"] + 0.1):
            assert time.monotonic() < deadline, "the reply never went on after its first clause"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert c.audible(started["_t"]), "no agent audio before the interruption"
        c.mic.say(flite_pcm(INTERRUPT, RATE), RATE)
        cleared = await c.wait(lambda e: e["type"] == "output_audio_buffer.cleared", 15)
        assert cleared["response_id"] == rid
        done = await c.wait(lambda e: e["type"] == "response.done"
                            and e["response"]["id"] == rid, 5)
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        # the server knew what was played: the item is truncated to it; on a
        # starved CPU the caller may have heard all that was made when the cut
        # came (the next clause not yet spoken), and then there is nothing to cut
        try:
            trunc = await c.wait("conversation.item.truncated", 2)
            assert trunc["audio_end_ms"] > 300, trunc
        except TimeoutError:
            item = rtc_server.runner(sid).session.conversation.get(done["response"]["output"][0]["id"])
            assert item.truncated_at_ms is None and item.audio_ms > 300, item
        # the remote audio goes silent soon after the flush, until the next reply
        nxt = await c.wait(lambda e: e["type"] == "output_audio_buffer.started"
                           and e["response_id"] != rid, 30)
        quiet_from = cleared["_t"] + 0.25
        assert nxt["_t"] > quiet_from + 0.2, "next reply too soon to check the silence"
        assert not c.audible(quiet_from, nxt["_t"]), \
            [round(t - cleared["_t"], 3) for t in c.audible(cleared["_t"], nxt["_t"])]
        assert not c.of_type("error"), c.of_type("error")
    finally:
        await c.close()
    await no_live_calls(rtc_server)


async def test_client_secret_single_use_and_expiry(rtc_server):
    url = rtc_server.base + "/v1/realtime/client_secrets"
    async with httpx.AsyncClient(timeout=10) as h:
        r = await h.post(url, json={})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = await h.post(url, headers={"Authorization": f"Bearer {API_KEY}"},
                         json={"session": {"type": "realtime", "instructions": "Be brief."}})
        assert r.status_code == 200, r.text
        body = r.json()
        secret = body["value"]
        assert secret.startswith("ek_") and body["expires_at"] > time.time() + 30
        assert body["session"]["instructions"] == "Be brief."
        r = await h.post(url, headers={"Authorization": f"Bearer {API_KEY}"},
                         json={"session": {"type": "realtime", "turn_detection": "nope"}})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        # a secret does not mint secrets
        r = await h.post(url, headers={"Authorization": f"Bearer {secret}"}, json={})
        assert r.status_code == 401

    c = await connect(rtc_server, token=secret)  # first use: a call
    try:
        created = await c.wait("session.created", 5)
        assert created["session"]["id"] == body["session"]["id"]
        assert created["session"]["instructions"] == "Be brief."
    finally:
        await c.close()
    with pytest.raises(PermissionError, match="401"):  # second use
        await RTCClient.connect(rtc_server.base, secret)

    store = rtc_server.app.state.client_secrets
    async with httpx.AsyncClient(timeout=10) as h:
        r = await h.post(url, headers={"Authorization": f"Bearer {API_KEY}"}, json={})
        old = r.json()["value"]
    real_clock = store.clock
    store.clock = lambda: real_clock() + 61  # the default lifetime is 60 s
    try:
        with pytest.raises(PermissionError, match="401"):
            await RTCClient.connect(rtc_server.base, old)
    finally:
        store.clock = real_clock
    with pytest.raises(PermissionError, match="401"):  # no key at all
        await RTCClient.connect(rtc_server.base, None)
    await no_live_calls(rtc_server)


async def test_garbage_sdp_is_400(rtc_server):
    url = rtc_server.base + "/v1/realtime/calls"
    hdr = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/sdp"}
    async with httpx.AsyncClient(timeout=10) as h:
        for body in (b"", b"hello", b"v=0\r\nthis is not sdp\r\n", b"\xff\xfe\x00v=0",
                     b"v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 FOO 0\r\n",
                     b"v=0\r\n" + b"a=x\r\n" * 20000):
            r = await h.post(url, content=body, headers=hdr)
            assert r.status_code in (400, 413), (body[:40], r.status_code, r.text)
            err = r.json()["error"]
            assert err["type"] == "invalid_request_error" and err["code"] and err["message"]
        r = await h.post(url, content=b"v=0\r\n", headers={"Content-Type": "application/sdp"})
        assert r.status_code == 401
        r = await h.delete(rtc_server.base + "/v1/realtime/calls/rtc_nope", headers=hdr)
        assert r.status_code == 404
    assert not rtc_server.app.state.webrtc.calls
    # the server still works
    c = await connect(rtc_server)
    await c.wait("session.created", 5)
    await c.close()
    await no_live_calls(rtc_server)


async def test_close_and_hangup_end_the_session(rtc_server):
    # 1) the client closes its peer connection while the agent is answering
    c = await connect(rtc_server)
    await c.wait("session.created", 5)
    c.mic.say(flite_pcm(QUESTION, RATE), RATE)
    await c.wait(lambda e: e["type"] in ("response.created", "output_audio_buffer.started"), 30)
    assert rtc_server.app.state.webrtc.calls
    await c.close()
    await no_live_calls(rtc_server)

    # 2) DELETE on the Location hangs up
    c = await connect(rtc_server)
    try:
        await c.wait("session.created", 5)
        async with httpx.AsyncClient(timeout=10) as h:
            hdr = {"Authorization": f"Bearer {API_KEY}"}
            r = await h.delete(rtc_server.base + c.location, headers=hdr)
            assert r.status_code == 204
            r = await h.delete(rtc_server.base + c.location, headers=hdr)
            assert r.status_code == 404
        await no_live_calls(rtc_server)
        end = time.monotonic() + 5
        while c.pc.connectionState not in ("closed", "failed") and time.monotonic() < end:
            await asyncio.sleep(0.1)
        assert c.pc.connectionState in ("closed", "failed")
    finally:
        await c.close()


def user_text(text: str, event_id: str) -> dict:
    return {"type": "conversation.item.create", "event_id": event_id, "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


async def test_oversized_and_undecodable_channel_messages(rtc_server):
    """oai-events messages over datachannel_max_message_bytes, or bytes that are
    not UTF-8: an error event each, and the call goes on."""
    ep = rtc_server.app.state.webrtc
    old = ep.settings
    ep.settings = old.model_copy(update={"datachannel_max_message_bytes": 4096})
    try:  # read at call setup
        c = await connect(rtc_server)
    finally:
        ep.settings = old
    try:
        await c.wait("session.created", 5)
        # the SCTP limit the answer advertises is the default cap: a peer that
        # honours the SDP never reaches the default; a lower cap is ours to enforce
        assert f"a=max-message-size:{old.datachannel_max_message_bytes}" in \
            c.pc.remoteDescription.sdp
        # 2,100 two-byte characters: under the cap in characters, over it in bytes
        n = len(c.events)
        c.send(user_text("\u00e9" * 2100, "big"))
        err = await c.wait("error", 5, start=n)
        assert err["error"]["type"] == "invalid_request_error"
        assert err["error"]["code"] == "message_too_large"
        assert "4096" in err["error"]["message"]
        # binary that is not UTF-8
        n = len(c.events)
        c.channel.send(b"\xff\xfe{}")
        err = await c.wait("error", 5, start=n)
        assert err["error"]["code"] == "invalid_json"
        # a text message (string PPID) that is not UTF-8: the browser API cannot
        # send one, a raw SCTP peer can (the test client's own queue, as its
        # channel.send would fill it)
        from aiortc.rtcsctptransport import WEBRTC_STRING
        n = len(c.events)
        c.pc.sctp._data_channel_queue.append((c.channel, WEBRTC_STRING, b"\xff\xfe{}"))
        await c.pc.sctp._data_channel_flush()
        err = await c.wait("error", 5, start=n)
        assert err["error"]["code"] == "invalid_json"
        # the call goes on: binary UTF-8 JSON, and a message just under the cap
        n = len(c.events)
        c.channel.send(json.dumps({"type": "input_audio_buffer.clear"}).encode())
        await c.wait("input_audio_buffer.cleared", 5, start=n)
        c.send(user_text("a" * 3900, "fits"))
        added = await c.wait("conversation.item.added", 5, start=n)
        assert added["item"]["content"][0]["text"] == "a" * 3900
        assert c.types(n).count("error") == 0, c.types(n)
        assert c.pc.connectionState == "connected"
        assert len(rtc_server.app.state.webrtc.calls) == 1
    finally:
        await c.close()
    await no_live_calls(rtc_server)


@contextlib.contextmanager
def every_transport(srv, **update):
    """Settings changed on the WebSocket, WebRTC and Twilio endpoints at once
    (each new session reads them when it is admitted)."""
    eps = [srv.app.state.realtime, srv.app.state.webrtc, srv.app.state.twilio]
    old = [ep.settings for ep in eps]
    for ep in eps:
        ep.settings = ep.settings.model_copy(update=update)
    try:
        yield
    finally:
        for ep, o in zip(eps, old):
            ep.settings = o


async def places_taken(srv) -> int:
    """Live sessions of every transport plus handshakes holding a place."""
    def count() -> int:
        reg = registry_for(srv.pipeline)
        return len(reg) + reg.pending
    return await srv.acall(count)


async def wait_places(srv, n: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while await places_taken(srv) != n:
        assert time.monotonic() < end, f"places taken: {await places_taken(srv)}, want {n}"
        await asyncio.sleep(0.05)


async def callers_still_served(rtc: RTCClient, ws: RTClient, tw: TwilioClient) -> None:
    """Each admitted caller asks a question and hears (or reads) its answer."""
    n_rtc, n_ws, n_tw = len(rtc.events), len(ws.events), len(tw.msgs)
    rtc.mic.say(flite_pcm(QUESTION, RATE), RATE)
    tw.say(QUESTION)
    await ws.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say yes."}]}})
    await ws.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
    done_ws, done_rtc, _ = await asyncio.gather(
        ws.wait("response.done", timeout=60, start=n_ws), rtc.wait("response.done", 60, start=n_rtc),
        tw.wait(lambda m: m["event"] == "media" and m["_item"], start=n_tw, timeout=60))
    assert answered(done_ws["response"]), done_ws
    assert answered(done_rtc["response"]), done_rtc
    assert ws.closed is None and not tw.closed and rtc.pc.connectionState == "connected"


async def test_max_sessions_counts_websocket_webrtc_and_twilio_together(rtc_server):
    """One WebSocket session, one WebRTC call and one Twilio stream fill
    max_sessions=3; a fourth is refused with 503 on each transport, a client
    secret offered to the refused WebRTC call is not spent, and the three
    callers already in are untouched: each still gets its answer."""
    srv = rtc_server
    base_ws = f"ws://127.0.0.1:{srv.port}"
    await wait_places(srv, 0)
    opened: list = []
    with every_transport(srv, max_sessions=3):
        try:
            rtc = await connect(srv)
            opened.append(rtc)
            await rtc.wait("session.created", 10)
            ws = await RTClient.connect(srv.url, key=API_KEY)
            opened.append(ws)
            await ws.wait("session.created")
            tw = await TwilioClient.connect(base_ws, headers={"Authorization": f"Bearer {API_KEY}"})
            opened.append(tw)
            await wait_places(srv, 3)

            with pytest.raises(websockets.InvalidStatus) as ei:
                await RTClient.connect(srv.url, key=API_KEY)
            assert ei.value.response.status_code == 503
            assert b"server_busy" in ei.value.response.body
            with pytest.raises(websockets.InvalidStatus) as ei:
                await websockets.connect(base_ws + "/v1/telephony/twilio", additional_headers={
                    "Authorization": f"Bearer {API_KEY}"})
            assert ei.value.response.status_code == 503     # the same refusal as the WebSocket's
            assert json.loads(ei.value.response.body)["error"]["code"] == "server_busy"
            assert ei.value.response.headers["Retry-After"] == "5"
            with pytest.raises(PermissionError, match="503"):
                await RTCClient.connect(srv.base, API_KEY)

            async with httpx.AsyncClient(timeout=10) as h:
                r = await h.post(srv.base + "/v1/realtime/client_secrets",
                                 headers={"Authorization": f"Bearer {API_KEY}"}, json={})
            secret = r.json()["value"]
            with pytest.raises(PermissionError, match="503"):
                await RTCClient.connect(srv.base, secret)
            await wait_places(srv, 3)          # the refused attempts hold no place
            await callers_still_served(rtc, ws, tw)

            await tw.stop()  # the phone call ends: one place frees
            await asyncio.wait_for(tw.ws.wait_closed(), 10)
            await wait_places(srv, 2)
            c = await connect(srv, token=secret)  # the refused call's secret still works
            opened.append(c)
            await c.wait("session.created", 10)
        finally:
            for c in opened:
                with contextlib.suppress(Exception):
                    await c.close()
    await no_live_calls(srv)
    await wait_places(srv, 0)
