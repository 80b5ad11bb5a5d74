"""The phone bridges of Telnyx, Plivo, Exotel and Vonage on the real CPU
pipeline (the shared server of conftest.py), each driven by a client written
from the provider's documentation
(:class:`voice_server.testing.phone_clients.PhoneClient`) over a real
WebSocket: a spoken turn, a barge-in answered with the provider's clear verb,
the provider's end of call, and bad input of every kind.  (Twilio's bridge has
its own tests in test_twilio.py.)"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time

import numpy as np
import pytest
import websockets

from voice_server.testing.audio import flite_pcm
from voice_server.testing.phone_clients import PhoneClient
from voice_server.transports.phone.dtmf_tones import COLUMNS, ROWS, key_frequencies
from .conftest import API_KEY

pytestmark = pytest.mark.timeout(120)

PROVIDERS = ["telnyx", "plivo", "exotel", "vonage"]
CLEAR_VERB = {"telnyx": {"event": "clear"}, "plivo": {"event": "clearAudio"},
              "exotel": {"event": "clear"}, "vonage": {"action": "clear"}}


def base_ws(server) -> str:
    return f"ws://127.0.0.1:{server.port}"


def endpoint(server, provider):
    return server.app.state.phone[provider]


async def wait_call(server, provider, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not endpoint(server, provider).calls:
        assert time.monotonic() < deadline, "the call did not start"
        await asyncio.sleep(0.02)
    return next(iter(endpoint(server, provider).calls.values()))


async def wait_no_calls(server, provider, timeout: float = 10.0) -> None:
    ep = endpoint(server, provider)
    deadline = time.monotonic() + timeout
    while ep.calls or ep.runners:
        assert time.monotonic() < deadline, f"{provider} call still registered"
        await asyncio.sleep(0.05)


async def settled_clean(server) -> None:
    snap = await server.settled()
    assert snap["live_requests"] == 0, snap
    assert not any(p["held"] for p in snap["processes"].values()), snap


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_spoken_turn_then_the_providers_end_of_call(server, provider):
    c = await PhoneClient.connect(base_ws(server), provider, {
        "instructions": "Answer in one short sentence.", "max_output_tokens": "12"})
    try:
        call = await wait_call(server, provider)
        await asyncio.sleep(0.2)
        assert call.session.settings.instructions == "Answer in one short sentence."
        t_end = await c.say("what is the capital of france")
        i, first = await c.wait(lambda m: m.kind == "media" and m.item, timeout=40)
        item = first.item
        assert c.marks()[0] == f"{item}:0:start"
        _, end = await c.wait(lambda m: m.kind == "mark" and m.name.startswith(item)
                              and m.name.endswith(":end"), i, timeout=40)
        pcm = c.pcm(item)
        dur = pcm.size / c.wire.rate
        rms = float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)))
        assert dur > 0.5 and rms > 300, (dur, rms)  # speech, not silence
        ms = [int(n.split(":")[1]) for n in c.marks() if n.startswith(item)]
        assert ms == sorted(ms) and ms[-1] == round(dur * 1000), ms
        # the client answers the end mark once played: the session knows it was heard
        it = call.session.conversation.get(item)
        deadline = time.monotonic() + dur + 5
        while end.name not in c.answered or (it.played_ms or 0) < it.audio_ms - 40:
            assert time.monotonic() < deadline, (it.played_ms, it.audio_ms)
            await asyncio.sleep(0.05)
        assert call.stats["media_in"] > 0 and call.bad_messages == 0, call.stats
        print(f"{provider}: first audio {(first.t - t_end) * 1000:.0f} ms after end of "
              f"speech, reply {dur:.2f} s")
        await c.end()  # stop message, or (Plivo, Vonage) the socket closes
        await wait_no_calls(server, provider)
        await settled_clean(server)
    finally:
        await c.close()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_barge_in_clears_with_the_providers_verb(server, provider):
    c = await PhoneClient.connect(base_ws(server), provider, {
        "instructions": "You tell long, detailed stories of many sentences.",
        "max_output_tokens": "200"})
    try:
        c.say("tell me a long story about a dragon")
        i, first = await c.wait(lambda m: m.kind == "media" and m.item, timeout=40)
        old = first.item
        await asyncio.sleep(0.5)  # the caller hears a bit, then talks over it
        await c.say("stop and tell me the time")
        j, clear = await c.wait(lambda m: m.kind == "clear", i, timeout=20)
        for k, v in CLEAR_VERB[provider].items():
            assert clear.raw[k] == v, clear.raw
        await c.wait(lambda m: m.kind == "mark" and m.name.endswith(":start")
                     and not m.name.startswith(old), j, timeout=40)
        assert not [m for m in c.msgs[j + 1:] if m.kind == "media" and m.item == old]
        assert not [n for n in c.marks(j + 1) if n.startswith(old)]
        call = next(iter(endpoint(server, provider).calls.values()))
        it = call.session.conversation.get(old)
        sent_ms = c.pcm(old).size * 1000 / c.wire.rate
        # cut to what was heard; on a starved CPU the caller may have heard all
        # that was made so far, and then there is nothing to cut
        assert it is not None and (it.truncated_at_ms is not None
                                   or it.played_ms >= it.audio_ms - 1), it
        heard = it.truncated_at_ms if it.truncated_at_ms is not None else it.played_ms
        assert 0 < heard <= sent_ms, (heard, sent_ms)
        assert call.stats["clears"] == 1, call.stats
        print(f"{provider} barge-in: heard {heard:.0f} of {sent_ms:.0f} ms sent")
    finally:
        await c.close()  # a socket close ends the call too
    await wait_no_calls(server, provider)
    await settled_clean(server)


def _garbage(c: PhoneClient) -> list:
    """Bad input of every kind, in the provider's own framing where it has one."""
    w = c.wire
    good = w.media(w.silence_frame())
    bad = ["not json", "[1,2]", "{}", {"event": "whatever"}, {"event": "dtmf"},
           {"event": "websocket:dtmf", "digit": "x"}]
    if isinstance(good, dict):
        bad.append(b"\x00\x01binary")  # these providers send text frames only
        for payload in ("!!!not base64", 5, base64.b64encode(b"\x01\x02\x03").decode()
                        if w.sample_bytes == 2 else "@@@"):
            m = json.loads(json.dumps(good))
            m["media"]["payload"] = payload
            bad.append(m)
        m = json.loads(json.dumps(good))
        del m["media"]
        bad.append(m)
    else:
        bad.append(b"\x01\x02\x03")  # Vonage: not whole 16-bit samples
    return bad


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_bad_input_is_ignored_and_the_server_lives(server, provider):
    c = await PhoneClient.connect(base_ws(server), provider, start=False)
    try:
        # media before the call starts: ignored
        await c.send(c.wire.media(c.wire.silence_frame()))
        await c.start({"instructions": "Answer in one short sentence."})
        call = await wait_call(server, provider)
        garbage = _garbage(c)
        for g in garbage:
            await c.send(g)
        await asyncio.sleep(0.5)
        assert call.bad_messages >= len(garbage), (call.bad_messages, len(garbage))
        assert not c.closed and endpoint(server, provider).calls
        # the call still works: its audio still reaches the session (a whole
        # spoken turn per provider is test_spoken_turn_then_the_providers_end_of_call)
        before = call.stats["media_in"]
        for _ in range(10):
            await c.send(c.wire.media(c.wire.silence_frame()))
        deadline = time.monotonic() + 5
        while call.stats["media_in"] < before + 10:
            assert time.monotonic() < deadline, (before, call.stats)
            await asyncio.sleep(0.02)
        assert not c.closed
    finally:
        await c.close()
    await wait_no_calls(server, provider)


