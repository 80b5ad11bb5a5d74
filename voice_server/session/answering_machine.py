"""Who answered an outbound call: a person, or an answering machine.

A person picks up and says something short ("Hello?", "Yes, this is Anna")
and waits; a machine plays a greeting of several sentences, then a beep.
The detector reads that from the listen stage's speech bounds on the input
timeline, and hears the beep in the audio itself:

* ``human``: the first words stop, with less than :data:`MACHINE_SPEECH_MS` of
  speech, and :data:`ANSWER_PAUSE_MS` of silence follows (the person waits
  for us);
* ``machine``: :data:`MACHINE_SPEECH_MS` of speech before such a pause, or a
  beep;
* ``silence``: nothing said for :data:`NO_ANSWER_MS`.

A beep is one steady tone (400-2600 Hz, most of the frame's energy in a few
FFT bins) for :data:`BEEP_MIN_MS`.  The session (core.py) holds its replies
until the verdict; for a machine it waits for the beep (or the greeting's
end) and then leaves the message (silence.py's goodbye path ends the call).
"""

from __future__ import annotations

from enum import Enum
from typing import Optional

import numpy as np

MACHINE_SPEECH_MS = 2400.0  # more speech than a person's "hello" before they pause
ANSWER_PAUSE_MS = 900.0  # a person who answered waits this long for us
NO_ANSWER_MS = 6000.0  # no speech at all this long after the call starts
GREETING_END_MS = 1500.0  # a machine whose beep we missed: its greeting ended this long ago
BEEP_MIN_MS = 160.0
# The note the model reads after the beep (a user text item, under the greeting's
# transcript).  It says what the greeting was and what a message holds: told only
# "an answering machine is recording: leave a short message, then say goodbye",
# the default brain (Qwen 1.5B) answered "I will leave a short message and then
# say goodbye.", read the greeting back or refused, in 4 of 4 calls whose
# instructions said who calls and why; with this one it said who it was and why
# it called in 3 of 4, and in the fourth before reading the greeting back
# (docs/PERFORMANCE.md, "The message an answering machine records").
MESSAGE_NOTE = ("[That was an answering machine's greeting, not a person; it is recording "
                "now. Leave your message for them: in one or two sentences, say who you "
                "are and why you called, then say goodbye.]")
_RATE = 16000
_FRAME = 512  # 32 ms
_BEEP_BAND = (400.0, 2600.0)
_BEEP_CONCENTRATION = 0.7  # share of the frame's energy within +-2 bins of its peak
_BEEP_MIN_RMS = 300.0  # int16


class Verdict(Enum):
    HUMAN = "human"
    MACHINE = "machine"
    SILENCE = "silence"


def is_tone(frame: np.ndarray) -> Optional[float]:
    """The frequency of a steady tone filling ``frame`` (32 ms, 16 kHz int16), or None."""
    x = frame.astype(np.float64)
    if np.sqrt(np.mean(x * x)) < _BEEP_MIN_RMS:
        return None
    power = np.abs(np.fft.rfft(x * np.hanning(x.size))) ** 2
    peak = int(np.argmax(power))
    freq = peak * _RATE / x.size
    if not _BEEP_BAND[0] <= freq <= _BEEP_BAND[1]:
        return None
    near = power[max(peak - 2, 0):peak + 3].sum()
    return freq if near >= _BEEP_CONCENTRATION * power.sum() else None


class AnsweringMachineDetector:
    """Sans-I/O: positions are ms on the session's input timeline."""

    def __init__(self) -> None:
        self.verdict: Optional[Verdict] = None  # once decided, it stays
        self.beep_at_ms: Optional[float] = None  # where a beep ended (machine: speak now)
        self._speech_ms = 0.0  # speech heard before the first long pause
        self._speaking_since: Optional[float] = None
        self._last_stop: Optional[float] = None
        self._pending = np.zeros(0, np.int16)
        self._tone_frames = 0
        self._tone_freq = 0.0

    # ------------------------------------------------------------ speech bounds
    def speech_started(self, pos_ms: float) -> None:
        self._speaking_since = pos_ms

    def speech_stopped(self, pos_ms: float) -> None:
        if self._speaking_since is not None:
            self._speech_ms += max(pos_ms - self._speaking_since, 0.0)
        self._speaking_since = None
        self._last_stop = pos_ms

    def advance(self, pos_ms: float) -> Optional[Verdict]:
        """The verdict, the first time it can be given at ``pos_ms``."""
        if self.verdict is not None:
            return None
        speech = self._speech_ms + (pos_ms - self._speaking_since
                                    if self._speaking_since is not None else 0.0)
        if speech >= MACHINE_SPEECH_MS or self.beep_at_ms is not None:
            self.verdict = Verdict.MACHINE
        elif self._speaking_since is None and self._last_stop is not None \
                and pos_ms - self._last_stop >= ANSWER_PAUSE_MS:
            self.verdict = Verdict.HUMAN
        elif self._last_stop is None and self._speaking_since is None and pos_ms >= NO_ANSWER_MS:
            self.verdict = Verdict.SILENCE
        return self.verdict

    def greeting_over(self, pos_ms: float) -> bool:
        """A machine: its beep was heard, or its greeting stopped long enough ago."""
        if self.beep_at_ms is not None:
            return True
        return self._speaking_since is None and self._last_stop is not None \
            and pos_ms - self._last_stop >= GREETING_END_MS

    # ------------------------------------------------------------ the beep
    def audio(self, pcm16k: np.ndarray, end_ms: float) -> None:
        """16 kHz input ending at ``end_ms``: listens for the beep."""
        if self.beep_at_ms is not None:
            return
        buf = np.concatenate([self._pending, pcm16k]) if self._pending.size else pcm16k
        n = buf.size // _FRAME
        for i in range(n):
            freq = is_tone(buf[i * _FRAME:(i + 1) * _FRAME])
            steady = freq is not None and (self._tone_frames == 0
                                           or abs(freq - self._tone_freq) <= 2 * _RATE / _FRAME)
            if steady:
                self._tone_frames += 1
                self._tone_freq = freq
            elif self._tone_frames * _FRAME * 1000 / _RATE >= BEEP_MIN_MS:
                # the tone just ended: that was the beep
                self.beep_at_ms = end_ms - (buf.size - i * _FRAME) * 1000 / _RATE
                return
            else:
                self._tone_frames = 0
        self._pending = buf[n * _FRAME:].copy()


__all__ = ["AnsweringMachineDetector", "Verdict", "is_tone", "MACHINE_SPEECH_MS", "NO_ANSWER_MS",
           "ANSWER_PAUSE_MS"]
