"""What the think stage is asked with (prompt.py, truncation.py): a
session.update that applies its valid fields and names the bad ones, the
client's instructions after the server's system prompt, and the history kept
within the context by ``truncation`` (auto, retention_ratio, disabled)."""

import pytest

from session_helpers import new_session, of, one, spoken_turn, types
from voice_server.session import PrefillConversation, PrepareReply, StartResponse
from voice_server.session.truncation import ThinkContext

PERSONA = "You are a friendly voice assistant."


def _update(s, session, now=1, event_id=None):
    ev = {"type": "session.update", "session": session}
    if event_id:
        ev["event_id"] = event_id
    return s.client_event(ev, now)


# ------------------------------------------------------------ partial updates
def test_an_update_applies_its_valid_fields_and_names_the_bad_ones_once():
    s = new_session()
    cmds = _update(s, {
        "type": "realtime", "instructions": 5, "output_modalities": ["video"],
        "tool_choice": "sometimes", "truncation": {"type": "retention_ratio",
                                                   "retention_ratio": 0.5},
        "audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": {
            "type": "server_vad", "silence_duration_ms": 450, "threshold": 7}},
            "output": {"voice": "marin"}}}, event_id="ev_u")
    assert types(cmds) == ["error", "session.updated"]
    e = one(cmds, "error")["error"]
    assert e["event_id"] == "ev_u" and e["param"] == "session.instructions", e
    for param in ("session.instructions", "session.output_modalities", "session.tool_choice",
                  "threshold"):
        assert param in e["message"], e
    upd = one(cmds, "session.updated")["session"]
    assert upd["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    td = upd["audio"]["input"]["turn_detection"]
    assert td["silence_duration_ms"] == 450 and td["threshold"] == 0.5   # the bad value left out
    assert upd["audio"]["output"]["voice"] == "marin"
    assert upd["truncation"] == {"type": "retention_ratio", "retention_ratio": 0.5}
    assert (upd["instructions"], upd["output_modalities"], upd["tool_choice"]) == \
        ("", ["audio"], "auto")


def test_one_bad_field_is_one_error_with_its_own_code():
    s = new_session()
    cmds = _update(s, {"truncation": "sometimes", "instructions": "be brief"})
    e = one(cmds, "error")["error"]
    assert (e["code"], e["param"]) == ("invalid_value", "session.truncation")
    assert one(cmds, "session.updated")["session"]["instructions"] == "be brief"


@pytest.mark.parametrize("value", [
    "auto", "disabled", {"type": "retention_ratio", "retention_ratio": 0.8},
    {"type": "retention_ratio", "retention_ratio": 1,
     "token_limits": {"post_instructions": 500}}])
def test_truncation_is_echoed(value):
    s = new_session()
    upd = one(_update(s, {"truncation": value}), "session.updated")["session"]
    want = dict(value, retention_ratio=float(value["retention_ratio"])) \
        if isinstance(value, dict) else value
    assert upd["truncation"] == want


@pytest.mark.parametrize("value,param", [
    ({"type": "retention_ratio", "retention_ratio": 1.5}, "session.truncation.retention_ratio"),
    ({"type": "retention_ratio"}, "session.truncation.retention_ratio"),
    ({"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {
        "post_instructions": 0}}, "session.truncation.token_limits.post_instructions"),
    ({"type": "keep_all"}, "session.truncation"), (3, "session.truncation")])
def test_a_bad_truncation_is_an_error_and_keeps_the_last(value, param):
    s = new_session()
    _update(s, {"truncation": "disabled"})
    cmds = _update(s, {"truncation": value}, 2)
    assert one(cmds, "error")["error"]["param"] == param
    assert one(cmds, "session.updated")["session"]["truncation"] == "disabled"


# ------------------------------------------------------------ instructions
def _start(cmds) -> StartResponse:
    [st] = of(cmds, StartResponse)
    return st


def test_instructions_follow_the_server_prompt():
    s = new_session(context=ThinkContext(system_prompt=PERSONA))
    # no instructions: the think stage's own prompt, unchanged
    st = _start(spoken_turn(s, "hello"))
    assert st.instructions is None
    s.response_finished(st.response_id, "completed", None, 10)
    _update(s, {"instructions": "Your name is Ada."}, 11)
    st = _start(s.client_event({"type": "response.create"}, 12))
    assert st.instructions == PERSONA + "\n\nYour name is Ada."
    s.response_finished(st.response_id, "completed", None, 13)
    # a response's own instructions replace the session's, still after the prompt
    st = _start(s.client_event({"type": "response.create", "response": {
        "instructions": "Answer in French."}}, 14))
    assert st.instructions == PERSONA + "\n\nAnswer in French."


