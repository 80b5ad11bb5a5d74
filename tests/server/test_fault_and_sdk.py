"""Mid-stream failure (fault server) and the official openai SDK client."""

from __future__ import annotations

import asyncio
import base64
import contextlib

import numpy as np
import pytest

from voice_server.testing.audio import flite_pcm, silence, frames
from voice_server.testing.realtime_client import RTClient
from .conftest import API_KEY
from voice_server.testing.response_status import answered

pytestmark = pytest.mark.timeout(120)


async def test_failure_after_first_delta_is_in_band(fault_server):
    c = await RTClient.connect(fault_server.url)
    try:
        await c.wait("session.created")

        async def turn():
            n = len(c.events)
            await c.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "hi"}]}})
            await c.send({"type": "response.create", "event_id": "go"})
            return n, await c.wait("response.done", timeout=30, start=n)

        n, done = await turn()  # the speak double fails its 1st request mid-stream
        r = done["response"]
        assert r["status"] == "failed", r
        assert r["status_details"]["type"] == "failed"
        assert r["status_details"]["error"]["code"] == "resource_exhausted"
        rid = r["id"]
        deltas = [e for e in c.events[n:] if e["type"] == "response.output_audio.delta"]
        assert deltas, "the failure must come after audio was sent"
        err = next(e for e in c.events[n:] if e["type"] == "error")
        assert err["error"]["type"] == "server_error"
        assert err["error"]["code"] == "resource_exhausted"
        assert err["error"]["event_id"] == "go"
        assert c.index(deltas[0]) < c.index(err) < c.index(done)
        assert not [e for e in c.events[c.index(done):] if e.get("response_id") == rid]
        # the next turn works
        _, done2 = await turn()
        assert answered(done2["response"]), done2
        assert c.closed is None
    finally:
        await c.close()
    snap = await fault_server.settled()
    assert snap["live_requests"] == 0


# ------------------------------------------------------------------ openai SDK

async def _drain(conn, sink: list, stop: asyncio.Event):
    async for ev in conn:
        sink.append(ev)
        if stop.is_set():
            break


async def _wait(sink: list, pred, timeout=30.0, start=0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        for i in range(start, len(sink)):
            if pred(sink[i]):
                return i, sink[i]
        await asyncio.sleep(0.02)
    raise AssertionError(f"timeout; last: {[e.type for e in sink[-12:]]}")


async def test_openai_sdk_client(server):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key=API_KEY, base_url=f"http://127.0.0.1:{server.port}/v1")
    async with client.realtime.connect(model="voice-agent") as conn:
        events: list = []
        reader = asyncio.ensure_future(_drain(conn, events, asyncio.Event()))

        async def mic(pcm):
            for ch in frames(pcm):
                await conn.input_audio_buffer.append(
                    audio=base64.b64encode(ch.tobytes()).decode())
                await asyncio.sleep(0.02)

        async def silence_forever():
            while True:
                await mic(silence(200))

        try:
            await _wait(events, lambda e: e.type == "session.created")
            await conn.session.update(session={"type": "realtime", "max_output_tokens": 24})
            # spoken turn
            await mic(np.concatenate([silence(200), flite_pcm("what is the capital of france")]))
            bg = asyncio.ensure_future(silence_forever())
            _, done = await _wait(events, lambda e: e.type == "response.done")
            assert answered(done.response)
            assert any(e.type == "response.output_audio.delta" for e in events)
            tr = next(e for e in events
                      if e.type == "conversation.item.input_audio_transcription.completed")
            assert "capital" in tr.transcript
            # text turn
            n = len(events)
            await conn.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Say hello."}]})
            await conn.response.create(response={"output_modalities": ["text"]})
            _, done = await _wait(events, lambda e: e.type == "response.done", start=n)
            assert answered(done.response)
            assert any(e.type == "response.output_text.delta" for e in events[n:])
            # cancel
            n = len(events)
            await conn.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Tell me a long story."}]})
            await conn.response.create(response={"max_output_tokens": 200})
            # Sent back to back: the server handles them in order, so the cancel
            # always meets an active response however short the reply would be.
            await conn.response.cancel()
            await _wait(events, lambda e: e.type == "response.created", start=n)
            _, done = await _wait(events, lambda e: e.type == "response.done", start=n)
            assert done.response.status == "cancelled"
            assert done.response.status_details.reason == "client_cancelled"
            # barge-in
            n = len(events)
            await conn.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Tell me a long story about a cat."}]})
            await conn.response.create(response={"max_output_tokens": 200})
            i, first = await _wait(events, lambda e: e.type == "response.output_audio.delta",
                                   start=n)
            bg.cancel()
            await mic(np.concatenate([flite_pcm("please stop now"), silence(100)]))
            bg = asyncio.ensure_future(silence_forever())
            _, done = await _wait(events, lambda e: e.type == "response.done"
                                  and e.response.id == first.response_id, start=i)
            assert done.response.status == "cancelled"
            assert done.response.status_details.reason == "turn_detected"
            j = events.index(done)
            await asyncio.sleep(0.3)
            assert not [e for e in events[j:] if e.type == "response.output_audio.delta"
                        and e.response_id == first.response_id]
        finally:
            for t in (reader,):
                t.cancel()
            with contextlib.suppress(BaseException):
                bg.cancel()
                await bg
            with contextlib.suppress(BaseException):
                await reader
