"""The runner tells the listen stage whether the caller hears a reply
(``agent_speaking``), on the first chunk after it changed, so that the stage
spends early readings only where they change something (asr_thread.py,
stream.py).  A unit test of voice_server.listening against a stand-in
pipeline that records what is sent; the stage's side is
tests/models/listen/test_peek_policy.py and the params path
tests/runtime/test_background_chunks.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np

from runtime.models.voice_contract import AGENT_SPEAKING, LINE_RATE
from voice_server.listening import Listening
from voice_server.session import ConfigureListen, FeedListen


class RecordingHandle:
    request_id = 7

    def __init__(self) -> None:
        self.sent: list[dict | None] = []
        self.done = asyncio.Event()

    async def send(self, pcm, params=None) -> None:
        self.sent.append(params)

    async def end_input(self) -> None:
        self.done.set()

    def __aiter__(self):
        return self

    async def __anext__(self):
        await self.done.wait()
        raise StopAsyncIteration


class RecordingPipeline:
    def __init__(self) -> None:
        self.handle = RecordingHandle()
        self.submitted: list[dict] = []

    async def submit(self, payload, **kw):
        self.submitted.append(kw["params"])
        return self.handle


async def test_agent_speaking_rides_on_the_first_chunk_after_it_changed():
    session = SimpleNamespace(agent_speaking=False, input_ms=0.0, input_rate=None)
    pipeline = RecordingPipeline()
    host = SimpleNamespace(session=session, pipeline=pipeline, live={}, closed=False,
                           opt=SimpleNamespace(listen_deadline_s=60),
                           spawn=lambda coro, name: asyncio.ensure_future(coro))
    listening = Listening(host)
    writer = asyncio.ensure_future(listening.write())
    pcm = np.zeros(320, np.int16)

    async def feed(speaking: bool) -> None:
        session.agent_speaking = speaking
        n = len(pipeline.handle.sent)
        listening.feed(FeedListen(pcm))
        while len(pipeline.handle.sent) == n:
            await asyncio.sleep(0.001)

    try:
        listening.configure(ConfigureListen({"threshold": 0.5}))
        for speaking in (False, False, True, True, False, False):
            await feed(speaking)
        assert pipeline.submitted[0][AGENT_SPEAKING] is False
        assert pipeline.handle.sent == [None, None, {AGENT_SPEAKING: True}, None,
                                        {AGENT_SPEAKING: False}, None]
        # the caller's line rate rides the same way, once known (voice_contract.LINE_RATE)
        session.input_rate = 8000
        await feed(False)
        await feed(False)
        assert pipeline.handle.sent[-2:] == [{LINE_RATE: 8000}, None]
    finally:
        listening.stop()
        await asyncio.wait_for(pipeline.handle.done.wait(), 5)
        writer.cancel()
