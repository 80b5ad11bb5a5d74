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
from voice_server.session.answering_machine import MESSAGE_NOTE, NO_ANSWER_MS
from voice_server.session.silence import no_answer_note

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


# an outbound call's instructions; the session puts them after the stage's prompt (prompt.py)
CALLER = "You are Sam from Bright Dental. You call patients to confirm their cleaning on Tuesday at 3 pm."


@pytest.mark.parametrize("heard", [
    ["Hello, this is Mark. Leave a message.", MESSAGE_NOTE],   # a machine, after its beep
    [no_answer_note(NO_ANSWER_MS)],                              # nobody said anything
])
def test_an_outbound_call_says_who_is_calling_and_why_not_the_servers_note(brain, heard):
    """The notes the session adds for an answering machine and for silence on
    an outbound call get a message naming the caller and the reason, not the
    note or the greeting read aloud, nor a refusal."""
    messages = [{"role": "system", "content": brain.opts.system_prompt + "\n\n" + CALLER}]
    messages += [{"role": "user", "content": text} for text in heard]
    text, events = _run(brain, 3, messages, tools=[])
    said = text.lower()
    assert "tuesday" in said and ("sam" in said or "bright dental" in said), text
    assert not any(w in said for w in ("leave a", "assist", "said nothing", "nobody")), text
    assert not events
