"""Which language a caller speaks: pinned, or detected once and then held.

A multilingual Whisper (``asr_model: base``) can transcribe in any of its
languages, but it must be told which one, and its own guess is poor on short
sounds: a Spanish caller's "okay" or "sí" reads as English at p = 0.91-0.99
(Whisper base, espeak-ng speech), and people's commonest complaint about
other services is a short word heard in the wrong language ("Continue" as
Korean).  So a stream's language is

* **pinned** when the client names one (the listen param ``language``,
  from ``audio.input.transcription.language``): every utterance is
  transcribed in it and nothing is detected;
* otherwise **detected** on every utterance (Whisper's language head on the
  encoder output: one decoder step, ~35 ms a batch on base) and **locked** by
  the first utterance long enough to trust (:data:`LOCK_MIN_S` of audio and
  probability :data:`LOCK_P`); from then on utterances are transcribed in the
  locked language, short and unsure ones whatever Whisper guesses;
* **switched** only on clear evidence: :data:`SWITCH_COUNT` utterances in a
  row of at least :data:`SWITCH_MIN_S` that Whisper hears in one other
  language at probability :data:`SWITCH_P` or more.  Such an utterance is
  transcribed in the language it was heard in even before the switch (a
  sentence in English is not forced into Spanish words).

An English-only model (``tiny.en``) hears English and nothing else: its
streams say ``en`` and detect nothing.

:class:`LanguageLock` is one stream's state, on the stage loop's thread;
:func:`transcribe_in` is what the recognition thread applies to a segment
between detecting and decoding (it sees a :class:`LanguageAsk` snapshot of
the lock taken when the segment was queued).  Pure Python: the session's
config checks a client's language against :data:`LANGUAGES` with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

# Whisper's languages (ISO 639-1, and "haw", "yue" which have no two-letter code).
LANGUAGES = frozenset((
    "af am ar as az ba be bg bn bo br bs ca cs cy da de el en es et eu fa fi fo fr gl gu ha "
    "haw he hi hr ht hu hy id is it ja jw ka kk km kn ko la lb ln lo lt lv mg mi mk ml mn mr "
    "ms mt my ne nl nn no oc pa pl ps pt ro ru sa sd si sk sl sn so sq sr su sv sw ta te tg th "
    "tk tl tr tt uk ur uz vi yi yo zh yue").split())

ENGLISH = "en"
# Lock on the first utterance this long (from its onset to the end of its
# speech, as the VAD cut it) that Whisper hears at this probability.  A wrong
# lock costs more than a late one (unlocked, each utterance is transcribed in
# the language Whisper hears it in): on espeak-ng's voices of 7 languages
# (benchmarks/language_bench.py), 2 s stretches at p >= 0.5 locked wrong 12
# times in 35, at p >= 0.8 4 times (and right 10 times).
LOCK_MIN_S = 1.5
LOCK_P = 0.8
# Switch after this many utterances in a row, each this long, heard in one
# other language at this probability.
SWITCH_MIN_S = 2.0
SWITCH_P = 0.9
SWITCH_COUNT = 2
# The segment Whisper reads is longer than the utterance by its lead-in
# (prefix_padding_ms, 300 ms) and the silence before recognition starts.
SEGMENT_EXTRA_S = 0.5


def check_language(value: object, what: str = "language") -> str | None:
    """A language param: None, or one of :data:`LANGUAGES` (``ValueError`` else)."""
    if value is None:
        return None
    if not isinstance(value, str) or value.lower() not in LANGUAGES:
        raise ValueError(f"{what} must be an ISO-639-1 code Whisper knows (such as 'en', 'es', "
                         f"'ja') or null, got {value!r}")
    return value.lower()


class LanguageAsk(NamedTuple):
    """What the recognition thread is told about a segment's stream: the
    language it is pinned to or has locked (None: none yet), and whether pinned."""

    language: str | None
    pinned: bool = False


def transcribe_in(ask: LanguageAsk, heard: str, p: float, seconds: float) -> str:
    """The language to transcribe a segment of ``seconds`` (its audio, lead-in
    and pause included) in, given Whisper's
    guess ``heard`` at probability ``p``: the pin; else its guess while
    nothing is locked, or when it is long and sure enough to count toward a
    switch (:meth:`LanguageLock.observe`); else the locked language."""
    if ask.pinned and ask.language:
        return ask.language
    if ask.language is None or heard == ask.language:
        return heard
    if seconds >= SWITCH_MIN_S + SEGMENT_EXTRA_S and p >= SWITCH_P:
        return heard
    return ask.language


@dataclass
class LanguageLock:
    """One stream's language (see the module's doc).  ``multilingual`` False:
    an English-only model, always ``en``."""

    pinned: str | None = None
    multilingual: bool = True
    language: str | None = None        # the locked (or pinned) language; None: none yet
    probability: float | None = None   # Whisper's, on the utterance that locked or switched it
    strikes: dict = field(default_factory=dict)   # other language -> long sure utterances in a row
    changes: int = 0

    def __post_init__(self) -> None:
        if not self.multilingual:
            self.pinned = self.language = ENGLISH
        elif self.pinned:
            self.language = self.pinned

    @property
    def detecting(self) -> bool:
        return self.multilingual and not self.pinned

    def ask(self) -> LanguageAsk | None:
        """The snapshot a segment carries to the recognition thread (None: an
        English-only model, nothing to say)."""
        if not self.multilingual:
            return None
        return LanguageAsk(self.language, bool(self.pinned))

    def observe(self, heard: str | None, p: float | None, seconds: float) -> bool:
        """An ended utterance of ``seconds`` (onset to end of speech) that Whisper heard as ``heard`` at
        probability ``p``; True when the stream's language changed (locked
        for the first time, or switched)."""
        if not self.detecting or not heard or p is None:
            return False
        if self.language is None:
            if seconds >= LOCK_MIN_S and p >= LOCK_P:
                return self._set(heard, p)
            return False
        if heard == self.language:
            if seconds >= LOCK_MIN_S:
                self.strikes.clear()    # a long utterance in the locked language: no run
            return False
        if seconds < SWITCH_MIN_S or p < SWITCH_P:
            return False                # short or unsure: no evidence either way
        n = self.strikes.get(heard, 0) + 1
        self.strikes = {heard: n}       # a run is in one language
        if n >= SWITCH_COUNT:
            return self._set(heard, p)
        return False

    def _set(self, language: str, p: float) -> bool:
        self.language, self.probability = language, float(p)
        self.strikes.clear()
        self.changes += 1
        return True


__all__ = ["LANGUAGES", "ENGLISH", "LanguageAsk", "LanguageLock", "check_language",
           "transcribe_in", "LOCK_MIN_S", "LOCK_P", "SWITCH_MIN_S", "SWITCH_P", "SWITCH_COUNT"]
