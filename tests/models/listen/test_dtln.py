"""DTLN (runtime/models/listen/dtln_denoiser.py) on a person's recording: what it
takes out of white noise, what it leaves of clean speech, alone and mixed back
with the input, and that its framing neither shifts nor depends on how the
stream is cut."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.errors import StageError
from runtime.models.listen.denoise import make_denoiser
from runtime.models.listen.dtln_denoiser import LATENCY, SHIFT, DtlnDenoiser, dtln_sessions
from voice_server.testing.enhancement import at_snr, si_sdr
from voice_server.testing.speech_corpus import human_clips

SR = 16000


def denoised(audio: np.ndarray, wet: float = 0.7, chunk: int = 320) -> np.ndarray:
    d = DtlnDenoiser(wet)
    return np.concatenate([d.process(audio[i:i + chunk]) for i in range(0, audio.size, chunk)])


@pytest.fixture(scope="module")
def clips():
    return [c for c in human_clips() if c.group == "librivox"]


@pytest.mark.parametrize("wet, gain_db", [(1.0, 6.0), (0.7, 4.0)])
def test_white_noise_comes_down_and_clean_speech_stays(clips, wet, gain_db):
    speech = clips[3].audio
    white = np.random.default_rng(0).standard_normal(speech.size).astype(np.float32)
    mixed = at_snr(speech, white, 5.0)
    # measured 5.0 -> 14.0 dB alone, -> 11.8 dB mixed at 70%; clean speech 43 / 46 dB
    assert si_sdr(speech, denoised(mixed, wet)) >= si_sdr(speech, mixed) + gain_db
    assert si_sdr(speech, denoised(speech, wet)) >= 25.0


def test_sample_i_out_is_sample_i_in_whatever_the_chunks(clips):
    audio = at_snr(clips[1].audio, np.random.default_rng(1).standard_normal(SR), 10.0)
    whole = denoised(audio, 0.7, audio.size)
    assert whole.size == audio.size // SHIFT * SHIFT - LATENCY   # the steps finished
    for chunk in (100, 320, 333):
        out = denoised(audio, 0.7, chunk)
        assert np.allclose(out, whole[:out.size], atol=1e-5)
    assert si_sdr(audio[:whole.size], whole) > si_sdr(audio[SHIFT:SHIFT + whole.size], whole)
    dry = denoised(audio, 0.0, 333)            # the input it mixes in is the same sample
    assert np.array_equal(dry, audio[:dry.size])


def test_the_settings_and_their_mix():
    assert make_denoiser("dtln").wet == pytest.approx(0.7)
    assert make_denoiser("dtln-full").wet == 1.0
    with pytest.raises(ValueError, match="wet"):
        DtlnDenoiser(wet=1.5)


def test_missing_graphs_say_how_to_get_them(tmp_path):
    with pytest.raises(StageError, match="make setup"):
        dtln_sessions(str(tmp_path))
