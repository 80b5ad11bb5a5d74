"""What counts as a backchannel, and the server's settings for deciding
interruptions (``ServerSettings.interruptions``).

A listener says "mm-hmm", "yeah" or "okay" while the other one talks to show
they follow, not to take the turn; a reply must not stop for that, nor for a
cough.  :func:`only_backchannel` reads an early transcript of the sound that
paused the reply: empty (a cough, a knock) or made only of backchannel words
means "go on".
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

# words that take the turn even heard alone, cut mid-speech (one word of a 400 ms
# transcript is otherwise as often a misheard hum, "mm hmm" -> "NME.")
DEFAULT_INTERRUPTIONS = (
    "stop", "wait", "no", "hold on", "hang on", "actually", "sorry", "excuse me", "hey",
    "but", "what", "pause", "cancel", "enough", "listen",
    "why", "how", "who", "where", "when", "which",
)

DEFAULT_BACKCHANNELS = (
    "mm", "mmm", "hm", "hmm", "mhm", "mm hmm", "mm hm", "mmhmm", "mhmm", "uh huh", "uhhuh",
    "uh", "um", "ah", "oh",
    "yeah", "yes", "yep", "yup", "ya", "ok", "okay", "right", "sure", "alright", "all right",
    "i see", "got it", "cool", "great", "nice", "good", "wow", "really", "exactly", "true",
    "indeed", "of course",
)

# Hums and laughs have no fixed spelling: Whisper writes "MMHMM", "M-H-N-N",
# "Mmmm", "hahaha", "heh".
_HUM_OR_LAUGH = re.compile(r"[mhn]+|u+[mh]+|(?:ha)+h?|heh|he(?:he)+h?")
# Whisper writes non-speech as an annotation: "[cough]", "(knocking)", "*sighs*".
_ANNOTATION = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*")
_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> list[str]:
    return _WORD.findall(_ANNOTATION.sub(" ", text.lower()).replace("-", " "))


def word_count(text: str) -> int:
    """Words in a transcript, annotations ("[cough]") and punctuation left out."""
    return len(_words(text))


def starts_with(text: str, phrases: frozenset[tuple[str, ...]]) -> bool:
    """True when ``text`` begins with one of ``phrases`` ("stop", "hold on")."""
    words = tuple(_words(text))
    return any(words[:len(p)] == p for p in phrases)


def only_backchannel(text: str, phrases: frozenset[tuple[str, ...]]) -> bool:
    """True when ``text`` has no words, or only words of backchannel phrases
    (matched longest first: "mm hmm", "all right"), hums and laughs."""
    words = _words(text)
    longest = max((len(p) for p in phrases), default=1)
    i = 0
    while i < len(words):
        for n in range(min(longest, len(words) - i), 0, -1):
            if tuple(words[i:i + n]) in phrases:
                i += n
                break
        else:
            if not _HUM_OR_LAUGH.fullmatch(words[i]):
                return False
            i += 1
    return True


class InterruptionSettings(BaseModel):
    """How a reply that the caller talks over is handled (server-wide; YAML
    ``interruptions:``).  The reply pauses at the first speech frame; then
    speech that goes on for ``decide_after_ms``, or words that are not all
    ``backchannel_words``, cancel it; a backchannel or a noise resumes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # phrases that do not take the turn ("mm hmm", "yeah"); [] makes every word an
    # interruption (a hum or a laugh, "MMHMM", "hahaha", is no word)
    backchannel_words: list[str] = Field(default_factory=lambda: list(DEFAULT_BACKCHANNELS))
    # phrases that cancel at once even as the only word heard while the speech goes on
    interruption_words: list[str] = Field(default_factory=lambda: list(DEFAULT_INTERRUPTIONS))
    # speech this long without a pause, and with no early transcript yet, is an
    # interruption.  The first transcript is cut 400 ms in and may wait 300 ms for
    # the recognition thread before its ~100-400 ms reading: a shorter limit
    # decided before the words came (a phone line's 1.1 s "mm hmm" read "NMA" /
    # "Mm-hmm." 500 ms after its cut, 3 times in 4, after the cancel at 700).
    # An early transcript replaces this limit: words (min_interruption_ms), or
    # only backchannels or none ("mm hmm" drawn out, backchannel_max_ms)
    decide_after_ms: float = Field(1200.0, ge=100.0, le=5000.0)
    # ... then this long, however its words read
    backchannel_max_ms: float = Field(1600.0, ge=100.0, le=10000.0)
    # a sound shorter than this is no interruption, whatever Whisper reads in it ("yeah"
    # heard as "You had."), unless it starts with interruption_words ("stop", "why")
    min_interruption_ms: float = Field(500.0, ge=0.0, le=5000.0)
    # false: the reply is cancelled at speech_started, as the Realtime API does
    resume_backchannels: bool = True
    # the agent's own voice in the mic (a speakerphone): mic audio that is this
    # much quieter than the reply it could echo is not the caller (echo_guard.py)
    echo_guard: bool = True
    echo_margin_db: float = Field(10.0, ge=0.0, le=40.0)

    def phrases(self) -> frozenset[tuple[str, ...]]:
        return _phrases(self.backchannel_words)

    def interruption_phrases(self) -> frozenset[tuple[str, ...]]:
        return _phrases(self.interruption_words)


def _phrases(texts: list[str]) -> frozenset[tuple[str, ...]]:
    return frozenset(tuple(_words(p)) for p in texts if _words(p))


__all__ = ["DEFAULT_BACKCHANNELS", "DEFAULT_INTERRUPTIONS", "InterruptionSettings",
           "only_backchannel", "starts_with", "word_count"]
