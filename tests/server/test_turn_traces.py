"""Turn traces (voice_server.traces) on the real CPU pipeline, exported to an
in-memory exporter: one trace per turn with the named spans in order, and an
aborted reply's trace with the abort and each stage process's ack.  With tracing
off the OpenTelemetry SDK is never imported."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from voice_server.session_registry import registry_for
from voice_server.settings import ServerSettings
from voice_server.testing import ServerThread
from voice_server.traces.settings import TraceSettings
from voice_server.traces.turn_traces import (ABORT, ACK, ASR, DECISION, SEND, SPAN_ORDER, SPEAK,
                                             THINK, TURN, VAD, Tracing)
from voice_server.testing.realtime_client import RTClient

from .conftest import API_KEY, ROOT
from .test_realtime_ws import session_id, talking, text_turn

pytestmark = pytest.mark.timeout(180)

QUESTION = "what is the capital of france"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of this module's own whose replies may run long: the barge-in
    must land while the reply is still being generated, or there is nothing
    left in the pipeline to abort (the shared server cuts replies at 24 tokens,
    the think stage's own budget at 64)."""
    import yaml
    cfg = yaml.safe_load((ROOT / "configs" / "voice-cpu-fast.yaml").read_text())
    for stage in cfg["stages"]:
        if stage["name"] == "think":
            stage["args"]["max_tokens"] = 400
    path = tmp_path_factory.mktemp("traces") / "long-replies.yaml"
    path.write_text(yaml.safe_dump(cfg))
    settings = ServerSettings(api_keys=[API_KEY], max_sessions=8, max_output_tokens=400)
    srv = ServerThread(str(path), settings).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def exporter(server):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exp = InMemorySpanExporter()
    reg = registry_for(server.pipeline)
    reg.traces = Tracing(TraceSettings(), exporter=exp)   # as build_app does with an endpoint
    yield exp
    reg.traces = None


async def trace_of(exporter, response_id: str, timeout: float = 5.0) -> list:
    """The spans of the one trace whose root is this response's turn."""
    deadline = time.monotonic() + timeout
    while True:
        spans = exporter.get_finished_spans()
        roots = [s for s in spans if s.name == TURN and s.attributes["response.id"] == response_id]
        if roots:
            assert len(roots) == 1, roots
            tid = roots[0].context.trace_id
            return [s for s in spans if s.context.trace_id == tid]
        assert time.monotonic() < deadline, f"no trace for {response_id}"
        await asyncio.sleep(0.1)


async def long_replies(server, instructions: str) -> RTClient:
    """A session whose replies run long (up to 300 tokens): one to cut."""
    c = await RTClient.connect(server.url)
    await session_id(c)
    await c.send({"type": "session.update", "session": {
        "type": "realtime", "max_output_tokens": 300, "instructions": instructions}})
    return c


def check_order(spans: list, names: list[str]) -> None:
    by_name = {s.name: s for s in spans}
    assert set(names) <= set(by_name), sorted(by_name)
    starts = [by_name[n].start_time for n in SPAN_ORDER if n in names]
    assert starts == sorted(starts), [(n, by_name[n].start_time) for n in names]


async def test_one_trace_per_turn_with_the_named_spans_in_order(server, exporter):
    c = await RTClient.connect(server.url)
    try:
        sid = await session_id(c)
        async with talking(c, QUESTION):
            done = await c.wait("response.done", timeout=30)
        text = await text_turn(c, "Say yes.", modalities=("audio",))
    finally:
        await c.close()
    rid = done["response"]["id"]
    spans = await trace_of(exporter, rid)
    [root] = [s for s in spans if s.name == TURN]
    assert root.parent is None and root.attributes["session.id"] == sid
    assert root.attributes["turn.trigger"] == "speech"
    for s in spans:
        assert (s.attributes["session.id"], s.attributes["response.id"]) == (sid, rid), s.name
        assert s.start_time >= root.start_time and s.end_time <= root.end_time, s.name
        if s is not root:
            assert s.parent.span_id == root.context.span_id, s.name
    check_order(spans, [VAD, ASR, DECISION, THINK, SPEAK, SEND])
    think = next(s for s in spans if s.name == THINK)
    assert think.attributes["ttft_ms"] > 0
    assert think.attributes["tokens.output"] == done["response"]["usage"]["output_tokens"]
    assert ABORT not in {s.name for s in spans}
    # the client's text turn is a trace of its own: no speech spans
    other = await trace_of(exporter, text["response"]["id"])
    assert other[0].context.trace_id != root.context.trace_id
    assert {s.name for s in other} >= {TURN, THINK, SPEAK, SEND}
    assert not {VAD, ASR, DECISION} & {s.name for s in other}


