"""The agent's call actions on the session core (sans-I/O): the operator's
setting, which tools the model is offered, and what the session asks the
runner to do when the model calls end_call / transfer_call / send_dtmf.
Every event is checked against the openai SDK's GA models."""

import json

from runtime.models.voice_contract import tool_call_done_event
from session_helpers import events, new_session, of, one, speak, spoken_turn, types
from voice_server.call_control import END_CALL, SEND_DTMF, TRANSFER
from voice_server.session import HangUpCall, SendDtmf, StartResponse, TransferCall

ACTIONS = {"end_call": True,
           "transfer_call": {"targets": [{"name": "sales", "uri": "tel:+15550100",
                                          "description": "buying"},
                                         {"uri": "sip:desk@pbx.example"}],
                             "announcement": "Say that you transfer the call."},
           "send_dtmf": {"max_digits": 8}}


def _session(mode="stream", available=(END_CALL, TRANSFER, SEND_DTMF), actions=ACTIONS,
             tools=None):
    s = new_session(mode)
    session = {"type": "realtime", "voice_agent": {"call_actions": actions}}
    if tools is not None:
        session["tools"] = tools
    upd = one(s.client_event({"type": "session.update", "session": session}, 0),
              "session.updated")["session"]
    assert upd["voice_agent"]["call_actions"]["end_call"] == {}
    s.set_call_actions_available(frozenset(available))
    return s


def _forced(s, name, now=10, **response):
    cmds = s.client_event({"type": "response.create", "response": {
        "tool_choice": {"type": "function", "name": name}, **response}}, now)
    st = of(cmds, StartResponse)
    assert st, types(cmds)
    return st[0]


def _model_calls(s, rid, name, args="{}", call_id="call_1", now=20, say=None):
    cmds = []
    if say:
        cmds += s.response_chunk(rid, "speak", speak(say, 400, 8000), now)
    cmds += s.response_chunk(rid, "think", [tool_call_done_event(0, call_id, name, args)], now)
    cmds += s.response_finished(rid, "completed", None, now)
    return cmds


def _tick_until(s, now, until, cls=None):
    out = []
    while now < until:
        now += 100
        out += s.tick(now)
        if s.next_output_ms is not None:
            out += s.pump_output(now)
        if cls is not None and of(out, cls):
            break
    return out, now


def _outputs(cmds):
    return [json.loads(e["item"]["output"]) for e in events(cmds)
            if e["type"] == "conversation.item.added"
            and e["item"]["type"] == "function_call_output"]


def _message_item(cmds) -> str:
    return next(e["item"]["id"] for e in events(cmds)
                if e["type"] == "response.output_item.added" and e["item"]["type"] == "message")


def _names(st):
    return [t["function"]["name"] for t in (st.tools or [])]


def test_offered_only_when_turned_on_and_the_transport_can():
    s = _session(available=(END_CALL,))
    st = of(spoken_turn(s, "hello"), StartResponse)[0]
    assert _names(st) == ["end_call"]
    s = _session()
    st = of(spoken_turn(s, "hello"), StartResponse)[0]
    assert _names(st) == ["end_call", "transfer_call", "send_dtmf"]
    target = st.tools[1]["function"]["parameters"]["properties"]["target"]
    assert target["enum"] == ["sales", "sip:desk@pbx.example"]
    assert "sales: buying" in st.tools[1]["function"]["description"]
    # not turned on: nothing offered, and a forced choice of one is an error
    s = new_session("stream")
    s.set_call_actions_available(frozenset({END_CALL}))
    assert of(spoken_turn(s, "hi"), StartResponse)[0].tools is None
    s = new_session("stream")
    cmds = s.client_event({"type": "response.create", "response": {
        "tool_choice": {"type": "function", "name": "end_call"}}}, 5)
    assert one(cmds, "error")["error"]["code"] == "invalid_tool_choice"
    # turned on, but no call control (a plain WebSocket): not offered either
    s = _session(available=())
    assert of(spoken_turn(s, "hello"), StartResponse)[0].tools is None


