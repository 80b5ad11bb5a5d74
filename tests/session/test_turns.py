"""Turn taking: server VAD, push-to-talk, text turns, item management."""

import base64

import numpy as np

from session_helpers import (b64_pcm, events, new_session, of, one, speak, spoken_turn, tone,
                             types)
from voice_server.session import (ConfigureListen, FeedListen, Session, SessionSettings,
                                  StartResponse, StopListen, TranscribeBuffer)


def test_start_emits_session_created_and_configures_listen():
    s = Session("sess_1", SessionSettings())
    cmds = s.start(0)
    ev = one(cmds, "session.created")
    sess = ev["session"]
    assert sess["id"] == "sess_1" and sess["type"] == "realtime"
    td = sess["audio"]["input"]["turn_detection"]
    assert td == {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                  "silence_duration_ms": 500, "idle_timeout_ms": None,
                  "create_response": True, "interrupt_response": True}
    assert sess["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    cfg = of(cmds, ConfigureListen)
    assert cfg and cfg[0].params == {"threshold": 0.5, "silence_duration_ms": 500,
                                     "prefix_padding_ms": 300, "min_speech_ms": 250,
                                     "turn_mode": "silence", "eagerness": "auto",
                                     "noise_reduction": None, "voice_lock": None}
    assert s.start(1) == []


def test_full_spoken_turn_event_order_and_response_from_final():
    s = new_session()
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 1000}, 10)
    st = one(cmds, "input_audio_buffer.speech_started")
    item_id = st["item_id"]
    assert st["audio_start_ms"] == 1000
    cmds = s.listen_event({"type": "partial", "text": "what is"}, 11)
    assert events(cmds) == []  # no item yet: partials wait for the commit
    cmds = s.listen_event({"type": "speech_stopped", "audio_end_ms": 1900}, 12)
    assert types(cmds) == ["input_audio_buffer.speech_stopped", "input_audio_buffer.committed",
                           "conversation.item.added",
                           "conversation.item.input_audio_transcription.delta"]
    ev = events(cmds)
    assert ev[0]["audio_end_ms"] == 1900 and ev[0]["item_id"] == item_id
    assert ev[1]["item_id"] == item_id and ev[1]["previous_item_id"] is None
    added = ev[2]["item"]
    assert added["id"] == item_id and added["role"] == "user"
    assert added["content"] == [{"type": "input_audio", "transcript": None}]
    assert ev[3]["delta"] == "what is"
    cmds = s.listen_event({"type": "final", "text": "what is the time",
                           "audio_start_ms": 1000, "audio_end_ms": 1900}, 13)
    assert types(cmds) == ["conversation.item.input_audio_transcription.delta",
                           "conversation.item.input_audio_transcription.completed",
                           "conversation.item.done", "response.created",
                           "rate_limits.updated"]
    ev = events(cmds)
    assert ev[0]["delta"] == " the time"
    assert ev[1]["transcript"] == "what is the time" and ev[1]["content_index"] == 0
    assert ev[2]["item"]["content"][0]["transcript"] == "what is the time"
    created = ev[3]["response"]
    assert created["status"] == "in_progress" and created["object"] == "realtime.response"
    start = of(cmds, StartResponse)[0]
    assert start.response_id == created["id"]
    assert start.messages == [{"role": "user", "content": "what is the time"}]
    assert start.modalities == ["audio"]
    rid = start.response_id

    # the response: think deltas are not sent for audio responses
    assert s.response_chunk(rid, "think", "It is noon.", 20) == []
    cmds = s.response_chunk(rid, "speak", speak("It is", 400), 21)
    assert types(cmds) == ["response.output_item.added", "conversation.item.added",
                           "response.content_part.added", "response.output_audio.delta",
                           "response.output_audio_transcript.delta"]
    ev = events(cmds)
    aitem = ev[0]["item"]["id"]
    assert ev[0]["item"]["role"] == "assistant" and ev[0]["item"]["status"] == "in_progress"
    assert ev[2]["part"] == {"type": "audio", "transcript": ""}
    for e in ev[3:]:
        assert (e["response_id"], e["item_id"], e["output_index"], e["content_index"]) == \
            (rid, aitem, 0, 0)
    assert ev[4]["delta"] == "It is"
    cmds = s.response_chunk(rid, "speak", speak("noon.", 400), 22)
    assert types(cmds) == ["response.output_audio.delta",
                           "response.output_audio_transcript.delta"]
    assert events(cmds)[1]["delta"] == " noon."
    cmds = s.response_finished(rid, "completed", None, 30)
    t = types(cmds)
    assert t == ["response.output_audio.delta", "response.output_audio.done",
                 "response.output_audio_transcript.done", "response.content_part.done",
                 "response.output_item.done", "conversation.item.done", "response.done"]
    ev = events(cmds)
    assert ev[2]["transcript"] == "It is noon."
    done = ev[-1]["response"]
    assert done["status"] == "completed" and done["id"] == rid
    assert done["output"][0]["content"][0] == {"type": "output_audio",
                                               "transcript": "It is noon."}
    assert done["output"][0]["status"] == "completed"
    assert set(done["usage"]) >= {"total_tokens", "input_tokens", "output_tokens"}
    # exact audio accounting: 800 ms of 24 kHz PCM16 sent in total
    assert s.response_chunk(rid, "speak", speak("late", 100), 31) == []  # finished
    item = s.conversation.get(aitem)
    assert abs(item.audio_ms - 800.0) < 1.0
    # next StartResponse sees the full history
    cmds = spoken_turn(s, "thanks", t0=5000, now=40)
    msgs = of(cmds, StartResponse)[0].messages
    assert msgs == [{"role": "user", "content": "what is the time"},
                    {"role": "assistant", "content": "It is noon."},
                    {"role": "user", "content": "thanks"}]


