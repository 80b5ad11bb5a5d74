"""Function calling on the session core: tools and tool_choice, function_call
items from the thinker's tool-call events, the client's function_call_output,
the history the next response takes, cancels mid-arguments and every bad
input.  Every event is checked against the openai SDK's GA models."""

import json

import pytest

from runtime.models.voice_contract import (think_events, tool_call_delta_event,
                                           tool_call_done_event)
from session_helpers import events, new_session, of, one, speak, spoken_turn, types
from voice_server.session import CancelResponse, PrepareReply, Session, StartResponse
from voice_server.session.items import chat_messages, function_call_item, \
    function_call_output_item, Content, Item

WEATHER = {"type": "function", "name": "get_weather",
           "description": "The weather in a city now.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
TIME = {"type": "function", "name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}
ARGS = '{"city": "Paris"}'


def _err(cmds) -> dict:
    e = one(cmds, "error")["error"]
    assert e["type"] == "invalid_request_error"
    return e


def _tools_session(mode="events", tools=(WEATHER, TIME), choice="auto", **settings) -> Session:
    s = new_session(mode, **settings)
    upd = one(s.client_event({"type": "session.update", "session": {
        "type": "realtime", "tools": list(tools), "tool_choice": choice}}, 0),
        "session.updated")["session"]
    assert upd["tools"] == list(tools) and upd["tool_choice"] == choice
    return s


def _call(s, rid, index=0, call_id="call_abc", name="get_weather", args=ARGS, now=10,
          pieces=2):
    """The thinker's events for one whole call, ``pieces`` deltas then done."""
    step = max(1, len(args) // pieces)
    parts = [args[i:i + step] for i in range(0, len(args), step)]
    cmds = s.response_chunk(rid, "think", [tool_call_delta_event(index, parts[0], call_id, name)],
                            now)
    for p in parts[1:]:
        cmds += s.response_chunk(rid, "think", [tool_call_delta_event(index, p)], now)
    cmds += s.response_chunk(rid, "think", [tool_call_done_event(index, call_id, name, args)],
                             now)
    return cmds


def _text_response(s, now=0, **response) -> str:
    cmds = s.client_event({"type": "response.create", "response": {
        "output_modalities": ["text"], **response}}, now)
    return of(cmds, StartResponse)[0].response_id


def _output(s, call_id="call_abc", output='{"temperature_c": 17}', now=50, **event):
    return s.client_event({"type": "conversation.item.create", **event, "item": {
        "type": "function_call_output", "call_id": call_id, "output": output}}, now)


# --------------------------------------------------------------- tools config
def test_tools_reach_the_thinker_in_the_chat_completions_shape():
    s = _tools_session(choice={"type": "function", "name": "get_weather"})
    st = of(spoken_turn(s, "weather in paris?"), StartResponse)[0]
    assert st.tools == [
        {"type": "function", "function": {"name": "get_weather",
                                          "description": "The weather in a city now.",
                                          "parameters": WEATHER["parameters"]}},
        {"type": "function", "function": {"name": "get_time",
                                          "parameters": TIME["parameters"]}}]
    assert st.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    # no tools: nothing about tools goes to the thinker
    s2 = new_session()
    st2 = of(spoken_turn(s2, "hi"), StartResponse)[0]
    assert st2.tools is None and st2.tool_choice is None


def test_response_create_overrides_tools_and_tool_choice():
    s = _tools_session()
    cmds = s.client_event({"type": "response.create", "response": {
        "tools": [TIME], "tool_choice": "required"}}, 0)
    st = of(cmds, StartResponse)[0]
    assert [t["function"]["name"] for t in st.tools] == ["get_time"]
    assert st.tool_choice == "required"
    s.response_finished(st.response_id, "completed", None, 1)
    # an override of the choice alone keeps the session's tools
    cmds = s.client_event({"type": "response.create", "response": {
        "tool_choice": {"type": "function", "name": "get_time"}}}, 2)
    st = of(cmds, StartResponse)[0]
    assert len(st.tools) == 2
    assert st.tool_choice == {"type": "function", "function": {"name": "get_time"}}
    s.response_finished(st.response_id, "completed", None, 3)
    # override tools that drop the session's named function: the choice is auto
    s.client_event({"type": "session.update", "session": {
        "tool_choice": {"type": "function", "name": "get_weather"}}}, 4)
    st = of(s.client_event({"type": "response.create", "response": {"tools": [TIME]}}, 5),
            StartResponse)[0]
    assert st.tool_choice == "auto"
    s.response_finished(st.response_id, "completed", None, 6)
    # empty override: no tools for this response
    st = of(s.client_event({"type": "response.create", "response": {"tools": []}}, 7),
            StartResponse)[0]
    assert st.tools is None and st.tool_choice is None


def test_tools_in_a_prepared_reply_match_the_response():
    s = _tools_session(choice="required")
    s.listen_event({"type": "speech_started", "audio_start_ms": 0}, 0)
    [prep] = of(s.listen_event({"type": "turn_likely_over", "text": "weather?"}, 1),
                PrepareReply)
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 900}, 2)
    cmds = s.listen_event({"type": "final", "text": "weather?", "audio_start_ms": 0,
                           "audio_end_ms": 900}, 3)
    st = of(cmds, StartResponse)[0]
    assert (prep.tools, prep.tool_choice) == (st.tools, st.tool_choice)
    assert prep.tools and prep.tool_choice == "required"


def test_a_choice_is_kept_as_set_and_checked_when_a_response_starts():
    s = _tools_session(choice={"type": "function", "name": "get_time"})
    upd = one(s.client_event({"type": "session.update", "session": {"tools": [WEATHER]}}, 1),
              "session.updated")["session"]
    assert upd["tool_choice"] == {"type": "function", "name": "get_time"}
    # the response: an error that names the choice, and an answer under auto
    cmds = s.client_event({"type": "response.create", "event_id": "ev_r1"}, 2)
    assert types(cmds)[:2] == ["error", "response.created"]
    e = _err(cmds)
    assert (e["code"], e["param"], e["event_id"]) == \
        ("invalid_tool_choice", "session.tool_choice.name", "ev_r1"), e
    st = of(cmds, StartResponse)[0]
    assert [t["function"]["name"] for t in st.tools] == ["get_weather"]
    assert st.tool_choice == "auto"
    s.response_finished(st.response_id, "completed", None, 3)
    # the tool it names arrives: it applies, with no error
    s.client_event({"type": "session.update", "session": {"tools": [WEATHER, TIME]}}, 4)
    cmds = s.client_event({"type": "response.create"}, 5)
    assert "error" not in types(cmds)
    st = of(cmds, StartResponse)[0]
    assert st.tool_choice == {"type": "function", "function": {"name": "get_time"}}
    s.response_finished(st.response_id, "completed", None, 6)
    # required with no tools left: an error, and a reply without tools
    upd = one(s.client_event({"type": "session.update", "session": {
        "tools": None, "tool_choice": "required"}}, 7), "session.updated")["session"]
    assert upd["tools"] == [] and upd["tool_choice"] == "required"
    cmds = s.client_event({"type": "response.create"}, 8)
    assert _err(cmds)["param"] == "session.tool_choice"
    st = of(cmds, StartResponse)[0]
    assert st.tools is None and st.tool_choice is None


def test_a_choice_set_before_its_tools_as_livekit_and_pipecat_send_it():
    """LiveKit Agents' first update names the function and has no tools (they
    come next); Pipecat's says required before any tool.  Neither is an
    error, and the rest of the update (audio format, turn detection) holds."""
    for choice in ({"type": "function", "name": "get_weather"}, "required"):
        s = new_session()
        cmds = s.client_event({"type": "session.update", "session": {
            "type": "realtime", "tool_choice": choice, "audio": {"input": {
                "format": {"type": "audio/pcmu"},
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 450}}}}}, 0)
        assert types(cmds) == ["session.updated"], types(cmds)
        upd = one(cmds, "session.updated")["session"]
        assert upd["tool_choice"] == choice
        assert upd["audio"]["input"]["format"] == {"type": "audio/pcmu"}
        assert upd["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 450
        s.client_event({"type": "session.update", "session": {"tools": [WEATHER]}}, 1)
        cmds = s.client_event({"type": "response.create"}, 2)
        assert "error" not in types(cmds)
        st = of(cmds, StartResponse)[0]
        assert [t["function"]["name"] for t in st.tools] == ["get_weather"]
        assert st.tool_choice == ("required" if choice == "required" else
                                  {"type": "function", "function": {"name": "get_weather"}})


BAD_TOOLS = [
    ([{"type": "function", "name": "bad name!"}], "invalid_tool", "session.tools[0].name"),
    ([{"type": "function"}], "invalid_tool", "session.tools[0].name"),
    ([{"type": "function", "name": "x" * 65}], "invalid_tool", "session.tools[0].name"),
    ([WEATHER, dict(WEATHER)], "invalid_tool", "session.tools[1].name"),
    ([{"type": "mcp", "server_label": "x"}], "unsupported_tool_type", "session.tools[0].type"),
    ([{"type": "function", "name": "f", "parameters": {"type": "string"}}],
     "invalid_tool_parameters", "session.tools[0].parameters"),
    ([{"type": "function", "name": "f", "parameters": "object"}],
     "invalid_tool_parameters", "session.tools[0].parameters"),
    ([{"type": "function", "name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "nonsense"}}}}],
     "invalid_tool_parameters", "session.tools[0].parameters"),
    ([{"type": "function", "name": "f", "parameters": {"type": "object", "required": "a"}}],
     "invalid_tool_parameters", "session.tools[0].parameters"),
    ([{"type": "function", "name": "f", "description": 3}], "invalid_type",
     "session.tools[0].description"),
    (["get_weather"], "invalid_type", "session.tools[0]"),
    ({"type": "function", "name": "f"}, "invalid_type", "session.tools"),
]


@pytest.mark.parametrize("tools,code,param", BAD_TOOLS)
def test_a_malformed_tool_is_an_error_and_changes_nothing(tools, code, param):
    s = _tools_session(tools=[TIME])
    before = s.settings
    e = _err(s.client_event({"type": "session.update", "event_id": "ev1",
                             "session": {"tools": tools}}, 1))
    assert (e["code"], e["param"], e["event_id"]) == (code, param, "ev1"), e
    assert s.settings == before
    # the session goes on, and the same bad tools as a response override are refused too
    e = _err(s.client_event({"type": "response.create", "response": {"tools": tools}}, 2))
    assert e["code"] == code and e["param"] == param.replace("session.", "response.")
    assert s.active_response_id is None
    assert of(spoken_turn(s, "still there?"), StartResponse)


def test_tools_limits():
    from voice_server.session import ServerLimits
    s = Session("sess_lim", limits=ServerLimits(max_tools=2, max_tools_chars=400))
    events(s.start(0))
    e = _err(s.client_event({"type": "session.update", "session": {
        "tools": [dict(WEATHER, name=f"f{i}") for i in range(3)]}}, 1))
    assert e["code"] == "invalid_tool" and "at most 2" in e["message"]
    e = _err(s.client_event({"type": "session.update", "session": {
        "tools": [dict(WEATHER, description="x" * 500)]}}, 2))
    assert e["code"] == "invalid_tool" and "400" in e["message"]
    deep: dict = {"type": "object"}
    for _ in range(3000):
        deep = {"type": "object", "properties": {"a": deep}}
    s2 = new_session()
    e = _err(s2.client_event({"type": "session.update", "session": {
        "tools": [{"type": "function", "name": "f", "parameters": deep}]}}, 1))
    assert e["code"] in ("invalid_tool", "invalid_tool_parameters")


@pytest.mark.parametrize("choice,param", [
    ({"type": "function"}, "session.tool_choice.name"),
    ({"type": "function", "name": "no spaces"}, "session.tool_choice.name"),
    ("sometimes", "session.tool_choice"),
    ({"type": "mcp", "server_label": "x"}, "session.tool_choice"),
    (3, "session.tool_choice"),
])
def test_a_bad_tool_choice_is_an_error(choice, param):
    s = _tools_session()
    e = _err(s.client_event({"type": "session.update", "session": {"tool_choice": choice}}, 1))
    assert (e["code"], e["param"]) == ("invalid_tool_choice", param), e
    assert s.settings.tool_choice == "auto"
    e = _err(s.client_event({"type": "response.create", "response": {"tool_choice": choice}}, 2))
    assert (e["code"], e["param"]) == ("invalid_tool_choice", param.replace("session.",
                                                                            "response."))
    assert s.active_response_id is None


def test_a_response_choice_must_fit_its_tools_at_once():
    s = _tools_session()
    e = _err(s.client_event({"type": "response.create", "response": {
        "tool_choice": {"type": "function", "name": "book_flight"}}}, 1))
    assert (e["code"], e["param"]) == ("invalid_tool_choice", "response.tool_choice.name")
    e = _err(s.client_event({"type": "response.create", "response": {
        "tools": [], "tool_choice": "required"}}, 2))
    assert (e["code"], e["param"]) == ("invalid_tool_choice", "response.tool_choice")
    assert s.active_response_id is None


# ------------------------------------------------------------- calls come out
def test_a_call_in_a_text_response():
    s = _tools_session()
    rid = _text_response(s)
    cmds = _call(s, rid, pieces=3)
    ts = types(cmds)
    n = ts.count("response.function_call_arguments.delta")
    assert n >= 3 and ts == ["response.output_item.added", "conversation.item.added"] + \
        ["response.function_call_arguments.delta"] * n + [
            "response.function_call_arguments.done", "response.output_item.done",
            "conversation.item.done"]
    added = one(cmds, "response.output_item.added")
    assert added["output_index"] == 0 and added["response_id"] == rid
    assert added["item"] == {"id": added["item"]["id"], "object": "realtime.item",
                             "type": "function_call", "status": "in_progress",
                             "call_id": "call_abc", "name": "get_weather", "arguments": ""}
    item_id = added["item"]["id"]
    deltas = [e for e in events(cmds) if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(d["delta"] for d in deltas) == ARGS
    assert all((d["item_id"], d["call_id"], d["output_index"], d["response_id"])
               == (item_id, "call_abc", 0, rid) for d in deltas)
    done = one(cmds, "response.function_call_arguments.done")
    assert (done["arguments"], done["name"], done["call_id"], done["item_id"]) == \
        (ARGS, "get_weather", "call_abc", item_id)
    item_done = one(cmds, "response.output_item.done")["item"]
    assert item_done["status"] == "completed" and item_done["arguments"] == ARGS
    cmds = s.response_finished(rid, "completed", None, 20)
    assert types(cmds) == ["response.done"]
    resp = one(cmds, "response.done")["response"]
    assert resp["status"] == "completed" and resp["output"] == [item_done]


def test_a_call_only_audio_response_has_no_audio():
    s = _tools_session()
    rid = of(spoken_turn(s, "weather in paris?"), StartResponse)[0].response_id
    cmds = _call(s, rid)
    cmds += s.response_finished(rid, "completed", None, 30)
    ts = types(cmds)
    assert not [t for t in ts if "audio" in t or "content_part" in t], ts
    assert ts[-1] == "response.done"
    [out] = one(cmds, "response.done")["response"]["output"]
    assert out["type"] == "function_call" and out["status"] == "completed"


def test_speech_before_a_call_comes_first_and_keeps_playing():
    s = _tools_session()
    rid = of(spoken_turn(s, "weather in paris?"), StartResponse)[0].response_id
    # the thinker's words, then its call, arrive before the speaker's audio of the words
    assert s.response_chunk(rid, "think", "Let me check.", 5) == []
    cmds = s.response_chunk(rid, "think", ["", tool_call_delta_event(0, "", "call_1",
                                                                     "get_weather")], 6)
    added = [e for e in events(cmds) if e["type"] == "response.output_item.added"]
    assert [(a["output_index"], a["item"]["type"]) for a in added] == \
        [(0, "message"), (1, "function_call")]
    cmds += s.response_chunk(rid, "think", [tool_call_done_event(0, "call_1", "get_weather",
                                                                 ARGS)], 7)
    cmds += s.response_chunk(rid, "speak", speak("Let me check.", 400), 8)
    ev = events(cmds)
    audio = [e for e in ev if e["type"] == "response.output_audio.delta"]
    assert audio and all(e["output_index"] == 0 for e in audio)
    tr = one(cmds, "response.output_audio_transcript.delta")
    assert tr["output_index"] == 0 and tr["delta"] == "Let me check."
    assert one(cmds, "response.function_call_arguments.done")["output_index"] == 1
    cmds = s.response_finished(rid, "completed", None, 9)
    resp = one(cmds, "response.done")["response"]
    assert [o["type"] for o in resp["output"]] == ["message", "function_call"]
    assert resp["output"][0]["content"][0]["transcript"] == "Let me check."
    assert resp["output"][0]["status"] == "completed"
    # the conversation keeps that order too
    assert [it.type for it in s.conversation.items[-2:]] == ["message", "function_call"]


def test_several_calls_in_one_response_and_the_history_after_them():
    s = _tools_session()
    rid = _text_response(s)
    cmds = s.response_chunk(rid, "think", "Checking both.", 1)
    # interleaved deltas of two calls in one chunk
    cmds += s.response_chunk(rid, "think", [
        tool_call_delta_event(0, '{"city": ', "call_w", "get_weather"),
        tool_call_delta_event(1, '{"zone": "CET"}', "call_t", "get_time"),
        tool_call_delta_event(0, '"Paris"}'),
        tool_call_done_event(1, "call_t", "get_time", '{"zone": "CET"}'),
        tool_call_done_event(0, "call_w", "get_weather", ARGS)], 2)
    added = [e for e in events(cmds) if e["type"] == "response.output_item.added"]
    assert [(a["output_index"], a["item"]["type"], a["item"].get("call_id")) for a in added] \
        == [(0, "message", None), (1, "function_call", "call_w"), (2, "function_call", "call_t")]
    dones = [e for e in events(cmds) if e["type"] == "response.function_call_arguments.done"]
    assert [(d["call_id"], d["output_index"], d["arguments"]) for d in dones] == \
        [("call_t", 2, '{"zone": "CET"}'), ("call_w", 1, ARGS)]
    resp = one(s.response_finished(rid, "completed", None, 3), "response.done")["response"]
    assert [o["type"] for o in resp["output"]] == ["message", "function_call", "function_call"]
    # the client answers both (in any order) and asks for the next response
    events(_output(s, "call_t", "14:05", 4))
    events(_output(s, "call_w", "sunny, 17 C", 5))
    cmds = s.client_event({"type": "response.create"}, 6)
    st = of(cmds, StartResponse)[0]
    assert st.messages[-4:] == [
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"id": "call_w", "type": "function",
             "function": {"name": "get_weather", "arguments": ARGS}},
            {"id": "call_t", "type": "function",
             "function": {"name": "get_time", "arguments": '{"zone": "CET"}'}}]},
        {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 17 C"},
        {"role": "tool", "tool_call_id": "call_t", "content": "14:05"}]


def test_full_round_trip_events_and_history():
    s = _tools_session(choice={"type": "function", "name": "get_weather"})
    rid = of(spoken_turn(s, "what is the weather in paris"), StartResponse)[0].response_id
    events(_call(s, rid))
    events(s.response_finished(rid, "completed", None, 20))
    cmds = _output(s, "call_abc", '{"temperature_c": 17, "sky": "sunny"}', now=30)
    assert types(cmds) == ["conversation.item.added", "conversation.item.done"]
    item = one(cmds, "conversation.item.done")["item"]
    assert item["type"] == "function_call_output" and item["call_id"] == "call_abc"
    assert item["output"] == '{"temperature_c": 17, "sky": "sunny"}'
    # no response by itself: the client asks for one
    cmds = s.client_event({"type": "response.create"}, 31)
    st = of(cmds, StartResponse)[0]
    assert st.messages == [
        {"role": "user", "content": "what is the weather in paris"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_abc", "type": "function",
             "function": {"name": "get_weather", "arguments": ARGS}}]},
        {"role": "tool", "tool_call_id": "call_abc",
         "content": '{"temperature_c": 17, "sky": "sunny"}'}]
    cmds = s.response_chunk(st.response_id, "speak", speak("It is sunny and 17 degrees."), 32)
    cmds += s.response_finished(st.response_id, "completed", None, 33)
    resp = one(cmds, "response.done")["response"]
    assert resp["output"][0]["content"][0]["transcript"] == "It is sunny and 17 degrees."
    # retrieve works on both kinds of items
    call_item = s.conversation.function_call("call_abc")
    got = one(s.client_event({"type": "conversation.item.retrieve", "item_id": call_item.id},
                             40), "conversation.item.retrieved")["item"]
    assert got["type"] == "function_call" and got["arguments"] == ARGS


