"""Every class of bad input becomes an error event; the session stays open."""

import base64
import json

import pytest

from session_helpers import events, new_session, of, one, types
from voice_server.session import FeedListen, ServerLimits, Session, SessionSettings


def _err(cmds):
    e = one(cmds, "error")["error"]
    assert e["type"] == "invalid_request_error"
    return e


@pytest.mark.parametrize("raw,code,param", [
    ("{not json", "invalid_json", None),
    (b'{"type":"response.create"}', "binary_frame_not_supported", None),
    ("[1, 2]", "invalid_event", None),
    ('"x"', "invalid_event", None),
    ("{}", "missing_required_parameter", "type"),
    ('{"type": 5}', "invalid_type", "type"),
    ('{"type": "response.explode"}', "invalid_value", "type"),
    ('{"type": "input_audio_buffer.append"}', "missing_required_parameter", "audio"),
    ('{"type": "input_audio_buffer.append", "audio": 12}', "invalid_type", "audio"),
    ('{"type": "input_audio_buffer.append", "audio": "!!!notb64"}', "invalid_base64", "audio"),
    ('{"type": "input_audio_buffer.append", "audio": "AAAA"}', "invalid_audio_length", "audio"),
    ('{"type": "conversation.item.truncate", "item_id": "x", "content_index": "0",'
     ' "audio_end_ms": 5}', "invalid_type", "content_index"),
    ('{"type": "conversation.item.truncate", "item_id": "x", "content_index": 0}',
     "missing_required_parameter", "audio_end_ms"),
    ('{"type": "conversation.item.create", "item": "hello"}', "invalid_type", "item"),
    ('{"type": "conversation.item.create", "item": {"type": "message", "role": "user",'
     ' "content": [{"type": "input_text", "text": 3}]}}', "invalid_type", "item.content[0].text"),
    ('{"type": "conversation.item.create", "item": {"type": "message", "role": "robot",'
     ' "content": []}}', "invalid_value", "item.role"),
    ('{"type": "conversation.item.create", "item": {"type": "mcp_call"}}',
     "invalid_value", "item.type"),
    ('{"type": "conversation.item.create", "item": {"type": "function_call"}}',
     "missing_required_parameter", "item.call_id"),
    ('{"type": "conversation.item.create", "item": {"type": "message", "role": "user",'
     ' "content": [{"type": "input_image", "image_url": "x"}]}}', "invalid_value",
     "item.content[0].type"),
    ('{"type": "conversation.item.create", "item": {"type": "message", "role": "user",'
     ' "content": [{"type": "input_text"}]}}', "missing_required_parameter",
     "item.content[0].text"),
    ('{"type": "conversation.item.create", "previous_item_id": "ghost", "item": {"type":'
     ' "message", "role": "user", "content": []}}', "invalid_value", "previous_item_id"),
    ('{"type": "conversation.item.delete", "item_id": "ghost"}', "invalid_value", "item_id"),
    ('{"type": "conversation.item.retrieve", "item_id": "ghost"}', "invalid_value", "item_id"),
    ('{"type": "response.create", "response": {"output_modalities": ["video"]}}',
     "invalid_value", "response.output_modalities"),
    ('{"type": "response.create", "response": {"max_output_tokens": 0}}', "invalid_value",
     "response.max_output_tokens"),
    ('{"type": "response.create", "response": {"metadata": {"a": 1}}}', "invalid_type",
     "response.metadata.a"),
    ('{"type": "response.create", "response": {"conversation": "conv_x"}}', "invalid_value",
     "response.conversation"),
    ('{"type": "response.create", "response": {"instructions": 7}}', "invalid_type",
     "response.instructions"),
    ('{"type": "session.update", "session": []}', "invalid_type", "session"),
    ('{"type": "session.update", "session": {"instructions": 1}}', "invalid_type",
     "session.instructions"),
    ('{"type": "session.update", "session": {"type": "video"}}', "invalid_value",
     "session.type"),
    ('{"type": "session.update", "session": {"audio": {"input": {"format": {"type":'
     ' "audio/opus"}}}}}', "invalid_value", "session.audio.input.format.type"),
    ('{"type": "session.update", "session": {"input_audio_format": "mp3"}}', "invalid_value",
     "session.input_audio_format"),
    ('{"type": "session.update", "session": {"audio": {"input": {"turn_detection":'
     ' {"type": "server_vad", "threshold": 2}}}}}', "invalid_value",
     "session.audio.input.turn_detection.threshold"),
    ('{"type": "session.update", "session": {"audio": {"input": {"turn_detection":'
     ' {"type": "push_button"}}}}}', "invalid_value",
     "session.audio.input.turn_detection.type"),
    ('{"type": "session.update", "session": {"audio": {"input": {"turn_detection":'
     ' {"type": "server_vad", "silence_duration_ms": "500"}}}}}', "invalid_type",
     "session.audio.input.turn_detection.silence_duration_ms"),
    ('{"type": "session.update", "session": {"max_output_tokens": "lots"}}', "invalid_value",
     "session.max_output_tokens"),
])
def test_bad_input_is_an_error_event_and_the_session_survives(raw, code, param):
    s = new_session()
    before = s.settings
    cmds = s.client_event(raw, 0)
    err = _err(cmds)
    assert (err["code"], err["param"]) == (code, param), err
    assert err["message"]
    assert s.settings == before and not s.closed
    assert not of(cmds, FeedListen)
    # still usable
    assert types(s.client_event({"type": "input_audio_buffer.clear"}, 1)) == \
        ["input_audio_buffer.cleared"]