def test_audio_delta_bytes_match_output_format_and_duration():
    s = new_session()
    rid = of(spoken_turn(s, "hi"), StartResponse)[0].response_id
    cmds = s.response_chunk(rid, "speak", speak("Hello.", 1000, sr=22050), 1)
    cmds += s.response_finished(rid, "completed", None, 2)
    audio = b"".join(base64.b64decode(e["delta"]) for e in events(cmds)
                     if e["type"] == "response.output_audio.delta")
    assert abs(len(audio) - 48000) <= 4  # 1 s of 24 kHz PCM16
    item = s.conversation.items[-1]
    assert abs(item.audio_ms - 1000.0) < 0.2


def test_g711_output_format():
    s = new_session()
    events(s.client_event({"type": "session.update", "session": {
        "type": "realtime", "audio": {"output": {"format": {"type": "audio/pcmu"}}}}}, 0))
    rid = of(spoken_turn(s, "hi"), StartResponse)[0].response_id
    cmds = s.response_chunk(rid, "speak", speak("Hello.", 500), 1)
    cmds += s.response_finished(rid, "completed", None, 2)
    audio = b"".join(base64.b64decode(e["delta"]) for e in events(cmds)
                     if e["type"] == "response.output_audio.delta")
    assert abs(len(audio) - 4000) <= 2  # 500 ms at 8 kHz, one byte per sample
    assert one(cmds, "response.done")["response"]["audio"]["output"]["format"] == \
        {"type": "audio/pcmu"}


def test_empty_final_creates_no_response():
    s = new_session()
    cmds = spoken_turn(s, "  ")
    assert not of(cmds, StartResponse)
    assert "response.created" not in types(cmds)
    assert one(cmds, "conversation.item.input_audio_transcription.completed")["transcript"] == ""
    assert s.active_response_id is None


def test_create_response_false_and_deferred_auto_response():
    s = new_session()
    events(s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "create_response": False}}}}}, 0))
    assert not of(spoken_turn(s, "hello"), StartResponse)
    # with create_response on, a final while the user speaks again waits
    events(s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "create_response": True}}}}}, 0))
    c = s.listen_event({"type": "speech_started", "audio_start_ms": 100}, 1)
    c += s.listen_event({"type": "speech_stopped", "audio_end_ms": 900}, 2)
    c += s.listen_event({"type": "speech_started", "audio_start_ms": 1000}, 3)
    c += s.listen_event({"type": "final", "text": "one", "audio_start_ms": 100,
                         "audio_end_ms": 900}, 4)
    assert not of(c, StartResponse)
    c = s.listen_event({"type": "speech_stopped", "audio_end_ms": 1500}, 5)
    c += s.listen_event({"type": "final", "text": "two", "audio_start_ms": 1000,
                         "audio_end_ms": 1500}, 6)
    start = of(c, StartResponse)
    assert len(start) == 1
    assert [m["content"] for m in start[0].messages] == ["hello", "one", "two"]


