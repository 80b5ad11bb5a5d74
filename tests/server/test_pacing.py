"""Output pacing and pause/resume on a real server (tests/server/pacing-pipeline.yaml:
real listen, a scripted thinker, real flite speech; ``output_lead_ms`` 300).

The WebSocket client and the Twilio client keep a playout line from what they
receive (each piece plays at once, or after what they hold): what they hold
unplayed never exceeds the lead plus one slice, give or take the scheduling
of two event loops on a busy machine (``SLACK_MS``; an unpaced reply would be
seconds ahead).  Pause and resume go through the runner, as the listen-side
logic will call them; the played position comes from the server alone."""

from __future__ import annotations

import asyncio
import base64
import contextlib

import pytest

from voice_server.testing.realtime_client import RTClient
from voice_server.testing.rtc_client import RTCClient
from voice_server.testing.twilio_client import TwilioClient
from voice_server.testing.voice_stages import REPLY

from .conftest import API_KEY, LEAD_MS, unpaced_ws
from voice_server.testing.response_status import answered

pytestmark = pytest.mark.timeout(180)

WS_SLICE_MS = 40
TWILIO_SLICE_MS = 100
SLACK_MS = 120


def delta_ms(ev: dict) -> float:
    return len(base64.b64decode(ev["delta"])) / 2 / 24.0  # pcm16, 24 kHz


class Playout:
    """The listener's line: released audio plays end to end from its arrival."""

    def __init__(self) -> None:
        self.end: float | None = None
        self.max_ahead = 0.0
        self.received = 0.0

    def add(self, t_ms: float, ms: float) -> None:
        start = t_ms if self.end is None else max(self.end, t_ms)
        self.end = start + ms
        self.received += ms
        self.max_ahead = max(self.max_ahead, self.end - t_ms)


def ws_playout(c: RTClient, response_id: str, start: int = 0, stop: int | None = None) \
        -> Playout:
    p = Playout()
    for i in range(start, len(c.events) if stop is None else stop):
        e = c.events[i]
        if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id:
            p.add(c.times[i] * 1000.0, delta_ms(e))
    return p


async def audio_turn(c: RTClient) -> str:
    await c.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Tell me something."}]}})
    await c.send({"type": "response.create"})
    return (await c.wait("response.created", start=len(c.events) - 1 if c.events else 0,
                         timeout=30))["response"]["id"]


async def pause_while_playing(server, c: RTClient, runner, rid: str, start: int = 0):
    """Let the reply play 0.8 s, then pause it as the listen side would:
    (its first delta, the paused event)."""
    first = await c.wait("response.output_audio.delta", lambda e: e["response_id"] == rid,
                         start=start, timeout=30)
    await asyncio.sleep(0.8)
    await server.acall(runner.pause_output)
    return first, await c.wait("voice_agent.output_audio.paused", start=start)


async def runner_of(server, c: RTClient):
    sid = (await c.wait("session.created"))["session"]["id"]
    return server.runner(sid)


async def test_websocket_reply_is_paced_in_real_time(paced_server):
    c = await RTClient.connect(paced_server.url)
    try:
        await c.wait("session.created")
        rid = await audio_turn(c)
        done = await c.wait("response.done", lambda e: e["response"]["id"] == rid, timeout=60)
        assert answered(done["response"])
        assert done["response"]["output"][0]["content"][0]["transcript"].strip() == REPLY
        p = ws_playout(c, rid)
        assert p.received > 3000, p.received  # seconds of audio: pacing matters
        assert p.max_ahead <= LEAD_MS + WS_SLICE_MS + SLACK_MS, p.max_ahead
        deltas = [i for i, e in enumerate(c.events)
                  if e["type"] == "response.output_audio.delta" and e["response_id"] == rid]
        # released over (nearly) the audio's own duration, not in a burst
        span = (c.times[deltas[-1]] - c.times[deltas[0]]) * 1000.0
        assert span >= p.received - LEAD_MS - 2 * WS_SLICE_MS, (span, p.received)
        # the events that close the reply come after its last delta
        assert c.index(c.of_type("response.output_audio.done")[0]) > deltas[-1]
        assert c.index(done) > deltas[-1]
        assert not [e for e in c.events if e["type"].startswith("voice_agent.")]
    finally:
        await c.close()