def test_end_call_hangs_up_once_the_goodbye_was_heard():
    s = _session()
    st = of(spoken_turn(s, "bye"), StartResponse)[0]
    cmds = _model_calls(s, st.response_id, "end_call", say="Goodbye, have a nice day.")
    item_id = _message_item(cmds)
    assert "response.function_call_arguments.done" in types(cmds)
    # generated, but 400 ms of goodbye are still playing: no hang-up yet
    cmds, now = _tick_until(s, 20, 300)
    assert not of(cmds, HangUpCall)
    s.playback_progress(item_id, 400.0, now)
    cmds = s.tick(now + 100)
    hang = of(cmds, HangUpCall)
    assert hang == [HangUpCall("call_1", "end_call")]
    assert _outputs(cmds) == [{"status": "ended"}]
    # nothing more: no reply to the output, no tools offered
    assert not of(s.tick(now + 200), StartResponse)


def test_end_call_waits_for_an_earlier_reply_still_playing():
    s = _session()
    st = of(spoken_turn(s, "hello"), StartResponse)[0]
    cmds = s.response_chunk(st.response_id, "speak", speak("Hi there.", 500, 8000), 10)
    cmds += s.response_finished(st.response_id, "completed", None, 11)
    _, now = _tick_until(s, 11, 200)
    st2 = _forced(s, "end_call", now)
    _model_calls(s, st2.response_id, "end_call", now=now + 1)
    cmds, now = _tick_until(s, now + 1, now + 300)
    assert not of(cmds, HangUpCall)   # 500 ms of reply, none reported heard
    cmds, now = _tick_until(s, now, now + 4000, HangUpCall)   # the grace ran out
    assert of(cmds, HangUpCall)


def test_transfer_says_the_line_first_then_reports_a_failure_and_the_call_goes_on():
    s = _session()
    st = _forced(s, "transfer_call")
    _model_calls(s, st.response_id, "transfer_call", '{"target": "sales"}')
    cmds, now = _tick_until(s, 20, 300)
    # the model said nothing: a reply with the announcement, no tools
    line = of(cmds, StartResponse)
    assert line and line[0].tools is None
    assert "Say that you transfer the call." in line[0].instructions
    assert not of(cmds, TransferCall)
    rid = line[0].response_id
    cmds = s.response_chunk(rid, "speak", speak("Transferring you now.", 300, 8000), now)
    item_id = _message_item(cmds)
    s.response_finished(rid, "completed", None, now)
    s.playback_progress(item_id, 300.0, now + 300)
    cmds, now = _tick_until(s, now + 300, now + 1000, TransferCall)
    assert of(cmds, TransferCall) == [TransferCall("call_1", "tel:+15550100")]
    # the line refused it: the output says so and the model answers
    out = s.call_action_done("call_1", {"status": "failed", "sip_status": 486}, now,
                             reply=True)
    assert _outputs(out) == [{"status": "failed", "sip_status": 486}]
    reply = of(out, StartResponse)
    assert reply and any(m["role"] == "tool" and "486" in m["content"]
                         for m in reply[0].messages)
    assert "transfer_call" in _names(reply[0])   # the call goes on, actions too


def test_a_transfer_with_the_models_own_words_needs_no_announcement():
    s = _session()
    st = _forced(s, "transfer_call")
    cmds = _model_calls(s, st.response_id, "transfer_call",
                        '{"target": "sip:desk@pbx.example"}', say="Let me put you through.")
    item_id = _message_item(cmds)
    s.playback_progress(item_id, 400.0, 500)
    cmds, _ = _tick_until(s, 500, 900, TransferCall)
    assert of(cmds, TransferCall) == [TransferCall("call_1", "sip:desk@pbx.example")]
    assert not of(cmds, StartResponse)


