"""Does a transcript read like a finished turn?

The end-of-turn model (Smart Turn) hears intonation; synthetic and flat
voices end every phrase on a falling tone, so it calls "i would like to
book a table for" complete.  The words say otherwise: a turn that stops on a
conjunction, a preposition, an article or an auxiliary is not over.  The
listen stage asks this of the speculative transcript during the pause and
combines it with the model's verdict (listen.py).
"""

from __future__ import annotations

import re

# Words a finished English turn practically never ends on.
TRAILING_WORDS = frozenset("""
and or but so because if then than that which whom whose when while where whether
although though unless until since as nor
to for of in on at by with from into onto about like over under after before between
through during without within against toward towards via per
the a an my your his her their our its this these those some any every each no
not very really just um uh er erm
i we he she they i'm we're you're they're it's there's let's i'd i'll we'll
how what why
""".split())
# An auxiliary at the end finishes an elliptic clause after its subject ("than
# he was", "yes i can") but not after a noun ("my order number is").
AUXILIARIES = frozenset("""
is are am was were be been being can could would should will shall may might must
do does did have has had
""".split())
SUBJECTS = frozenset("i you he she it we they there that this what who which".split())
# Not even a question ends on these: an article, a possessive before its noun, a
# conjunction or a filler ("Could you check the?" is Whisper punctuating a cut).
# A question may end on a preposition or a pronoun ("What is it for?").
NEVER_LAST = frozenset("""
the a an my your their our its every each
and or but nor because although unless whether
um uh er erm
""".split())
# A turn of only one of these answers a question ("No.", "That.", or "What."
# where Whisper left out the question mark): it is over, not cut.
ANSWER_WORDS = frozenset("no not this that these those some any his her what why how when where".split())

# How a question put to the agent opens: a question word, or an auxiliary
# before "you" ("can you", "do you").
QUESTION_WORDS = frozenset("what who whom whose which when where why how".split())

_WORD = re.compile(r"[a-z']+")


def trailing_word(text: str) -> str | None:
    words = _WORD.findall(text.lower())
    return words[-1] if words else None


def looks_unfinished(text: str) -> bool:
    """True when the words show the speaker is mid-sentence: a trailing
    function word, or a trailing comma or ellipsis.  A question mark wins
    ("what is it for?") unless the word before it cannot end any sentence
    (``NEVER_LAST``), and so does a one-word answer ("No."); an empty
    transcript (a cough) is not unfinished."""
    t = text.strip()
    if not t:
        return False
    if t.endswith("?"):
        words = _WORD.findall(t.lower())
        return len(words) > 1 and words[-1] in NEVER_LAST
    if t.endswith((",", "...", "…", "-")):
        return True
    words = _WORD.findall(t.lower())
    if words and len(set(words)) == 1 and words[0] in ANSWER_WORDS:
        return False                      # "No." / "No, no." is an answer, not a cut
    if words[-1:] and words[-1] in AUXILIARIES:
        return len(words) < 2 or words[-2] not in SUBJECTS
    return trailing_word(t) in TRAILING_WORDS


def asks_the_agent(text: str) -> bool:
    """A whole question put to the agent: Whisper wrote a question mark, and
    the words open as such a question does.  The mark alone says little:
    Whisper writes one after a person's rising pause mid-sentence too ("Had
    he married a more amiable woman he might have been made?")."""
    if not text.rstrip().endswith("?"):
        return False
    words = _WORD.findall(text.lower())
    return bool(words) and (words[0] in QUESTION_WORDS
                            or words[0] in AUXILIARIES and words[1:2] == ["you"])


__all__ = ["ANSWER_WORDS", "AUXILIARIES", "NEVER_LAST", "QUESTION_WORDS", "TRAILING_WORDS",
           "asks_the_agent", "looks_unfinished", "trailing_word"]
