"""LlamaCppThinker function calling on the SmolLM2 GGUF: grammar-constrained
calls, auto's measured choice, tool results in the next reply, barge-in."""

from __future__ import annotations

import json

import jsonschema
import llama_cpp  # noqa: F401 - a missing llama-cpp-python fails here, it does not skip
import pytest

from runtime.errors import ErrorCode, StageError
from runtime.executor import StepResult, WorkItem
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from runtime.models.model_files import smollm2_gguf
from runtime.models.voice_contract import (TOOL_CALL_DELTA, TOOL_CALL_DONE, think_events,
                                           validate_think_chunk)


def _fn(name, description, parameters):
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": parameters}}


SCHEMAS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "set_alarm": {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                                                   "minute": {"type": "integer"}},
                  "required": ["hour", "minute"]},
    "choose_color": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
                     "required": ["color"]},
    "ship_parcel": {"type": "object", "properties": {
        "to": {"type": "object", "properties": {"name": {"type": "string"}, "zip": {"type": "string"},
                                                "express": {"type": "boolean"}},
               "required": ["name", "zip", "express"]}}, "required": ["to"]},
    "add_to_list": {"type": "object", "properties": {
        "items": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4}},
        "required": ["items"]},
}
TOOLS = [_fn(n, f"The {n.replace('_', ' ')} tool.", s) for n, s in SCHEMAS.items()]
ORDER = _fn("get_order_status", "Look up the status of an order.",
            {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})


@pytest.fixture(scope="module")
def thinker():
    smollm2_gguf()
    t = LlamaCppThinker(n_threads=2, max_sequences=2, n_ctx=2 * 1024, max_tokens=24, seed=11)
    t.load()
    yield t
    t.close()


def _run(t, rid, messages, tools=TOOLS, tool_choice=None, limit=400, **extra):
    """All chunks of one reply, as (text, events)."""
    payload = {"messages": messages, "tools": tools, **extra}
    if tool_choice is not None:
        payload["tool_choice"] = tool_choice
    t.prefill(WorkItem(rid, payload))
    text, events = "", []
    for _ in range(limit):
        sr = t.step([rid]).get(rid)
        if sr is None:
            continue
        assert isinstance(sr, StepResult), sr
        if sr.chunk is not None:
            validate_think_chunk(sr.chunk)
        for ev in think_events(sr.chunk):
            if isinstance(ev, str):
                text += ev
            else:
                events.append(ev)
        if sr.finished:
            t.release(rid)
            return text, events
    raise AssertionError("request never finished")


def _calls(events):
    return [e for e in events if e["type"] == TOOL_CALL_DONE]


def _user(text):
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("name, ask", [
    ("get_weather", "What is the weather in Lisbon?"),
    ("set_alarm", "Wake me up at half past six."),
    ("choose_color", "I like the colour of the sky."),
    ("ship_parcel", "Send the parcel to Ada Lovelace, zip 90210, fast please."),
    ("add_to_list", "Put milk, eggs and bread on my list."),
])
def test_named_function_always_calls_it_with_schema_valid_arguments(thinker, name, ask):
    choice = {"type": "function", "function": {"name": name}}
    for seed in (1, 2):
        text, events = _run(thinker, 1, _user(ask), tool_choice=choice, seed=seed, temperature=0.8)
        calls = _calls(events)
        assert text == "" and len(calls) == 1, (text, events)
        assert calls[0]["name"] == name
        jsonschema.validate(json.loads(calls[0]["arguments"]), SCHEMAS[name])


def test_required_always_calls_a_tool_with_schema_valid_arguments(thinker):
    asks = ["Tell me a joke.", "What is two plus two?", "Remind me to buy apples and pears.",
            "Hello there!", "Ship it to Bob at 12345 by express."]
    for i, ask in enumerate(asks):
        text, events = _run(thinker, 2, _user(ask), tool_choice="required", seed=i)
        calls = _calls(events)
        assert text == "" and len(calls) == 1, (ask, text, events)
        jsonschema.validate(json.loads(calls[0]["arguments"]), SCHEMAS[calls[0]["name"]])


def test_call_streams_deltas_then_done(thinker):
    _, events = _run(thinker, 3, _user("What is the weather in Oslo?"),
                     tool_choice={"type": "function", "function": {"name": "get_weather"}})
    first, *rest = events
    assert first["type"] == TOOL_CALL_DELTA and first["name"] == "get_weather"
    assert first["call_id"].startswith("call_") and len(first["call_id"]) > 10
    assert rest[-1]["type"] == TOOL_CALL_DONE and rest[-1]["call_id"] == first["call_id"]
    deltas = [e for e in rest if e["type"] == TOOL_CALL_DELTA]
    assert len(deltas) >= 2, "arguments came in one piece, not streamed"
    assert "".join(e["arguments"] for e in deltas) == rest[-1]["arguments"]
    assert {e["index"] for e in events} == {0}


def test_none_never_calls(thinker):
    for i, ask in enumerate(["What is the weather in Paris?", "Where is my order 123?", "Set an alarm for 7."]):
        text, events = _run(thinker, 4, _user(ask), tool_choice="none", seed=i)
        assert events == [] and text.strip()