async def test_pause_holds_and_resume_goes_on_with_the_same_reply(paced_server):
    c = await RTClient.connect(paced_server.url)
    try:
        runner = await runner_of(paced_server, c)
        # the same reply uninterrupted, for reference: in a session of its own,
        # unpaced (its timing is not what is compared)
        with unpaced_ws(paced_server):
            ref = await RTClient.connect(paced_server.url)
        try:
            await ref.wait("session.created")
            rid = await audio_turn(ref)
            full = await ref.wait("response.done", lambda e: e["response"]["id"] == rid,
                                  timeout=60)
            full_ms = ws_playout(ref, rid).received
        finally:
            await ref.close()
        n = len(c.events)
        rid2 = await audio_turn(c)
        first, paused = await pause_while_playing(paced_server, c, runner, rid2, n)
        i_paused = c.index(paused)
        received = ws_playout(c, rid2, n, i_paused).received
        assert paused["response_id"] == rid2 and paused["item_id"] == first["item_id"]
        assert isinstance(paused["event_id"], str) and paused["event_id"]
        # the played position: what arrived, less the client's lead at most
        assert received - LEAD_MS - WS_SLICE_MS - SLACK_MS <= paused["audio_end_ms"] \
            <= received, (paused, received)
        await asyncio.sleep(1.2)  # held: nothing of the reply may arrive
        assert [e["type"] for e in c.events[i_paused + 1:]] == []
        await paced_server.acall(runner.resume_output)
        resumed = await c.wait("voice_agent.output_audio.resumed", start=i_paused)
        assert resumed["response_id"] == rid2 and resumed["item_id"] == first["item_id"]
        # the client has played out what it held meanwhile
        assert abs(resumed["audio_end_ms"] - received) <= WS_SLICE_MS
        done = await c.wait("response.done", lambda e: e["response"]["id"] == rid2,
                            start=i_paused, timeout=60)
        assert answered(done["response"])
        assert [e["response"]["id"] for e in c.of_type("response.done", n)] == [rid2]
        assert done["response"]["output"][0]["content"][0]["transcript"] == \
            full["response"]["output"][0]["content"][0]["transcript"]
        # the same audio as an uninterrupted reply: nothing lost, nothing twice
        # (flite dithers: where a clause's voice begins and ends, and so its
        # padding cut, may move by a 10 ms frame at either end; a clause is > 1 s)
        assert abs(ws_playout(c, rid2, n).received - full_ms) <= 4 * 2 * 10.0
        after = ws_playout(c, rid2, c.index(resumed))
        assert after.max_ahead <= LEAD_MS + WS_SLICE_MS + SLACK_MS
    finally:
        await c.close()


async def test_cancel_after_pause_truncates_at_the_played_position(paced_server):
    c = await RTClient.connect(paced_server.url)
    try:
        runner = await runner_of(paced_server, c)
        rid = await audio_turn(c)
        first, paused = await pause_while_playing(paced_server, c, runner, rid)
        await asyncio.sleep(0.6)  # the interruption turns out to be real

        def cancel():
            runner.dispatch(runner.session.cancel_response("turn_detected", runner.clock()))

        await paced_server.acall(cancel)
        done = await c.wait("response.done", lambda e: e["response"]["id"] == rid)
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        cut = await c.wait("conversation.item.truncated", start=c.index(done))
        assert cut["item_id"] == first["item_id"]
        received = ws_playout(c, rid).received
        # 600 ms after the pause the client has played everything it got
        assert abs(cut["audio_end_ms"] - received) <= WS_SLICE_MS, (cut, received)
        assert cut["audio_end_ms"] >= paused["audio_end_ms"]
        assert not [e for e in c.events[c.index(done):]
                    if e["type"] == "response.output_audio.delta"]
        transcript = done["response"]["output"][0]["content"][0]["transcript"]
        assert len(transcript) < len(REPLY)
        # a client that truncates by itself, as many do, is still answered
        await c.send({"type": "conversation.item.truncate", "item_id": cut["item_id"],
                      "content_index": 0, "audio_end_ms": int(received)})
        again = await c.wait("conversation.item.truncated", start=c.index(cut) + 1)
        assert again["audio_end_ms"] == int(received)
        assert not c.of_type("error")
    finally:
        await c.close()


