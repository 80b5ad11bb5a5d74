"""What the model is asked with, end to end on the real CPU pipeline
(configs/voice-cpu-fast.yaml with a greedy thinker, over the WebSocket): a
client's ``instructions`` (session and response) change what the agent says,
on top of the server's system prompt; a conversation many times longer than
the think stage's context is answered under ``truncation`` (auto and
retention_ratio), and under ``disabled`` gets a clear error and the session
goes on."""

from __future__ import annotations

import pytest

from voice_server.settings import ServerSettings
from voice_server.testing import ServerThread
from voice_server.testing.realtime_client import RTClient

from .conftest import API_KEY
from voice_server.testing.greedy_config import greedy_config
from voice_server.testing.response_status import answered

from .test_function_calling import user_text

pytestmark = pytest.mark.timeout(300)

ASK_NAME = "What is your name?"
NAMED = "You are Ada. Always introduce yourself as Ada."
FRENCH = "Always answer in French."
FRENCH_WORDS = ("je ", "bonjour", "suis", "merci", "c'est")
# the think stage's context is 1024 tokens per conversation (voice-cpu-fast.yaml):
# 40 items of ~1200 characters are ten times that
FILLER = ("The river runs past the old mill and the fields where the farmers grow "
          "wheat and barley every summer. ") * 12


@pytest.fixture(scope="module")
def greedy_server(tmp_path_factory):
    settings = ServerSettings(api_keys=[API_KEY], max_sessions=4, max_output_tokens=24)
    srv = ServerThread(str(greedy_config(tmp_path_factory.mktemp("cfg"))), settings).start()
    yield srv
    srv.stop()


async def session(srv, **config) -> RTClient:
    c = await RTClient.connect(srv.url)
    await c.wait("session.created")
    await c.send({"type": "session.update", "session": {
        "type": "realtime", "output_modalities": ["text"], "audio": {
            "input": {"turn_detection": None}}, **config}})
    await c.wait("session.updated")
    return c


async def reply(c: RTClient, text: str | None = None, timeout: float = 120,
                **response) -> dict:
    """One text response (to ``text``, a new user item, when given): its
    ``response.done``."""
    start = len(c.events)
    if text is not None:
        await c.send(user_text(text))
    await c.send({"type": "response.create", "response": response})
    return await c.wait("response.done", timeout=timeout, start=start)


def said(done: dict) -> str:
    return " ".join(part.get("text", "") for o in done["response"]["output"]
                    if o["type"] == "message" for part in o["content"])


async def test_instructions_change_what_the_agent_says(greedy_server):
    plain = await session(greedy_server)
    named = await session(greedy_server, instructions=NAMED)
    fresh = await session(greedy_server)
    try:
        without = said(await reply(plain, ASK_NAME))
        with_them = said(await reply(named, ASK_NAME))
        assert "ada" not in without.lower(), without
        assert "ada" in with_them.lower(), (without, with_them)
        # a response's own instructions (here in a session that has none)
        hello = said(await reply(plain, "Hello, how are you?"))
        french = said(await reply(fresh, "Hello, how are you?", instructions=FRENCH))
        assert not any(w in hello.lower() for w in FRENCH_WORDS), hello
        assert any(w in french.lower() for w in FRENCH_WORDS), (hello, french)
    finally:
        for c in (plain, named, fresh):
            await c.close()


async def fill(c: RTClient, n: int) -> None:
    for i in range(n):
        await c.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user" if i % 2 == 0 else "assistant",
            "content": [{"type": "input_text" if i % 2 == 0 else "output_text",
                         "text": f"Note {i}. {FILLER}"}]}})
    await c.wait("conversation.item.done", lambda e: e["item"]["content"][0]["text"]
                 .startswith(f"Note {n - 1}."), timeout=60)


@pytest.mark.parametrize("truncation", ["auto", {"type": "retention_ratio",
                                                 "retention_ratio": 0.5}])
async def test_a_conversation_longer_than_the_context_is_answered(greedy_server, truncation):
    c = await session(greedy_server, truncation=truncation)
    try:
        await fill(c, 40)
        for turn in range(3):
            done = await reply(c, f"Say the word banana. ({turn})")
            resp = done["response"]
            assert answered(resp), resp
            assert said(done).strip(), done
            # the prompt the model read fit its context
            assert 0 < resp["usage"]["input_tokens"] <= 1024, resp["usage"]
        assert not c.of_type("error"), c.of_type("error")
    finally:
        await c.close()


async def test_disabled_truncation_is_a_clear_error_and_the_session_goes_on(greedy_server):
    c = await session(greedy_server, truncation="disabled")
    try:
        await fill(c, 40)
        start = len(c.events)
        await c.send({"type": "response.create", "event_id": "ev_long"})
        err = await c.wait("error", start=start, timeout=30)
        assert err["error"]["code"] == "context_length_exceeded", err
        assert err["error"]["event_id"] == "ev_long"
        done = await c.wait("response.done", start=start, timeout=30)
        assert done["response"]["status"] == "failed"
        # the client turns truncation on: the same conversation is answered
        await c.send({"type": "session.update", "session": {"truncation": "auto"}})
        upd = await c.wait("session.updated", start=start)
        assert upd["session"]["truncation"] == "auto"
        done = await reply(c, "Say hello.")
        assert answered(done["response"]) and said(done).strip(), done
    finally:
        await c.close()
