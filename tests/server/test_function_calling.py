"""Function calling end to end on the real CPU pipeline (configs/voice-cpu-fast.yaml,
the embedded llama.cpp thinker): a tool round trip over the WebSocket, over
the WebRTC data channel and with the official openai SDK; a call cancelled
while its arguments stream; every bad input.

The first response names the function (``tool_choice``), so the thinker's
grammar makes it call every time; the answer after the output is asked with
``tool_choice: "none"`` so that it speaks.  One server for the module, loopback
only (ICE host 127.0.0.1, no STUN), as in test_webrtc.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from voice_server.testing.audio import flite_pcm
from voice_server.testing.greedy_config import greedy_config
from voice_server.testing.realtime_client import RTClient
from voice_server.testing.rtc_client import RTCClient

from .conftest import API_KEY, loopback_server, unpaced_ws
from voice_server.testing.response_status import answered

pytestmark = pytest.mark.timeout(180)

WEATHER = {"type": "function", "name": "get_weather",
           "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
# many required fields: its arguments take long enough to cancel in the middle
FORM = {"type": "function", "name": "file_report",
        "description": "File a detailed incident report.",
        "parameters": {"type": "object", "required": [f"field_{i}" for i in range(8)],
                       "properties": {f"field_{i}": {"type": "string"} for i in range(8)}}}
# The small default model (SmolLM2-135M) passes a short result on reliably
# with this instruction (5 in 5 tries, against 3 in 5 for a JSON result with a
# looser one): the test checks the protocol, not the model's judgement.
INSTRUCTIONS = "You are a voice assistant. Repeat the tool result to the user."
FACT = "sunny"
OUTPUT = "Sunny, 23 degrees."
NAMED = {"type": "function", "name": "get_weather"}
RATE = 16000


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    srv = loopback_server(max_output_tokens=40, config=greedy_config(tmp_path_factory.mktemp("cfg")))
    with unpaced_ws(srv):
        yield srv
    srv.stop()


def user_text(text: str) -> dict:
    return {"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


def tool_setup(choice="auto", tools=(WEATHER,)) -> dict:
    return {"type": "session.update", "session": {
        "type": "realtime", "instructions": INSTRUCTIONS, "tools": list(tools),
        "tool_choice": choice}}


def output_item(call_id: str, output: str = OUTPUT, event_id: str | None = None) -> dict:
    ev = {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": call_id, "output": output}}
    if event_id:
        ev["event_id"] = event_id
    return ev


def check_call_response(evs: list[dict], done: dict, name: str = "get_weather") -> dict:
    """The events of a response that made one call and said nothing: the
    call's item, checked as the GA API defines it."""
    resp = done["response"]
    assert answered(resp), resp
    [call] = [o for o in resp["output"] if o["type"] == "function_call"]
    assert call["name"] == name and call["status"] == "completed"
    args = json.loads(call["arguments"])        # valid JSON, by the grammar
    assert isinstance(args, dict)
    rid = resp["id"]
    mine = [e for e in evs if e.get("response_id") == rid]
    types = [e["type"] for e in mine]
    added = next(e for e in mine if e["type"] == "response.output_item.added"
                 and e["item"]["type"] == "function_call")
    assert added["item"]["call_id"] == call["call_id"] and added["item"]["status"] == "in_progress"
    deltas = [e for e in mine if e["type"] == "response.function_call_arguments.delta"]
    assert deltas and "".join(d["delta"] for d in deltas) == call["arguments"]
    assert all(d["call_id"] == call["call_id"] and d["item_id"] == call["id"] for d in deltas)
    [args_done] = [e for e in mine if e["type"] == "response.function_call_arguments.done"]
    assert (args_done["name"], args_done["arguments"], args_done["call_id"]) == \
        (name, call["arguments"], call["call_id"])
    order = [types.index(t) for t in ("response.output_item.added",
                                      "response.function_call_arguments.delta",
                                      "response.function_call_arguments.done",
                                      "response.output_item.done")]
    assert order == sorted(order), types
    return call