def test_send_dtmf_goes_at_once_and_its_result_is_answered():
    s = _session()
    st = _forced(s, "send_dtmf")
    _model_calls(s, st.response_id, "send_dtmf", '{"digits": "12#"}')
    cmds = s.tick(120)
    assert of(cmds, SendDtmf) == [SendDtmf("call_1", "12#")]
    # a client may not answer a call the server runs
    err = one(s.client_event({"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "call_1", "output": "{}"}}, 130), "error")
    assert err["error"]["code"] == "function_call_run_by_server"
    out = s.call_action_done("call_1", {"status": "sent", "digits": "12#"}, 140, reply=True)
    assert _outputs(out) == [{"status": "sent", "digits": "12#"}]
    assert of(out, StartResponse)
    assert s.call_action_done("call_1", {}, 150, reply=True) == []   # answered once


def test_bad_arguments_are_said_back_to_the_model():
    s = _session()
    st = _forced(s, "send_dtmf")
    _model_calls(s, st.response_id, "send_dtmf", '{"digits": "12345678901"}')
    cmds = s.tick(120)
    assert not of(cmds, SendDtmf)
    assert _outputs(cmds)[0]["status"] == "failed"
    assert "1 to 8" in _outputs(cmds)[0]["error"]
    assert of(cmds, StartResponse)
    s = _session()
    st = _forced(s, "transfer_call")
    _model_calls(s, st.response_id, "transfer_call", '{"target": "the moon"}')
    cmds = s.tick(120)
    assert "allowed targets are: sales, sip:desk@pbx.example" in _outputs(cmds)[0]["error"]
    assert not of(cmds, TransferCall)


def test_a_cancelled_response_runs_no_action():
    s = _session()
    st = _forced(s, "end_call")
    s.response_chunk(st.response_id, "think", [tool_call_done_event(0, "call_1", "end_call", "{}")],
                     20)
    s.client_event({"type": "response.cancel"}, 30)
    cmds, _ = _tick_until(s, 30, 500)
    assert not of(cmds, HangUpCall)
    assert _outputs(cmds) == [{"status": "cancelled", "detail":
                               "the response was interrupted before the action ran"}]


def test_a_client_tool_may_not_take_an_actions_name():
    s = _session()
    cmds = s.client_event({"type": "session.update", "session": {"tools": [
        {"type": "function", "name": "end_call", "parameters": {"type": "object"}}]}}, 1)
    err = one(cmds, "error")["error"]
    assert err["code"] == "tool_name_reserved" and err["param"] == "session.tools[0].name"
    assert one(cmds, "session.updated")["session"]["tools"] == []
    cmds = s.client_event({"type": "response.create", "response": {"tools": [
        {"type": "function", "name": "send_dtmf"}]}}, 2)
    assert one(cmds, "error")["error"]["code"] == "tool_name_reserved"
    assert not of(cmds, StartResponse)
    # the other way round: the tool came first, the action is refused
    s = new_session("stream")
    s.client_event({"type": "session.update", "session": {"tools": [
        {"type": "function", "name": "end_call"}]}}, 1)
    cmds = s.client_event({"type": "session.update", "session": {
        "voice_agent": {"call_actions": {"end_call": True}}}}, 2)
    err = one(cmds, "error")["error"]
    assert err["param"] == "session.voice_agent.call_actions"
    assert "voice_agent" not in one(cmds, "session.updated")["session"]


def test_bad_settings_are_errors_and_the_session_keeps_its_own():
    s = _session()
    for bad, param in (({"transfer_call": {"targets": []}},
                        "session.voice_agent.call_actions.transfer_call.targets"),
                       ({"transfer_call": {"targets": [{"uri": "http://x"}]}},
                        "session.voice_agent.call_actions.transfer_call.targets[0].uri"),
                       ({"send_dtmf": {"max_digits": 0}},
                        "session.voice_agent.call_actions.send_dtmf.max_digits"),
                       ({"hold": True}, "session.voice_agent.call_actions.hold"),
                       ("yes", "session.voice_agent.call_actions")):
        cmds = s.client_event({"type": "session.update", "session": {
            "voice_agent": {"call_actions": bad}}}, 1)
        assert one(cmds, "error")["error"]["param"] == param, (bad, events(cmds))
        assert one(cmds, "session.updated")["session"]["voice_agent"]["call_actions"] \
            == {"end_call": {}, "transfer_call": ACTIONS["transfer_call"] | {"targets": [
                {"name": "sales", "uri": "tel:+15550100", "description": "buying"},
                {"uri": "sip:desk@pbx.example"}]}, "send_dtmf": {"max_digits": 8}}
    # null turns them off
    cmds = s.client_event({"type": "session.update", "session": {"voice_agent": None}}, 2)
    assert "voice_agent" not in one(cmds, "session.updated")["session"]
