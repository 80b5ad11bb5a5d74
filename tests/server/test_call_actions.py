"""The agent's call actions on the real server and real phone-provider
WebSockets (the shared CPU server of conftest.py, a provider client written
from its documentation): the model's ``end_call`` closes the stream once the
goodbye was played (the provider's mark echoes), ``send_dtmf`` puts tones on
the line, and nothing is offered that the operator did not turn on or the
stream cannot do.

The 0.5B test model is made to call an action with ``response.create``'s
``tool_choice`` (a phone line has no event channel: the test hands the
event to the call's runner on the server loop, as a sideband client would)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from voice_server.session.call_actions import CallActionsSetting
from voice_server.testing.phone_clients import PhoneClient
from .test_phone_providers import (base_ws, phone_settings, settled_clean, wait_call,
                                   wait_no_calls)

pytestmark = pytest.mark.timeout(120)


def _spy(call) -> list[tuple[float, dict]]:
    """Every event the call's session emitted (a phone line has no channel for them)."""
    seen: list[tuple[float, dict]] = []
    orig = call.runner._send_event

    async def spy(ev):
        seen.append((time.monotonic(), ev))
        await orig(ev)
    call.runner._send_event = spy
    return seen


async def _until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


def _of(seen, type_: str) -> list[dict]:
    return [ev for _, ev in seen if ev["type"] == type_]


def _force(server, call, name: str):
    return server.acall(call.runner.client_event, {"type": "response.create", "response": {
        "tool_choice": {"type": "function", "name": name}}})


async def test_end_call_closes_the_stream_after_the_goodbye_was_played(server):
    provider = "telnyx"
    with phone_settings(server, provider, phone_call_actions=CallActionsSetting.model_validate(
            {"end_call": True})):
        c = await PhoneClient.connect(base_ws(server), provider, {
            "instructions": "Answer in one short sentence.", "max_output_tokens": "10"})
        call = await wait_call(server, provider)
    seen = _spy(call)
    try:
        await c.say("hello there")
        # the reply: its audio goes out paced, and its response.done comes with its end
        await _until(lambda: _of(seen, "response.done"), 60, "no reply")
        reply_item = next(n.split(":")[0] for n in c.marks() if n.endswith(":start"))
        await _force(server, call, "end_call")
        await asyncio.wait_for(c.ws.wait_closed(), 30)   # the server hangs up
        closed_at = time.monotonic()
        assert c.ws.close_code == 1000, c.ws.close_code
        args = [e for e in _of(seen, "response.function_call_arguments.done")
                if e["name"] == "end_call"]
        assert len(args) == 1, [e["type"] for _, e in seen]
        outputs = [json.loads(e["item"]["output"]) for e in _of(seen, "conversation.item.added")
                   if e["item"]["type"] == "function_call_output"]
        assert outputs == [{"status": "ended"}]
        # the goodbye (everything the agent said) was played before the line closed
        end_mark = next(n for n in c.marks() if n.startswith(reply_item) and n.endswith(":end"))
        assert end_mark in c.answered_at and c.answered_at[end_mark] <= closed_at
        print(f"closed {(closed_at - c.answered_at[end_mark]) * 1000:.0f} ms after the "
              "reply's end mark was played")
    finally:
        await c.close()
    await wait_no_calls(server, provider)
    await settled_clean(server)


async def test_send_dtmf_puts_the_models_digits_on_the_line(server):
    provider = "plivo"
    with phone_settings(server, provider, phone_call_actions=CallActionsSetting.model_validate(
            {"send_dtmf": {"max_digits": 4}})):
        c = await PhoneClient.connect(base_ws(server), provider, {"max_output_tokens": "8"})
        call = await wait_call(server, provider)
    seen = _spy(call)
    try:
        await asyncio.sleep(0.2)
        # what to press (else the small model may write more keys than max_digits allows)
        await server.acall(call.runner.client_event, {
            "type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Press 1 for me."}]}})
        await _force(server, call, "send_dtmf")
        _, m = await c.wait(lambda m: m.kind == "digits", timeout=40)
        done = [e for e in _of(seen, "response.function_call_arguments.done")
                if e["name"] == "send_dtmf"]
        digits = json.loads(done[0]["arguments"])["digits"]
        assert m.raw == {"event": "sendDTMF", "dtmf": digits}
        assert 1 <= len(digits) <= 4 and set(digits) <= set("0123456789*#ABCD")
        out = await _until(lambda: [e for e in _of(seen, "conversation.item.added")
                                    if e["item"]["type"] == "function_call_output"], 10,
                           "no output")
        assert json.loads(out[0]["item"]["output"]) == {"status": "sent", "digits": digits}
        # the model answers the result (a response after the output)
        await _until(lambda: len(_of(seen, "response.created")) >= 2, 20, "no answer")
    finally:
        await c.close()
    await wait_no_calls(server, provider)
    await settled_clean(server)


async def test_actions_are_offered_only_when_turned_on_and_possible(server):
    provider = "telnyx"
    # not turned on: not offered, and a forced choice of one is an error event
    c = await PhoneClient.connect(base_ws(server), provider, {"max_output_tokens": "6"})
    try:
        call = await wait_call(server, provider)
        seen = _spy(call)
        await _force(server, call, "end_call")
        err = await _until(lambda: _of(seen, "error"), 10, "no error")
        assert err[0]["error"]["code"] == "invalid_tool_choice"
        assert not _of(seen, "response.created")
    finally:
        await c.close()
    await wait_no_calls(server, provider)
    # turned on, but no provider stream can transfer: end_call and send_dtmf
    # (in-band tones on Telnyx) are offered
    every = CallActionsSetting.model_validate({
        "end_call": True, "send_dtmf": True,
        "transfer_call": {"targets": [{"uri": "tel:+15550100", "name": "desk"}]}})
    with phone_settings(server, provider, phone_call_actions=every):
        c = await PhoneClient.connect(base_ws(server), provider, {"max_output_tokens": "6"})
        call = await wait_call(server, provider)
    try:
        await c.say("hello")
        await _until(lambda: call.runner.started_responses, 40, "no response")
        tools = call.runner.started_responses[0]["tools"]
        assert sorted(t["function"]["name"] for t in tools) == ["end_call", "send_dtmf"]
    finally:
        await c.close()
    await wait_no_calls(server, provider)
    await settled_clean(server)
