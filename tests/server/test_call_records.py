"""Call records on the real CPU pipeline: a spoken call over each transport
(Realtime WebSocket, WebRTC, Twilio) leaves a transcript whose items and
timings match what the client saw, and a two-channel recording whose agent
channel Whisper transcribes back to the reply; ``/v1/calls`` follows the
access rule of every HTTP endpoint; a server killed mid-call leaves a
readable record."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sqlite3
import time
import wave

import httpx
import numpy as np
import pytest

from voice_server.records.settings import RecordSettings
from voice_server.records.store import DB_NAME, CallStore
from voice_server.settings import ServerSettings
from voice_server.testing.audio import flite_pcm, silence, stream_realtime
from voice_server.testing.realtime_client import RTClient
from voice_server.testing.response_status import answered
from voice_server.testing.rtc_client import RTCClient
from voice_server.testing.server_process import ServerProcess
from voice_server.testing.server_thread import ServerThread
from voice_server.testing.twilio_client import TwilioClient
from voice_server.testing.wer import normalize

from .conftest import API_KEY, ROOT

pytestmark = pytest.mark.timeout(180)

QUESTION = "what is the capital of france"
RATE = 16000
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def rec_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("records")
    settings = ServerSettings.from_sources(
        env={"VOICE_AGENT_ICE_HOSTS": "127.0.0.1"}, api_keys=[API_KEY], max_sessions=8,
        max_output_tokens=24, records={"enabled": True, "folder": str(folder), "recording": True})
    srv = ServerThread(str(ROOT / "configs" / "voice-cpu-fast.yaml"), settings).start()
    srv.base = f"http://127.0.0.1:{srv.port}"
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def whisper():
    from runtime.models.listen.whisper_asr import WhisperASR
    return WhisperASR("tiny.en", threads=1)


async def ended_call(srv, call_id: str, timeout: float = 20.0) -> dict:
    """The call's record once the server has closed it."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=srv.base, headers=AUTH, timeout=30) as http:
        while True:
            r = await http.get(f"/v1/calls/{call_id}")
            if r.status_code == 200 and r.json()["state"] == "ended" and r.json()["recorded"]:
                return r.json()
            assert time.monotonic() < deadline, (r.status_code, r.text[:300])
            await asyncio.sleep(0.2)


async def recording(srv, call_id: str) -> np.ndarray:
    async with httpx.AsyncClient(base_url=srv.base, headers=AUTH, timeout=30) as http:
        r = await http.get(f"/v1/calls/{call_id}/recording.wav")
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    with wave.open(io.BytesIO(r.content)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (2, 2, RATE)
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, 2)


def overlap(said: str, heard: str) -> tuple[float, int]:
    """The share (and number) of the words said that were heard."""
    a, b = normalize(said), set(normalize(heard))
    n = sum(w in b for w in a)
    return n / max(len(a), 1), n


def check_turn(call: dict, response_id: str, status: str) -> dict:
    [turn] = [t for t in call["turns"] if t["response_id"] == response_id]
    assert turn["status"] == status, turn
    t = turn["timings"]
    assert t["trigger"] == "speech", t
    order = ["speech_stopped_ms", "transcript_ms", "response_started_ms", "first_token_ms",
             "first_audio_ms", "done_ms"]
    assert all(t[k] is not None for k in order), t
    assert [t[k] for k in order] == sorted(t[k] for k in order), t
    assert turn["usage"]["output_tokens"] > 0
    return t


async def check_recording(srv, call_id: str, reply: str, whisper) -> None:
    frames = await recording(srv, call_id)
    caller, agent = (frames[:, i].astype(np.float32) / 32768.0 for i in (0, 1))
    assert np.abs(caller).max() > 0.05, "the caller's channel is silent"
    heard = whisper.transcribe([agent[i:i + 30 * RATE] for i in range(0, agent.size, 30 * RATE)])
    # Whisper tiny mishears the small model's French names ("L'Etoile", "L'Alma")
    share, n = overlap(reply, " ".join(heard))
    assert share >= 0.4 and n >= 3, (reply, heard)
    # the two channels are aligned: the reply starts after the question ended
    loud = lambda x: np.flatnonzero(np.abs(x) > 0.05)   # noqa: E731
    assert loud(agent)[0] > loud(caller)[-1] - RATE // 10   # (10 ms frames of slack)


