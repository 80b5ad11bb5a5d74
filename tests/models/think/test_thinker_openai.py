"""OpenAICompatThinker against a real llama.cpp server started here (127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime.errors import ErrorCode, StageError
from runtime.executor import CONVERSATION, StepResult, WorkItem
from runtime.models.think.openai_thinker import OpenAICompatThinker, status_code_error
from runtime.models.think.sse import sse_events
from tests.requirements import missing
from voice_server.testing.llama_server import LlamaServer, free_port


def _ask(rid, text, **params):
    return WorkItem(rid, {"messages": [{"role": "user", "content": text}]}, params=params)


def collect_chunks(t, rid, deadline_s=60.0) -> list:
    """Step like the AR scheduler does: drain, and wait idle_wait_s when nothing came."""
    chunks, end = [], time.monotonic() + deadline_s
    while time.monotonic() < end:
        res = t.step([rid])
        if rid not in res:
            time.sleep(t.idle_wait_s)
            continue
        r = res[rid]
        if isinstance(r, Exception):
            t.release(rid)
            raise r
        assert isinstance(r, StepResult)
        if r.chunk is not None:
            chunks.append(r.chunk)
        if r.finished:
            t.release(rid)
            return chunks
    raise AssertionError("stream did not finish")


def _collect(t, rid, deadline_s=60.0) -> str:
    chunks = collect_chunks(t, rid, deadline_s)
    assert all(isinstance(c, str) for c in chunks), chunks
    return "".join(chunks)


def start_llama_server(*extra: str):
    """``python -m llama_cpp.server`` on the SmolLM2 GGUF, on a free 127.0.0.1 port:
    yields (process, base url) and stops it afterwards."""
    pytest.importorskip("llama_cpp")
    for mod in ("fastapi", "sse_starlette", "starlette_context", "pydantic_settings", "uvicorn"):
        pytest.importorskip(mod, reason="pip install 'llama-cpp-python[server]' extras")
    from runtime.models.model_files import ModelFileMissing, smollm2_gguf

    try:
        smollm2_gguf()
    except ModelFileMissing as e:
        missing(str(e))
    try:
        srv = LlamaServer(*extra).start()
    except RuntimeError as e:
        pytest.fail(str(e))
    yield srv.proc, srv.url
    srv.stop()


@pytest.fixture(scope="module")
def server():
    yield from start_llama_server()


@pytest.fixture
def thinker(server):
    _, url = server
    t = OpenAICompatThinker(base_url=url + "/v1", model="smollm2", max_tokens=16, temperature=0.25,
                            repeat_penalty=1.2, penalty_field="repeat_penalty")
    t.load()
    yield t
    t.close()


def _server_connections(proc, port) -> int:
    import psutil

    return sum(1 for c in psutil.Process(proc.pid).net_connections(kind="tcp")
               if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def test_streamed_reply_is_not_empty(thinker):
    thinker.prefill(_ask(1, "What is the capital of France?"))
    assert _collect(thinker, 1).strip()
    assert thinker.stats()["active"] == 0


def _server_goes_quiet(proc, deadline_s: float = 20.0) -> bool:
    """True once the server uses (almost) no CPU over half a second: it stopped generating."""
    import psutil

    p = psutil.Process(proc.pid)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        before = sum(p.cpu_times()[:2])
        time.sleep(0.5)
        if sum(p.cpu_times()[:2]) - before < 0.1:
            return True
    return False


def test_release_mid_stream_closes_connection(server, thinker):
    proc, url = server
    port = int(url.rsplit(":", 1)[1])
    thinker.prefill(_ask(2, "Tell me a very long story about a dragon.", max_tokens=1500))
    end = time.monotonic() + 60
    got = ""
    while not got and time.monotonic() < end:
        r = thinker.step([2]).get(2)
        if r is None:
            time.sleep(thinker.idle_wait_s)
            continue
        assert not isinstance(r, Exception), r
        assert not r.finished
        got += r.chunk or ""
    assert got
    assert _server_connections(proc, port) >= 1
    fut = thinker._streams[2].future
    thinker.release(2)  # barge-in
    end = time.monotonic() + 5
    while (not fut.done() or _server_connections(proc, port)) and time.monotonic() < end:
        time.sleep(0.02)
    assert fut.cancelled()
    assert _server_connections(proc, port) == 0
    assert _server_goes_quiet(proc), "the server kept generating after the client closed the stream"
    thinker.prefill(_ask(3, "Say hello.", max_tokens=8))
    assert _collect(thinker, 3) is not None


def test_server_not_running_is_stage_unavailable():
    t = OpenAICompatThinker(base_url=f"http://127.0.0.1:{free_port()}/v1", connect_timeout_s=2)
    t.load()
    try:
        t.prefill(_ask(4, "hi"))
        with pytest.raises(StageError) as e:
            _collect(t, 4, deadline_s=10)
        assert e.value.code == ErrorCode.STAGE_UNAVAILABLE
    finally:
        t.close()


def test_wrong_path_is_bad_input(server):
    _, url = server
    t = OpenAICompatThinker(base_url=url + "/nope")
    t.load()
    try:
        t.prefill(_ask(5, "hi"))
        with pytest.raises(StageError) as e:
            _collect(t, 5, deadline_s=10)
        assert e.value.code == ErrorCode.BAD_INPUT
    finally:
        t.close()


def test_status_mapping_and_truncation():
    assert status_code_error(429, "").code == ErrorCode.RESOURCE_EXHAUSTED
    assert status_code_error(503, "").code == ErrorCode.RESOURCE_EXHAUSTED
    assert status_code_error(400, "").code == ErrorCode.BAD_INPUT
    assert status_code_error(500, "").code == ErrorCode.INTERNAL
    t = OpenAICompatThinker(max_prompt_chars=1000)
    req = t._fit(_ask(6, "word " * 20000))
    assert t.stats()["truncated"] is True
    assert req.messages[0]["role"] == "system"
    assert sum(len(m["content"]) for m in req.messages) <= 1000


def test_a_conversations_cut_never_moves_back_when_the_server_drops_less():
    """A prefix-caching engine behind the server keeps the cut too (CutMemory)."""
    t = OpenAICompatThinker(max_prompt_chars=400)
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i:02d} " * 6}
             for i in range(12)]
    first = t._fit(WorkItem(7, {"messages": turns}, params={CONVERSATION: "call"})).messages
    kept = first[1]["content"]
    assert kept.startswith("turn 07")
    # the server then drops six turns of its own, one fewer than the thinker did:
    # the rest would fit, but turn 06 is not given back
    again = t._fit(WorkItem(8, {"messages": turns[6:]}, params={CONVERSATION: "call"})).messages
    assert again[1]["content"] == kept
    t.forget("call")
    assert len(t._cuts) == 0


def test_sse_parser_groups_multiline_events():
    async def lines():
        for ln in [": keep-alive", "data: {\"a\":", "data: 1}", "", "event: x", "data: [DONE]", ""]:
            yield ln

    async def collect():
        return [(e.event, e.data) for e in [e async for e in sse_events(lines())]]

    assert asyncio.run(collect()) == [("message", "{\"a\":\n1}"), ("x", "[DONE]")]


@pytest.mark.parametrize("event, code", [
    ('{"choices": [{"delta": {"content": "Hel"}, "finish_reason": "abort"}]}', ErrorCode.CANCELLED),
    ('{"error": {"object": "error", "message": "too long", "type": "BadRequest", "code": 400}}',
     ErrorCode.BAD_INPUT),
    ('{"error": {"message": "no KV memory", "type": "SERVICE_UNAVAILABLE", "code": 503}}',
     ErrorCode.RESOURCE_EXHAUSTED),
    ('{"error": {"message": "took too long", "code": 504}}', ErrorCode.TIMEOUT),
    ('{"error": {"message": "boom", "type": "INTERNAL_SERVER_ERROR", "code": 500}}', ErrorCode.INTERNAL),
    ('{"error": {"message": "no code at all"}}', ErrorCode.INTERNAL),
    ('{"error": "a bare string"}', ErrorCode.INTERNAL),
    ('[1, 2]', ErrorCode.INTERNAL),
])
def test_stream_event_errors_keep_the_servers_code(event, code):
    """Mid-stream error events and an abort finish (SGLang's server sends both; llama.cpp's never does)."""
    with pytest.raises(StageError) as e:
        OpenAICompatThinker._parse_chunk(event)
    assert e.value.code == code


def test_stream_events_that_are_not_errors():
    parse = OpenAICompatThinker._parse_chunk
    assert parse('{"choices": [{"delta": {"content": "Hi"}, "finish_reason": null}]}') == ("Hi", False)
    assert parse('{"choices": [{"delta": {}, "finish_reason": "stop"}]}') == (None, True)
    assert parse('{"choices": [{"delta": {}, "finish_reason": "length"}]}') == (None, True)
    assert parse('{"choices": [], "usage": {"completion_tokens": 3}}') == (None, False)


def test_body_carries_the_repeat_penalty_under_the_servers_name():
    req = OpenAICompatThinker(repeat_penalty=1.3)._fit(_ask(9, "hi"))
    assert OpenAICompatThinker(repeat_penalty=1.3)._body(req)["repetition_penalty"] == 1.3  # SGLang, vLLM
    body = OpenAICompatThinker(penalty_field="repeat_penalty")._body(req)
    assert body["repeat_penalty"] == 1.3 and "repetition_penalty" not in body  # llama.cpp
    body = OpenAICompatThinker(penalty_field=None)._body(req)
    assert "repeat_penalty" not in body and "repetition_penalty" not in body
