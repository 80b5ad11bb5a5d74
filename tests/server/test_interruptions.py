"""Talking over a reply on the shared paced server (conftest.py:
tests/server/pacing-pipeline.yaml, real listen with Whisper, a scripted
thinker whose reply lasts seconds, real flite speech; ``output_lead_ms`` 300),
with a caller that streams its microphone in real time (voice_server.testing
Caller):

* a backchannel pauses the reply, which then resumes: same response, no
  cancel, no user turn, no new response;
* a real interruption cancels it and truncates it where the caller is;
* the reply's own voice in the caller's microphone (-20 dB, 150 ms late)
  neither pauses nor cancels it, while a real interruption on top still
  cancels it."""

from __future__ import annotations

import asyncio

import pytest

from voice_server.testing.audio import flite_pcm
from voice_server.testing.callers.base import RealtimeWSTransport
from voice_server.testing.callers.caller import connected
from voice_server.testing.echo import PlayoutEcho

from .conftest import API_KEY
from .test_pacing import SLACK_MS, WS_SLICE_MS, delta_ms
from voice_server.testing.response_status import answered

pytestmark = pytest.mark.timeout(240)

RATE = 24000
INTERRUPTION = "wait, stop. what about tomorrow instead"


def of(c, type_: str, start: int, rid: str | None = None) -> list[dict]:
    return [e for e in c.events[start:] if e["type"] == type_
            and (rid is None or e.get("response_id", e.get("response", {}).get("id")) == rid)]