def test_error_carries_the_client_event_id():
    s = new_session()
    e = _err(s.client_event({"type": "conversation.item.delete", "item_id": "x",
                             "event_id": "evt_42"}, 0))
    assert e["event_id"] == "evt_42"
    e = _err(s.client_event('{"type": "nope", "event_id": "evt_43"}', 0))
    assert e["event_id"] == "evt_43"
    e = _err(s.client_event("{bad", 0))
    assert e["event_id"] is None


def test_append_size_limit():
    s = Session("s", SessionSettings(), limits=ServerLimits(max_append_b64_bytes=100))
    events(s.start(0))
    big = base64.b64encode(b"\x00" * 100).decode()
    e = _err(s.client_event({"type": "input_audio_buffer.append", "audio": big}, 0))
    assert e["code"] == "input_audio_too_large" and e["param"] == "audio"
    ok = base64.b64encode(b"\x00" * 60).decode()
    assert events(s.client_event({"type": "input_audio_buffer.append", "audio": ok}, 0)) == []


def test_default_append_limit_is_15_mib():
    assert ServerLimits().max_append_b64_bytes == 15 * 1024 * 1024


def test_instructions_length_limit():
    s = Session("s", limits=ServerLimits(max_instructions_chars=10))
    events(s.start(0))
    e = _err(s.client_event({"type": "session.update",
                             "session": {"instructions": "x" * 11}}, 0))
    assert e["code"] == "string_above_max_length" and e["param"] == "session.instructions"
    e = _err(s.client_event({"type": "response.create",
                             "response": {"instructions": "y" * 11}}, 0))
    assert e["param"] == "response.instructions"
    assert s.active_response_id is None


def test_metadata_limits():
    s = new_session()
    e = _err(s.client_event({"type": "response.create", "response": {
        "metadata": {f"k{i}": "v" for i in range(17)}}}, 0))
    assert e["code"] == "invalid_value"
    e = _err(s.client_event({"type": "response.create", "response": {
        "metadata": {"k": "v" * 600}}}, 0))
    assert e["code"] == "string_above_max_length"


def test_events_without_event_id_and_unknown_fields_are_accepted():
    s = new_session()
    cmds = s.client_event({"type": "input_audio_buffer.clear", "foo": {"bar": 1}}, 0)
    assert types(cmds) == ["input_audio_buffer.cleared"]
    cmds = s.client_event(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "object": "realtime.item", "status": "completed",
        "content": [{"type": "input_text", "text": "hi", "extra": True}]}}), 0)
    assert types(cmds) == ["conversation.item.added", "conversation.item.done"]


def test_duplicate_item_id_rejected():
    s = new_session()
    item = {"id": "dup", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "a"}]}
    events(s.client_event({"type": "conversation.item.create", "item": item}, 0))
    e = _err(s.client_event({"type": "conversation.item.create", "item": item}, 0))
    assert e["param"] == "item.id"
    assert len(s.conversation) == 1


def test_input_audio_rejects_non_int16():
    s = new_session()
    import numpy as np
    with pytest.raises(TypeError):
        s.input_audio(np.zeros(10, np.float32), 16000, 0)
