"""The fast profile's brain, Qwen2.5-Coder-0.5B-Instruct (Q4_0, assembled by ``make
setup``), on LlamaCppThinker: a spoken question answered right, tool calls in
its own template under auto and required (schema-valid), the round trip with a
tool's output, a call on the tenth turn of a session, a wrong call refused.

One thinker for the module, greedy, small budgets: these check the model's
dialect and the call rule, not its eloquence."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from runtime.models.model_files import QWEN_05B, thinker_gguf
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from runtime.models.think.tool_dialect import NATIVE

from tests.models.think.test_thinker_llama_tools import _calls, _run

ROOT = Path(__file__).resolve().parents[3]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIMER = {"type": "function", "function": {
    "name": "set_timer", "description": "Start a countdown timer.",
    "parameters": {"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1}},
                   "required": ["minutes"]}}}
TOOLS = [WEATHER, TIMER]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def _profile_prompt() -> str:
    data = yaml.safe_load((ROOT / "configs" / "voice-cpu-fast.yaml").read_text())
    [think] = [s for s in data["stages"] if s["name"] == "think"]
    assert think["args"]["model"] == QWEN_05B  # the fast profile is this model
    return think["args"]["system_prompt"]


@pytest.fixture(scope="module")
def qwen():
    thinker_gguf(QWEN_05B)  # a missing model fails here with how to get it, it does not skip
    t = LlamaCppThinker(model=QWEN_05B, n_threads=2, max_sequences=2, n_ctx=4096, max_tokens=24,
                        temperature=0.0, repeat_penalty=1.0, system_prompt=_profile_prompt())
    t.load()
    yield t
    t.close()


def _valid(call: dict) -> dict:
    args = json.loads(call["arguments"])
    jsonschema.validate(args, SCHEMAS[call["name"]])
    return args


def test_it_speaks_its_own_tool_dialect(qwen):
    assert qwen.dialect is NATIVE
    assert (qwen.tool_call_threshold, qwen.tool_name_threshold) == (0.005, 0.5)


def test_a_spoken_question_gets_the_right_content_word(qwen):
    text, events = _run(qwen, 1, [{"role": "user", "content": "Who wrote Romeo and Juliet?"}], tools=[])
    assert "shakespeare" in text.lower() and not events


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_tool_request_calls_with_schema_valid_arguments(qwen, choice):
    _, events = _run(qwen, 2, [{"role": "user", "content": "What's the weather like in Paris?"}],
                     tool_choice=choice, tools=TOOLS)
    [call] = _calls(events)
    assert call["name"] == "get_weather" and _valid(call)["city"].lower() == "paris"


def test_auto_answers_a_question_no_tool_does(qwen):
    text, events = _run(qwen, 3, [{"role": "user", "content": "What is twelve times twelve?"}],
                        tools=TOOLS)
    assert not _calls(events) and "144" in text
    assert "{" not in text and "<tool_call>" not in text


def test_the_reply_after_the_output_uses_the_result(qwen):
    msgs = [{"role": "user", "content": "What's the weather like in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 18, "sky": "light rain"}'}]
    text, events = _run(qwen, 4, msgs, tools=TOOLS)
    assert not _calls(events)
    assert "18" in text and "rain" in text.lower() and "{" not in text


def test_a_call_on_the_tenth_turn_of_a_session(qwen):
    chat = ["Hi there!", "What is the capital of France?", "Thanks. How many days are in a week?",
            "Tell me something about cats.", "What is seven plus eight?", "Nice. Who wrote Hamlet?",
            "What is the opposite of cold?", "How many legs does a spider have?",
            "Thanks, that helps."]
    history = []
    for i, line in enumerate(chat):
        history.append({"role": "user", "content": line})
        text, _ = _run(qwen, 10 + i, history, tools=TOOLS, tool_choice="none")
        history.append({"role": "assistant", "content": text})
    history.append({"role": "user", "content": "Set a timer for ten minutes."})
    _, events = _run(qwen, 30, history, tools=TOOLS)
    [call] = _calls(events)
    assert call["name"] == "set_timer" and _valid(call) == {"minutes": 10}
