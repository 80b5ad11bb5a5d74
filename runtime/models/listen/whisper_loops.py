"""Cutting Whisper's repetition loops out of a transcript.

On a short segment padded into a long window Whisper tiny sometimes says the
sentence again ("How do I reset my password? How do i reset my pass word?
How"), and the listen stage then reads the turn as unfinished (it ends on
"How") and the thinker answers a garbled question.  A loop is told from real
repetition by its rate: people say at most about five words a second, a
loop says the sentence twice in the time of once.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[\w']+")
MAX_WORDS_PER_S = 5.0    # above this the transcript has more words than were said
OPENING = 2              # words of the opening that must come round again


def cut_loop(text: str, seconds: float) -> str:
    """``text`` up to where it starts over, when it has more words than
    ``seconds`` of speech can hold; otherwise ``text`` unchanged."""
    words = list(_WORD.finditer(text))
    if len(words) <= OPENING or len(words) <= MAX_WORDS_PER_S * max(seconds, 0.0):
        return text
    norm = [w.group().lower() for w in words]
    opening = norm[:OPENING]
    for i in range(OPENING, len(norm) - OPENING + 1):
        if norm[i:i + OPENING] == opening:
            return text[:words[i].start()].rstrip(" ,;-")
    return text


__all__ = ["cut_loop", "MAX_WORDS_PER_S"]
