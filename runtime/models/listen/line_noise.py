"""How noisy a caller's line is: the spread between its loud and its quiet frames.

Whisper tiny.en, the default recogniser, loses 41-52% of a person's words
under the talk of a room at 5 dB (people's recordings mixed with eight other
people's, benchmarks/noise_bench.py); Whisper base loses 24-36%, and is right
more often on clean speech too, at about twice the CPU.  No denoiser here did better than a tenth of that gain (they remove
what Whisper reads consonants from).  So a line that sounds noisy is read by
the stronger recogniser (the listen stage's ``asr_noisy_model``), and a clean
one keeps the quick one.

A line is judged by its frames' levels over the last ``WINDOW_S``: the 90th
percentile is the caller's speech, the 10th what is left between their
words.  On people's recordings the spread is 22-58 dB clean, 10-16 dB with
babble or pink noise at 5 dB, 14-22 dB at 10 dB; a line goes noisy under
``NOISY_BELOW_DB`` and clean again over ``CLEAN_ABOVE_DB`` (one noisy stretch
does not flip the recogniser back and forth).  Digital silence (a client
that sends zeros between turns, a synthetic voice's gaps) counts at
``SILENT_DB``: it is the floor of a clean line.  Left out, the quiet sounds
of speech itself became the floor of a voice with exact zeros in its gaps
(hibari's: judged noisy on half its segments in a served call).  A line
with no sound at all has no verdict.
"""

from __future__ import annotations

from collections import deque

import numpy as np

WINDOW_S = 10.0
MIN_S = 2.0                # judged only on this much of the line (a call that opens with
                           # speech: its first words alone spread less than speech and quiet)
NOISY_BELOW_DB = 19.0
CLEAN_ABOVE_DB = 23.0
SILENT_DB = -90.0          # a frame's level at its quietest (digital silence)
FRAME_RATE_HZ = 31.25      # the listen stage's 32 ms frames


class LineNoise:
    """One stream's frame levels and its verdict (noisy or not)."""

    def __init__(self, frame_rate_hz: float = FRAME_RATE_HZ) -> None:
        self._levels: deque[float] = deque(maxlen=int(WINDOW_S * frame_rate_hz))
        self._min_frames = int(MIN_S * frame_rate_hz)
        self.noisy = False

    def hear(self, frame: np.ndarray) -> None:
        """One frame of the line, as the VAD and the recogniser get it."""
        power = float(np.dot(frame, frame)) / max(frame.size, 1)
        self._levels.append(max(10.0 * np.log10(power), SILENT_DB) if power > 0.0 else SILENT_DB)

    def spread_db(self) -> float | None:
        """Speech over what lies under it, in dB (None: too little heard yet)."""
        if len(self._levels) < self._min_frames:
            return None
        low, high = np.percentile(np.fromiter(self._levels, float), (10, 90))
        return None if high <= SILENT_DB else float(high - low)

    def judge(self) -> bool:
        """The verdict now, with hysteresis (asked when a segment is read)."""
        spread = self.spread_db()
        if spread is not None:
            if spread < NOISY_BELOW_DB:
                self.noisy = True
            elif spread > CLEAN_ABOVE_DB:
                self.noisy = False
        return self.noisy