WRONG_CODEC = {
    "telnyx": {"event": "start", "sequence_number": "1", "stream_id": "s1",
               "start": {"call_control_id": "v3:x",
                         "media_format": {"encoding": "OPUS", "sample_rate": 16000,
                                          "channels": 1}}},
    "plivo": {"event": "start", "sequenceNumber": 1,
              "start": {"callId": "c", "streamId": "s", "accountId": "MA", "tracks": ["inbound"],
                        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 16000}}},
    "exotel": {"event": "start", "stream_sid": "MZ1",
               "start": {"stream_sid": "MZ1", "call_sid": "CA1",
                         "media_format": {"encoding": "audio/x-mulaw", "sample_rate": "8000",
                                          "bit_rate": "8"}}},
    "vonage": {"event": "websocket:connected", "content-type": "audio/pcmu;rate=8000"},
}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_wrong_codec_closes_1003_and_oversize_closes_1009(server, provider):
    url = f"{base_ws(server)}/v1/telephony/{provider}"
    hdrs = {"Authorization": f"Bearer {API_KEY}"}
    async with websockets.connect(url, additional_headers=hdrs) as ws:
        await ws.send(json.dumps(WRONG_CODEC[provider]))
        with contextlib.suppress(websockets.ConnectionClosed):
            async for _ in ws:
                pass
        assert ws.close_code == 1003, ws.close_code
    # a message over ws_max_message_bytes: the bare 1009 (no Realtime error event)
    async with websockets.connect(url, additional_headers=hdrs, max_size=None) as ws:
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send("x" * (server.settings.ws_max_message_bytes + 1))
        got = []
        with contextlib.suppress(websockets.ConnectionClosed):
            async for m in ws:
                got.append(m)
        assert ws.close_code == 1009 and got == [], (ws.close_code, got)
    # no key: refused before the upgrade; the server lives
    with pytest.raises(websockets.InvalidStatus) as e:
        await websockets.connect(url)
    assert e.value.response.status_code == 403
    await wait_no_calls(server, provider)
    assert (await server.settled())["live_requests"] == 0


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_key_presses_reach_the_session_in_order_and_are_answered(server, provider):
    c = await PhoneClient.connect(base_ws(server), provider, {
        "instructions": "The caller uses the keypad. Say which keys they pressed.",
        "max_output_tokens": "16"})
    try:
        call = await wait_call(server, provider)
        seen = []
        orig = call._session_event

        async def spy(ev):  # what the session emitted (a phone line has no event channel)
            seen.append(ev)
            await orig(ev)
        call.runner._send_event = spy
        for key in "42#":
            await c.press(key)
        # answered: the reply's audio begins (hanging up during it is a call's normal end)
        await c.wait(lambda m: m.kind == "media" and m.item, timeout=40)
        assert list(call.keys_pressed) == list("42#")
        assert [e["event"] for e in seen if e["type"] ==
                "input_audio_buffer.dtmf_event_received"] == list("42#")
        texts = [it.content[0].text for it in call.session.conversation.items
                 if it.role == "user"]
        assert texts == ["[pressed 4 2 #]"], texts
    finally:
        await c.close()
    await wait_no_calls(server, provider)