def test_auto_choice_is_the_models_first_token_probability(thinker):
    """auto calls exactly when the marker's probability reached the threshold (what the benchmark measures)."""
    before = thinker.stats()["auto_decisions"]
    for i, ask in enumerate(["Where is my order A-553?", "Tell me a joke about cats."]):
        text, events = _run(thinker, 5, _user(ask), tools=[ORDER], tool_choice="auto", seed=i)
        p = thinker.stats()["last_call_probability"]
        assert 0.0 <= p <= 1.0
        if p >= thinker.tool_call_threshold:
            assert len(_calls(events)) == 1 and text == ""
            assert json.loads(_calls(events)[0]["arguments"]).keys() == {"order_id"}
        else:
            assert events == [] and text.strip()
    assert thinker.stats()["auto_decisions"] == before + 2


def test_release_mid_arguments_frees_the_sequence(thinker):
    def active_cells():
        st = thinker.stats()
        return st["kv_cells_used"] - st["kv_cells_kept"]
    base, free = active_cells(), thinker.stats()["free_sequences"]
    thinker.prefill(WorkItem(6, {"messages": _user("Put apples, pears, plums and figs on the list."),
                                 "tools": TOOLS,
                                 "tool_choice": {"type": "function", "function": {"name": "add_to_list"}}}))
    seen: list = []
    for _ in range(200):
        sr = thinker.step([6]).get(6)
        if sr is None:
            continue
        assert not sr.finished
        seen += think_events(sr.chunk)
        if any(isinstance(e, dict) and e["type"] == TOOL_CALL_DELTA and e["arguments"] for e in seen):
            break
    assert not _calls([e for e in seen if isinstance(e, dict)])
    assert active_cells() > base
    thinker.release(6)  # barge-in while the arguments stream
    assert active_cells() == base
    assert thinker.stats()["free_sequences"] == free and thinker.stats()["active"] == 0
    text, events = _run(thinker, 7, _user("Say hello."), tools=[])
    assert text.strip() and not events
    # released before auto decided: both of its sampler chains go
    thinker.prefill(WorkItem(17, {"messages": _user("Where is order 5?"), "tools": [ORDER], "tool_choice": "auto"}))
    thinker.release(17)
    assert thinker.stats()["free_sequences"] == free and thinker.stats()["active"] == 0


def test_the_next_reply_uses_the_tool_output(thinker):
    cases = [("Where is my order A1234?", "get_order_status", '{"order_id": "A1234"}',
              '{"status": "shipped", "arrives": "Tuesday"}', "tuesday"),
             ("What's the weather like in Paris?", "get_weather", '{"city": "Paris"}',
              '{"temperature_c": 18, "sky": "sunny"}', "18"),
             ("Book me an appointment on Monday at 10am.", "book_appointment",
              '{"day": "monday", "time": "10am"}', '{"confirmation": "BK-7731"}', "bk-7731")]
    hits = []
    for ask, name, args, output, fact in cases:
        messages = _user(ask) + [
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": output}]
        text, events = _run(thinker, 8, messages, tools=TOOLS + [ORDER], tool_choice="auto", seed=0,
                            max_tokens=40)
        assert not events, "auto right after a tool result answers, it does not call again"
        hits.append(fact in text.lower())
    # SmolLM2-135M repeats the fact about two times in three (docs/TOOLS.md); one miss is the model.
    assert sum(hits) >= 2, hits


def test_parallel_calls_are_indexed_and_each_complete():
    t = LlamaCppThinker(n_threads=2, max_sequences=1, n_ctx=1024, max_tool_calls=3, seed=5)
    t.load()
    try:
        _, events = _run(t, 1, _user("What is the weather in Paris, and in Rome?"),
                         tools=TOOLS[:1], tool_choice="required")
        calls = _calls(events)
        assert 1 <= len(calls) <= 3
        assert [c["index"] for c in calls] == list(range(len(calls)))
        assert len({c["call_id"] for c in calls}) == len(calls)
        for c in calls:
            jsonschema.validate(json.loads(c["arguments"]), SCHEMAS["get_weather"])
        _, events = _run(t, 2, _user("What is the weather in Paris, and in Rome?"),
                         tools=TOOLS[:1], tool_choice="required", parallel_tool_calls=False)
        assert len(_calls(events)) == 1
    finally:
        t.close()


@pytest.mark.parametrize("payload, says", [
    ({"tools": [_fn("bad name!", "", None)]}, "must match"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among"),
    ({"tool_choice": "required"}, "offers no tools"),
    ({"tools": [_fn("x", "", {"type": "object", "properties": {"a": {"type": 5}}})]}, "not a valid JSON Schema"),
])
def test_bad_tools_are_bad_input_and_the_thinker_lives_on(thinker, payload, says):
    with pytest.raises(StageError) as e:
        thinker.prefill(WorkItem(9, {"messages": _user("hi"), **payload}))
    assert e.value.code == ErrorCode.BAD_INPUT and says in str(e.value)
    assert thinker.stats()["active"] == 0
    text, _ = _run(thinker, 10, _user("Say hi."), tools=[])
    assert text.strip()
