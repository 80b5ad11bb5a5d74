"""Response lifecycle: barge-in, cancel, truncation, failures, benign errors."""

import numpy as np

from session_helpers import PLAIN_BARGE_IN, events, new_session, of, one, speak, spoken_turn, types
from voice_server.session import (AudioOut, CancelResponse, FlushAudio, StartResponse,
                                  StopListen)

DELTA_TYPES = {"response.output_audio.delta", "response.output_audio_transcript.delta",
               "response.output_text.delta"}


def _start(s, text="hello", now=0):
    return of(spoken_turn(s, text, now=now), StartResponse)[0].response_id


def test_barge_in_cancels_in_the_same_call_and_drops_late_chunks():
    s = new_session(interruptions=PLAIN_BARGE_IN)
    rid = _start(s)
    events(s.response_chunk(rid, "speak", speak("The weather today", 600), 10))
    events(s.response_chunk(rid, "speak", speak("is sunny and warm.", 600), 20))
    item_id = s.conversation.items[-1].id
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 5000}, 30)
    assert isinstance(cmds[0], CancelResponse)
    assert cmds[0].response_id == rid and cmds[0].reason == "turn_detected"
    assert not of(cmds, FlushAudio)  # events mode: the client owns playback
    assert types(cmds) == ["input_audio_buffer.speech_started", "response.output_audio.done",
                           "response.output_audio_transcript.done",
                           "response.content_part.done", "response.output_item.done",
                           "conversation.item.done", "response.done"]
    done = one(cmds, "response.done")["response"]
    assert done["status"] == "cancelled"
    assert done["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert done["output"][0]["status"] == "incomplete"
    # zero late deltas, whatever arrives afterwards
    late = s.response_chunk(rid, "speak", speak("Late words", 500), 40)
    late += s.response_chunk(rid, "think", "more", 41)
    late += s.response_finished(rid, "completed", None, 42)
    late += s.response_finished(rid, "failed", {"code": "internal", "message": "x"}, 43)
    assert late == []
    # the client truncates what it played; history carries the cut text
    cmds = s.client_event({"type": "conversation.item.truncate", "item_id": item_id,
                           "content_index": 0, "audio_end_ms": 900}, 50)
    assert types(cmds) == ["conversation.item.truncated"]
    ev = events(cmds)[0]
    assert (ev["item_id"], ev["content_index"], ev["audio_end_ms"]) == (item_id, 0, 900)
    item = s.conversation.get(item_id)
    # 600 ms of clause 1 fully heard, 300/600 of "is sunny and warm." = 2 words
    assert item.content[0].transcript == "The weather today is sunny"
    cmds = s.listen_event({"type": "speech_stopped", "audio_end_ms": 5600}, 60)
    cmds += s.listen_event({"type": "final", "text": "stop", "audio_start_ms": 5000,
                            "audio_end_ms": 5600}, 61)
    st = of(cmds, StartResponse)[0]
    assert st.messages == [{"role": "user", "content": "hello"},
                           {"role": "assistant", "content": "The weather today is sunny"},
                           {"role": "user", "content": "stop"}]


def test_barge_in_before_any_output_and_before_start():
    s = new_session()
    rid = _start(s)
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 100}, 1)
    assert of(cmds, CancelResponse)[0].response_id == rid
    assert types(cmds) == ["input_audio_buffer.speech_started", "response.done"]
    assert one(cmds, "response.done")["response"]["output"] == []


def test_interrupt_response_false_keeps_the_response():
    s = new_session()
    events(s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "interrupt_response": False}}}}}, 0))
    rid = _start(s)
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 100}, 1)
    assert types(cmds) == ["input_audio_buffer.speech_started"] and not of(cmds, CancelResponse)
    assert s.active_response_id == rid