async def test_a_spoken_call_over_the_websocket(rec_server, whisper):
    c = await RTClient.connect(rec_server.url)
    try:
        created = await c.wait("session.created")
        call_id = created["session"]["id"]
        await stream_realtime(c.send, np.concatenate([silence(300), flite_pcm(QUESTION),
                                                      silence(1500)]))
        done = await c.wait("response.done", timeout=60)
        assert answered(done["response"]), done
        tr = c.of_type("conversation.item.input_audio_transcription.completed")[0]
        said = c.of_type("response.output_audio_transcript.done")[0]
        i_stop = c.index(c.of_type("input_audio_buffer.speech_stopped")[0])
        i_audio = c.index(c.of_type("response.output_audio.delta")[0])
        seen_ms = (c.times[i_audio] - c.times[i_stop]) * 1000
    finally:
        await c.close()
    call = await ended_call(rec_server, call_id)
    assert call["transport"] == "websocket"
    user, agent = call["items"][:2]
    assert (user["id"], user["role"], user["text"]) == (tr["item_id"], "user", tr["transcript"])
    assert (agent["id"], agent["role"], agent["text"]) == (said["item_id"], "assistant",
                                                           said["transcript"])
    t = check_turn(call, done["response"]["id"], done["response"]["status"])
    # end of speech -> first audio, as the server timed it and as the client saw it
    assert abs((t["first_audio_ms"] - t["speech_stopped_ms"]) - seen_ms) < 250, (t, seen_ms)
    assert call["turns"][0]["usage"] == done["response"]["usage"]
    await check_recording(rec_server, call_id, said["transcript"], whisper)


async def test_a_spoken_call_over_webrtc(rec_server, whisper):
    c = await RTCClient.connect(rec_server.base, API_KEY)
    try:
        await asyncio.wait_for(c.open.wait(), 10)
        created = await c.wait(lambda e: e["type"] == "session.created", 5)
        await asyncio.sleep(0.3)
        c.mic.say(flite_pcm(QUESTION, RATE), RATE)
        tr = await c.wait(lambda e: e["type"] ==
                          "conversation.item.input_audio_transcription.completed", 30)
        done = await c.wait(lambda e: e["type"] == "response.done", 30)
        said = await c.wait(lambda e: e["type"] == "response.output_audio_transcript.done", 1)
        await c.wait(lambda e: e["type"] == "output_audio_buffer.stopped", 20)
    finally:
        await c.close()
    call = await ended_call(rec_server, created["session"]["id"])
    assert call["transport"] == "webrtc"
    texts = {i["id"]: i.get("text") for i in call["items"]}
    assert texts[tr["item_id"]] == tr["transcript"] and texts[said["item_id"]] == said["transcript"]
    check_turn(call, done["response"]["id"], done["response"]["status"])
    await check_recording(rec_server, call["id"], said["transcript"], whisper)


async def test_a_spoken_call_over_twilio(rec_server, whisper):
    c = await TwilioClient.connect(f"ws://127.0.0.1:{rec_server.port}")
    try:
        await c.say(QUESTION)
        _, first = await c.wait(lambda m: m["event"] == "media" and m["_item"], timeout=40)
        item = first["_item"]
        await c.wait(lambda m: m["event"] == "mark" and m["mark"]["name"].startswith(item)
                     and m["mark"]["name"].endswith(":end"), timeout=40)
        [tw] = list(rec_server.app.state.twilio.calls.values())
        call_id = tw.session.session_id
        await c.stop()
    finally:
        await c.close()
    call = await ended_call(rec_server, call_id)
    assert call["transport"] == "twilio"
    [agent] = [i for i in call["items"] if i["id"] == item]
    assert agent["role"] == "assistant" and agent["text"]
    assert any(i.get("role") == "user" and "capital" in i.get("text", "") for i in call["items"])
    assert agent["response_id"] == call["turns"][0]["response_id"]
    check_turn(call, agent["response_id"], call["turns"][0]["status"])
    await check_recording(rec_server, call_id, agent["text"], whisper)


