"""The SIP endpoint against a real softphone: baresip (Debian ``baresip-core``),
driven through its ``ctrl_tcp`` module (:mod:`voice_server.testing.baresip`).
Its microphone is a WAV file, its ear a recording of what it decoded.

* A spoken turn: baresip dials the agent and says a person's recorded
  command ("go forward ten meters", from pocketsphinx-testdata); the agent
  answers; baresip records the answer, and Whisper hears in that recording
  the words the agent said, on the command's topic.
* A call the agent places (``POST /v1/sip/calls``) to baresip, which
  answers by itself: dialing -> answered; the agent speaks first; baresip
  records it, Whisper hears it; the agent hangs up; ended; the call record
  keeps the placed call's outcome with the session's transcript.

One baresip and one endpoint for the module, on the shared server.  Every
wait is bounded and nothing here asserts a duration.
"""

from __future__ import annotations


import numpy as np
import pytest

from voice_server.audio_codec import resample
from voice_server.session.items import chat_messages
from voice_server.transports.sip.incoming import Accept, IncomingCall
from voice_server.testing.baresip import Baresip, baresip_available
from voice_server.testing.baresip_ctrl import (CommandFailed, NetstringError, NetstringReader,
                                               netstring)
from voice_server.testing.speech_corpus import human_clips
from voice_server.testing.wer import normalize
from voice_server.testing.waiting import answered_call, until

from .test_sip import nothing_left, reply_texts
from .test_sip_outbound import api, dial_endpoint, placed, record_of

# `make setup` installs baresip-core: missing is a failure, not a skip
assert baresip_available(), "baresip (baresip-core) missing: run `make setup`"
pytestmark = [pytest.mark.timeout(180)]

ROBOT = ("You are the voice of a delivery robot on a phone line. When you are given a movement "
         "command, confirm it in one short sentence that repeats the command.")
LIBRARY = ("You are calling from the city library. When the call is answered, say in one short "
           "sentence that the book they reserved is ready to pick up at the library.")


@pytest.fixture(scope="module")
def phone():
    with Baresip(rtp_ports=(34700, 34798)) as p:
        yield p


@pytest.fixture(scope="module")
def sip(server, tmp_path_factory):
    with dial_endpoint(server, (34800, 34838), tmp_path_factory.mktemp("records")) as made:
        yield made


@pytest.fixture(scope="module")
def whisper():
    from runtime.models.listen.whisper_asr import WhisperASR
    return WhisperASR("tiny.en", threads=1)


def hear(whisper, pcm: np.ndarray, rate: int) -> str:
    """What Whisper hears in a phone's recording (30 s windows)."""
    x = resample(pcm, rate, 16000).astype(np.float32) / 32768.0
    return " ".join(whisper.transcribe([x[i:i + 30 * 16000]
                                        for i in range(0, max(x.size, 1), 30 * 16000)]))


def overlap(said: str, heard: str) -> tuple[float, int]:
    """The share (and number) of the words said that were heard."""
    words, got = normalize(said), set(normalize(heard))
    n = sum(w in got for w in words)
    return n / max(len(words), 1), n


async def reply_played(server, call, timeout: float = 60.0) -> str:
    """Wait until a response of ``call`` is done and every frame of it has
    gone out on the RTP clock; the agent's last words."""
    played: list[dict] = []
    await until(lambda: call.runner is not None, 20, "the session")
    # the session says so once the RTP clock has sent the reply's last frame
    await server.acall(call.runner.watch, lambda ev: played.append(ev)
                       if ev.get("type") == "output_audio_buffer.stopped" else None)
    await until(lambda: played and reply_texts(call), timeout, "the reply to be played out")
    return reply_texts(call)[-1]


