"""The words' side of semantic end of turn: a transcript that stops on a
function word is unfinished, whatever the voice sounded like."""

import pytest

from runtime.models.turn_text import looks_unfinished


@pytest.mark.parametrize("text", [
    "I would like to book a table for", "Can you tell me how", "My order number is",
    "What I really need is.", "I was wondering if.", "Please remind me to", "and the",
    "I need to change my flight because", "Could you check the", "Um, so...", "well,",
    "No...", "So.", "There is no"])
def test_unfinished(text):
    assert looks_unfinished(text)


@pytest.mark.parametrize("text", [
    "I would like to book a table for two.", "What is it for?", "Yes I can.",
    "Had he married a more amiable woman than he was.", "Thank you.", "",
    "What time does the store open tomorrow", "Set a timer for ten minutes.",
    "No.", "No, no.", "That.", "What."])
def test_finished(text):
    assert not looks_unfinished(text)