def strongest_dtmf_pair(pcm: np.ndarray, rate: int) -> tuple[float, float]:
    """The loudest row and column tone of ``pcm`` (Hz), read at the DTMF frequencies."""
    spec = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    freqs = np.fft.rfftfreq(pcm.size, 1 / rate)

    def power(f: float) -> float:
        return float(spec[np.abs(freqs - f) < 15].max())
    return max(ROWS, key=power), max(COLUMNS, key=power)


async def test_the_application_plays_tones_into_every_providers_call(server):
    """Plivo's stream has ``sendDTMF``; on the others the tones go in-band, as audio."""
    import httpx
    base = f"http://127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {API_KEY}"}
    plivo = await PhoneClient.connect(base_ws(server), "plivo")
    vonage = await PhoneClient.connect(base_ws(server), "vonage")
    try:
        p_call, v_call = await wait_call(server, "plivo"), await wait_call(server, "vonage")
        async with httpx.AsyncClient() as h:
            url = base + "/v1/telephony/calls/{}/dtmf"
            r = await h.post(url.format(p_call.session.session_id), json={"digits": "12#"},
                             headers=auth)
            assert r.status_code == 202, r.text
            _, m = await plivo.wait(lambda m: m.kind == "digits", timeout=5)
            assert m.raw == {"event": "sendDTMF", "dtmf": "12#"}
            n = len(vonage.msgs)
            r = await h.post(url.format(v_call.session.session_id), json={"digits": "9"},
                             headers=auth)
            assert r.status_code == 202, r.text
            await vonage.wait(lambda m: m.kind == "media", start=n, timeout=5)
            await asyncio.sleep(0.3)                 # the key's 160 ms of tone and gap
            tones = vonage.wire.decode(b"".join(m.data for m in vonage.msgs[n:]
                                                if m.kind == "media"))
            assert tones.size >= vonage.wire.rate * 0.15, tones.size
            assert strongest_dtmf_pair(tones, vonage.wire.rate) == key_frequencies("9")
            for body, status in (({"digits": "1x"}, 400), ({}, 400), ({"digits": ""}, 400)):
                r = await h.post(url.format(p_call.session.session_id), json=body, headers=auth)
                assert r.status_code == status, (body, r.text)
            r = await h.post(url.format("sess_nope"), json={"digits": "1"}, headers=auth)
            assert r.status_code == 404
            r = await h.post(url.format(p_call.session.session_id), json={"digits": "1"})
            assert r.status_code == 401
    finally:
        await plivo.close()
        await vonage.close()
    await wait_no_calls(server, "plivo")
    await wait_no_calls(server, "vonage")


