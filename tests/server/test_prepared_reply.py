"""The runner adopts a reply prepared during the pause, or aborts it (unit test of
SessionRunner with a recording stand-in of the pipeline beside it: which requests
are submitted and aborted is what is checked, not the models)."""

from __future__ import annotations

import asyncio

from runtime.request_lifecycle import OutputEvent
from voice_server.runner import SessionRunner
from voice_server.session import SendEvent, Session, SessionSettings


class _Handle:
    """Two think deltas, then nothing until the test finishes or the runner aborts it."""

    def __init__(self, rid: int, chunks: list) -> None:
        self.request_id = rid
        self.q: asyncio.Queue = asyncio.Queue()
        for c in chunks:
            self.q.put_nowait(OutputEvent("chunk", rid, stage="think", payload=c))

    def end(self, kind: str) -> None:
        self.q.put_nowait(OutputEvent(kind, self.request_id))

    def __aiter__(self):
        return self

    async def __anext__(self):
        ev = await self.q.get()
        if ev is None:
            raise StopAsyncIteration
        if ev.kind != "chunk":
            self.q.put_nowait(None)
        return ev


class _RecordingPipeline:
    def __init__(self) -> None:
        self.submitted: list[dict] = []
        self.affinities: list = []
        self.aborted: list[int] = []
        self.handles: dict[int, _Handle] = {}
        self.next_rid = 100

    async def submit(self, payload=None, **kw):
        self.submitted.append(payload)
        self.affinities.append(kw.get("affinity"))
        self.next_rid += 1
        h = self.handles[self.next_rid] = _Handle(self.next_rid, ["It is ", "noon."])
        return h

    def abort(self, rid: int, reason: str = "", **kw):
        self.aborted.append(rid)
        self.handles[rid].end("cancelled")
        return None


async def _runner() -> tuple[SessionRunner, _RecordingPipeline, list]:
    sent: list = []
    p = _RecordingPipeline()

    async def send(ev):
        sent.append(ev)

    s = Session("sess_t", SessionSettings(output_modalities=["text"]))
    r = SessionRunner(s, p, send)
    r.session.start(0)
    r.session.listen_event({"type": "speech_started", "audio_start_ms": 0}, 1)
    return r, p, sent


async def test_a_prepared_reply_is_adopted_not_submitted_twice():
    r, p, sent = await _runner()
    r.dispatch(r.session.listen_event({"type": "turn_likely_over", "text": "what time is it"}, 2))
    await asyncio.sleep(0.05)
    assert len(p.submitted) == 1 and r.stats["prepared"] == 1
    assert p.affinities == ["sess_t"]     # the replica that keeps this conversation's cells
    r.dispatch(r.session.listen_event({"type": "speech_stopped", "audio_end_ms": 900}, 3))
    r.dispatch(r.session.listen_event({"type": "final", "text": "what time is it",
                                       "audio_start_ms": 0, "audio_end_ms": 900}, 4))
    await asyncio.sleep(0.05)
    p.handles[p.next_rid].end("done")
    for _ in range(100):
        if r.stats["prepared_used"] and not r.session.active_response_id:
            break
        await asyncio.sleep(0.01)
    assert len(p.submitted) == 1 and p.aborted == []          # adopted, not submitted again
    assert r.stats["prepared_used"] == 1 and r.stats["think_tokens_wasted"] == 0
    assert r.session.active_response_id is None                 # the reply completed
    deltas = [x.event["delta"] for x in r._outbox
              if isinstance(x, SendEvent) and x.type == "response.output_text.delta"]
    assert deltas == ["It is ", "noon."]                          # held deltas, replayed
    await r.close()


async def test_a_prepared_reply_is_aborted_when_the_speaker_goes_on():
    r, p, sent = await _runner()
    r.dispatch(r.session.listen_event({"type": "turn_likely_over", "text": "i would like"}, 2))
    await asyncio.sleep(0.05)
    r.dispatch(r.session.listen_event({"type": "turn_continues"}, 3))
    assert p.aborted == [p.next_rid] and r.stats["prepared_wasted"] == 1
    assert r.stats["think_tokens_wasted"] == 2
    r.dispatch(r.session.listen_event({"type": "speech_stopped", "audio_end_ms": 2000}, 4))
    r.dispatch(r.session.listen_event({"type": "final", "text": "i would like a pizza",
                                       "audio_start_ms": 0, "audio_end_ms": 2000}, 5))
    for _ in range(100):
        if len(p.submitted) == 2:
            break
        await asyncio.sleep(0.01)
    assert p.submitted[1]["messages"][-1]["content"] == "i would like a pizza"
    await r.close()