def test_input_audio_feeds_listen_at_16k_and_append_decodes_formats():
    s = new_session()
    pcm = tone(1000, 24000)
    total = 0
    for i in range(0, len(pcm), 480):  # 20 ms chunks
        cmds = s.client_event({"type": "input_audio_buffer.append",
                               "audio": b64_pcm(pcm[i:i + 480])}, i)
        assert events(cmds) == []
        total += sum(f.pcm16k.size for f in of(cmds, FeedListen))
    assert 15000 < total <= 16000  # resampler delay only
    assert abs(s.input_ms - total / 16) < 1e-9
    # WebRTC-style raw audio at 48 kHz
    cmds = s.input_audio(tone(100, 48000), 48000, 2000)
    assert all(f.pcm16k.dtype == np.int16 for f in of(cmds, FeedListen))
    # G.711 input
    events(s.client_event({"type": "session.update",
                           "session": {"input_audio_format": "g711_ulaw"}}, 0))
    mu = base64.b64encode(b"\xff" * 160).decode()
    sizes = []
    for _ in range(10):
        sizes.append(sum(f.pcm16k.size for f in of(s.client_event(
            {"type": "input_audio_buffer.append", "audio": mu}, 0), FeedListen)))
    # telephony audio reaches the listen stage at once, 20 ms in, 20 ms out
    assert all(300 <= n <= 320 for n in sizes), sizes


def test_push_to_talk_commit_transcribe_then_response():
    s = new_session()
    cmds = s.client_event({"type": "session.update", "session": {
        "type": "realtime", "audio": {"input": {"turn_detection": None}}}}, 0)
    assert of(cmds, StopListen)
    assert one(cmds, "session.updated")["session"]["audio"]["input"]["turn_detection"] is None
    pcm = tone(600, 24000)
    cmds = s.client_event({"type": "input_audio_buffer.append", "audio": b64_pcm(pcm)}, 1)
    assert not of(cmds, FeedListen) and events(cmds) == []
    # listen events are ignored in push-to-talk
    assert s.listen_event({"type": "speech_started", "audio_start_ms": 0}, 1) == []
    cmds = s.client_event({"type": "input_audio_buffer.commit", "event_id": "c1"}, 2)
    assert types(cmds) == ["input_audio_buffer.committed", "conversation.item.added"]
    tb = of(cmds, TranscribeBuffer)[0]
    item_id = one(cmds, "input_audio_buffer.committed")["item_id"]
    assert tb.item_id == item_id and 8000 < tb.pcm16k.size <= 9600
    # response.create before the transcript: created now, started later
    cmds = s.client_event({"type": "response.create"}, 3)
    assert types(cmds) == ["response.created", "rate_limits.updated"] \
        and not of(cmds, StartResponse)
    cmds = s.transcription_result(item_id, "hello there", 4)
    assert types(cmds) == ["conversation.item.input_audio_transcription.delta",
                           "conversation.item.input_audio_transcription.completed",
                           "conversation.item.done"]
    start = of(cmds, StartResponse)[0]
    assert start.messages == [{"role": "user", "content": "hello there"}]
    # the buffer is empty after commit
    cmds = s.client_event({"type": "input_audio_buffer.commit"}, 5)
    assert one(cmds, "error")["error"]["code"] == "input_audio_buffer_commit_empty"


def test_push_to_talk_clear_and_buffer_limit():
    from voice_server.session import ServerLimits
    s = Session("s", SessionSettings(turn_detection=None),
                limits=ServerLimits(max_buffered_input_s=1.0))
    events(s.start(0))
    cmds = s.client_event({"type": "input_audio_buffer.append",
                           "audio": b64_pcm(tone(900, 24000))}, 0)
    assert events(cmds) == []
    cmds = s.client_event({"type": "input_audio_buffer.append",
                           "audio": b64_pcm(tone(900, 24000))}, 0)
    assert one(cmds, "error")["error"]["code"] == "input_audio_buffer_full"
    cmds = s.client_event({"type": "input_audio_buffer.append",
                           "audio": b64_pcm(tone(900, 24000))}, 0)
    assert events(cmds) == []  # reported once
    assert types(s.client_event({"type": "input_audio_buffer.clear"}, 0)) == \
        ["input_audio_buffer.cleared"]
    assert s._buffer.samples == 0