def test_a_system_item_does_not_take_the_server_prompt_away():
    s = new_session(context=ThinkContext(system_prompt=PERSONA))
    s.client_event({"type": "conversation.item.create", "item": {
        "type": "message", "role": "system",
        "content": [{"type": "input_text", "text": "The user is called Bo."}]}}, 1)
    st = _start(s.client_event({"type": "response.create"}, 2))
    assert st.instructions == PERSONA
    assert st.messages[0] == {"role": "system", "content": "The user is called Bo."}


def test_the_agent_may_speak_first_on_an_empty_conversation():
    """No items and no instructions: the request still carries one message, the
    stage's own prompt (an engine refuses an empty list)."""
    s = new_session(context=ThinkContext(system_prompt=PERSONA))
    st = _start(s.client_event({"type": "response.create"}, 1))
    assert st.instructions == PERSONA and st.messages == []


def test_instructions_reach_prefills_and_prepared_replies_as_the_reply_has_them():
    s = new_session(context=ThinkContext(system_prompt=PERSONA), instructions="Be Ada.")
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 0}, 0)
    [pre] = of(cmds, PrefillConversation)
    [prep] = of(s.listen_event({"type": "turn_likely_over", "text": "who are you"}, 1),
                PrepareReply)
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 900}, 2)
    st = _start(s.listen_event({"type": "final", "text": "who are you", "audio_start_ms": 0,
                                "audio_end_ms": 900}, 3))
    assert pre.instructions == prep.instructions == st.instructions == PERSONA + "\n\nBe Ada."
    assert prep.messages == st.messages


# ------------------------------------------------------------ truncation
# 100 tokens of context at 1 char/token, replies of 10: 90 characters of history
SMALL = ThinkContext(tokens=100, reply_tokens=10, chars_per_token=1.0)


def _text_item(s, role, text, now):
    kind = "input_text" if role == "user" else "output_text"
    cmds = s.client_event({"type": "conversation.item.create", "item": {
        "type": "message", "role": role, "content": [{"type": kind, "text": text}]}}, now)
    return one(cmds, "conversation.item.added")["item"]["id"]


def _ask(s, now, **response):
    cmds = s.client_event({"type": "response.create", "response": {
        "output_modalities": ["text"], **response}}, now)
    sts = of(cmds, StartResponse)
    if sts:
        s.response_finished(sts[0].response_id, "completed", None, now + 1)
    return cmds, (sts[0] if sts else None)


def test_auto_drops_the_oldest_items_to_three_quarters_of_the_room():
    s = new_session(context=SMALL)
    for i in range(6):
        _text_item(s, "user" if i % 2 == 0 else "assistant", f"{i}" * 20, i)
    _, st = _ask(s, 10)
    texts = [m["content"] for m in st.messages]
    assert texts == ["3" * 20, "4" * 20, "5" * 20]   # 60 <= 90 * 0.75
    # the items stay in the conversation: only the prompt leaves them out
    assert len(s.conversation) == 6
    # the next turns add to that prompt until it is full again: no cut each turn
    _text_item(s, "user", "6" * 20, 11)
    _, st2 = _ask(s, 12)
    assert [m["content"] for m in st2.messages] == texts + ["6" * 20]


def test_each_item_costs_the_chat_templates_tokens_too():
    # 5 tokens around each message: four items of 20 characters take 100, not 80
    s = new_session(context=SMALL.model_copy(update={"message_tokens": 5}))
    _update(s, {"truncation": {"type": "retention_ratio", "retention_ratio": 1.0}})
    for i in range(4):
        _text_item(s, "user", f"{i}" * 20, i)
    _, st = _ask(s, 10)
    assert [m["content"] for m in st.messages] == ["1" * 20, "2" * 20, "3" * 20]   # 75 <= 90