async def only_listening(srv, sid: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        live = srv.runner(sid).live_requests
        snap = await srv.acall(srv.pipeline.snapshot)
        if set(live.values()) <= {"listen"} and snap["live_requests"] == len(live):
            return
        assert loop.time() < end, (live, snap["live_requests"])
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------ WebSocket
async def test_tool_round_trip_over_websocket(tool_server):
    c = await RTClient.connect(tool_server.url)
    try:
        sid = (await c.wait("session.created"))["session"]["id"]
        await c.send(tool_setup())
        upd = await c.wait("session.updated")
        assert upd["session"]["tools"] == [WEATHER]
        await c.send(user_text("What is the weather like in Paris today?"))
        await c.send({"type": "response.create", "response": {"tool_choice": NAMED}})
        done = await c.wait("response.done", timeout=60)
        call = check_call_response(c.events, done)
        assert "paris" in json.loads(call["arguments"])["city"].lower()
        rid = done["response"]["id"]
        # a call-only reply has no audio
        assert not [e for e in c.events if e.get("response_id") == rid
                    and e["type"].startswith("response.output_audio")]
        n = len(c.events)
        await c.send(output_item(call["call_id"]))
        item = await c.wait("conversation.item.done", start=n)
        assert item["item"]["type"] == "function_call_output"
        await c.send({"type": "response.create", "response": {"tool_choice": "none"}})
        done2 = await c.wait("response.done", timeout=60, start=n)
        assert answered(done2["response"]), done2
        [msg] = done2["response"]["output"]
        spoken = msg["content"][0]["transcript"]
        assert FACT in spoken.lower(), spoken
        assert c.of_type("response.output_audio.delta", n)
        assert not c.of_type("error"), c.of_type("error")
        # what the thinker was given: the call, then its result
        started = next(s for s in list(tool_server.runner(sid).started_responses)
                       if s["response_id"] == done2["response"]["id"])
        msgs = started["messages"]
        i = next(k for k, m in enumerate(msgs) if m.get("tool_calls"))
        assert msgs[i]["tool_calls"][0]["id"] == call["call_id"]
        assert msgs[i + 1] == {"role": "tool", "tool_call_id": call["call_id"],
                               "content": OUTPUT}
        assert started["tool_choice"] == "none"
    finally:
        await c.close()


async def test_cancel_while_arguments_stream(tool_server):
    """response.cancel as soon as the first argument delta arrives: no
    ``.done`` for the arguments, the item ends incomplete, its output is
    refused, the thinker's request is gone and the session goes on.  The
    cancel races the thinker, so a call that finished first is tried again."""
    c = await RTClient.connect(tool_server.url)
    try:
        sid = (await c.wait("session.created"))["session"]["id"]
        await c.send(tool_setup(tools=(WEATHER, FORM)))
        await c.wait("session.updated")
        cut = None
        for attempt in range(4):
            n = len(c.events)
            await c.send(user_text("Please file a report about the broken elevator."))
            await c.send({"type": "response.create", "response": {
                "tool_choice": {"type": "function", "name": "file_report"},
                "max_output_tokens": 400}})
            first = await c.wait("response.function_call_arguments.delta", timeout=60, start=n)
            await c.send({"type": "response.cancel"})
            done = await c.wait("response.done", timeout=30, start=n)
            if done["response"]["status"] == "cancelled":
                cut = (first, done, n)
                break
            assert answered(done["response"])   # the call won the race
        assert cut is not None, "the arguments were done before every cancel"
        first, done, n = cut
        assert done["response"]["status_details"]["reason"] == "client_cancelled"
        assert not [e for e in c.events[n:] if e["type"] == "response.function_call_arguments.done"
                    and e["item_id"] == first["item_id"]]
        assert not [e for e in c.events[n:] if e["type"] == "response.output_item.done"
                    and e["item"]["id"] == first["item_id"]]
        [out] = [o for o in done["response"]["output"] if o["id"] == first["item_id"]]
        assert out["status"] == "incomplete"
        # the distributed abort freed the thinker: the session's listen stream is
        # all the pipeline still holds for it
        await only_listening(tool_server, sid)
        # no output for a cut-off call
        m = len(c.events)
        await c.send(output_item(first["call_id"], event_id="out-cut"))
        err = await c.wait("error", start=m)
        assert err["error"]["code"] == "function_call_incomplete"
        assert err["error"]["event_id"] == "out-cut"
        # the session goes on
        await c.send(user_text("Say hello."))
        await c.send({"type": "response.create", "response": {
            "output_modalities": ["text"], "tool_choice": "none"}})
        done = await c.wait("response.done", timeout=60, start=m)
        assert answered(done["response"])
    finally:
        await c.close()


BAD = [
    ({"type": "session.update", "session": {"tools": [{"type": "function", "name": "no spaces"}]}},
     "invalid_tool", "session.tools[0].name"),
    ({"type": "session.update", "session": {"tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object",
                                                         "properties": {"a": {"type": 7}}}}]}},
     "invalid_tool_parameters", "session.tools[0].parameters"),
    ({"type": "session.update", "session": {"tools": [{"type": "mcp", "server_label": "x"}]}},
     "unsupported_tool_type", "session.tools[0].type"),
    # a session's choice of a function not (yet) among its tools is checked when a
    # response starts; one that cannot name any function is refused at once
    ({"type": "session.update", "session": {"tool_choice": {"type": "function",
                                                            "name": "book flight"}}},
     "invalid_tool_choice", "session.tool_choice.name"),
    ({"type": "response.create", "response": {"tool_choice": {"type": "function",
                                                              "name": "book_flight"}}},
     "invalid_tool_choice", "response.tool_choice.name"),
    (output_item("call_unknown"), "function_call_not_found", "item.call_id"),
    ({"type": "conversation.item.create", "item": {"type": "function_call_output",
                                                   "output": "x"}},
     "missing_required_parameter", "item.call_id"),
]