async def test_twilio_media_is_paced_and_marks_still_work(paced_server):
    base = f"ws://127.0.0.1:{paced_server.port}"
    c = await TwilioClient.connect(base)
    try:
        await c.say("hello, can you hear me")
        i, end = await c.wait(lambda m: m["event"] == "mark"
                              and m["mark"]["name"].endswith(":end"), timeout=90)
        item = end["mark"]["name"].split(":")[0]
        p = Playout()
        for m in c.msgs[:i]:
            if m["event"] == "media" and m.get("_item") == item:
                p.add(m["_t"] * 1000.0, len(base64.b64decode(m["media"]["payload"])) / 8.0)
        assert p.received > 3000, p.received
        assert p.max_ahead <= LEAD_MS + TWILIO_SLICE_MS + SLACK_MS, p.max_ahead
        marks = [n for n in c.marks() if n.startswith(item)]
        assert marks[0].endswith(":start") and len(marks) > 10
        # the echo of the last mark tells the server the whole reply was heard
        deadline = asyncio.get_running_loop().time() + 10
        while end["mark"]["name"] not in c.echoed:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        ms = [int(n.split(":")[1]) for n in marks]
        assert ms == sorted(ms) and abs(ms[-1] - p.received) <= 20
    finally:
        await c.close()


async def test_webrtc_pause_silences_the_track_and_resume_goes_on(paced_server):
    c = await RTCClient.connect(f"http://127.0.0.1:{paced_server.port}", API_KEY)
    try:
        await asyncio.wait_for(c.open.wait(), 10)
        created = await c.wait("session.created", 10)
        runner = paced_server.runner(created["session"]["id"])
        c.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Tell me something."}]}})
        c.send({"type": "response.create"})
        started = await c.wait("output_audio_buffer.started", 30)
        rid = started["response_id"]
        await asyncio.sleep(0.8)
        await paced_server.acall(runner.pause_output)
        paused = await c.wait("voice_agent.output_audio.paused", 5)
        assert paused["response_id"] == rid and paused["audio_end_ms"] > 0
        await asyncio.sleep(1.2)
        # the track sends silence while paused (a few frames may be in flight)
        assert c.audible(paused["_t"] + 0.15, paused["_t"] + 1.2) == []
        assert not [e for e in c.events[c.events.index(paused):]
                    if e["type"] in ("response.done", "output_audio_buffer.cleared")]
        await paced_server.acall(runner.resume_output)
        resumed = await c.wait("voice_agent.output_audio.resumed", 5)
        # played position did not move while paused: the track held the audio
        assert abs(resumed["audio_end_ms"] - paused["audio_end_ms"]) <= 20
        done = await c.wait(lambda e: e["type"] == "response.done"
                            and e["response"]["id"] == rid, 30)
        assert answered(done["response"])
        stopped = await c.wait("output_audio_buffer.stopped", 10)
        assert stopped["response_id"] == rid
        heard = c.audible(resumed["_t"], stopped["_t"] + 0.5)
        assert len(heard) >= 15  # the rest of the reply was played after the resume
    finally:
        await c.close()


async def test_openai_sdk_takes_the_extension_events(paced_server):
    """The official SDK builds unknown server events loosely: a paused and
    resumed reply reaches it whole, and its connection goes on."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key=API_KEY, base_url=f"http://127.0.0.1:{paced_server.port}/v1")
    async with client.realtime.connect(model="voice-agent") as conn:
        events: list = []

        async def read():
            async for ev in conn:
                events.append(ev)

        async def first(pred, timeout=30.0):
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                hit = next((e for e in events if pred(e)), None)
                if hit is not None:
                    return hit
                assert asyncio.get_running_loop().time() < deadline, \
                    [e.type for e in events[-10:]]
                await asyncio.sleep(0.02)

        reader = asyncio.ensure_future(read())
        try:
            created = await first(lambda e: e.type == "session.created")
            runner = paced_server.runner(created.session.id)
            await conn.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Tell me something."}]})
            await conn.response.create()
            delta = await first(lambda e: e.type == "response.output_audio.delta")
            await asyncio.sleep(0.5)
            await paced_server.acall(runner.pause_output)
            paused = await first(lambda e: e.type == "voice_agent.output_audio.paused")
            assert getattr(paused, "response_id", None) == delta.response_id
            await asyncio.sleep(0.3)
            await paced_server.acall(runner.resume_output)
            await first(lambda e: e.type == "voice_agent.output_audio.resumed")
            done = await first(lambda e: e.type == "response.done", timeout=60)
            assert answered(done.response)
            assert done.response.id == delta.response_id
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