def test_beta_clients_get_created_for_call_items():
    s = Session("sess_beta", dialect="beta")
    s.start(0)
    s.client_event({"type": "session.update", "session": {"tools": [WEATHER]}}, 0)
    cmds = s.client_event({"type": "response.create", "response": {"modalities": ["text"]}}, 1)
    rid = of(cmds, StartResponse)[0].response_id
    cmds = _call(s, rid)
    ts = [c.event["type"] for c in cmds]
    assert "conversation.item.created" in ts and "conversation.item.added" not in ts
    assert "response.function_call_arguments.done" in ts


def test_done_without_deltas_and_deltas_short_of_the_whole():
    s = _tools_session()
    rid = _text_response(s)
    cmds = s.response_chunk(rid, "think", [tool_call_done_event(0, "call_x", "get_time", "{}")],
                            1)
    assert types(cmds) == ["response.output_item.added", "conversation.item.added",
                           "response.function_call_arguments.delta",
                           "response.function_call_arguments.done",
                           "response.output_item.done", "conversation.item.done"]
    cmds = s.response_chunk(rid, "think", [tool_call_delta_event(1, '{"ci', "call_y",
                                                                 "get_weather")], 2)
    cmds += s.response_chunk(rid, "think", [tool_call_done_event(1, "call_y", "get_weather",
                                                                 ARGS)], 3)
    deltas = [e["delta"] for e in events(cmds)
              if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(deltas) == ARGS
    # a second done for the same call changes nothing
    assert s.response_chunk(rid, "think", [tool_call_done_event(1, "call_y", "get_weather",
                                                                "{}")], 4) == []
    assert s.conversation.function_call("call_y").arguments == ARGS


def test_a_thinker_call_id_that_is_missing_or_taken_gets_a_fresh_one():
    s = _tools_session()
    rid = _text_response(s)
    events(_call(s, rid, 0, "call_1"))
    cmds = _call(s, rid, 1, "call_1")            # the thinker reused the id
    cmds += s.response_chunk(rid, "think", [{"type": "tool_call_delta", "index": 2,
                                             "arguments": "{}", "name": "get_time"}], 5)
    ids = [e["item"]["call_id"] for e in events(cmds) if e["type"] == "response.output_item.added"]
    assert len(ids) == 2 and ids[0] != "call_1" and ids[1] and len(set(ids)) == 2


# ------------------------------------------------------------ cancel mid-call
@pytest.mark.parametrize("how", ["barge_in", "response.cancel", "runtime_cancelled", "failed"])
def test_a_call_cut_off_mid_arguments(how):
    s = _tools_session()
    rid = of(spoken_turn(s, "weather in paris?"), StartResponse)[0].response_id
    events(s.response_chunk(rid, "think", [tool_call_delta_event(0, '{"city": "Pa', "call_c",
                                                                 "get_weather")], 5))
    if how == "barge_in":
        cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 3000}, 6)
        assert of(cmds, CancelResponse)[0].reason == "turn_detected"
    elif how == "response.cancel":
        cmds = s.client_event({"type": "response.cancel"}, 6)
        assert of(cmds, CancelResponse)[0].response_id == rid
    elif how == "runtime_cancelled":
        cmds = s.response_finished(rid, "cancelled", None, 6)
    else:
        cmds = s.response_finished(rid, "failed", {"code": "internal", "message": "x"}, 6)
    ts = types(cmds)
    # nothing closes the call but response.done: a client must not run it
    assert not [t for t in ts if t.startswith(("response.function_call_arguments",
                                               "response.output_item", "conversation.item"))], ts
    resp = one(cmds, "response.done")["response"]
    assert resp["status"] == ("failed" if how == "failed" else "cancelled")
    [item] = resp["output"]
    assert item["type"] == "function_call" and item["status"] == "incomplete"
    assert item["arguments"] == '{"city": "Pa'
    # late pieces of the call are dropped, and the call takes no output
    assert s.response_chunk(rid, "think", [tool_call_done_event(0, "call_c", "get_weather",
                                                                ARGS)], 7) == []
    e = _err(_output(s, "call_c", "17 C", now=8))
    assert (e["code"], e["param"]) == ("function_call_incomplete", "item.call_id")
    # the cut-off call is not in the history; the session goes on
    st = of(s.client_event({"type": "response.create"}, 9), StartResponse)[0]
    assert not any("tool_calls" in m or m["role"] == "tool" for m in st.messages)