def test_barge_in_stream_mode_flushes_and_truncates_to_what_was_heard():
    s = new_session("stream", interruptions=PLAIN_BARGE_IN)
    rid = _start(s)
    cmds = s.response_chunk(rid, "speak", speak("one two three four", 1000, sr=22050), 10)
    assert "output_audio_buffer.started" in types(cmds)
    assert not any(t == "response.output_audio.delta" for t in types(cmds))
    out = of(cmds, AudioOut)[0]
    assert out.sample_rate == 22050 and out.pcm.size == 22050 and out.response_id == rid
    item_id = out.item_id
    assert events(s.playback_progress(item_id, 500, 20)) == []
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 3000}, 30)
    assert isinstance(cmds[0], CancelResponse) and isinstance(cmds[1], FlushAudio)
    assert cmds[1].item_id == item_id
    assert types(cmds) == ["output_audio_buffer.cleared", "input_audio_buffer.speech_started",
                           "response.output_audio.done", "response.output_audio_transcript.done",
                           "response.content_part.done", "response.output_item.done",
                           "conversation.item.done", "response.done",
                           "conversation.item.truncated"]
    assert one(cmds, "conversation.item.truncated")["audio_end_ms"] == 500
    assert one(cmds, "response.output_audio_transcript.done")["transcript"] == "one two"
    assert s.conversation.get(item_id).text() == "one two"
    assert s.response_chunk(rid, "speak", speak("five"), 40) == []


def test_stream_mode_playback_stopped_after_completion():
    s = new_session("stream")
    rid = _start(s)
    item_id = of(s.response_chunk(rid, "speak", speak("hi", 400), 1), AudioOut)[0].item_id
    events(s.response_finished(rid, "completed", None, 2))
    assert events(s.playback_progress(item_id, 200, 3)) == []
    cmds = s.playback_progress(item_id, 400, 4)
    assert types(cmds) == ["output_audio_buffer.stopped"]
    assert s.playback_progress(item_id, 400, 5) == []


def test_output_audio_buffer_clear_flushes_in_stream_mode():
    s = new_session("stream")
    rid = _start(s)
    item_id = of(s.response_chunk(rid, "speak", speak("hi", 400), 1), AudioOut)[0].item_id
    cmds = s.client_event({"type": "output_audio_buffer.clear"}, 2)
    assert of(cmds, FlushAudio)[0].item_id == item_id
    assert one(cmds, "output_audio_buffer.cleared")["response_id"] == rid


