"""The /v1/realtime WebSocket endpoint on the real CPU pipeline (one server for
all tests, see conftest.py).  Audio is flite speech streamed in real time in
20 ms frames, followed by continuous silence as real clients send."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json

import httpx
import numpy as np
import pytest
import websockets

from voice_server.testing.audio import flite_pcm, silence, stream_realtime
from voice_server.testing.realtime_client import RTClient
from .conftest import API_KEY
from voice_server.testing.response_status import answered

pytestmark = pytest.mark.timeout(120)

QUESTION = "what is the capital of france"


@contextlib.asynccontextmanager
async def talking(c: RTClient, text: str, lead_ms: int = 200):
    """Stream ``text`` in real time, then silence until the block exits."""
    done = asyncio.Event()

    async def run():
        await stream_realtime(c.send, np.concatenate([silence(lead_ms), flite_pcm(text)]))
        done.set()
        while True:
            await stream_realtime(c.send, silence(200))

    t = asyncio.ensure_future(run())
    try:
        yield done
    finally:
        t.cancel()
        with contextlib.suppress(BaseException):
            await t


def order(c: RTClient, *types_: str, start: int = 0) -> list[int]:
    """Indices of the first event of each type (after start); assert increasing."""
    idx = []
    for t in types_:
        i = next((k for k in range(start, len(c.events)) if c.events[k]["type"] == t), None)
        assert i is not None, f"no {t} in {c.types(start)}"
        idx.append(i)
        start = i
    return idx


async def session_id(c: RTClient) -> str:
    return (await c.wait("session.created"))["session"]["id"]


@pytest.mark.usefixtures("unpaced")
async def test_spoken_turn_end_to_end(server):
    c = await RTClient.connect(server.url)
    try:
        await session_id(c)
        async with talking(c, QUESTION):
            done = await c.wait("response.done", timeout=30)
        assert answered(done["response"]), done
        tr = c.of_type("conversation.item.input_audio_transcription.completed")
        heard = tr[0]["transcript"].lower() if tr else ""
        assert "capital" in heard and "france" in heard, tr
        order(c, "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
              "input_audio_buffer.committed", "conversation.item.added",
              "conversation.item.input_audio_transcription.completed", "response.created",
              "response.output_item.added", "conversation.item.added",
              "response.content_part.added", "response.output_audio.delta",
              "response.output_audio_transcript.delta", "response.output_audio.done",
              "response.output_audio_transcript.done", "response.content_part.done",
              "response.output_item.done", "response.done")
        rid = done["response"]["id"]
        deltas = [e for e in c.of_type("response.output_audio.delta")]
        assert deltas and all(e["response_id"] == rid for e in deltas)
        pcm = b"".join(base64.b64decode(e["delta"]) for e in deltas)
        assert len(pcm) > 24000  # > 0.5 s of 24 kHz PCM16
        item = done["response"]["output"][0]
        assert item["role"] == "assistant" and item["content"][0]["type"] == "output_audio"
        assert item["content"][0]["transcript"]
        # the session keeps working: a second turn in the same session
        n = len(c.events)
        async with talking(c, "what is two plus two"):
            done2 = await c.wait("response.done", timeout=30, start=n)
        assert answered(done2["response"])
    finally:
        await c.close()


@pytest.mark.usefixtures("unpaced")
async def test_push_to_talk(server):
    c = await RTClient.connect(server.url)
    try:
        await c.send({"type": "session.update", "session": {
            "type": "realtime", "audio": {"input": {"turn_detection": None}}}})
        upd = await c.wait("session.updated")
        assert upd["session"]["audio"]["input"]["turn_detection"] is None
        pcm = np.concatenate([silence(300), flite_pcm(QUESTION), silence(300)])
        await stream_realtime(c.send, pcm, speed=4.0)  # PTT: pace does not matter
        await c.send({"type": "input_audio_buffer.commit"})
        await c.send({"type": "response.create"})
        done = await c.wait("response.done", timeout=30)
        assert answered(done["response"]), done
        assert not c.of_type("input_audio_buffer.speech_started")
        tr = await c.wait("conversation.item.input_audio_transcription.completed")
        assert "capital" in tr["transcript"]
        order(c, "input_audio_buffer.committed", "response.created",
              "conversation.item.input_audio_transcription.completed",
              "response.output_audio.delta", "response.done")
        # empty buffer commit -> error, session stays
        await c.send({"type": "input_audio_buffer.commit", "event_id": "e-empty"})
        err = await c.wait("error")
        assert err["error"]["code"] == "input_audio_buffer_commit_empty"
        assert err["error"]["event_id"] == "e-empty"
    finally:
        await c.close()


async def text_turn(c: RTClient, text: str, modalities=("text",), **resp) -> dict:
    n = len(c.events)
    await c.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})
    await c.send({"type": "response.create", "response": {"output_modalities": list(modalities),
                                                          **resp}})
    return await c.wait("response.done", timeout=30, start=n)


async def test_text_turn(server):
    c = await RTClient.connect(server.url)
    try:
        done = await text_turn(c, "Say hello.", metadata={"topic": "greeting"})
        r = done["response"]
        assert answered(r) and r["output_modalities"] == ["text"]
        assert r["metadata"] == {"topic": "greeting"}
        created = c.of_type("response.created")[0]
        assert created["response"]["metadata"] == {"topic": "greeting"}
        assert c.of_type("response.output_text.delta")
        assert not c.of_type("response.output_audio.delta")
        text = c.of_type("response.output_text.done")[0]["text"]
        assert text and r["output"][0]["content"][0]["text"] == text
        # the thinker's own token counts (no audio tokens: speech goes through ASR and TTS)
        u = r["usage"]
        assert u["input_tokens"] > 10 and u["output_tokens"] >= 1, u
        assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
        assert u["input_token_details"]["text_tokens"] == u["input_tokens"]
        assert 0 < u["input_token_details"]["cached_tokens"] < u["input_tokens"], u
        assert u["output_token_details"] == {"text_tokens": u["output_tokens"], "audio_tokens": 0}
    finally:
        await c.close()


async def test_the_agent_speaks_first_on_an_empty_conversation(server):
    """response.create before anything was said (a greeting): answered, not refused."""
    c = await RTClient.connect(server.url)
    try:
        await c.send({"type": "response.create", "response": {"output_modalities": ["text"],
                                                               "max_output_tokens": 8}})
        done = await c.wait("response.done", timeout=30)
        assert answered(done["response"]), done
        assert not c.of_type("error")
    finally:
        await c.close()


async def test_a_reply_cut_by_max_output_tokens_ends_incomplete(server):
    """A 4-token budget on a long answer: response.done says ``incomplete``,
    reason ``max_output_tokens``, with the thinker's 4 output tokens; the
    audio seconds of the reply ride in usage's ``voice_agent`` extension."""
    c = await RTClient.connect(server.url)
    try:
        done = await text_turn(c, "Count from one to twenty in words.", modalities=("audio",),
                               max_output_tokens=4)
        r = done["response"]
        assert r["status"] == "incomplete", r
        assert r["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
        assert r["output"][0]["status"] == "incomplete"
        assert r["usage"]["output_tokens"] == 4, r["usage"]
        spoken = r["usage"]["voice_agent"]
        assert spoken["output_audio_seconds"] > 0 and spoken["input_audio_seconds"] == 0, spoken
    finally:
        await c.close()


async def test_barge_in(server):
    c = await RTClient.connect(server.url)
    try:
        sid = await session_id(c)
        await c.send({"type": "session.update", "session": {
            "type": "realtime", "max_output_tokens": 200,
            "instructions": "You tell long, detailed stories of many sentences."}})
        async with talking(c, "tell me a long story about a dragon"):
            first = await c.wait("response.output_audio.delta", timeout=30)
        r1 = first["response_id"]
        i_first = c.index(first)
        # the user talks over the reply while it plays
        async with talking(c, "stop and tell me the time", lead_ms=0):
            started = await c.wait("input_audio_buffer.speech_started", start=i_first)
            done1 = await c.wait("response.done", lambda e: e["response"]["id"] == r1)
            assert done1["response"]["status"] == "cancelled", done1
            assert done1["response"]["status_details"]["reason"] == "turn_detected"
            assert c.index(started) < c.index(done1)
            # the client played only part of it: truncate to half of what it received
            item_id = first["item_id"]
            got = sum(len(base64.b64decode(e["delta"]))
                      for e in c.of_type("response.output_audio.delta") if e["response_id"] == r1)
            played_ms = int(got / 2 / 24000 * 1000 / 2)
            await c.send({"type": "conversation.item.truncate", "item_id": item_id,
                          "content_index": 0, "audio_end_ms": played_ms})
            await c.wait("conversation.item.truncated")
            created2 = await c.wait("response.created", start=c.index(done1), timeout=30)
            r2 = created2["response"]["id"]
            # what matters of it is what it was started with (below); its audio is
            # paced in real time and may run a minute, so it is not waited out
            await c.send({"type": "response.cancel", "response_id": r2})
            done2 = await c.wait("response.done", lambda e: e["response"]["id"] == r2,
                                 timeout=40)
        # not one audio delta of the cancelled response after its response.done
        late = [e for e in c.events[c.index(done1):]
                if e["type"] == "response.output_audio.delta" and e["response_id"] == r1]
        assert late == []
        assert done2["response"]["status"] in ("completed", "incomplete", "cancelled")
        # the next response was started with the truncated assistant turn
        runner = server.runner(sid)
        started_with = next(s for s in list(runner.started_responses)
                            if s["response_id"] == r2)
        full = done1["response"]["output"][0]["content"][0]["transcript"]
        assistant = [m["content"] for m in started_with["messages"] if m["role"] == "assistant"]
        assert len(assistant) <= 1
        if assistant:
            assert len(assistant[0]) < len(full), (assistant, full)
            assert full.startswith(assistant[0][: max(1, len(assistant[0]) - 12)].rstrip())
        assert any("time" in m["content"] for m in started_with["messages"] if m["role"] == "user")
    finally:
        await c.close()


async def test_response_cancel(server):
    c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        await c.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Tell me a long story about a knight."}]}})
        await c.send({"type": "response.create", "response": {"max_output_tokens": 200}})
        created = await c.wait("response.created")
        rid = created["response"]["id"]
        await c.send({"type": "response.cancel"})
        done = await c.wait("response.done")
        assert done["response"]["id"] == rid
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "client_cancelled"
        # cancelling again: the benign code clients ignore
        await c.send({"type": "response.cancel"})
        err = await c.wait("error")
        assert err["error"]["code"] == "response_cancel_not_active"
        await asyncio.sleep(0.5)
        i = c.index(done)
        assert not [e for e in c.events[i:] if e.get("response_id") == rid]
        done2 = await text_turn(c, "Say yes.")
        assert answered(done2["response"])
    finally:
        await c.close()


async def test_truncate_beyond_audio_is_an_error(server):
    c = await RTClient.connect(server.url)
    try:
        done = await text_turn(c, "Say hello.", modalities=("audio",))
        assert answered(done["response"])
        item_id = done["response"]["output"][0]["id"]
        await c.send({"type": "conversation.item.truncate", "item_id": item_id,
                      "content_index": 0, "audio_end_ms": 10_000_000, "event_id": "t1"})
        err = await c.wait("error")
        assert err["error"]["type"] == "invalid_request_error"
        assert err["error"]["param"] == "audio_end_ms" and err["error"]["event_id"] == "t1"
        await c.send({"type": "conversation.item.truncate", "item_id": item_id,
                      "content_index": 0, "audio_end_ms": 100})
        await c.wait("conversation.item.truncated")
        done2 = await text_turn(c, "Say yes.")
        assert answered(done2["response"])
    finally:
        await c.close()


async def test_disconnect_mid_response_frees_everything(server):
    await server.settled()
    c = await RTClient.connect(server.url)
    sid = await session_id(c)
    await c.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Tell me a long story about a ship."}]}})
    await c.send({"type": "response.create", "response": {"max_output_tokens": 200}})
    await c.wait("response.output_audio.delta", timeout=30)
    runner = server.runner(sid)
    assert runner is not None and len(runner.live_request_ids) >= 2  # listen + response
    await c.ws.close()
    for _ in range(100):
        if server.runner(sid) is None:
            break
        await asyncio.sleep(0.05)
    assert server.runner(sid) is None
    assert runner.closed and not runner._tasks and not runner.live_request_ids
    snap = await server.settled()
    assert snap["live_requests"] == 0
    assert all(not p["held"] for p in snap["processes"].values()), snap["processes"]


BAD_INPUTS = [
    ("not json", "invalid_json", None),
    ('["a list"]', "invalid_json", None),  # or invalid_request: checked below by type only
    ('{"type":"no.such.event"}', None, "type"),
    ('{"type":"input_audio_buffer.append","audio":123}', None, "audio"),
    ('{"type":"session.update","session":{"instructions":5}}', None, "session.instructions"),
    ('{"type":"input_audio_buffer.append","audio":"@@@not base64@@@"}', None, "audio"),
    ('{"type":"input_audio_buffer.append","audio":"AAAA"}', "invalid_audio_length", "audio"),
]


async def test_bad_inputs_are_error_events_and_session_survives(server):
    c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        for raw, code, param in BAD_INPUTS:
            n = len(c.events)
            await c.send(raw)
            err = await c.wait("error", start=n)
            assert err["error"]["type"] == "invalid_request_error", (raw, err)
            if code and raw.startswith("{"):
                assert err["error"]["code"] == code, (raw, err)
            if param:
                assert err["error"]["param"] == param, (raw, err)
        # oversized append (server limit 256 KiB of base64 in this test server)
        n = len(c.events)
        big = base64.b64encode(b"\0" * (300 * 1024)).decode()
        await c.send({"type": "input_audio_buffer.append", "audio": big, "event_id": "big"})
        err = await c.wait("error", start=n)
        assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == "audio"
        # binary frame: an error event, not a close
        n = len(c.events)
        await c.ws.send(b"\x00\x01binary")
        err = await c.wait("error", start=n)
        assert err["error"]["code"] == "binary_frames_not_supported"
        assert c.closed is None
        done = await text_turn(c, "Say yes.")
        assert answered(done["response"])
    finally:
        await c.close()


async def test_auth(server):
    # no key -> HTTP 401 before the upgrade
    with pytest.raises(websockets.exceptions.InvalidStatus) as ei:
        await RTClient.connect(server.url, key=None)
    assert ei.value.response.status_code == 401
    with pytest.raises(websockets.exceptions.InvalidStatus) as ei:
        await RTClient.connect(server.url, key="wrong")
    assert ei.value.response.status_code == 401
    # browser style: subprotocols, "realtime" is echoed
    ws = await websockets.connect(server.url + "?model=m", subprotocols=[
        "realtime", f"openai-insecure-api-key.{API_KEY}"])
    try:
        assert ws.subprotocol == "realtime"
        ev = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert ev["type"] == "session.created" and ev["session"]["model"] == "m"
    finally:
        await ws.close()
    # the HTTP side of the app is up, and the static demo is served at /
    async with httpx.AsyncClient() as h:
        r = await h.get(f"http://127.0.0.1:{server.port}/")
        assert r.status_code == 200 and "<html" in r.text.lower()


async def test_client_events_before_session_created_and_without_event_id(server):
    # some clients send session.update before session.created arrives
    ws = await websockets.connect(server.url, additional_headers={
        "Authorization": f"Bearer {API_KEY}"})
    try:
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "instructions": "Be brief.", "tracing": "auto",
            "tools": [], "audio": {"input": {"transcription": {"model": "whisper-1"},
                                             "turn_detection": {"type": "semantic_vad"}},
                                   "output": {"voice": "marin"}}}}))
        a = json.loads(await asyncio.wait_for(ws.recv(), 10))
        b = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert [a["type"], b["type"]] == ["session.created", "session.updated"]
        assert b["session"]["instructions"] == "Be brief."
    finally:
        await ws.close()