@contextlib.contextmanager
def phone_settings(server, provider, **update):
    """The provider's endpoint settings changed for calls started inside."""
    ep = endpoint(server, provider)
    old, ep.settings = ep.settings, ep.settings.model_copy(update=update)
    try:
        yield
    finally:
        ep.settings = old


async def test_a_silent_caller_gets_a_check_in_then_a_goodbye_and_the_call_ends(server):
    """idle 1.5 s, hang up after 1 check-in: hello -> reply; silence -> check-in;
    silence -> goodbye, heard, then the server closes the stream (1000)."""
    provider = "telnyx"
    with phone_settings(server, provider, phone_idle_timeout_ms=1500,
                        phone_idle_hang_up_after=1):
        c = await PhoneClient.connect(base_ws(server), provider, {
            "instructions": "Answer in one short sentence.", "max_output_tokens": "10"})
        call = await wait_call(server, provider)
    seen = []
    orig = call._session_event

    async def spy(ev):
        seen.append((time.monotonic(), ev))
        await orig(ev)
    call.runner._send_event = spy
    try:
        await c.say("hello there")
        await asyncio.wait_for(c.ws.wait_closed(), 90)  # the server hangs up
        assert c.ws.close_code == 1000, c.ws.close_code
        ends = [n for n in c.answered if n.endswith(":end")]
        items = [n.split(":")[0] for n in ends]
        assert len(items) == 3, c.answered  # reply, check-in, goodbye: each heard to its end
        notes = [it.content[0].transcript for it in call.session.conversation.items
                 if it.role == "user"][1:]
        assert notes == ["[the caller said nothing for 1.5 s]",
                         "[the caller said nothing for 1.5 s and did not answer the check-ins;"
                         " say a short goodbye, the call ends]"], notes
        fired = [t for t, ev in seen if ev["type"] == "input_audio_buffer.timeout_triggered"]
        assert len(fired) == 2
        assert not [t for t, ev in seen if ev["type"] == "input_audio_buffer.speech_started"
                    and t > fired[0]], "the caller never spoke after the first reply"
        # each timeout came after the previous reply was heard to its end (order, not time)
        heard = [c.answered_at[n] for n in ends]
        assert heard[0] < fired[0] < heard[1] < fired[1] < heard[2]
        late = [round((f - h) * 1000 - 1500) for f, h in zip(fired, heard)]
        print(f"timeouts fired {late} ms after their setting once the reply was heard")
    finally:
        await c.close()
    await wait_no_calls(server, provider)
    await settled_clean(server)


async def test_an_answering_machine_gets_the_message_after_its_beep_then_the_call_ends(server):
    """Outbound call with answering_machine=true: the greeting is not answered;
    after the beep the agent leaves its message, and once that was heard the
    server ends the stream (1000)."""
    provider = "exotel"
    c = await PhoneClient.connect(base_ws(server), provider, {
        "answering_machine": "true", "max_output_tokens": "10",
        "instructions": "You call to remind Jane of her appointment."})
    try:
        call = await wait_call(server, provider)
        rate = c.wire.rate
        greeting = flite_pcm("Hi, you have reached Jane. I can not take your call right now. "
                             "Please leave a message after the tone.", rate)
        t = np.arange(int(rate * 0.4)) / rate
        beep = (9000 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)
        fut = asyncio.get_running_loop().create_future()
        c.mic_q.put_nowait((c.wire.encode(np.concatenate(
            [greeting, np.zeros(rate // 2, np.int16), beep])), fut))
        beep_end = await fut
        await asyncio.wait_for(c.ws.wait_closed(), 60)  # the server hangs up
        assert c.ws.close_code == 1000
        media = [m for m in c.msgs if m.kind == "media"]
        assert media and media[0].t > beep_end - 0.05, "spoke over the greeting"
        notes = [it.content[0].text for it in call.session.conversation.items
                 if it.role == "user" and it.content[0].type == "input_text"]
        assert notes and "answering machine" in notes[0]
        print(f"message began {(media[0].t - beep_end) * 1000:.0f} ms after the beep ended")
    finally:
        await c.close()
    await wait_no_calls(server, provider)
    await settled_clean(server)
