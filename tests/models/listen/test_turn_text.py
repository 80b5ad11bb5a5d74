"""The words' side of semantic end of turn: a transcript that stops on a
function word is unfinished, whatever the voice sounded like."""

import pytest

from runtime.models.listen.turn_text import asks_the_agent, looks_unfinished


@pytest.mark.parametrize("text", [
    "I would like to book a table for", "Can you tell me how", "My order number is",
    "What I really need is.", "I was wondering if.", "Please remind me to", "and the",
    "I need to change my flight because", "Could you check the", "Um, so...", "well,",
    "No...", "So.", "There is no", "Could you check the?", "I'd like a coffee and?"])
def test_unfinished(text):
    assert looks_unfinished(text)


@pytest.mark.parametrize("text", [
    "I would like to book a table for two.", "What is it for?", "Yes I can.",
    "Had he married a more amiable woman than he was.", "Thank you.", "",
    "What time does the store open tomorrow", "Set a timer for ten minutes.",
    "No.", "No, no.", "That.", "What.", "Who are you talking about?", "And?",
    "Can you tell me how?", "Is this yours or mine?"])
def test_finished(text):
    assert not looks_unfinished(text)


@pytest.mark.parametrize("text,asks", [
    ("Can you recommend a good book?", True), ("How far away is the movement?", True),
    ("Do you know?", True), ("what time is it?", True),
    # a person's rising pause mid-sentence, which Whisper marks as a question
    ("Had he married a more amiable woman he might have been made?", False),
    ("Can you recommend a good book.", False), ("Rear center?", False), ("?", False)])
def test_a_question_put_to_the_agent(text, asks):
    assert asks_the_agent(text) is asks