async def test_bad_tool_inputs_are_errors_and_the_session_survives(tool_server):
    c = await RTClient.connect(tool_server.url)
    try:
        await c.wait("session.created")
        await c.send(tool_setup())
        await c.wait("session.updated")
        for i, (ev, code, param) in enumerate(BAD):
            n = len(c.events)
            await c.send({**ev, "event_id": f"bad-{i}"})
            err = await c.wait("error", start=n)
            assert (err["error"]["code"], err["error"]["param"], err["error"]["event_id"]) == \
                (code, param, f"bad-{i}"), err
        # a duplicate output, on a call the client made itself
        n = len(c.events)
        await c.send({"type": "conversation.item.create", "item": {
            "type": "function_call", "call_id": "call_mine", "name": "get_weather",
            "arguments": '{"city": "Oslo"}'}})
        await c.send(output_item("call_mine", "rain"))
        await c.send(output_item("call_mine", "snow", event_id="dup"))
        err = await c.wait("error", start=n)
        assert (err["error"]["code"], err["error"]["event_id"]) == \
            ("function_call_output_duplicate", "dup")
        # nothing bad changed the session's tools, and it still answers
        n = len(c.events)
        await c.send({"type": "session.update", "session": {}})
        upd = await c.wait("session.updated", start=n)
        assert upd["session"]["tools"] == [WEATHER] and upd["session"]["tool_choice"] == "auto"
        await c.send(user_text("Say hello."))
        await c.send({"type": "response.create", "response": {
            "output_modalities": ["text"], "tool_choice": "none"}})
        done = await c.wait("response.done", timeout=60, start=n)
        assert answered(done["response"])
        assert c.closed is None
    finally:
        await c.close()


# --------------------------------------------------------------------- WebRTC
async def test_tool_round_trip_over_webrtc(tool_server):
    """Spoken question on the mic track, the call on ``oai-events``, the
    answer spoken on the remote track."""
    c = await RTCClient.connect(tool_server.base, API_KEY)
    try:
        await asyncio.wait_for(c.open.wait(), 10)
        await c.wait("session.created", 5)
        c.send(tool_setup(NAMED))
        await c.wait("session.updated", 5)
        c.mic.say(flite_pcm("what is the weather in paris", RATE), RATE)
        done = await c.wait("response.done", 60)
        call = check_call_response(c.events, done)
        n = len(c.events)
        c.send(output_item(call["call_id"]))
        c.send({"type": "response.create", "response": {"tool_choice": "none"}})
        done2 = await c.wait(lambda e: e["type"] == "response.done", 60, start=n)
        assert answered(done2["response"]), done2
        [msg] = done2["response"]["output"]
        assert FACT in msg["content"][0]["transcript"].lower(), msg
        started = await c.wait(lambda e: e["type"] == "output_audio_buffer.started"
                               and e["response_id"] == done2["response"]["id"], 10, start=n)
        stopped = await c.wait(lambda e: e["type"] == "output_audio_buffer.stopped"
                               and e["response_id"] == done2["response"]["id"], 30, start=n)
        assert c.audible(started["_t"] - 0.2, stopped["_t"] + 0.5)   # spoken on the track
        # an output for a call that does not exist, on the data channel
        m = len(c.events)
        c.send(output_item("call_ghost", event_id="ghost"))
        err = await c.wait("error", 5, start=m)
        assert (err["error"]["code"], err["error"]["event_id"]) == \
            ("function_call_not_found", "ghost")
        assert c.pc.connectionState == "connected"
    finally:
        await c.close()


# ----------------------------------------------------------------- openai SDK
async def test_openai_sdk_completes_a_tool_turn(tool_server):
    from openai import AsyncOpenAI
    from openai.types.realtime import ResponseFunctionCallArgumentsDoneEvent

    client = AsyncOpenAI(api_key=API_KEY, base_url=f"{tool_server.base}/v1")
    async with client.realtime.connect(model="voice-agent") as conn:
        async def until(pred, timeout=60.0):
            async def read():
                async for ev in conn:
                    if ev.type == "error":
                        raise AssertionError(f"error event: {ev}")
                    if pred(ev):
                        return ev
            return await asyncio.wait_for(read(), timeout)

        await until(lambda e: e.type == "session.created")
        await conn.session.update(session={
            "type": "realtime", "instructions": INSTRUCTIONS, "output_modalities": ["text"],
            "tools": [WEATHER], "tool_choice": "auto"})
        await until(lambda e: e.type == "session.updated")
        await conn.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]})
        await conn.response.create(response={"tool_choice": NAMED})
        args = await until(lambda e: e.type == "response.function_call_arguments.done")
        assert isinstance(args, ResponseFunctionCallArgumentsDoneEvent)
        assert args.name == "get_weather" and isinstance(json.loads(args.arguments), dict)
        done = await until(lambda e: e.type == "response.done")
        assert answered(done.response)
        assert [o.type for o in done.response.output] == ["function_call"]
        assert done.response.output[0].call_id == args.call_id
        await conn.conversation.item.create(item={
            "type": "function_call_output", "call_id": args.call_id, "output": OUTPUT})
        await conn.response.create(response={"tool_choice": "none"})
        done = await until(lambda e: e.type == "response.done")
        assert answered(done.response)
        text = done.response.output[0].content[0].text
        assert FACT in text.lower(), text
