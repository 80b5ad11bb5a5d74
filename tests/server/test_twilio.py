"""The Twilio Media Streams bridge (/v1/telephony/twilio) on the real CPU
pipeline (the shared server of conftest.py).  A Twilio-protocol test client
over a real WebSocket: flite speech, resampled to 8 kHz and mu-law encoded,
sent in real time in 20 ms frames followed by silence; it "plays" the media it
receives at real time and echoes each mark once the audio before it has
played, as Twilio does (and echoes pending marks at once on ``clear``):
:class:`voice_server.testing.twilio_client.TwilioClient`."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import time

import httpx
import numpy as np
import pytest
import websockets


from voice_server.testing.twilio_client import TwilioClient
from .conftest import API_KEY

pytestmark = pytest.mark.timeout(120)

RATE = 8000
FRAME = 160  # bytes = samples = 20 ms


def sign(token: str, url: str, params: dict | None = None) -> str:
    """Twilio's documented algorithm, written independently of the server code."""
    data = url + "".join(k + params[k] for k in sorted(params or {}))
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def base_ws(server) -> str:
    return f"ws://127.0.0.1:{server.port}"


def twilio_calls(server) -> dict:
    return server.app.state.twilio.calls


async def wait_no_calls(server, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while twilio_calls(server) or server.app.state.twilio.runners:
        assert time.monotonic() < deadline, "twilio call still registered"
        await asyncio.sleep(0.05)


async def test_twilio_turn_bad_payloads_and_stop(server):
    # media before start is ignored
    c = await TwilioClient.connect(base_ws(server), start=False)
    try:
        await c.send(c.media_msg(b"\xff" * FRAME))
        await c.start({"instructions": "Answer in one short sentence.",
                       "max_output_tokens": "24"})
        # garbage of every kind: logged and ignored, the call goes on
        for bad in ["not json", "[1,2]", "{}", b"\x00\x01binary",
                    {"event": "media", "streamSid": c.sid, "media": {"payload": "!!!not base64"}},
                    {"event": "media", "streamSid": c.sid, "media": {"payload": 5}},
                    {"event": "media", "streamSid": c.sid},
                    {"event": "media", "streamSid": c.sid,
                     "media": {"payload": base64.b64encode(b"\xff" * 77).decode()}},  # odd size
                    {"event": "mark", "streamSid": c.sid, "mark": {"name": "nope:12"}},
                    {"event": "mark", "streamSid": c.sid},
                    {"event": "dtmf", "streamSid": c.sid, "dtmf": {"track": "inbound_track",
                                                                    "digit": "x"}},
                    {"event": "whatever"}, {"event": "start", "start": {}}]:
            await c.send(bad)
        await asyncio.sleep(0.3)
        assert len(twilio_calls(server)) == 1
        call = next(iter(twilio_calls(server).values()))
        assert call.bad_messages >= 11
        assert call.session.settings.instructions == "Answer in one short sentence."

        t_end = await c.say("what is the capital of france")
        i, first = await c.wait(lambda m: m["event"] == "media" and m["_item"], timeout=40)
        item = first["_item"]
        assert c.marks()[0] == f"{item}:0:start"
        latency = first["_t"] - t_end
        # the whole reply, then its end mark
        _, end = await c.wait(lambda m: m["event"] == "mark" and
                              m["mark"]["name"].startswith(item) and
                              m["mark"]["name"].endswith(":end"), i, timeout=40)
        pcm = c.pcm(item)
        frames = [m for m in c.msgs if m["event"] == "media" and m["_item"] == item]
        assert all(len(base64.b64decode(m["media"]["payload"])) == FRAME for m in frames)
        dur = pcm.size / RATE
        rms = float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)))
        assert dur > 0.5, dur
        assert rms > 300, rms  # speech, not silence
        # the marks' ms grow with the audio sent; the end mark says all of it
        ms = [int(n.split(":")[1]) for n in c.marks() if n.startswith(item)]
        assert ms == sorted(ms) and ms[-1] == round(dur * 1000)
        # the client echoes the end mark once it has played: the session knows it was heard
        deadline = time.monotonic() + dur + 5
        it = call.session.conversation.get(item)
        while end["mark"]["name"] not in c.echoed or (it.played_ms or 0) < it.audio_ms - 40:
            assert time.monotonic() < deadline, (it.played_ms, it.audio_ms, c.echoed[-3:])
            await asyncio.sleep(0.05)
        assert call.stats["marks_in"] >= 3
        print(f"first audio {latency * 1000:.0f} ms after end of speech, reply {dur:.2f} s")

        await c.stop()
        await asyncio.wait_for(c.ws.wait_closed(), 10)
        await wait_no_calls(server)
        snap = await server.settled()
        assert snap["live_requests"] == 0, snap
        assert not any(p["held"] for p in snap["processes"].values()), snap
    finally:
        await c.close()


