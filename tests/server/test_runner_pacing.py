"""The runner's pacer hears of every output the session holds, also when the
session released none of it (unit test of SessionRunner with a stand-in
pipeline beside it: its speak chunks come at once, as a fast TTS makes them).

A clause that arrives just after the listener's lead filled up is held and
gives no command; the pacer slept with nothing due, so before the fix the
clause, the reply's end and its response.done never came (seen as a reply
that stopped after its first clause, 1 time in 3 on a fresh server)."""

from __future__ import annotations

import asyncio

import numpy as np

from runtime.models.voice_contract import speak_chunk
from runtime.request_lifecycle import OutputEvent
from voice_server.runner import SessionRunner
from voice_server.session import Session, SessionSettings

RATE = 24000
LEAD_MS = 300.0


def tone(ms: float) -> np.ndarray:
    t = np.arange(int(RATE * ms / 1000)) / RATE
    return (5000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


class _Handle:
    def __init__(self, rid: int, events: list) -> None:
        self.request_id = rid
        self.q: asyncio.Queue = asyncio.Queue()
        for ev in events:
            self.q.put_nowait(ev)

    def __aiter__(self):
        return self

    async def __anext__(self):
        return await self.q.get()


class _Pipeline:
    """Listen requests that never say anything; every think request is answered
    by two clauses at once: the first fills the lead exactly (280 ms: seven
    40 ms slices, all released at once), the second then has to wait."""

    def __init__(self) -> None:
        self.rid = 0

    async def submit(self, payload=None, entry=None, **kw):
        self.rid += 1
        if entry != "think":
            return _Handle(self.rid, [])
        return _Handle(self.rid, [
            OutputEvent("chunk", self.rid, stage="speak", payload=speak_chunk(tone(280), RATE, "Hello!")),
            OutputEvent("chunk", self.rid, stage="speak",
                        payload=speak_chunk(tone(500), RATE, "How are you?")),
            OutputEvent("done", self.rid)])

    def abort(self, rid: int, reason: str = "", **kw):
        return None


async def test_a_clause_held_while_the_lead_is_full_still_plays_and_the_reply_ends():
    sent: list[dict] = []

    async def send(ev: dict) -> None:
        sent.append(ev)

    runner = SessionRunner(Session("sess_pace", SessionSettings(), output_lead_ms=LEAD_MS),
                           _Pipeline(), send)
    await runner.start()
    try:
        runner.client_event({"type": "response.create"})
        for _ in range(300):    # 3 s: the reply is 0.78 s of audio
            if any(e["type"] == "response.done" for e in sent):
                break
            await asyncio.sleep(0.01)
        done = [e for e in sent if e["type"] == "response.done"]
        assert done and done[0]["response"]["status"] == "completed", [e["type"] for e in sent]
        said = [e["delta"] for e in sent if e["type"] == "response.output_audio_transcript.delta"]
        assert "".join(said) == "Hello! How are you?"
    finally:
        await runner.close()
