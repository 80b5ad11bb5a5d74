"""The default brain (configs/voice-cpu.yaml: Qwen2.5-Coder-1.5B-Instruct,
Q4_K_M, fetched by ``make setup``) with the profile's own think args and a
fixed seed: the everyday questions the 0.5B got wrong in issue 43 answered
right, and the issue's text request made the call it means, with no markup
in what would be spoken.  The rest of the suite runs the fast profile (the
0.5B); this keeps the shipped default honest."""

from __future__ import annotations

import json

import pytest

from runtime.models.model_files import QWEN_15B
from voice_server.session.answering_machine import MESSAGE_NOTE

from tests.models.think.profile_thinker import MARKUP, TOOLS, profile_thinker
from tests.models.think.test_thinker_llama_tools import _calls, _run


@pytest.fixture(scope="module")
def brain():
    t = profile_thinker("voice-cpu.yaml", QWEN_15B, n_ctx=2048, max_tokens=32,
                        warm_batch=False)   # the answers do not need it; it costs ~7 s
    yield t
    t.close()


@pytest.mark.parametrize("question, word", [
    ("Which planet is closest to the sun?", "mercury"),
    ("How many legs does a spider have?", "eight"),
    ("What colour do you get when you mix blue and yellow?", "green"),
])
def test_everyday_questions_the_small_brain_got_wrong(brain, question, word):
    text, events = _run(brain, 1, [{"role": "user", "content": question}], tools=[])
    assert word in text.lower().replace("8", "eight"), text
    assert not events


def test_a_text_request_is_the_call_it_means_not_spoken_markup(brain):
    text, events = _run(brain, 2, [{"role": "user", "content": "Text my brother Sam that I'll be late."}],
                        tools=TOOLS)
    assert not MARKUP.search(text), text
    [call] = _calls(events)
    assert call["name"] == "send_message" and "sam" in json.loads(call["arguments"])["contact"].lower()


def test_an_answering_machine_gets_a_message_that_says_who_called_and_why(brain):
    """After the beep the session adds MESSAGE_NOTE under the greeting's
    transcript, and its instructions follow the stage's prompt (prompt.py):
    the message names the caller and the reason, not the greeting's words or a
    refusal."""
    system = brain.opts.system_prompt + "\n\n" + (
        "You are Sam from Bright Dental. You call patients to confirm their "
        "cleaning on Tuesday at 3 pm.")
    text, events = _run(brain, 3, [{"role": "system", "content": system},
                                   {"role": "user", "content": "Hello, this is Mark. Leave a message."},
                                   {"role": "user", "content": MESSAGE_NOTE}], tools=[])
    said = text.lower()
    assert "tuesday" in said and ("sam" in said or "bright dental" in said), text
    assert "leave a" not in said and "assist" not in said, text
    assert not events