# ------------------------------------------------------------ bad outputs
def test_output_errors_unknown_in_progress_duplicate():
    s = _tools_session()
    e = _err(_output(s, "call_nope", event_id="ev9"))
    assert (e["code"], e["param"], e["event_id"]) == ("function_call_not_found", "item.call_id",
                                                      "ev9")
    rid = _text_response(s)
    events(s.response_chunk(rid, "think", [tool_call_delta_event(0, "{", "call_p",
                                                                 "get_time")], 1))
    e = _err(_output(s, "call_p"))
    assert e["code"] == "function_call_in_progress"
    events(s.response_chunk(rid, "think", [tool_call_done_event(0, "call_p", "get_time",
                                                                "{}")], 2))
    # the call is complete: its output is accepted while the response still runs
    assert types(_output(s, "call_p", "12:00")) == ["conversation.item.added",
                                                    "conversation.item.done"]
    e = _err(_output(s, "call_p", "13:00"))
    assert e["code"] == "function_call_output_duplicate"
    # the call item of the response in progress cannot be deleted
    call = s.conversation.function_call("call_p")
    e = _err(s.client_event({"type": "conversation.item.delete", "item_id": call.id}, 3))
    assert e["param"] == "item_id"
    events(s.response_finished(rid, "completed", None, 4))
    assert types(s.client_event({"type": "conversation.item.delete", "item_id": call.id}, 5)) \
        == ["conversation.item.deleted"]
    # once the call is gone its output is not sent to the thinker either
    st = of(s.client_event({"type": "response.create"}, 6), StartResponse)[0]
    assert not any(m["role"] == "tool" for m in st.messages)