def test_retention_ratio_cuts_deeper_so_the_next_turns_keep_their_prefix():
    s = new_session(context=SMALL)
    _update(s, {"truncation": {"type": "retention_ratio", "retention_ratio": 0.5}})
    for i in range(5):
        _text_item(s, "user", f"{i}" * 20, i)
    _, st = _ask(s, 10)
    assert [m["content"] for m in st.messages] == ["3" * 20, "4" * 20]   # 40 <= 45
    _text_item(s, "user", "5" * 20, 12)
    _, st2 = _ask(s, 13)
    # no new cut: the prompt grows at its end only
    assert [m["content"] for m in st2.messages] == ["3" * 20, "4" * 20, "5" * 20]


def test_post_instructions_lowers_the_room():
    s = new_session(context=SMALL)
    _update(s, {"truncation": {"type": "retention_ratio", "retention_ratio": 1.0,
                               "token_limits": {"post_instructions": 30}}})
    for i in range(3):
        _text_item(s, "user", f"{i}" * 20, i)
    _, st = _ask(s, 10)
    assert [m["content"] for m in st.messages] == ["2" * 20]


def test_instructions_and_tools_take_room_from_the_history():
    s = new_session(context=SMALL)
    _update(s, {"truncation": {"type": "retention_ratio", "retention_ratio": 1.0}})
    for i in range(4):
        _text_item(s, "user", f"{i}" * 20, i)
    _, st = _ask(s, 10, instructions="x" * 30)   # 90 - 30: three items
    assert [m["content"] for m in st.messages] == ["1" * 20, "2" * 20, "3" * 20]


def test_a_call_and_its_output_leave_together():
    s = new_session(context=SMALL)
    _text_item(s, "user", "a" * 20, 0)
    s.client_event({"type": "conversation.item.create", "item": {
        "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}}, 1)
    _text_item(s, "user", "b" * 30, 2)
    s.client_event({"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "c1", "output": "o" * 30}}, 3)
    _text_item(s, "user", "c" * 30, 4)
    _, st = _ask(s, 10)
    roles = [m["role"] for m in st.messages]
    assert "tool" not in roles and not any(m.get("tool_calls") for m in st.messages), \
        st.messages
    assert [m["content"] for m in st.messages] == ["b" * 30, "c" * 30]


def test_the_newest_item_stays_even_alone_over_the_room():
    s = new_session(context=SMALL)
    _text_item(s, "user", "a" * 20, 0)
    _text_item(s, "user", "b" * 500, 1)
    _, st = _ask(s, 10)
    assert [m["content"] for m in st.messages] == ["b" * 500]


def test_disabled_fails_the_response_with_a_clear_error_and_the_session_goes_on():
    s = new_session(context=SMALL)
    _update(s, {"truncation": "disabled"})
    for i in range(6):
        _text_item(s, "user", f"{i}" * 20, i)
    cmds, st = _ask(s, 10)
    assert st is None
    assert types(cmds) == ["response.created", "rate_limits.updated", "error", "response.done"], types(cmds)
    e = one(cmds, "error")["error"]
    assert e["code"] == "context_length_exceeded" and "disabled" in e["message"]
    done = one(cmds, "response.done")["response"]
    assert done["status"] == "failed"
    assert done["status_details"]["error"]["code"] == "context_length_exceeded"
    assert s.active_response_id is None
    # back to auto: the same conversation is answered
    _update(s, {"truncation": "auto"}, 20)
    _, st = _ask(s, 21)
    assert st is not None and len(st.messages) == 3


def test_without_a_known_context_nothing_is_dropped():
    s = new_session()
    for i in range(50):
        _text_item(s, "user", "x" * 1000, i)
    _, st = _ask(s, 100)
    assert len(st.messages) == 50


def test_a_prepared_reply_is_cut_as_the_reply_will_be():
    s = new_session(context=SMALL)
    for i in range(4):
        _text_item(s, "user", f"{i}" * 20, i)
    s.listen_event({"type": "speech_started", "audio_start_ms": 0}, 10)
    [prep] = of(s.listen_event({"type": "turn_likely_over", "text": "w" * 25}, 11),
                PrepareReply)
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 900}, 12)
    st = _start(s.listen_event({"type": "final", "text": "w" * 25, "audio_start_ms": 0,
                                "audio_end_ms": 900}, 13))
    assert prep.messages == st.messages
    # 80 + 25 > 90: the oldest go (down to 3/4 of the room), in the prepared
    # reply as in the reply
    assert [m["content"] for m in st.messages] == ["2" * 20, "3" * 20, "w" * 25]