async def test_an_aborted_reply_trace_shows_the_abort_and_the_acks(server, exporter):
    # Cancelled at its first audio, while the think stage still decodes it: a
    # spoken barge-in is decided from the caller's words about a second later,
    # when a short reply can be wholly generated, with nothing left to abort.
    c = await long_replies(server, "You count aloud when asked, every number, never stopping early.")
    try:
        async with talking(c, "please count from one to two hundred"):
            first = await c.wait("response.output_audio.delta", timeout=30)
            await c.send({"type": "response.cancel"})
            done = await c.wait("response.done", lambda e: e["response"]["id"] ==
                                first["response_id"], timeout=30)
        assert done["response"]["status"] == "cancelled", done
        spans = await trace_of(exporter, first["response_id"])
    finally:
        await c.close()
    aborts = [s for s in spans if s.name == ABORT]
    assert aborts, f"no abort in the trace: {[s.name for s in spans]}"
    abort = aborts[0]
    assert abort.attributes["reason"] == done["response"]["status_details"]["reason"]
    acks = [s for s in spans if s.name == ACK]
    assert acks and all(s.parent.span_id == abort.context.span_id for s in acks)
    processes = {s.attributes["process"] for s in acks}
    assert {p.split("/")[0] for p in processes} >= {"think"}, processes
    assert all(s.start_time == abort.start_time and s.end_time <= abort.end_time for s in acks)
    check_order(spans, [THINK, SEND, ABORT])


def test_tracing_off_imports_no_opentelemetry():
    code = ("import sys, voice_server.app, voice_server.runner, voice_server.cli\n"
            "from voice_server.settings import ServerSettings\n"
            "assert not ServerSettings.from_sources({}, env={}).traces.enabled\n"
            "bad = [m for m in sys.modules if m.startswith('opentelemetry')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


async def test_a_spoken_barge_in_trace_shows_the_cut(server, exporter):
    """The caller talks over a reply: the turn's trace ends in the abort that
    stopped it, with the reason the client saw.  A short reply has often left
    the pipeline whole by the time the caller's words decide (only its paced
    audio is left to cut): then the abort says no request was live and no
    stage acks; otherwise each stage's ack hangs under it."""
    c = await long_replies(server, "You tell long, detailed stories of many sentences.")
    try:
        async with talking(c, "tell me a long story about a dragon"):
            first = await c.wait("response.output_audio.delta", timeout=30)
        async with talking(c, "wait, stop, I have another question for you", lead_ms=0):
            done = await c.wait("response.done", lambda e: e["response"]["id"] ==
                                first["response_id"], timeout=30)
        assert done["response"]["status"] == "cancelled", done
        assert done["response"]["status_details"]["reason"] == "turn_detected", done
        spans = await trace_of(exporter, first["response_id"])
    finally:
        await c.close()
    [abort] = [s for s in spans if s.name == ABORT]
    assert abort.attributes["reason"] == "turn_detected"
    acks = [s for s in spans if s.name == ACK]
    assert all(s.parent.span_id == abort.context.span_id for s in acks)
    if not abort.attributes["request.live"]:
        assert not acks and not abort.attributes["acks.pending"]
    check_order(spans, [VAD, ASR, DECISION, THINK, SEND, ABORT])
