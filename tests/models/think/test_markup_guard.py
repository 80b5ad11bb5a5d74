"""MarkupGuard and GuardedReplies: prose streams, markup never leaves the thinker,
a call written as text becomes the call it means (or the thinker begins the
reply again as a call)."""

from __future__ import annotations

import json

import pytest

from runtime.executor import StepResult
from runtime.models.think.markup_call import call_in_markup, closed
from runtime.models.think.markup_guard import GuardedReplies, MarkupGuard
from runtime.models.think.tools import parse_tools
from runtime.models.voice_contract import (TOOL_CALL_DONE, think_events, think_text, usage_event,
                                           validate_think_chunk)

SEND = {"type": "function", "function": {"name": "send_message", "parameters": {
    "type": "object", "properties": {"contact": {"type": "string"}, "text": {"type": "string"}},
    "required": ["contact", "text"]}}}
TIMER = {"type": "function", "function": {"name": "set_timer", "parameters": {
    "type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1}},
    "required": ["minutes"]}}}
TOOLS = parse_tools([SEND, TIMER], "auto").tools
# issue 43: what Qwen2.5-Coder-0.5B said for "Text my brother Sam that I'll be late."
ISSUE = ('Markup: "tools": [ "function": "send_message", "parameters": '
         '{"contact": "Sam", "text": "I\'ll be late"')


def _through(text: str, size: int) -> tuple[str, str]:
    """``text`` fed ``size`` characters at a time: (what was released, the markup held)."""
    guard = MarkupGuard()
    out = "".join(guard.feed(text[i:i + size]) for i in range(0, len(text), size))
    end = guard.finish()
    return out + end.text, end.markup


SIZES = [1, 2, 3, 7, 1000]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("text", [
    "The weather in Paris is 18 degrees with light rain.",
    'She said "hello there" and left; 3 < 5 is true.',
    "Twelve times twelve is 144!",
])
def test_prose_passes_whole(text, size):
    assert _through(text, size) == (text, "")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("text, spoken", [
    (ISSUE, "Markup: "),
    ('{"name": "set_timer", "arguments": {"minutes": 5}}', ""),
    ('<tool_call>\n{"name": "set_timer", "arguments": {"minutes": 5}}\n</tool_call>', "\n\n"),
    ("Here is how:\n```python\nprint('hi')\n```\nThat prints hi.", "Here is how:\n\nThat prints hi."),
    ('Sure.\n"response": [\n  "I can\'t do that."\n]', "Sure.\n"),
    ("Use `print` for that [citation].", "Use print for that ."),
    ("Say <b>this</b> loudly.", "Say this loudly."),
])
def test_markup_is_never_released(text, spoken, size):
    out, markup = _through(text, size)
    assert out == spoken and markup.strip()
    for mark in ("{", "}", "[", "]", "`", "<", '"name"', '"function"', '"tools"'):
        assert mark not in out


def test_prose_waits_only_for_an_undecided_start():
    guard = MarkupGuard()
    assert guard.feed("It is ") == "It is "
    assert guard.feed('"warm') == ""          # may be a JSON key
    assert guard.feed(' today"') == '"warm today'   # a quote may open a key
    assert guard.feed(" <") == '" '
    assert guard.feed(" 5") == "< 5"


@pytest.mark.parametrize("markup, name, args", [
    (ISSUE, "send_message", {"contact": "Sam", "text": "I'll be late"}),
    ('{"name": "set_timer", "arguments": {"minutes": 5}}', "set_timer", {"minutes": 5}),
    ('{"function": "set_timer", "parameters": {"minutes": 5}}', "set_timer", {"minutes": 5}),
    ('{"tool": "set_timer", "args": "{\\"minutes\\": 5}"}', "set_timer", {"minutes": 5}),
    ('{"type": "function", "function": {"name": "set_timer", "arguments": {"minutes": 5}}}',
     "set_timer", {"minutes": 5}),
    ('<tool_call>{"name": "set_timer", "arguments": {"minutes": 5}}</tool_call>', "set_timer",
     {"minutes": 5}),
    ('```json\n{"set_timer": {"minutes": 5}}\n```', "set_timer", {"minutes": 5}),
    ('{"name": "set_timer", "minutes": 5}', "set_timer", {"minutes": 5}),
    ('"name": "set_timer", "arguments": {"minutes": 5', "set_timer", {"minutes": 5}),
])
def test_a_call_written_as_markup_is_read(markup, name, args):
    call = call_in_markup(markup, TOOLS)
    assert call is not None and call.name == name and json.loads(call.arguments) == args


