"""Cutting Whisper's repetition loops out of a transcript.

On a short segment padded into a long window Whisper tiny sometimes says the
sentence again ("How do I reset my password? How do i reset my pass word?
How"), and the listen stage then reads the turn as unfinished (it ends on
"How") and the thinker answers a garbled question.  A loop is told from real
repetition by its rate: people say at most about five words a second, a
loop says the sentence twice in the time of once.

A loop at a human rate ("4. Queen of clothes 4. queen of clothes" for 1.7 s
of a card reader's "four queen of clubs", "5 5 5" for "five five": Whisper
tiny under CTranslate2's AVX2 int8 kernels, 10 s window) is told by where
Whisper places it: aligned against the audio, its words lie in the window's
zero padding, past the end of the segment, where nothing was said
(:func:`said_tokens`; whisper_asr.py aligns only a transcript that starts over).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[\w']+")
MAX_WORDS_PER_S = 5.0    # above this the transcript has more words than were said
OPENING = 2              # words of the opening that must come round again
# A word aligned to end this far past the segment's audio is in the padding.
# Said words end inside the audio (a final full stop takes the padding); the
# loops seen end 2.7-5.6 s past it.
PAST_END_S = 1.0


def _restart(words: list[re.Match], first: int = OPENING) -> int | None:
    """The index of the word (``first`` or later) where the opening comes round
    again, if it does."""
    norm = [w.group().lower() for w in words]
    opening = norm[:OPENING]
    for i in range(first, len(norm) - OPENING + 1):
        if norm[i:i + OPENING] == opening:
            return i
    return None


def starts_over(text: str) -> bool:
    """The transcript's opening comes round again, even overlapping itself
    ("5 5 5"): it may be a loop, at any rate."""
    return _restart(list(_WORD.finditer(text)), first=1) is not None


def cut_loop(text: str, seconds: float) -> str:
    """``text`` up to where it starts over, when it has more words than
    ``seconds`` of speech can hold; otherwise ``text`` unchanged."""
    words = list(_WORD.finditer(text))
    if len(words) <= OPENING or len(words) <= MAX_WORDS_PER_S * max(seconds, 0.0):
        return text
    i = _restart(words)
    return text if i is None else text[:words[i].start()].rstrip(" ,;-")


def said_tokens(tokens: list[str], ends_s: list[float], seconds: float) -> int:
    """How many of a transcript's tokens to keep: those before the word of the
    first token aligned to end more than ``PAST_END_S`` past ``seconds`` of
    audio.  ``tokens`` are the decoded tokens (a word's first starts with a
    space), ``ends_s`` where each ends; punctuation is not judged."""
    for k, (token, end) in enumerate(zip(tokens, ends_s)):
        if end > seconds + PAST_END_S and _WORD.search(token):
            while k > 0 and not tokens[k].startswith(" "):
                k -= 1       # back to the start of the word
            return k
    return len(tokens)


__all__ = ["cut_loop", "starts_over", "said_tokens", "MAX_WORDS_PER_S", "PAST_END_S"]
