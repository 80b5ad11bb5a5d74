"""Tools validation, tool messages in chat parsing and fitting, the embedded call
format's stream parser and grammar (units; no model)."""

from __future__ import annotations

import json

import pytest

from runtime.errors import ErrorCode, StageError
from runtime.models.think.chat import fit_messages, message_chars, parse_messages
from runtime.models.think.tool_call_format import CallStream, call_grammar, call_text, plain_messages
from runtime.models.think.tools import FUNCTION, REQUIRED, parse_tools, tools_of
from runtime.models.voice_contract import (think_chunk, tool_call_delta_event, tool_call_done_event,
                                           validate_think_chunk, validate_tools)


def fn(name, parameters=None, description="d"):
    f = {"name": name, "description": description}
    if parameters is not None:
        f["parameters"] = parameters
    return {"type": "function", "function": f}


OBJ = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_good_tools_are_normalised():
    t = parse_tools([fn("get_weather", OBJ), fn("ping")], "required")
    assert [x.name for x in t.tools] == ["get_weather", "ping"]
    assert t.tools[1].parameters == {"type": "object", "properties": {}}
    assert t.choice.mode == REQUIRED and t.active
    named = parse_tools([fn("get_weather", OBJ), fn("ping")], {"type": "function", "function": {"name": "ping"}})
    assert named.choice.mode == FUNCTION and [x.name for x in named.callable_tools()] == ["ping"]
    assert named.choice.spec() == {"type": "function", "function": {"name": "ping"}}
    assert parse_tools([fn("a")]).choice.mode == "auto"
    assert not parse_tools([fn("a")], "none").active and parse_tools([fn("a")], "none").callable_tools() == ()
    assert not tools_of("a bare transcript").active
    # the flat Realtime shape is read the same way
    flat = parse_tools([{"type": "function", "name": "f", "parameters": OBJ}], {"type": "function", "name": "f"})
    assert flat.tools[0].parameters == OBJ and flat.choice.name == "f"


@pytest.mark.parametrize("tools, choice, says", [
    ("nope", None, "must be a list"),
    ([fn("has space")], None, "must match"),
    ([fn("x" * 65)], None, "must match"),
    ([fn("a"), fn("a")], None, "unique"),
    ([fn("a", {"type": "object", "properties": {"x": {"type": "strin"}}})], None, "not a valid JSON Schema"),
    ([fn("a", {"type": "array"})], None, "must describe an object"),
    ([fn("a", [1])], None, "must be a JSON Schema object"),
    ([{"type": "retrieval"}], None, "only type 'function'"),
    ([fn("a")], "sometimes", "must be one of"),
    ([fn("a")], {"type": "function", "function": {"name": "b"}}, "not among the tools"),
    ([fn("a")], {"type": "function"}, "needs function.name"),
    ([], "required", "offers no tools"),
    (None, "auto", "offers no tools"),
])
def test_bad_tools_are_bad_input(tools, choice, says):
    with pytest.raises(StageError) as e:
        parse_tools(tools, choice)
    assert e.value.code == ErrorCode.BAD_INPUT and says in str(e.value)
    with pytest.raises(ValueError, match=says):
        validate_tools(tools, choice)


CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "snow"}'}


def test_tool_messages_parse_and_keep_their_keys():
    msgs = parse_messages({"messages": [{"role": "user", "content": "weather?"}, CALL, RESULT]})
    assert msgs[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert msgs[2] == {"role": "tool", "content": '{"sky": "snow"}', "tool_call_id": "call_1"}
    assert message_chars(msgs) == len("weather?") + len('{"city": "Oslo"}') + len("get_weather") + len(RESULT["content"])


@pytest.mark.parametrize("messages, says", [
    ([{"role": "tool", "tool_call_id": "call_1", "content": "x"}], "answers no earlier"),
    ([CALL, {"role": "tool", "content": "x"}], "needs 'tool_call_id'"),
    ([{"role": "assistant", "content": "", "tool_calls": "f()"}], "must be a list"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}],
     "needs a string 'id'"),
])
def test_bad_tool_messages_are_bad_input(messages, says):
    with pytest.raises(StageError) as e:
        parse_messages({"messages": messages})
    assert e.value.code == ErrorCode.BAD_INPUT and says in str(e.value)