def test_response_cancel_and_benign_error_codes():
    s = new_session()
    cmds = s.client_event({"type": "response.cancel", "event_id": "ev_c"}, 0)
    err = one(cmds, "error")["error"]
    assert err["code"] == "response_cancel_not_active"
    assert err["message"].startswith("Cancellation failed")
    assert err["type"] == "invalid_request_error" and err["event_id"] == "ev_c"
    events(s.client_event({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}}, 0))
    rid = of(s.client_event({"type": "response.create", "response": {
        "metadata": {"k": "v"}}}, 0), StartResponse)[0].response_id
    cmds = s.client_event({"type": "response.create", "event_id": "ev_2"}, 1)
    err = one(cmds, "error")["error"]
    assert err["code"] == "conversation_already_has_active_response"
    assert err["event_id"] == "ev_2"
    assert not of(cmds, StartResponse) and s.active_response_id == rid
    # a cancel for another response id is "not active"
    cmds = s.client_event({"type": "response.cancel", "response_id": "resp_other"}, 2)
    assert one(cmds, "error")["error"]["code"] == "response_cancel_not_active"
    events(s.response_chunk(rid, "speak", speak("partial answer here", 600), 3))
    cmds = s.client_event({"type": "response.cancel", "response_id": rid}, 4)
    assert of(cmds, CancelResponse)[0].reason == "client_cancelled"
    done = one(cmds, "response.done")["response"]
    assert done["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    assert done["metadata"] == {"k": "v"}
    assert s.response_chunk(rid, "speak", speak("late"), 5) == []
    cmds = s.client_event({"type": "response.cancel"}, 6)
    assert one(cmds, "error")["error"]["code"] == "response_cancel_not_active"


def test_truncate_errors_within_and_beyond():
    s = new_session()
    rid = _start(s)
    events(s.response_chunk(rid, "speak", speak("a b c d", 1000), 1))
    events(s.response_finished(rid, "completed", None, 2))
    item_id = s.conversation.items[-1].id
    user_id = s.conversation.items[0].id
    bad = [({"item_id": item_id, "content_index": 0, "audio_end_ms": 1500}, "audio_end_ms"),
           ({"item_id": "nope", "content_index": 0, "audio_end_ms": 10}, "item_id"),
           ({"item_id": user_id, "content_index": 0, "audio_end_ms": 10}, "content_index"),
           ({"item_id": item_id, "content_index": 3, "audio_end_ms": 10}, "content_index")]
    for fields, param in bad:
        cmds = s.client_event({"type": "conversation.item.truncate", **fields}, 3)
        err = one(cmds, "error")["error"]
        assert err["code"] == "invalid_value" and err["param"] == param, err
    cmds = s.client_event({"type": "conversation.item.truncate", "item_id": item_id,
                           "content_index": 0, "audio_end_ms": -5}, 3)
    assert one(cmds, "error")["error"]["param"] == "audio_end_ms"
    # exactly the end is fine, then a cut in the middle
    events(s.client_event({"type": "conversation.item.truncate", "item_id": item_id,
                           "content_index": 0, "audio_end_ms": 1000}, 4))
    assert s.conversation.get(item_id).text() == "a b c d"
    events(s.client_event({"type": "conversation.item.truncate", "item_id": item_id,
                           "content_index": 0, "audio_end_ms": 500}, 5))
    assert s.conversation.get(item_id).text() == "a b"
    cmds = s.client_event({"type": "conversation.item.truncate", "item_id": item_id,
                           "content_index": 0, "audio_end_ms": 800}, 6)
    assert one(cmds, "error")["error"]["param"] == "audio_end_ms"
    events(s.client_event({"type": "conversation.item.truncate", "item_id": item_id,
                           "content_index": 0, "audio_end_ms": 0}, 7))
    assert s.conversation.get(item_id).text() == ""


def test_truncate_of_the_active_item_stops_the_response():
    s = new_session()
    rid = _start(s)
    events(s.response_chunk(rid, "speak", speak("one two", 1000), 1))
    item_id = s.conversation.items[-1].id
    cmds = s.client_event({"type": "conversation.item.truncate", "item_id": item_id,
                           "content_index": 0, "audio_end_ms": 500}, 2)
    assert of(cmds, CancelResponse)[0].response_id == rid
    assert types(cmds)[-2:] == ["response.done", "conversation.item.truncated"]
    assert s.response_chunk(rid, "speak", speak("x"), 3) == []


def test_failure_mid_stream_then_a_successful_turn():
    s = new_session()
    rid = _start(s)
    events(s.response_chunk(rid, "speak", speak("Half a", 300), 1))
    cmds = s.response_finished(rid, "failed", {"code": "resource_exhausted",
                                               "message": "out of memory", "retryable": True}, 2)
    t = types(cmds)
    assert t[0] == "error" and t[-1] == "response.done"
    err = events(cmds)[0]["error"]
    assert err == {"type": "server_error", "code": "resource_exhausted",
                   "message": "out of memory", "param": None, "event_id": None}
    done = one(cmds, "response.done")["response"]
    assert done["status"] == "failed"
    assert done["status_details"] == {"type": "failed", "error": {"type": "server_error",
                                                                  "code": "resource_exhausted"}}
    assert s.response_chunk(rid, "speak", speak("late"), 3) == []
    rid2 = _start(s, "try again", now=10)
    assert rid2 != rid
    cmds = s.response_chunk(rid2, "speak", speak("Done.", 200), 11)
    cmds += s.response_finished(rid2, "completed", None, 12)
    assert one(cmds, "response.done")["response"]["status"] == "completed"


def test_failure_bad_input_maps_to_invalid_request_and_cause_event_id():
    s = new_session()
    events(s.client_event({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}}, 0))
    rid = of(s.client_event({"type": "response.create", "event_id": "evt_rc",
                             "response": {"output_modalities": ["text"]}}, 0),
             StartResponse)[0].response_id
    cmds = s.response_finished(rid, "failed", {"code": "bad_input", "message": "too long",
                                               "retryable": False}, 1)
    err = one(cmds, "error")["error"]
    assert err["type"] == "invalid_request_error" and err["event_id"] == "evt_rc"
    assert types(cmds) == ["error", "response.done"]  # no output was produced
    rid = of(s.client_event({"type": "response.create"}, 2), StartResponse)[0].response_id
    cmds = s.response_finished(rid, "failed", {"code": "weird", "message": "?"}, 3)
    assert one(cmds, "error")["error"]["code"] == "internal"