@pytest.mark.parametrize("item,code,param", [
    ({"type": "function_call_output", "output": "x"}, "missing_required_parameter",
     "item.call_id"),
    ({"type": "function_call_output", "call_id": "c"}, "missing_required_parameter",
     "item.output"),
    ({"type": "function_call_output", "call_id": "c", "output": 5}, "invalid_type",
     "item.output"),
    ({"type": "function_call", "call_id": "c"}, "missing_required_parameter", "item.name"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}},
     "invalid_type", "item.arguments"),
    ({"type": "function_call", "call_id": "", "name": "f"}, "invalid_value", "item.call_id"),
    ({"type": "function_call_output", "call_id": "c", "output": "x" * 100_001},
     "string_above_max_length", "item.output"),
])
def test_malformed_function_items(item, code, param):
    s = _tools_session()
    e = _err(s.client_event({"type": "conversation.item.create", "item": item}, 1))
    assert (e["code"], e["param"]) == (code, param), e
    assert len(s.conversation) == 0


def test_client_created_calls_are_accepted_and_answered():
    s = _tools_session()
    cmds = s.client_event({"type": "conversation.item.create", "item": {
        "id": "item_mine", "type": "function_call", "call_id": "call_client",
        "name": "get_time", "arguments": "{}"}}, 1)
    added = one(cmds, "conversation.item.added")["item"]
    assert added["id"] == "item_mine" and added["status"] == "completed"
    e = _err(s.client_event({"type": "conversation.item.create", "item": {
        "type": "function_call", "call_id": "call_client", "name": "get_time"}}, 2))
    assert (e["code"], e["param"]) == ("invalid_value", "item.call_id")
    events(_output(s, "call_client", "09:30", 3))
    st = of(s.client_event({"type": "response.create"}, 4), StartResponse)[0]
    assert st.messages == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_client", "type": "function",
             "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_client", "content": "09:30"}]


