"""DTMF as sound: the two sine tones of each key, for lines with no DTMF message.

Only Plivo's media stream has a message that plays keys; on Twilio, Telnyx,
Exotel and Vonage streams the tones go in-band, as ordinary audio in the
line's own codec.  G.711 carries DTMF tones as well as a telephone keypad
does, so the far end's detector (an IVR, a PBX) hears them as keys.

Tone pairs and timing are the ITU-T Q.23/Q.24 ones: a row tone (697-941 Hz)
and a column tone (1209-1633 Hz) together, each at :data:`LEVEL` of full
scale (about -9 dBm0 on a G.711 line), 100 ms of tone and 60 ms of silence
per key (detectors need 40 ms of each).
"""

from __future__ import annotations

import numpy as np

ROWS = (697.0, 770.0, 852.0, 941.0)
COLUMNS = (1209.0, 1336.0, 1477.0, 1633.0)
KEYPAD = ("123A", "456B", "789C", "*0#D")
TONE_MS = 100
GAP_MS = 60
LEVEL = 0.25            # each of the two tones, of int16 full scale
RAMP_MS = 5             # fade in and out, so the tone starts and stops without a click


def key_frequencies(key: str) -> tuple[float, float]:
    """(row, column) Hz of a key of ``0-9 * # A-D``; ValueError for anything else."""
    for r, row in enumerate(KEYPAD):
        c = row.find(key.upper())
        if c >= 0 and len(key) == 1:
            return ROWS[r], COLUMNS[c]
    raise ValueError(f"not a DTMF key: {key!r}")


def dtmf_pcm(digits: str, rate: int) -> np.ndarray:
    """int16 PCM at ``rate``: each key's tone pair, then a gap."""
    t = np.arange(rate * TONE_MS // 1000) / rate
    ramp = np.minimum(1.0, np.minimum(t, t[::-1]) / (RAMP_MS / 1000))
    gap = np.zeros(rate * GAP_MS // 1000)
    parts = []
    for key in digits:
        low, high = key_frequencies(key)
        tone = LEVEL * (np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t)) * ramp
        parts += [tone, gap]
    if not parts:
        return np.zeros(0, np.int16)
    return np.round(np.concatenate(parts) * 32767).astype(np.int16)