def test_push_to_talk_buffer_full_is_reported_again_after_clear_or_commit():
    from voice_server.session import ServerLimits
    s = Session("s", SessionSettings(turn_detection=None),
                limits=ServerLimits(max_buffered_input_s=1.0))
    events(s.start(0))

    def overflow() -> list[str]:  # 1.8 s of audio into a 1 s buffer
        cmds = []
        for _ in range(2):
            cmds += s.client_event({"type": "input_audio_buffer.append",
                                    "audio": b64_pcm(tone(900, 24000))}, 0)
        return [e["error"]["code"] for e in events(cmds) if e["type"] == "error"]

    assert overflow() == ["input_audio_buffer_full"]
    assert overflow() == []  # reported once
    events(s.client_event({"type": "input_audio_buffer.clear"}, 0))
    assert overflow() == ["input_audio_buffer_full"]
    events(s.client_event({"type": "input_audio_buffer.commit"}, 0))
    assert overflow() == ["input_audio_buffer_full"]


def test_transcription_failure_in_push_to_talk():
    s = new_session(turn_detection=None)
    s.client_event({"type": "input_audio_buffer.append", "audio": b64_pcm(tone(300, 24000))}, 0)
    item_id = of(s.client_event({"type": "input_audio_buffer.commit"}, 0),
                 TranscribeBuffer)[0].item_id
    cmds = s.transcription_result(item_id, None, 1, error={"code": "timeout", "message": "slow",
                                                            "retryable": True})
    assert types(cmds) == ["conversation.item.input_audio_transcription.failed",
                           "conversation.item.done"]
    assert s.transcription_result(item_id, "again", 2) == []


def test_text_turn_item_create_and_response_text_only():
    s = new_session()
    cmds = s.client_event({"type": "conversation.item.create", "event_id": "e1", "item": {
        "id": "my_item_1", "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Say hi"}]}}, 0)
    assert types(cmds) == ["conversation.item.added", "conversation.item.done"]
    assert events(cmds)[0]["item"]["id"] == "my_item_1"  # client id echoed
    cmds = s.client_event({"type": "response.create", "response": {
        "output_modalities": ["text"], "metadata": {"topic": "greet"},
        "instructions": "be brief", "max_output_tokens": 50}}, 1)
    created = one(cmds, "response.created")["response"]
    assert created["metadata"] == {"topic": "greet"}
    assert created["output_modalities"] == ["text"] and created["max_output_tokens"] == 50
    st = of(cmds, StartResponse)[0]
    assert (st.modalities, st.max_tokens, st.instructions) == (["text"], 50, "be brief")
    rid = st.response_id
    cmds = s.response_chunk(rid, "think", "Hi", 2)
    assert types(cmds) == ["response.output_item.added", "conversation.item.added",
                           "response.content_part.added", "response.output_text.delta"]
    assert one(cmds, "response.content_part.added")["part"] == {"type": "text", "text": ""}
    assert s.response_chunk(rid, "speak", speak("ignored"), 3) == []
    cmds = s.response_chunk(rid, "think", " there!", 3)
    assert types(cmds) == ["response.output_text.delta"]
    cmds = s.response_finished(rid, "completed", None, 4)
    assert types(cmds) == ["response.output_text.done", "response.content_part.done",
                           "response.output_item.done", "conversation.item.done",
                           "response.done"]
    assert one(cmds, "response.output_text.done")["text"] == "Hi there!"
    done = one(cmds, "response.done")["response"]
    assert done["metadata"] == {"topic": "greet"}
    assert done["output"][0]["content"] == [{"type": "output_text", "text": "Hi there!"}]


def test_beta_modalities_and_out_of_band_response():
    s = new_session()
    s.client_event({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}}, 0)
    cmds = s.client_event({"type": "response.create", "response": {
        "modalities": ["text", "audio"], "conversation": "none",
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "classify this"}]}]}}, 0)
    st = of(cmds, StartResponse)[0]
    assert st.modalities == ["audio"]
    assert st.messages == [{"role": "user", "content": "classify this"}]
    assert one(cmds, "response.created")["response"]["conversation_id"] is None
    cmds = s.response_chunk(st.response_id, "speak", speak("ok"), 1)
    assert "conversation.item.added" not in types(cmds)
    cmds = s.response_finished(st.response_id, "completed", None, 2)
    assert "conversation.item.done" not in types(cmds)
    assert len(s.conversation) == 1