def test_fitting_keeps_a_call_with_its_result():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u" * 50}, CALL, RESULT,
            {"role": "user", "content": "last"}]
    # room for the system prompt, the call unit and the last turn, not the first user turn
    budget = message_chars(msgs) - 50
    fitted = fit_messages(msgs, message_chars, budget)
    assert fitted.truncated and [m["role"] for m in fitted.messages] == ["system", "assistant", "tool", "user"]
    # a tight budget: the call goes together with its result, never one without the other
    fitted = fit_messages(msgs, message_chars, message_chars(msgs[-1:]) + 1)
    assert [m["role"] for m in fitted.messages] == ["system", "user"]
    assert fitted.messages[0]["content"] == "s"


def test_an_anchored_cut_never_moves_back_as_the_call_grows_or_its_head_moves():
    from runtime.models.think.chat import _anchor

    sys_ = [{"role": "system", "content": "s" * 10}]
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i:02d} " + "x" * 22}
             for i in range(40)]

    def first(fitted):  # the index of the first turn the prompt keeps
        return turns.index(fitted.messages[1])

    cuts = []
    for n in range(12, 40):     # the call grows a turn at a time
        for head in (0, 3):     # sent whole, or from a later first item
            f = fit_messages(sys_ + turns[head:n], message_chars, 250, anchored=True)
            assert f.truncated and message_chars(f.messages) <= 250
            assert _anchor(f.messages[1]) or first(f) == n - 8   # an anchor, or the least cut
            cuts.append(first(f))
        assert cuts[-1] == cuts[-2]     # the same place whichever head it was sent with
    assert cuts == sorted(cuts)         # never back
    assert len(set(cuts)) < len(cuts) // 2   # and not with every turn
    # plain (no anchors): the least cut, which moves with every turn
    assert [turns.index(fit_messages(sys_ + turns[:n], message_chars, 250).messages[1])
            for n in (20, 21)] == [12, 13]


def test_call_stream_emits_name_then_argument_pieces_then_done_at_the_last_brace():
    text = call_text("get_weather", '{"city": "a}\\"b", "n": [1, {"x": 2}]}')
    cs = CallStream()
    events = []
    for i in range(0, len(text), 3):  # pieces that cut the frame anywhere
        events += cs.feed(text[i:i + 3])
        if any(e["type"] == "tool_call_done" for e in events):
            rest = text[i + 3:]
            break
    assert rest == "" or set(rest) <= set("}</tool_call>")  # done before the frame closes
    first, done = events[0], events[-1]
    assert first["name"] == "get_weather" and first["arguments"] == "" and first["call_id"].startswith("call_")
    assert done["type"] == "tool_call_done" and json.loads(done["arguments"])["city"] == 'a}"b'
    assert "".join(e["arguments"] for e in events[:-1]) == done["arguments"]
    assert not cs.open_call


def test_grammar_builds_for_every_tool_and_the_call_count():
    tools = parse_tools([fn("a", OBJ), fn("b")]).tools
    one = call_grammar(tools, 1)
    three = call_grammar(tools, 3)
    assert "root ::= call\n" in one + "\n" and three.count('"\\n" call') == 2
    assert "args-0" in one and "args-1" in one


def test_plain_messages_fold_results_into_the_question_and_list_tools_only_when_callable():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"}, CALL, RESULT]
    out = plain_messages(msgs, parse_tools([fn("get_weather", OBJ)], "none"))
    assert [m["role"] for m in out] == ["system", "user"] and out[0]["content"] == "Be brief."
    assert out[1]["content"].startswith("Weather in Oslo?") and "sky: snow" in out[1]["content"]
    out = plain_messages(msgs[:2], parse_tools([fn("get_weather", OBJ)], "auto"))
    assert "get_weather" in out[0]["content"] and "<tool_call>" in out[0]["content"]


def test_think_chunk_joins_text_and_keeps_events():
    ev = {"type": "tool_call_done", "index": 0, "call_id": "c", "name": "f", "arguments": "{}"}
    assert think_chunk(["a", "b", ""]) == "ab"
    assert think_chunk(["a", ev, "b", "c"]) == ["a", ev, "bc"]
    assert think_chunk([]) is None


def test_think_chunk_validator():
    good = ["hi", tool_call_delta_event(0, "", "call_1", "f"), tool_call_delta_event(0, '{"a"'),
            tool_call_done_event(0, "call_1", "f", '{"a": 1}')]
    assert validate_think_chunk(good) is good and validate_think_chunk("text") == "text"
    for bad in ([], None, [{"type": "tool_call_done", "index": 0}],
                [{"type": "tool_call_delta", "index": 0, "arguments": "", "extra": 1}],
                [{"type": "tool_call_delta", "index": "0", "arguments": ""}],
                [{"type": "tool_call_delta", "index": 0, "arguments": "", "call_id": "c"}],
                [{"type": "nope"}]):
        with pytest.raises(ValueError):
            validate_think_chunk(bad)