async def test_calls_are_listed_and_refused_without_access(rec_server, server):
    async with httpx.AsyncClient(base_url=rec_server.base, timeout=30) as http:
        r = await http.get("/v1/calls", headers=AUTH)
        assert r.status_code == 200 and r.json()["object"] == "list"
        calls = r.json()["data"]
        assert calls and calls == sorted(calls, key=lambda c: -c["started_at"])
        some = calls[0]["id"]
        for path in ("/v1/calls", f"/v1/calls/{some}", f"/v1/calls/{some}/recording.wav"):
            assert (await http.get(path)).status_code == 401
            r = await http.get(path, headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            r = await http.get(path, headers={**AUTH, "Origin": "https://elsewhere.example"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
        assert (await http.get("/v1/calls/nope", headers=AUTH)).status_code == 404
        r = await http.delete(f"/v1/calls/{some}", headers=AUTH)
        assert r.status_code == 200 and r.json()["deleted"]
        assert (await http.get(f"/v1/calls/{some}", headers=AUTH)).status_code == 404
    # a server that keeps no records says so
    r = httpx.get(f"http://127.0.0.1:{server.port}/v1/calls", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "records_disabled"


async def test_a_server_killed_mid_call_leaves_a_readable_record(tmp_path):
    proc = ServerProcess(str(ROOT / "configs" / "voice-cpu-fast.yaml"),
                         env={"VOICE_AGENT_RECORDS_DIR": str(tmp_path),
                              "VOICE_AGENT_RECORDS_AUDIO": "1", "VOICE_AGENT_API_KEYS": None})
    await asyncio.to_thread(proc.start)
    try:
        c = await RTClient.connect(proc.url, key=None)
        created = await c.wait("session.created")
        await stream_realtime(c.send, np.concatenate([silence(300), flite_pcm(QUESTION),
                                                      silence(1500)]))
        await c.wait("response.done", timeout=60)
        await asyncio.sleep(0.3)      # the writer thread's last rows
        os.kill(proc.pid, signal.SIGKILL)   # mid-call: the session is still open
        proc.proc.wait(10)
    finally:
        proc.stop()
    db = sqlite3.connect(tmp_path / DB_NAME)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    store = CallStore(RecordSettings(enabled=True, folder=str(tmp_path), recording=True))
    try:
        call = store.call(store.get_call, created["session"]["id"])
        assert call["state"] == "interrupted", call
        assert any(i.get("role") == "user" and "capital" in (i.get("text") or "")
                   for i in call["items"]), call["items"]
        assert call["turns"] and store.recording_file(call["id"]) is not None
    finally:
        store.close()


async def test_push_to_talk_is_recorded_too(rec_server):
    """No server VAD: the committed buffer is the caller's channel."""
    from voice_server.testing.audio import append_event, frames
    c = await RTClient.connect(rec_server.url)
    try:
        call_id = (await c.wait("session.created"))["session"]["id"]
        await c.send({"type": "session.update", "session": {
            "type": "realtime", "audio": {"input": {"turn_detection": None}}}})
        await c.wait("session.updated")
        for chunk in frames(np.concatenate([flite_pcm(QUESTION), silence(300)])):
            await c.send(append_event(chunk))
        await c.send({"type": "input_audio_buffer.commit"})
        await c.send({"type": "response.create"})
        done = await c.wait("response.done", timeout=60)
        assert answered(done["response"]), done
    finally:
        await c.close()
    call = await ended_call(rec_server, call_id)
    assert any(i.get("role") == "user" and "capital" in (i.get("text") or "").lower()
               for i in call["items"]), call["items"]
    caller = (await recording(rec_server, call_id))[:, 0]
    assert np.abs(caller).max() > 1500   # the question is there