def test_item_create_variants_insert_delete_retrieve():
    s = new_session()
    events(s.client_event({"type": "conversation.item.create", "item": {
        "id": "a", "type": "message", "role": "system",
        "content": [{"type": "input_text", "text": "sys"}]}}, 0))
    events(s.client_event({"type": "conversation.item.create", "item": {
        "id": "c", "type": "message", "role": "assistant",
        "content": [{"type": "output_audio", "transcript": "said"}]}}, 0))
    cmds = s.client_event({"type": "conversation.item.create", "previous_item_id": "a",
                           "item": {"id": "b", "type": "message", "role": "assistant",
                                    "content": [{"type": "text", "text": "beta alias"}]}}, 0)
    assert events(cmds)[0]["previous_item_id"] == "a"
    assert [i.id for i in s.conversation.items] == ["a", "b", "c"]
    cmds = s.client_event({"type": "conversation.item.retrieve", "item_id": "b"}, 0)
    assert one(cmds, "conversation.item.retrieved")["item"]["content"] == \
        [{"type": "output_text", "text": "beta alias"}]
    cmds = s.client_event({"type": "conversation.item.delete", "item_id": "b"}, 0)
    assert one(cmds, "conversation.item.deleted")["item_id"] == "b"
    assert [i.id for i in s.conversation.items] == ["a", "c"]
    st = of(s.client_event({"type": "response.create"}, 0), StartResponse)[0]
    assert st.messages == [{"role": "system", "content": "sys"},
                           {"role": "assistant", "content": "said"}]


def test_item_create_after_root_goes_first():
    """``previous_item_id: "root"`` is the beginning of the conversation (LiveKit
    Agents sends it for the first item it syncs)."""
    s = new_session()
    cmds = s.client_event({"type": "conversation.item.create", "previous_item_id": "root",
                           "item": {"id": "b", "type": "message", "role": "user",
                                    "content": [{"type": "input_text", "text": "second"}]}}, 0)
    assert "error" not in types(cmds)
    assert one(cmds, "conversation.item.added")["previous_item_id"] is None
    cmds = s.client_event({"type": "conversation.item.create", "previous_item_id": "root",
                           "item": {"id": "a", "type": "message", "role": "user",
                                    "content": [{"type": "input_text", "text": "first"}]}}, 0)
    assert one(cmds, "conversation.item.added")["previous_item_id"] is None
    assert [i.id for i in s.conversation.items] == ["a", "b"]


def test_user_input_audio_item_is_transcribed():
    s = new_session()
    cmds = s.client_event({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user",
        "content": [{"type": "input_audio", "audio": b64_pcm(tone(200, 24000))}]}}, 0)
    assert types(cmds) == ["conversation.item.added"]
    tb = of(cmds, TranscribeBuffer)[0]
    assert 3000 <= tb.pcm16k.size <= 3300
    cmds = s.transcription_result(tb.item_id, "audio words", 1)
    assert one(cmds, "conversation.item.done")["item"]["content"][0]["transcript"] == \
        "audio words"


def test_idle_timeout_triggers_a_response():
    s = new_session()
    events(s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}}}}}, 0))
    rid = of(spoken_turn(s, "hi", now=0), StartResponse)[0].response_id
    s.response_chunk(rid, "speak", speak("Hello.", 1000), 100)
    events(s.response_finished(rid, "completed", None, 200))
    assert s.tick(5000) == []  # audio plays until 1100, deadline 6100
    cmds = s.tick(6200)
    assert types(cmds)[:4] == ["input_audio_buffer.timeout_triggered",
                               "input_audio_buffer.committed", "conversation.item.added",
                               "conversation.item.done"]
    assert "response.created" in types(cmds) and of(cmds, StartResponse)
    assert s.tick(20000) == []


def test_session_max_duration_closes():
    from voice_server.session import Close, ServerLimits
    s = Session("s", limits=ServerLimits(max_session_s=10))
    events(s.start(0))
    assert s.tick(9999) == []
    cmds = s.tick(10000)
    assert one(cmds, "error")["error"]["code"] == "session_expired"
    assert of(cmds, Close) and of(cmds, StopListen)
    assert s.client_event({"type": "response.create"}, 10001) == []