@pytest.mark.parametrize("markup", [
    '"response": ["I can\'t do that."]',
    '{"name": "get_capital", "arguments": {"country": "Italy"}}',   # no such tool
    '{"name": "set_timer", "arguments": {"minutes": "ten"}}',       # not valid for the schema
    "```python\nprint('hi')\n```",
])
def test_markup_that_is_no_call_of_an_offered_tool_is_none(markup):
    assert call_in_markup(markup, TOOLS) is None


def test_json_cut_short_is_closed():
    assert json.loads(closed('{"a": [1, {"b": "x')) == {"a": [1, {"b": "x"}]}
    assert json.loads(closed('{"a": 1, "b":')) == {"a": 1, "b": None}
    assert json.loads(closed('{"a": 1,')) == {"a": 1}


def _reply(guards: GuardedReplies, rid: int, deltas: list, retry=None) -> list:
    events = []
    for i, delta in enumerate(deltas):
        last = i == len(deltas) - 1
        chunk = [delta, usage_event(10, 0, 5, "stop")] if last else delta
        result = guards.filter({rid: StepResult(chunk, last)}, retry=retry)[rid]
        if result.chunk is not None:
            validate_think_chunk(result.chunk)
            events += think_events(result.chunk)
        if result.finished:
            return events
    return events


def test_a_reply_of_markup_becomes_the_call_it_means():
    guards = GuardedReplies()
    guards.open(1, TOOLS)
    events = _reply(guards, 1, [ISSUE[i:i + 5] for i in range(0, len(ISSUE), 5)])
    assert think_text(events) == "Markup: "
    [done] = [e for e in events if isinstance(e, dict) and e["type"] == TOOL_CALL_DONE]
    assert done["name"] == "send_message" and json.loads(done["arguments"])["contact"] == "Sam"
    assert events[-1]["type"] == "usage"       # still the reply's last event
    assert guards.stats()["markup_calls"] == 1


def test_markup_where_no_call_is_allowed_is_dropped():
    guards = GuardedReplies()
    guards.open(1)                              # tool_choice none, or after the results
    events = _reply(guards, 1, ["Done. ", '{"name": "set_timer", ', '"arguments": {"minutes": 5}}'])
    assert think_text(events) == "Done. "
    assert not [e for e in events if isinstance(e, dict) and e["type"] != "usage"]
    assert guards.stats()["markup_dropped"] == 1


def test_a_thinker_that_can_begins_the_reply_again_as_a_call():
    guards = GuardedReplies()
    guards.open(1, TOOLS)
    asked = []

    def retry(rid):
        asked.append(rid)
        return True

    first = guards.filter({1: StepResult("Markup: ", False)}, retry=retry)[1]
    second = guards.filter({1: StepResult('"tools": [', True)}, retry=retry)[1]
    assert first.chunk == "Markup: " and asked == [1]
    assert second == StepResult(None, False)    # not finished: the call follows
    # once only: the call that follows is the thinker's own
    call = guards.filter({1: StepResult([{"type": "tool_call_delta", "index": 0, "arguments": "",
                                          "call_id": "c", "name": "set_timer"}], True)}, retry=retry)[1]
    assert call.finished and asked == [1] and guards.stats()["markup_retries"] == 1


def test_code_or_a_list_is_not_taken_for_a_call():
    guards = GuardedReplies()
    guards.open(1, TOOLS)
    events = _reply(guards, 1, ["Try this: ", "```python\nx = 1\n```", " Then run it."],
                    retry=lambda rid: pytest.fail("code is no call"))
    assert think_text(events) == "Try this:  Then run it."