def test_runtime_side_cancel_is_reported_cancelled():
    s = new_session()
    rid = _start(s)
    cmds = s.response_finished(rid, "cancelled", {"code": "cancelled", "message": "deadline"}, 1)
    done = one(cmds, "response.done")["response"]
    assert done["status"] == "cancelled" and done["status_details"]["type"] == "cancelled"


def test_disconnect_cancels_everything():
    s = new_session()
    rid = _start(s)
    cmds = s.disconnect(5)
    assert [type(c) for c in cmds] == [CancelResponse, StopListen]
    assert cmds[0].response_id == rid and cmds[0].reason == "disconnected"
    assert s.response_chunk(rid, "speak", speak("x"), 6) == []
    assert s.client_event({"type": "response.create"}, 7) == []
    assert s.disconnect(8) == []


def test_never_a_delta_after_response_done_random_interleavings():
    rng = np.random.default_rng(1)
    for trial in range(30):
        s = new_session("events" if trial % 2 else "stream")
        done_ids = set()
        now = 0
        rid = _start(s, now=now)
        for step in range(40):
            now += 10
            r = rng.integers(0, 6)
            if r <= 2:
                cmds = s.response_chunk(rid, "speak", speak("w " * int(rng.integers(1, 4)), 50),
                                        now)
            elif r == 3:
                cmds = s.listen_event({"type": "speech_started", "audio_start_ms": now}, now)
                cmds += s.listen_event({"type": "speech_stopped", "audio_end_ms": now + 5}, now)
                cmds += s.listen_event({"type": "final", "text": "go", "audio_start_ms": now,
                                        "audio_end_ms": now + 5}, now)
            elif r == 4:
                cmds = s.client_event({"type": "response.cancel"}, now)
            else:
                cmds = s.response_finished(rid, "completed", None, now)
            for e in events(cmds):
                if e["type"] == "response.done":
                    done_ids.add(e["response"]["id"])
                rid_e = e.get("response_id")
                if e["type"] in DELTA_TYPES:
                    assert rid_e not in done_ids
            for c in cmds:
                if isinstance(c, AudioOut):
                    assert c.response_id not in done_ids
                if isinstance(c, StartResponse):
                    rid = c.response_id


def test_barge_in_over_a_finished_reply_still_playing_flushes_and_truncates():
    """Stream mode (WebRTC, Twilio): the reply finished generating but only
    its first 300 ms were heard; the caller talks over it -> the rest is
    flushed and the item truncated to what was heard, in the same call."""
    s = new_session("stream")
    rid = _start(s)
    item_id = of(s.response_chunk(rid, "speak", speak("one two three four", 1000), 1),
                 AudioOut)[0].item_id
    events(s.response_finished(rid, "completed", None, 2))
    assert s.active_response_id is None
    events(s.playback_progress(item_id, 300, 3))
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 3000}, 4)
    assert not of(cmds, CancelResponse)  # nothing is generating any more
    assert of(cmds, FlushAudio)[0].item_id == item_id
    assert types(cmds) == ["input_audio_buffer.speech_started", "conversation.item.truncated",
                           "output_audio_buffer.cleared"]
    assert one(cmds, "conversation.item.truncated")["audio_end_ms"] == 300
    assert one(cmds, "output_audio_buffer.cleared")["response_id"] == rid
    # once cleared, more speech does not clear again
    events(s.listen_event({"type": "speech_stopped", "audio_end_ms": 3500}, 5))
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 4000}, 6)
    assert not of(cmds, FlushAudio)


def test_speech_after_a_reply_has_played_out_flushes_nothing():
    s = new_session("stream")
    rid = _start(s)
    item_id = of(s.response_chunk(rid, "speak", speak("hi", 400), 1), AudioOut)[0].item_id
    events(s.response_finished(rid, "completed", None, 2))
    assert types(s.playback_progress(item_id, 400, 3)) == ["output_audio_buffer.stopped"]
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 3000}, 4)
    assert types(cmds) == ["input_audio_buffer.speech_started"] and not of(cmds, FlushAudio)


def test_events_mode_never_flushes_a_finished_reply():
    s = new_session()
    rid = _start(s)
    events(s.response_chunk(rid, "speak", speak("hi", 400), 1))
    events(s.response_finished(rid, "completed", None, 2))
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 3000}, 4)
    assert types(cmds) == ["input_audio_buffer.speech_started"] and not of(cmds, FlushAudio)


