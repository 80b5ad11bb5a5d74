"""The lock on the caller's voice: enrol the caller, then tell their speech from anyone else's.

A television, people talking nearby or a room full of talk must not start a
turn, interrupt the agent or reach the transcript.  The listen stream asks
this lock about each new utterance once it has heard enough of it; the lock
only compares unit vectors (speaker_embedding.py computes them, off the VAD's
thread), so it is sans-I/O and its rules read alone.

Enrolment is gated on quality: a segment counts only with ``ENROL_SEGMENT_S``
of voiced audio, and the caller is enrolled once ``ENROL_SEGMENTS`` such
segments that agree with each other (cosine >= ``AGREE``) hold
``ENROL_TOTAL_S`` of voiced audio together; their mean is the caller's voice.
A first segment that was someone else (the TV before the caller spoke) then
simply agrees with nothing.  Until enrolled the lock lets everything through.

Thresholds come from CAM++ on people's recordings (speech_corpus.py, first
0.4 / 0.7 / 1 s of each clip against a 3-clip enrolment): the same person
0.23-0.54 / 0.40-0.78 / 0.57-0.80, anyone else at most 0.24 / 0.27 / 0.22.
Short segments ("yes", "stop") are where the vectors are weakest: they get a
lower bar (``SHORT_ACCEPT``), so that the caller's short word still counts,
at the price that another person's short word is likelier to.

The caller talking over someone else: the vector of the mix is neither
voice, so one verdict on the first second of such an utterance drops the
caller too (7 of 12 kept at equal level, 1 of 12 with the other 5 dB
louder).  So an utterance is judged on the part that matches best: the
first window (the first ``WINDOW_S`` or so) is judged as before, and while
it is judged someone else and the utterance goes on, the latest
``WINDOW_S`` again every ``HOP_S`` until ``CHECK_MAX_S`` of it, and once
more on the last window when it pauses (``is_last``); any window that
passes makes it the caller's.  Talk has gaps, and a second where the
caller dominates is enough.  On the same recordings, sliding 1 s windows
with a 0.5 s hop lift the best score of another person alone from at most
0.24 to at most 0.31 (the bar stays 0.35) and keep 10, 7 and 11 of the 12
mixed utterances instead of 5, 3 and 6 (docs/PERFORMANCE.md).  The price:
another person's speech holds the reply it pauses for up to ``CHECK_MAX_S``
before the reply goes on.

A later window is one more chance for another person to pass, so it has a
higher bar (``WINDOW_ACCEPT``).  Only the utterance's speech frames are
embedded (the listen stream leaves out its lead-in and pauses): silence
embeds alike for everyone.  Served with it, another person's first window
scored 0.30 against a caller enrolled from two utterances, 0.18 with it left
out; their third window still reached 0.36, which ``WINDOW_ACCEPT`` keeps
out.  On people's recordings, speech only, 1 s
windows: other people alone at most 0.30 on any window, the caller alone at
least 0.45 on the first and 0.57 on the best; over another talker at equal
level 8 of 12 of the caller's utterances pass with ``WINDOW_ACCEPT`` 0.45 as
with 0.35.  Speech that starts within ``AFTER_OTHER_S`` of an utterance
judged someone else's is most likely that person going on ("front ...
center"), so it gets the longer segments' bar even when short.

Over a telephone line (8 kHz, G.711) every score is higher, other people's
too: on the same recordings put on the line (speech only), other people
alone scored at most 0.34 on the first 0.7 s and 0.41 on any later window,
the caller alone at least 0.51 on the first.  A narrow-band lock
(``narrowband``: the listen stream is told its caller's line rate) has the
higher bars ``NARROW_*``; embedded with its pauses, as before, another
person's speech on the line reached 0.48 and the caller's 0.46, which no bar
separates.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

ENROL_SEGMENT_S = 0.8      # voiced audio for a segment to count towards enrolment
ENROL_TOTAL_S = 2.0        # voiced audio of the agreeing segments, together
ENROL_SEGMENTS = 2         # at least this many segments agree
AGREE = 0.45               # cosine at which two enrolment segments are one voice
MAX_CANDIDATES = 8         # enrolment segments kept (the oldest go first)
SHORT_S = 0.6              # a segment with less voiced audio than this is short
SHORT_ACCEPT = 0.28        # the caller, for a short segment
ACCEPT = 0.35              # the caller, for a longer one
WINDOW_ACCEPT = 0.45       # the caller, on a window after the first
NARROW_SHORT_ACCEPT = 0.4  # the same three over a telephone line (8 kHz)
NARROW_ACCEPT = 0.45
NARROW_WINDOW_ACCEPT = 0.5
AFTER_OTHER_S = 1.0        # speech this soon after someone else's is judged without the short bar
WINDOW_S = 1.0             # the audio one verdict hears, after the first
HOP_S = 0.5                # how often a window is judged while the utterance goes on
CHECK_MAX_S = 2.5          # an utterance no window matched by then is someone else's


class Verdict(enum.Enum):
    """Whose an utterance is, as far as the lock can tell."""

    CALLER = "caller"      # the enrolled voice, or no voice enrolled yet
    OTHER = "other"        # someone else: no turn, no interruption, no transcript


class VoiceAsk(NamedTuple):
    """A verdict asked of the speaker-embedding thread, to be applied when
    its vector comes back: which ask of the utterance (``gen``; a later one
    makes it stale), its voiced seconds then, whether it is the last chance
    (:func:`is_last`), a window after the first, and whether the utterance
    began just after someone else's (``AFTER_OTHER_S``)."""

    gen: int
    voiced_s: float
    last: bool
    later_window: bool = False
    after_other: bool = False