async def reply_playing(c, play_s: float = 0.8) -> tuple[str, int]:
    """Ask for the (long) scripted reply; return when it has played ``play_s``."""
    n = len(c.events)
    await c.t.send_event({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Tell me something."}]}})
    await c.t.send_event({"type": "response.create"})
    i, first = await c.wait(lambda e: e["type"] == "response.output_audio.delta", n, 60)
    await asyncio.sleep(play_s)
    return first["response_id"], i


async def done_of(c, rid: str, start: int) -> dict:
    return (await c.wait(lambda e: e["type"] == "response.done"
                         and e["response"]["id"] == rid, start, 90))[1]


async def test_a_backchannel_pauses_then_resumes_the_same_reply(paced_server):
    async with connected(RealtimeWSTransport(paced_server.url, API_KEY)) as c:
        rid, i = await reply_playing(c)
        _, end = c.say(flite_pcm("okay", RATE))
        await asyncio.wait_for(end, 30)
        await c.wait(lambda e: e["type"] == "voice_agent.output_audio.paused", i, 20)
        _, resumed = await c.wait(lambda e: e["type"] == "voice_agent.output_audio.resumed", i, 20)
        assert resumed["response_id"] == rid
        done = await done_of(c, rid, i)
        assert answered(done["response"])
        await asyncio.sleep(1.0)    # its utterance's final has come and gone
        for t in ("input_audio_buffer.speech_started", "input_audio_buffer.committed",
                  "conversation.item.added", "response.created"):
            assert not [e for e in of(c, t, i) if e.get("item", {}).get("role") != "assistant"], t
        assert not of(c, "conversation.item.truncated", i)


async def test_a_real_interruption_cancels_and_truncates_where_the_caller_is(paced_server):
    async with connected(RealtimeWSTransport(paced_server.url, API_KEY)) as c:
        rid, i = await reply_playing(c)
        c.say(flite_pcm(INTERRUPTION, RATE))
        done = await done_of(c, rid, i)
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        k = c.events.index(done)
        started = of(c, "input_audio_buffer.speech_started", i)
        assert started and c.events.index(started[0]) < k
        paused = of(c, "voice_agent.output_audio.paused", i, rid)
        assert paused and c.events.index(paused[0]) < c.events.index(started[0])
        cut = (await c.wait(lambda e: e["type"] == "conversation.item.truncated", k, 10))[1]
        # where the caller is: what it received, less what it still held when
        # the cancel came (it plays each delta on arrival, end to end)
        end = None
        for e in c.events[i:k]:
            if e["type"] == "response.output_audio.delta" and e["response_id"] == rid:
                end = e["_t"] if end is None else max(end, e["_t"])
                end += delta_ms(e) / 1000
        received = sum(delta_ms(e) for e in of(c, "response.output_audio.delta", i, rid))
        position = received - max(end - done["_t"], 0.0) * 1000
        assert abs(cut["audio_end_ms"] - position) <= WS_SLICE_MS + SLACK_MS, (cut, position)
        assert cut["audio_end_ms"] >= paused[0]["audio_end_ms"]
        # the interruption is the next turn
        await c.wait(lambda e: e["type"] == "input_audio_buffer.committed", i, 30)


@pytest.mark.parametrize("interrupt", [False, True], ids=["echo", "echo+interruption"])
async def test_the_replys_echo_does_not_interrupt_it_the_caller_still_does(paced_server, interrupt):
    async with connected(RealtimeWSTransport(paced_server.url, API_KEY)) as c:
        c.echo = PlayoutEcho(RATE, gain=0.1, delay_ms=150.0)     # -20 dB, 150 ms late
        rid, i = await reply_playing(c, 1.5)
        if interrupt:
            c.say(flite_pcm(INTERRUPTION, RATE))
        done = await done_of(c, rid, i)
        if interrupt:
            assert done["response"]["status"] == "cancelled"
            assert of(c, "input_audio_buffer.speech_started", i)
        else:
            heard = [(e["type"], e.get("transcript", e.get("audio_start_ms"))) for e in c.events[i:]
                     if e["type"].startswith(("input_audio_buffer.", "voice_agent.",
                                              "conversation.item.input_audio"))]
            assert answered(done["response"]), (done["response"], heard)
            assert not of(c, "voice_agent.output_audio.paused", i)
            assert not of(c, "input_audio_buffer.speech_started", i)


async def peek_counts(paced_server) -> tuple[int, int]:
    """The listen stage's (peeks asked, peeks skipped) so far."""
    snap = await paced_server.acall(paced_server.pipeline.snapshot)
    ex = next(p["stages"]["listen"]["executor"] for p in snap["processes"].values()
              if "listen" in p["stages"])
    return ex.get("peeks_asked", 0), ex.get("peeks_skipped", 0)


async def until_counts(paced_server, want, timeout: float = 10.0) -> tuple[int, int]:
    """Stage stats come five times a second: wait until ``want(counts)``."""
    end = asyncio.get_running_loop().time() + timeout
    while not want(counts := await peek_counts(paced_server)):
        assert asyncio.get_running_loop().time() < end, counts
        await asyncio.sleep(0.1)
    return counts


async def test_the_early_reading_runs_over_a_reply_only(paced_server):
    """The runner tells the listen stage whether a reply plays (agent_speaking):
    a question asked in silence gets no early reading (nothing to decide), the
    same caller talking over a reply gets it (backchannel or interruption?).
    This pipeline peeks once, 400 ms in (no asr_peek_every_ms)."""
    async with connected(RealtimeWSTransport(paced_server.url, API_KEY)) as c:
        await asyncio.sleep(0.5)
        asked0, skipped0 = await peek_counts(paced_server)
        n = len(c.events)
        _, end = c.say(flite_pcm("what is the capital of france", RATE))
        await asyncio.wait_for(end, 30)
        # the turn's answer begins; the decision was made at the end of the turn,
        # so the (long, scripted) reply is cut short rather than heard out
        await c.wait(lambda e: e["type"] == "response.created", n, 60)
        await c.t.send_event({"type": "response.cancel"})
        await c.wait(lambda e: e["type"] == "response.done", n, 60)
        asked, skipped = await until_counts(paced_server, lambda k: k[1] > skipped0)
        assert (asked, skipped) == (asked0, skipped0 + 1)

        rid, i = await reply_playing(c)
        c.say(flite_pcm(INTERRUPTION, RATE))
        done = await done_of(c, rid, i)
        assert done["response"]["status"] == "cancelled"
        got = await until_counts(paced_server, lambda k: k[0] > asked)
        assert got == (asked + 1, skipped), got