async def test_baresip_calls_and_hears_the_spoken_reply(server, sip, phone, whisper):
    ep, _ = sip
    [clip] = [c for c in human_clips() if c.name == "goforward"]   # "go forward ten meters"
    question = (np.concatenate([np.zeros(8000, np.float32), clip.audio]) * 32767).astype(np.int16)
    phone.say(question, 16000)

    async def robot(call: IncomingCall):
        return Accept(session={"instructions": ROBOT})

    ep.on_incoming = robot
    ctl = await phone.control()
    try:
        mark = ctl.mark()
        await ctl.command("dial", f"sip:agent@127.0.0.1:{ep.sip.port}")
        await ctl.event("CALL_ESTABLISHED", 20, since=mark)
        call = await answered_call(ep)
        assert call.plan.format.name in ("PCMU", "PCMA")
        said = await reply_played(server, call)
        await ctl.command("hangup")
        await ctl.event("CALL_CLOSED", 20, since=mark)
    finally:
        await ctl.close()
    await until(lambda: call.finished, 20, "the BYE")
    assert call.end_reason == "caller hung up"
    # the agent heard the person's words over the line
    heard_by_agent = " ".join(m.get("content") or "" for m in
                              chat_messages(list(call.session.conversation.items))
                              if m["role"] == "user")
    assert {"forward", "meters"} & set(normalize(heard_by_agent)), heard_by_agent
    # ...and answered on the topic: the command's own words come back
    assert {"forward", "ten", "meters"} & set(normalize(said)), said
    # baresip heard that answer: Whisper finds the agent's words in its recording
    pcm, rate = await phone.heard()
    heard = hear(whisper, pcm, rate)
    share, n = overlap(said, heard)
    assert share >= 0.5 and n >= 2, (said, heard)
    await nothing_left(server, ep)


async def test_the_agent_calls_baresip_and_speaks_first(server, sip, phone, whisper):
    ep, app = sip
    phone.say(np.zeros(8000, np.int16), 8000)   # the callee listens: 60 s of silence
    ctl = await phone.control()
    async with api(server, app) as client:
        try:
            mark = ctl.mark()
            r = await client.post("/v1/sip/calls", json={
                "to": phone.uri, "session": {"instructions": LIBRARY}})
            assert r.status_code == 201, r.text
            call_id = r.json()["id"]
            assert r.json()["status"] in ("dialing", "ringing")
            await ctl.event("CALL_ESTABLISHED", 20, since=mark)   # baresip answered by itself
            call = await until(lambda: ep.call(call_id), 20, "the answer")
            info = await placed(client, call_id)
            assert (info["status"], info["sip_status"]) == ("answered", 200), info
            await record_of(client, call_id, "answered")
            # the agent speaks first
            await server.acall(call.runner.client_event, {"type": "response.create"})
            said = await reply_played(server, call)
            r = await client.post(f"/v1/sip/calls/{call_id}/hangup")
            assert r.status_code == 200, r.text
            closed = await ctl.event("CALL_CLOSED", 20, since=mark)
            assert closed["direction"] == "incoming", closed
            await until(lambda: ep.placed_call(call_id).status == "ended", 20, "ended")
            rec = await record_of(client, call_id, "ended")
        finally:
            await ctl.close()
    assert rec["id"] == info["session_id"] and rec["outbound"]["to"] == phone.uri, rec
    assert any(i.get("role") == "assistant" and i.get("text") == said for i in rec["items"]), \
        (said, rec["items"])
    assert {"library", "book"} & set(normalize(said)), said
    pcm, rate = await phone.heard()
    heard = hear(whisper, pcm, rate)
    share, n = overlap(said, heard)
    assert share >= 0.5 and n >= 2, (said, heard)
    await nothing_left(server, ep)


def test_netstrings_are_framed_across_reads_and_a_broken_stream_is_refused():
    r = NetstringReader()
    wire = netstring(b'{"event":true}') + netstring(b"") + netstring(b'{"response":true}')
    got = [p for i in range(0, len(wire), 5) for p in r.feed(wire[i:i + 5])]
    assert got == [b'{"event":true}', b"", b'{"response":true}'] and not r.buffer
    for bad in (b"x:abc,", b"3:abcd", b"03:abc,", b"12345678"):
        try:
            NetstringReader().feed(bad)
        except NetstringError:
            continue
        raise AssertionError(f"{bad!r} was accepted")


async def test_the_control_connection_answers_and_refuses_clearly(phone):
    ctl = await phone.control()
    try:
        assert phone.uri in await ctl.command("reginfo")
        try:
            await ctl.command("no-such-command")
        except CommandFailed as exc:
            assert "not found" in str(exc)
        else:
            raise AssertionError("an unknown command did not fail")
    finally:
        await ctl.close()