async def test_twilio_barge_in(server):
    c = await TwilioClient.connect(base_ws(server), {
        "instructions": "You tell long, detailed stories of many sentences.",
        "max_output_tokens": "200"})
    try:
        c.say("tell me a long story about a dragon")
        i, first = await c.wait(lambda m: m["event"] == "media" and m["_item"], timeout=40)
        old = first["_item"]
        await asyncio.sleep(0.4)  # the caller hears a bit of it, then talks over it
        await c.say("stop and tell me the time")
        j, _ = await c.wait(lambda m: m["event"] == "clear", i, timeout=20)
        # the next reply: a start mark of another item
        await c.wait(lambda m: m["event"] == "mark" and m["mark"]["name"].endswith(":start")
                     and not m["mark"]["name"].startswith(old), j, timeout=40)
        # not one media frame nor mark of the old reply after the clear
        after = c.msgs[j + 1:]
        assert not [m for m in after if m["event"] == "media" and m["_item"] == old]
        assert not [n for n in c.marks(j + 1) if n.startswith(old)]
        call = next(iter(twilio_calls(server).values()))
        it = call.session.conversation.get(old)
        # truncated to what the caller heard (the echoed marks); with paced output
        # (and the reply paused at the caller's first sound) hardly more was sent
        sent_ms = c.pcm(old).size * 1000 / RATE
        assert it is not None and it.truncated_at_ms is not None, it
        assert 0 < it.audio_ms == it.truncated_at_ms <= sent_ms, (it.truncated_at_ms, sent_ms)
        assert sent_ms - it.truncated_at_ms <= server.settings.output_lead_ms + 100
        print(f"barge-in: heard {it.truncated_at_ms:.0f} of {sent_ms:.0f} ms sent")
        assert call.stats["clears"] == 1
    finally:
        await c.close()  # a socket close (no stop) ends the call too
    await wait_no_calls(server)
    snap = await server.settled()
    assert snap["live_requests"] == 0, snap


async def test_twilio_twiml_and_signatures(server):
    base = f"http://127.0.0.1:{server.port}"
    url = base + "/v1/telephony/twilio/twiml"
    form = {"CallSid": "CA" + "1" * 32, "From": "+15551230000", "To": "+15559870000",
            "AccountSid": "AC" + "0" * 32}
    s = server.settings
    async with httpx.AsyncClient() as h:
        r = await h.post(url, data=form)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/xml")
        assert f'<Connect><Stream url="ws://127.0.0.1:{server.port}/v1/telephony/twilio">' \
            in r.text
        assert '<Parameter name="from" value="+15551230000"/>' in r.text
        r = await h.post(url, data=form, headers={"Host": "voice.example.com"})
        assert 'url="wss://voice.example.com/v1/telephony/twilio"' in r.text
        try:
            s.twilio_auth_token = "tok_secret"
            s.twilio_stream_url = "wss://calls.example.com/v1/telephony/twilio"
            good = sign("tok_secret", url, form)
            r = await h.post(url, data=form)
            assert r.status_code == 403
            r = await h.post(url, data=form, headers={"X-Twilio-Signature": good[::-1]})
            assert r.status_code == 403
            r = await h.post(url, data={**form, "From": "+1999"},
                             headers={"X-Twilio-Signature": good})
            assert r.status_code == 403  # params are signed too
            r = await h.post(url, data=form, headers={"X-Twilio-Signature": good})
            assert r.status_code == 200, r.text
            assert 'url="wss://calls.example.com/v1/telephony/twilio"' in r.text

            # the stream's upgrade: a valid X-Twilio-Signature instead of an API key
            wurl = f"ws://127.0.0.1:{server.port}/v1/telephony/twilio"
            with pytest.raises(websockets.InvalidStatus) as e:
                await websockets.connect(wurl, additional_headers={
                    "X-Twilio-Signature": sign("tok_secret", wurl + "x")})
            assert e.value.response.status_code == 403
            c = await TwilioClient.connect(f"ws://127.0.0.1:{server.port}", headers={
                "X-Twilio-Signature": sign("tok_secret", s.twilio_stream_url)})
            await asyncio.sleep(0.2)
            assert len(twilio_calls(server)) == 1
            await c.stop()
            await asyncio.wait_for(c.ws.wait_closed(), 10)
            await c.close()
        finally:
            s.twilio_auth_token = None
            s.twilio_stream_url = None
    # neither key nor signature: refused before the upgrade
    with pytest.raises(websockets.InvalidStatus) as e:
        await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/telephony/twilio")
    assert e.value.response.status_code == 403
    await wait_no_calls(server)