def test_out_of_band_response_input_takes_calls_and_outputs():
    s = _tools_session()
    cmds = s.client_event({"type": "response.create", "response": {
        "conversation": "none", "output_modalities": ["text"], "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                             "text": "time?"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "10:00"}]}}, 1)
    st = of(cmds, StartResponse)[0]
    assert [m["role"] for m in st.messages] == ["user", "assistant", "tool"]
    # a call out of the conversation is not in it, so it takes no output there
    events(_call(s, st.response_id, call_id="call_oob"))
    e = _err(_output(s, "call_oob"))
    assert e["code"] == "function_call_not_found"


# --------------------------------------------------------------- history
def _msg(item_id, role, text):
    kind = "output_text" if role == "assistant" else "input_text"
    return Item(item_id, role, [Content(kind, text=text)])


def test_chat_messages_put_each_result_after_its_call():
    items = [_msg("1", "user", "weather and time?"),
             function_call_item("2", "c1", "get_weather", ARGS),
             _msg("3", "user", "hurry"),           # the user spoke before the output came
             function_call_output_item("4", "c1", "sunny"),
             function_call_item("5", "c2", "get_time", "{}"),       # never answered
             function_call_item("6", "c3", "get_time", "{}", status="incomplete"),
             function_call_output_item("7", "c9", "orphan")]
    assert chat_messages(items) == [
        {"role": "user", "content": "weather and time?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": ARGS}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "hurry"}]


def test_think_chunks_mix_text_and_calls():
    s = _tools_session()
    rid = _text_response(s)
    chunk = ["It is ", tool_call_delta_event(0, "{}", "call_m", "get_time"), "now."]
    assert think_events(chunk) == chunk
    cmds = s.response_chunk(rid, "think", chunk, 1)
    ts = types(cmds)
    assert ts.count("response.output_text.delta") == 2
    assert "response.function_call_arguments.delta" in ts
    # junk in a chunk is skipped
    assert s.response_chunk(rid, "think", [{"type": "other"}, {"type": "tool_call_delta"}], 2) \
        == []
    resp = one(s.response_finished(rid, "completed", None, 3), "response.done")["response"]
    # the call never got its done: it ends incomplete even in a completed response
    assert resp["output"][0]["content"][0]["text"] == "It is now."
    assert resp["output"][1]["status"] == "incomplete"
    json.dumps(resp)
