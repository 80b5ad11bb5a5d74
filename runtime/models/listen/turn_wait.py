"""How long a pause must last to end the turn, from what is known at it.

In semantic mode three witnesses speak at a pause, each late or wrong in its
own way: the end-of-turn model (Smart Turn) hears the voice, the transcript's
last words say whether the sentence stopped on "for" or "the"
(turn_text.looks_unfinished), and a chat LLM reads the words
(text_turn_end.py).  The rule that weighs them is a table, kept here apart
from the stream that gathers the evidence, so each row can be tested alone.
"""

from __future__ import annotations

from dataclasses import dataclass

# How long to wait in the pause, by eagerness, in ms: (the end-of-turn model
# and the words both say "finished"; the model says "unfinished" but the words
# and a chat LLM reading them say the message ends; they disagree or the words
# are late; the words are unfinished).  People answer each other within
# 200-300 ms; a thinking pause mid-sentence must not end the turn.
EAGERNESS_WAIT_MS = {"high": (160.0, 250.0, 400.0, 1000.0), "medium": (200.0, 300.0, 800.0, 2000.0),
                     "low": (250.0, 500.0, 1200.0, 3000.0), "auto": (200.0, 300.0, 800.0, 2000.0)}
# The chat LLM's P(message ends here) that overrules the end-of-turn model's
# "unfinished": 11 of turn_bench's 12 questions score 0.13-0.72 (one 0.009);
# its cut first halves 3e-5-0.013, and a person's sentence cut by a pause,
# "had he married a more amiable woman he might have been made", 0.059.
TEXT_END_P = 0.1
# Below this the chat LLM reads the words as cut ("i would like to book a
# table" 0.0016, "can you tell me how" 0.0024): the wait is ``incomplete``, as
# for words that stop on "to".  Whole questions and people's short commands
# it scored at least 0.009 ("can you recommend a good book", "rear center").
TEXT_CUT_P = 0.005
# Smart Turn this sure of "finished" (people's short commands, 0.94-0.99) does
# not wait the whole ``likely`` for the reading, only halfway from ``complete``
# to it: a reading that comes by then can still say "cut" (flite says "I would
# like to book a table." on a falling tone that Smart Turn may score 0.9+;
# the chat model reads it 0.0016).
SURE_P = 0.9


@dataclass
class Pause:
    """What one silence run inside an utterance has gathered toward ending the
    turn; the stream replaces it whole when the speaker goes on (``gen`` counts
    the runs, so that a late answer for an earlier one is known)."""

    gen: int = 0
    words: bool | None = None        # the transcript at this pause reads finished
    text: str = ""                   # the transcript at this pause
    question: bool = False           # it is a question put to the agent (turn_text)
    read: bool = False               # the chat LLM was asked to read ``text``
    text_p: float | None = None      # its P(``text`` ends the message); nan: nothing to read
    asked: bool = False              # the end-of-turn model was asked
    verdict: bool | None = None      # its verdict
    verdict_p: float = 0.0           # its probability of "finished"

    @property
    def reading(self) -> bool:
        """The chat LLM's reading is on its way."""
        return self.read and self.text_p is None

    @property
    def sure(self) -> bool:
        return self.verdict_p >= SURE_P


def semantic_wait_ms(pause: Pause, eagerness: str) -> float:
    """The silence that ends the turn, from the first row that fits (``p`` is
    the chat LLM's reading, ``-`` not known yet; the four waits are
    ``EAGERNESS_WAIT_MS[eagerness]``):

    ========  ======  ========================================  =====================
    verdict   words   reading                                   wait
    ========  ======  ========================================  =====================
    any       cut     any, or finished words read as cut        incomplete
    ``None``  any     whole (p >= TEXT_END_P)                   (complete+likely)/2
    ``None``  any     otherwise                                 incomplete
    cut       ``-``   any                                       incomplete
    finished  whole   on its way, the model sure                (complete+likely)/2
    finished  whole   on its way                                unsure
    finished  whole   none, whole, or the model sure            complete
    any       whole   whole, or a question not read as cut      likely
    otherwise                                                   unsure
    ========  ======  ========================================  =====================

    Why: words that stop on "for" or "the" are never a turn's end, whatever
    the model heard (a flat synthetic voice sounds finished there), and
    Whisper writes "I would like to book a table." for a cut sentence that
    Smart Turn may hear as finished, which the reading calls cut.  No verdict
    means the model was not asked, because the reading alone decides there
    (a decision on the words alone, as LiveKit's end-of-turn model makes).
    Finished on both counts waits for a reading on its way, which may still
    say "cut", and a reading that says the message may go on ("Front." of a
    person's "front ... left": Smart Turn 0.54-0.78, the reading 0.014) makes
    them disagree.  A question asked is the plainest end of a turn, which
    flat voices hide from the model ("Can you recommend a good book?": Smart
    Turn 0.008, the reading 0.009, since "... for my son" could follow)."""
    complete, likely, unsure, incomplete = EAGERNESS_WAIT_MS[eagerness]
    words, p = pause.words, pause.text_p
    if words is False or (words and p is not None and p < TEXT_CUT_P):
        return incomplete
    if pause.verdict is None:
        return (complete + likely) / 2 if words and p is not None and p >= TEXT_END_P else incomplete
    if pause.verdict is False and words is None:
        return incomplete
    if pause.verdict and words:
        if pause.reading:
            return (complete + likely) / 2 if pause.sure else unsure
        if pause.sure or p is None or not p < TEXT_END_P:
            return complete
    if words and p is not None and (p >= TEXT_END_P or pause.question and p >= TEXT_CUT_P):
        return likely
    return unsure
