"""Never speak markup, on the fast profile's brain (Qwen2.5-Coder-0.5B, the voice-cpu-fast
profile's think args and sampling, a fixed seed): the requests where it wrote a
tool call as text to be spoken (issue 43: ``Markup: "tools": [ "function":
"send_message", ...``) come out as prose without markup, and the one the issue
names as the call it meant.  The recovery itself is unit-tested beside it
(test_markup_guard.py)."""

from __future__ import annotations

import json

import pytest

from runtime.models.model_files import QWEN_05B

from tests.models.think.profile_thinker import MARKUP, TOOLS, profile_thinker
from tests.models.think.test_thinker_llama_tools import _calls, _run


@pytest.fixture(scope="module")
def qwen():
    t = profile_thinker("voice-cpu-fast.yaml", QWEN_05B, n_ctx=4096, n_threads=2)
    yield t
    t.close()


def test_the_issue_request_is_the_call_it_meant_not_spoken_markup(qwen):
    text, events = _run(qwen, 1, [{"role": "user", "content": "Text my brother Sam that I'll be late."}],
                        tools=TOOLS)
    assert not MARKUP.search(text), text
    [call] = _calls(events)
    assert call["name"] == "send_message" and "sam" in json.loads(call["arguments"])["contact"].lower()


@pytest.mark.parametrize("request_", ["Text Anna that I'm running late.", "Message Ben: see you at noon.",
                                      "Tell Maria by text that dinner is ready."])
def test_requests_it_wrote_as_json_speak_no_markup(qwen, request_):
    text, _ = _run(qwen, 2, [{"role": "user", "content": request_}], tools=TOOLS)
    assert not MARKUP.search(text), text


def test_the_guard_acted(qwen):
    """The requests above reproduce it: without the guard they spoke markup."""
    stats = qwen.stats()
    assert stats["markup_retries"] + stats["markup_calls"] + stats["markup_dropped"] >= 1
