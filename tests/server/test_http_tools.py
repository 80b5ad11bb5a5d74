"""POST /v1/chat/completions with tools on the real server (configs/voice-cpu-fast.yaml:
the embedded llama.cpp thinker), over real sockets, by hand and with the openai SDK."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from tests.server.conftest import API_KEY

ORDER_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
TOOLS = [{"type": "function", "function": {"name": "get_order_status",
                                           "description": "Look up the status of an order.",
                                           "parameters": ORDER_SCHEMA}},
         {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
NAMED = {"type": "function", "function": {"name": "get_order_status"}}
ASK = [{"role": "user", "content": "Where is my order A1234?"}]
HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def _post(server, body, **kw):
    return httpx.post(f"{server.base}/v1/chat/completions", json=body, headers=HEADERS, timeout=120, **kw)


def _sse(text):
    out = []
    for block in text.split("\n\n"):
        data = [ln[6:] for ln in block.splitlines() if ln.startswith("data: ")]
        if data:
            out.append("\n".join(data))
    return out


def test_non_streamed_named_call(server):
    r = _post(server, {"messages": ASK, "tools": TOOLS, "tool_choice": NAMED})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["content"] is None and len(msg["tool_calls"]) == 1
    call = msg["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_order_status"
    jsonschema.validate(json.loads(call["function"]["arguments"]), ORDER_SCHEMA)


def test_streamed_required_call(server):
    r = _post(server, {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "stream": True})
    assert r.status_code == 200, r.text
    events = _sse(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    pieces = [p for c in chunks for p in (c["choices"][0]["delta"].get("tool_calls") or [])]
    first, rest = pieces[0], pieces[1:]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"]["name"] in ("get_order_status", "get_weather")
    assert rest and all(set(p) == {"index", "function"} and p["index"] == 0 for p in rest)
    args = first["function"]["arguments"] + "".join(p["function"]["arguments"] for p in rest)
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == first["function"]["name"])
    jsonschema.validate(json.loads(args), schema)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_result_round_trip_answers_with_text(server):
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_order_status", "arguments": '{"order_id": "A1234"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped", "arrives": "Tuesday"}'}]
    r = _post(server, {"messages": messages, "tools": TOOLS, "max_tokens": 32, "seed": 0})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] in ("stop", "length") and "tool_calls" not in choice["message"]
    assert choice["message"]["content"].strip()


def test_none_answers_with_text(server):
    r = _post(server, {"messages": ASK, "tools": TOOLS, "tool_choice": "none", "max_tokens": 16, "stream": True})
    assert r.status_code == 200
    chunks = [json.loads(e) for e in _sse(r.text)[:-1]]
    assert not any(c["choices"][0]["delta"].get("tool_calls") for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks).strip()


@pytest.mark.parametrize("extra, param, says", [
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools", "must match"),
    ({"tools": TOOLS + TOOLS[:1]}, "tools", "unique"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "not among"),
    ({"tool_choice": "auto"}, "tool_choice", "no tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, "tools",
     "object"),
    ({"tools": "get_weather"}, "tools", "must be a list"),
])
def test_bad_tools_are_400_with_an_openai_error(server, extra, param, says):
    for stream in (False, True):
        r = _post(server, {"messages": ASK, **extra, "stream": stream})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == param and says in err["message"]


def test_bad_tool_messages_are_400(server):
    r = _post(server, {"messages": ASK + [{"role": "tool", "tool_call_id": "call_x", "content": "42"}]})
    assert r.status_code == 400 and "answers no earlier assistant tool call" in r.json()["error"]["message"]


def test_openai_sdk_chat_client_gets_tool_calls(server):
    from openai import OpenAI

    client = OpenAI(api_key=API_KEY, base_url=f"{server.base}/v1")
    done = client.chat.completions.create(model="voice-agent", messages=ASK, tools=TOOLS, tool_choice=NAMED)
    call = done.choices[0].message.tool_calls[0]
    assert done.choices[0].finish_reason == "tool_calls" and call.function.name == "get_order_status"
    jsonschema.validate(json.loads(call.function.arguments), ORDER_SCHEMA)
    stream = client.chat.completions.create(model="voice-agent", messages=ASK, tools=TOOLS, tool_choice=NAMED,
                                            stream=True)
    args, reasons = "", []
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or []:
            args += tc.function.arguments or ""
        reasons.append(chunk.choices[0].finish_reason)
    jsonschema.validate(json.loads(args), ORDER_SCHEMA)
    assert reasons[-1] == "tool_calls"


def test_a_reply_cut_by_max_tokens_finishes_length_with_the_thinkers_counts(server):
    """The thinker's own finish reason and token counts, whole and streamed: a
    3-token budget on a long answer ends ``length``, 3 completion tokens."""
    ask = [{"role": "user", "content": "Count from one to twenty in words."}]
    r = _post(server, {"messages": ask, "max_tokens": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "length"
    u = body["usage"]
    assert u["completion_tokens"] == 3 and u["prompt_tokens"] > 5
    assert u["total_tokens"] == u["prompt_tokens"] + 3
    assert 0 <= u["prompt_tokens_details"]["cached_tokens"] <= u["prompt_tokens"]
    r = _post(server, {"messages": ask, "max_tokens": 3, "stream": True,
                       "stream_options": {"include_usage": True}})
    chunks = [json.loads(d) for d in _sse(r.text) if d != "[DONE]"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 3