@contextlib.contextmanager
def unpaced(server):
    """Calls started inside run without output pacing (``output_lead_ms`` 0),
    as a server configured so does: Twilio then holds the whole reply."""
    settings = server.app.state.twilio.settings
    old, settings.output_lead_ms = settings.output_lead_ms, 0
    try:
        yield
    finally:
        settings.output_lead_ms = old


async def test_twilio_barge_in_while_finished_reply_plays(server):
    """Generation is done (end mark sent) but Twilio still plays the reply: the
    caller talking over it still gets a ``clear`` and the item is truncated.
    Paced output leaves Twilio at most ``output_lead_ms`` after the end mark,
    so the scenario needs an unpaced call."""
    with unpaced(server):
        c = await TwilioClient.connect(base_ws(server), {
            "instructions": "You tell long, detailed stories.", "max_output_tokens": "48"})
        deadline = time.monotonic() + 10
        while not twilio_calls(server):  # its session is made with the setting
            assert time.monotonic() < deadline, "the call did not start"
            await asyncio.sleep(0.02)
    try:
        c.say("tell me a story about a cat")
        i, first = await c.wait(lambda m: m["event"] == "media" and m["_item"], timeout=40)
        old = first["_item"]
        j, _ = await c.wait(lambda m: m["event"] == "mark" and m["mark"]["name"] == next(
            (n for n in c.marks(i) if n.startswith(old) and n.endswith(":end")), None), i)
        sent_ms = c.pcm(old).size * 1000 / RATE
        assert c.play_end - time.monotonic() > 1.5, "reply too short to talk over"
        await c.say("stop and tell me the time")
        k, _ = await c.wait(lambda m: m["event"] == "clear", j, timeout=20)
        assert not [m for m in c.msgs[k + 1:] if m.get("_item") == old]
        call = next(iter(twilio_calls(server).values()))
        it = call.session.conversation.get(old)
        t0 = time.monotonic()
        while it.truncated_at_ms is None and time.monotonic() - t0 < 2:
            await asyncio.sleep(0.02)
        assert it.truncated_at_ms is not None and it.truncated_at_ms < sent_ms - 500, \
            (it.truncated_at_ms, sent_ms)
        print(f"barge-in after generation: heard {it.truncated_at_ms:.0f} of {sent_ms:.0f} ms")
    finally:
        await c.close()
    await wait_no_calls(server)


async def test_twilio_message_too_big_closes_1009_without_an_error_event(server):
    """Media Streams has no error message: an oversized frame gets the bare
    1009 close (the Realtime endpoint sends an ``error`` event first)."""
    base = f"ws://127.0.0.1:{server.port}"
    ws = await websockets.connect(base + "/v1/telephony/twilio",
                                  additional_headers={"Authorization": f"Bearer {API_KEY}"},
                                  max_size=None)
    try:
        with contextlib.suppress(websockets.exceptions.ConnectionClosed):
            await ws.send("x" * (server.settings.ws_max_message_bytes + 1))
        got = []
        with contextlib.suppress(websockets.exceptions.ConnectionClosed):
            async for m in ws:
                got.append(m)
        assert ws.close_code == 1009 and got == []
    finally:
        await ws.close()