def test_a_reply_is_prepared_during_the_pause_and_matches_the_committed_turn():
    """Preemptive generation: the words are known before the turn is; the reply the
    session asks to prepare is exactly the request the committed turn starts, so
    the runner can adopt it.  Nothing reaches the client until the commit."""
    from voice_server.session import PrepareReply

    s = new_session()
    spoken_turn(s, "hello there")                      # a turn before: conversation context
    done = s.active_response_id
    s.response_finished(done, "completed", None, 50)
    s.listen_event({"type": "speech_started", "audio_start_ms": 5000}, 100)
    cmds = s.listen_event({"type": "turn_likely_over", "text": "what time is it"}, 101)
    [prep] = of(cmds, PrepareReply)
    assert events(cmds) == []                          # held: nothing for the client
    assert prep.messages[-1] == {"role": "user", "content": "what time is it"}
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 5900}, 102)
    cmds = s.listen_event({"type": "final", "text": "what time is it", "audio_start_ms": 5000,
                           "audio_end_ms": 5900}, 103)
    [start] = of(cmds, StartResponse)
    assert (start.messages, start.modalities, start.max_tokens, start.instructions) == \
        (prep.messages, prep.modalities, prep.max_tokens, prep.instructions)


def test_a_prepared_reply_is_dropped_when_the_speaker_goes_on():
    from voice_server.session import DropPreparedReply, PrepareReply

    s = new_session()
    s.listen_event({"type": "speech_started", "audio_start_ms": 1000}, 10)
    assert of(s.listen_event({"type": "turn_likely_over", "text": "i would like"}, 11),
              PrepareReply)
    cmds = s.listen_event({"type": "turn_continues"}, 12)
    assert of(cmds, DropPreparedReply) and events(cmds) == []
    assert s.listen_event({"type": "turn_continues"}, 13) == []      # once
    # no preparation while a reply is active or without words
    assert of(s.listen_event({"type": "turn_likely_over", "text": ""}, 14), PrepareReply) == []


def test_the_conversation_is_prefilled_when_the_caller_starts_to_speak():
    """What the reply's prompt holds before the caller's words is decoded while they
    speak: the conversation so far, with the instructions and tools the next
    response will carry; not while a reply is active (it is being cut), and not
    for a first turn with nothing but the cached system prompt."""
    from voice_server.session import PrefillConversation, PrepareReply

    s = new_session()
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 1000}, 10)
    assert of(cmds, PrefillConversation) == []          # nothing said yet, no instructions
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 1900}, 11)
    s.listen_event({"type": "final", "text": "hello there", "audio_start_ms": 1000,
                    "audio_end_ms": 1900}, 12)
    rid = s.active_response_id
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 3000}, 13)
    assert of(cmds, PrefillConversation) == []          # the reply is being cut
    s.response_finished(rid, "cancelled", None, 14)
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 3500}, 15)
    s.listen_event({"type": "final", "text": "wait", "audio_start_ms": 3000,
                    "audio_end_ms": 3500}, 16)
    s.response_finished(s.active_response_id, "completed", None, 17)
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 5000}, 18)
    [pre] = of(cmds, PrefillConversation)
    assert events(cmds) and pre.messages and pre.messages[-1]["role"] in ("user", "assistant")
    assert all(m.get("content") != "what time is it" for m in pre.messages)
    [prep] = of(s.listen_event({"type": "turn_likely_over", "text": "what time is it"}, 19),
                PrepareReply)
    # the prepared reply's messages start with exactly what was prefilled
    assert prep.messages[:len(pre.messages)] == pre.messages
    assert (prep.instructions, prep.tools, prep.tool_choice) == \
        (pre.instructions, pre.tools, pre.tool_choice)


def test_the_words_so_far_are_prefilled_while_the_caller_speaks():
    """An interim transcript of speech still going on is decoded into the reply's
    prompt ahead of the pause, without its last (possibly cut) word; not the
    interim of a pause, nor while a reply plays (that speech is being judged)."""
    from voice_server.session import PrefillConversation

    s = new_session()
    s.listen_event({"type": "speech_started", "audio_start_ms": 1000}, 10)
    [pre] = of(s.listen_event({"type": "interim", "text": "What is the capi", "paused": False}, 11),
               PrefillConversation)
    assert pre.words == "What is the" and pre.messages == []
    assert of(s.listen_event({"type": "interim", "text": "What", "paused": False}, 12),
              PrefillConversation) == []                # no whole word yet
    assert of(s.listen_event({"type": "interim", "text": "What is the capital of France?",
                              "paused": True}, 13), PrefillConversation) == []
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 2900}, 14)
    assert of(s.listen_event({"type": "interim", "text": "What is the capital", "paused": False},
                             15), PrefillConversation) == []   # no utterance going on
