"""The call store and the recorder on their own: retention, a crashed call
recovered, the transcript and turn rows a recorder writes, and the recording
placed on the session clock."""

from __future__ import annotations

import base64
import sqlite3
import time
import wave

import numpy as np

from voice_server.metrics import TurnTimer
from voice_server.records.recorder import CallRecorder
from voice_server.records.settings import RecordSettings
from voice_server.records.store import DB_NAME, CallStore
from voice_server.session import Session, SessionSettings


def _store(tmp_path, **kw) -> CallStore:
    return CallStore(RecordSettings(enabled=True, folder=str(tmp_path), **kw))


def _call(store: CallStore, call_id: str, started_at: float, text: str) -> None:
    store.call(store.begin_call, call_id, "websocket", "m", started_at, False)
    store.call(store.put_item, call_id, "item_1", 10.0,
               {"type": "message", "role": "user", "text": text})
    # ended, without end_call's retention pass (the test runs its own)
    store.call(store._db.execute, "UPDATE calls SET state = 'ended' WHERE id = ?", (call_id,))


def test_retention_deletes_the_oldest_past_the_size_then_the_age(tmp_path):
    store = _store(tmp_path, max_total_mb=3000 / 2**20, max_age_days=1)
    now = time.time()
    for i in range(4):   # ~1064 bytes each (1000 of text + a row's 64)
        _call(store, f"c{i}", now - 3600 * (4 - i), "x" * 1000)
    gone = store.call(store.enforce_retention, now)
    assert gone == ["c0", "c1"]          # the two oldest: the other two fit in 3000 bytes
    assert [c["id"] for c in store.call(store.list_calls)] == ["c3", "c2"]
    gone = store.call(store.enforce_retention, now + 86400 - 3600 * 1.5)
    assert gone == ["c2"]                # now older than a day; c3 is not yet
    store.close()


def test_a_call_left_live_by_a_killed_server_is_kept_as_interrupted(tmp_path):
    store = _store(tmp_path, recording=True)
    store.call(store.begin_call, "c1", "webrtc", None, time.time(), True)
    store.call(store.put_item, "c1", "item_1", 1500.0,
               {"type": "message", "role": "user", "text": "hello"})
    store.call(store.append_audio, "c1", "caller", np.ones(1600, "<i2").tobytes())
    store.close()         # as a kill leaves it: no end_call, raw audio on disk
    db = sqlite3.connect(tmp_path / DB_NAME)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    again = _store(tmp_path, recording=True)
    call = again.call(again.get_call, "c1")
    assert call["state"] == "interrupted" and call["items"][0]["text"] == "hello"
    assert call["ended_at"] >= call["started_at"] + 1.5 - 1e-6
    with wave.open(str(again.recording_file("c1"))) as w:
        assert (w.getnchannels(), w.getframerate(), w.getnframes()) == (2, 16000, 1600)
    again.close()


def test_the_recorder_writes_items_turns_and_a_two_channel_recording(tmp_path):
    store = _store(tmp_path, recording=True)
    session = Session("sess_rec", SessionSettings())
    timer = TurnTimer()
    rec = CallRecorder(store, session, "websocket", clock_ms=1000.0)
    timer.observers.append(rec.turn_times)
    rec.event({"type": "conversation.item.added", "item": {
        "id": "item_u", "type": "message", "role": "user", "status": "completed",
        "content": [{"type": "input_audio", "transcript": None}]}}, 1100.0)
    rec.caller_audio(np.full(8000, 1000, np.int16), 1600.0)      # 0.1 .. 0.6 s
    rec.event({"type": "conversation.item.input_audio_transcription.completed",
               "item_id": "item_u", "content_index": 0, "transcript": "hi there"}, 1700.0)
    timer.listen_event({"type": "speech_stopped"})
    timer.response_started("resp_1")
    timer.chunk("resp_1", "think")
    pcm24k = np.full(2400, -1000, np.int16)   # 100 ms at the wire rate (24 kHz pcm)
    delta = {"type": "response.output_audio.delta", "response_id": "resp_1", "item_id": "item_a",
             "output_index": 0, "content_index": 0,
             "delta": base64.b64encode(pcm24k.astype("<i2").tobytes()).decode()}
    timer.event_sent(delta)
    rec.event(delta, 2000.0)                                      # 1.0 s
    rec.event({"type": "conversation.item.done", "item": {
        "id": "item_a", "type": "message", "role": "assistant", "status": "incomplete",
        "content": [{"type": "output_audio", "transcript": "Hello! How"}]}}, 2100.0)
    rec.event({"type": "conversation.item.truncated", "item_id": "item_a", "content_index": 0,
               "audio_end_ms": 60}, 2150.0)
    done = {"type": "response.done", "response": {
        "id": "resp_1", "status": "cancelled",
        "status_details": {"type": "cancelled", "reason": "turn_detected"},
        "usage": {"total_tokens": 3}}}
    timer.event_sent(done)
    rec.event(done, 2200.0)
    rec.close(2300.0)
    store.close()
    store = _store(tmp_path, recording=True)
    call = store.call(store.get_call, "sess_rec")
    assert call["state"] == "ended" and call["transport"] == "websocket"
    user, agent = call["items"]
    assert (user["id"], user["role"], user["text"]) == ("item_u", "user", "hi there")
    assert (agent["role"], agent["text"], agent["truncated_ms"]) == ("assistant", "Hello! How", 60)
    [turn] = call["turns"]
    assert (turn["response_id"], turn["status"], turn["reason"]) == ("resp_1", "cancelled",
                                                                     "turn_detected")
    t = turn["timings"]
    assert t["trigger"] == "speech" and turn["usage"] == {"total_tokens": 3}
    assert t["speech_stopped_ms"] <= t["response_started_ms"] <= t["first_token_ms"] \
        <= t["first_audio_ms"] <= t["done_ms"]
    with wave.open(str(store.recording_file("sess_rec"))) as w:
        frames = np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, 2)
    caller, agent_ch = frames[:, 0], frames[:, 1]
    assert np.all(caller[1600:9600] == 1000) and not caller[:1600].any()
    assert not agent_ch[:15900].any()                      # the reply starts at 1.0 s
    assert np.median(agent_ch[16400:17400]) < -800         # (after the resampler's onset)
    store.close()


def test_tool_calls_and_their_outputs_are_transcript_items(tmp_path):
    store = _store(tmp_path)
    rec = CallRecorder(store, Session("sess_tools", SessionSettings()), "webrtc", clock_ms=0.0)
    rec.event({"type": "response.output_item.done", "response_id": "resp_1", "item": {
        "id": "item_c", "type": "function_call", "status": "completed", "call_id": "call_1",
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}, 100.0)
    rec.event({"type": "conversation.item.added", "item": {
        "id": "item_o", "type": "function_call_output", "call_id": "call_1",
        "output": '{"sky": "clear"}'}}, 200.0)
    rec.close(300.0)
    store.close()
    store = _store(tmp_path)
    call, o = store.call(store.get_call, "sess_tools")["items"]
    assert call == {"id": "item_c", "t_ms": 100.0, "type": "function_call", "status": "completed",
                    "response_id": "resp_1", "name": "get_weather", "call_ref": "call_1",
                    "arguments": '{"city": "Paris"}'}
    assert (o["type"], o["call_ref"], o["output"]) == ("function_call_output", "call_1",
                                                       '{"sky": "clear"}')
    store.close()