def test_cancel_response_on_the_servers_behalf():
    s = new_session("stream")
    assert s.cancel_response("server_shutting_down", 0) == []
    rid = _start(s)
    events(s.response_chunk(rid, "speak", speak("hi", 400), 1))
    cmds = s.cancel_response("server_shutting_down", 2)
    assert of(cmds, CancelResponse)[0].response_id == rid and of(cmds, FlushAudio)
    # the drain's reason is this server's own (not an SDK literal): read it unvalidated
    done = [c.event for c in cmds if getattr(c, "event", {}).get("type") == "response.done"]
    assert len(done) == 1 and done[0]["response"]["status"] == "cancelled"
    assert done[0]["response"]["status_details"]["reason"] == "server_shutting_down"


def test_listen_lost_ends_the_utterance_and_answers_pending_finals():
    s = new_session()
    events(s.listen_event({"type": "speech_started", "audio_start_ms": 100}, 0))
    assert s.user_speaking
    cmds = s.listen_lost(1)
    assert not s.user_speaking
    assert types(cmds)[:2] == ["input_audio_buffer.speech_stopped",
                               "input_audio_buffer.committed"]
    assert "conversation.item.input_audio_transcription.completed" in types(cmds)
    assert not of(cmds, StartResponse)  # an empty transcript starts no response
    assert s.listen_lost(2) == []


def test_the_thinkers_usage_event_is_response_dones_usage():
    """A usage event in the think stage's last chunk (include_usage, which the runner
    asks for) becomes response.done's usage; none leaves the zeros."""
    s = new_session()
    rid = _start(s)
    events(s.response_chunk(rid, "speak", speak("It is noon.", 300), 10))
    assert s.response_chunk(rid, "think", ["It is noon.", {
        "type": "usage", "input_tokens": 42, "cached_tokens": 30, "output_tokens": 5}], 11) == []
    done = one(s.response_finished(rid, "completed", None, 20), "response.done")["response"]
    assert done["usage"] == {"total_tokens": 47, "input_tokens": 42, "output_tokens": 5,
                             "input_token_details": {"text_tokens": 42, "audio_tokens": 0,
                                                     "image_tokens": 0, "cached_tokens": 30,
                                                     "cached_tokens_details": {
                                                         "text_tokens": 30, "audio_tokens": 0,
                                                         "image_tokens": 0}},
                             "output_token_details": {"text_tokens": 5, "audio_tokens": 0},
                             "voice_agent": {"input_audio_seconds": s.input_ms / 1000.0,
                                             "output_audio_seconds": 0.3}}
    assert done["status"] == "completed"
    rid = _start(s, "again", now=100)
    done = one(s.response_finished(rid, "completed", None, 120), "response.done")["response"]
    assert done["usage"]["total_tokens"] == 0


def test_a_reply_cut_by_its_token_budget_ends_incomplete():
    """The thinker says ``length`` (max_output_tokens or its own budget cut the
    reply): response.done is ``incomplete``, reason ``max_output_tokens``, and
    the message item is incomplete too; ``stop`` stays ``completed``."""
    s = new_session()
    rid = _start(s)
    events(s.response_chunk(rid, "speak", speak("One, two,", 300), 10))
    events(s.response_chunk(rid, "think", ["One, two,", {
        "type": "usage", "input_tokens": 20, "cached_tokens": 0, "output_tokens": 4,
        "finish_reason": "length"}], 11))
    done = one(s.response_finished(rid, "completed", None, 20), "response.done")["response"]
    assert done["status"] == "incomplete"
    assert done["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
    assert done["output"][0]["status"] == "incomplete"
    assert done["usage"]["output_tokens"] == 4
    rid = _start(s, "again", now=100)
    events(s.response_chunk(rid, "think", ["Done.", {
        "type": "usage", "input_tokens": 30, "cached_tokens": 20, "output_tokens": 2,
        "finish_reason": "stop"}], 110))
    done = one(s.response_finished(rid, "completed", None, 120), "response.done")["response"]
    assert done["status"] == "completed" and done["status_details"] is None


def test_audio_seconds_leave_usage_when_extension_events_are_off():
    s = new_session()
    s.extension_events = False
    rid = _start(s)
    done = one(s.response_finished(rid, "completed", None, 20), "response.done")["response"]
    assert "voice_agent" not in done["usage"]
