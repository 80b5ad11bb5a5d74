"""Issue 41 end to end on the client transports: the lock on the caller's voice
and noise suppression, set by the client's ``session.update``, over the
Realtime WebSocket and WebRTC on the shared test server (conftest.py).

People's recordings (voice_server/testing/voice_lock_script.py): the caller
speaks twice and gets a turn each time (and is enrolled), another person's
recording then opens no turn (no ``input_audio_buffer.speech_started``, no
transcript; the listen stage counts it as someone else), and the caller
again gets a turn.  The listen stage's stats show the session's
``noise_reduction`` and the lock on its stream (opened by the first audio).  Replies are off (``create_response``
false): the features are the listen side's.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voice_server.audio_codec import resample
from voice_server.testing.audio import silence, stream_realtime
from voice_server.testing.realtime_client import RTClient
from voice_server.testing.rtc_client import RTCClient
from voice_server.testing.voice_lock_script import caller_other_caller

from .conftest import API_KEY

pytestmark = pytest.mark.timeout(120)

LISTEN_SIDE = {"type": "realtime", "audio": {"input": {
    "noise_reduction": {"type": "near_field"},
    "turn_detection": {"type": "server_vad", "create_response": False}}},
    "voice_agent": {"voice_lock": True}}
WS_RATE = 24000   # the Realtime default input format: pcm16 at 24 kHz


def transcripts(events: list[dict]) -> list[str]:
    return [e["transcript"] for e in events
            if e["type"] == "conversation.item.input_audio_transcription.completed"]


def checked_update(updated: dict) -> None:
    s = updated["session"]
    assert s["voice_agent"]["voice_lock"] is True, s
    assert s["audio"]["input"]["noise_reduction"] == {"type": "near_field"}, s


async def test_websocket_caller_other_person_caller(server):
    c = await RTClient.connect(f"ws://127.0.0.1:{server.port}/v1/realtime")
    try:
        await c.wait("session.created")
        await c.send({"type": "session.update", "session": LISTEN_SIDE})
        checked_update(await c.wait("session.updated"))

        async def say(pcm16k: np.ndarray) -> None:   # twice real time: pacing is not judged here
            pcm = resample(pcm16k, 16000, WS_RATE)
            await stream_realtime(c.send, np.concatenate([silence(200), pcm, silence(1000)]),
                                  speed=2.0)

        await the_trio(server, c, say)
    finally:
        await c.close()


async def the_trio(server, c, say) -> None:
    """caller_other_caller on a client's session: three turns, two of the
    caller's, none of the other person's words, no error."""
    got = await caller_other_caller(server, say, lambda: transcripts(c.events), "goforward",
                                    "near_field")
    assert len(c.of_type("input_audio_buffer.speech_started")) == 3, c.types()
    assert not any("forward" in t.lower() for t in got), got
    assert not c.of_type("error"), c.of_type("error")


async def test_webrtc_caller_other_person_caller(server):
    # the shared server offers 127.0.0.1 as its only ICE host (conftest.py)
    c = await RTCClient.connect(f"http://127.0.0.1:{server.port}", API_KEY)
    try:
        await asyncio.wait_for(c.open.wait(), 15)
        await c.wait("session.created", 10)
        c.send({"type": "session.update", "session": LISTEN_SIDE})
        checked_update(await c.wait("session.updated", 10))

        async def say(pcm16k: np.ndarray) -> None:   # the mic track sends in real time
            _, end = c.mic.say(pcm16k, 16000)
            await end

        await the_trio(server, c, say)
    finally:
        await c.close()
