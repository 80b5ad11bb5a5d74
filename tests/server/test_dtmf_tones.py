"""In-band DTMF (voice_server/transports/phone/dtmf_tones.py): each key is its two
ITU-T Q.23 tones, loud enough and long enough for a detector, and survives the
G.711 line that carries it."""

from __future__ import annotations

import numpy as np
import pytest

from voice_server.transports.phone.dtmf_tones import (COLUMNS, GAP_MS, ROWS, TONE_MS, dtmf_pcm,
                                                      key_frequencies)
from voice_server.transports.phone.line import Encoding, LineFormat


def loudest(pcm: np.ndarray, rate: int, among: tuple[float, ...]) -> float:
    spec = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    freqs = np.fft.rfftfreq(pcm.size, 1 / rate)
    return max(among, key=lambda f: spec[np.abs(freqs - f) < 15].max())


@pytest.mark.parametrize("key", list("0123456789*#ABCD"))
def test_each_key_is_its_row_and_column_tone_through_mulaw(key):
    line = LineFormat(Encoding.MULAW, 8000)
    pcm = line.decode(line.encode(dtmf_pcm(key, 8000)))
    assert pcm.size == 8000 * (TONE_MS + GAP_MS) // 1000
    tone = pcm[:8000 * TONE_MS // 1000]
    assert (loudest(tone, 8000, ROWS), loudest(tone, 8000, COLUMNS)) == key_frequencies(key)
    assert np.abs(pcm[tone.size:]).max() <= 8          # the gap is silence
    assert 5000 < np.abs(tone).max() < 32767           # loud, never clipped


def test_keys_follow_each_other_and_bad_keys_are_refused():
    pcm = dtmf_pcm("1#", 16000)
    one, pound = pcm[:1600], pcm[2560:2560 + 1600]
    assert (loudest(one, 16000, ROWS), loudest(one, 16000, COLUMNS)) == (697.0, 1209.0)
    assert (loudest(pound, 16000, ROWS), loudest(pound, 16000, COLUMNS)) == (941.0, 1477.0)
    assert dtmf_pcm("", 8000).size == 0
    with pytest.raises(ValueError):
        dtmf_pcm("1x", 8000)