@dataclass
class VoiceLock:
    """One caller's enrolment and verdicts; fed vectors, returns decisions."""

    # (unit vector, voiced seconds) of segments offered while not enrolled
    candidates: list[tuple[np.ndarray, float]] = field(default_factory=list)
    voice: np.ndarray | None = None      # the caller's mean vector, once enrolled
    last_score: float | None = None      # the cosine behind the last verdict (for counters)
    narrowband: bool = False             # the caller is heard over a telephone line (8 kHz)

    @property
    def enrolled(self) -> bool:
        return self.voice is not None

    def offer(self, vec: np.ndarray, voiced_s: float) -> bool:
        """A finished utterance while not enrolled; returns whether it completed enrolment.

        Segments with too little voiced audio are ignored: their vectors are noisy."""
        if self.enrolled or voiced_s < ENROL_SEGMENT_S:
            return False
        self.candidates = (self.candidates + [(_unit(vec), float(voiced_s))])[-MAX_CANDIDATES:]
        for anchor, _ in self.candidates:
            group = [(v, s) for v, s in self.candidates if float(v @ anchor) >= AGREE]
            if len(group) >= ENROL_SEGMENTS and sum(s for _, s in group) >= ENROL_TOTAL_S:
                self.voice = _unit(np.mean([v for v, _ in group], axis=0))
                self.candidates = []
                return True
        return False

    def verdict(self, vec: np.ndarray, voiced_s: float, *, later_window: bool = False,
                after_other: bool = False) -> Verdict:
        """Whose a segment with ``voiced_s`` of voiced audio is (everyone's
        until enrolled); ``later_window``: not the utterance's first window;
        ``after_other``: it began just after someone else's utterance."""
        if self.voice is None:
            return Verdict.CALLER
        self.last_score = float(_unit(vec) @ self.voice)
        short, first, window = (NARROW_SHORT_ACCEPT, NARROW_ACCEPT, NARROW_WINDOW_ACCEPT) \
            if self.narrowband else (SHORT_ACCEPT, ACCEPT, WINDOW_ACCEPT)
        if later_window:
            bar = window
        else:
            bar = short if voiced_s < SHORT_S and not after_other else first
        return Verdict.CALLER if self.last_score >= bar else Verdict.OTHER


def is_last(spoken_s: float, paused: bool) -> bool:
    """Whether a window asked after ``spoken_s`` of an utterance is its last
    chance: it paused, or the next hop would pass ``CHECK_MAX_S``."""
    return paused or spoken_s + HOP_S > CHECK_MAX_S


def _unit(vec: np.ndarray) -> np.ndarray:
    v = np.asarray(vec, dtype=np.float32).reshape(-1)
    n = float(np.linalg.norm(v))
    if not np.isfinite(n) or n == 0.0:
        raise ValueError("a voice vector must be finite and non-zero")
    return v / n
