"""GTCRN (runtime/models/listen/gtcrn_denoiser.py) on a person's recording: what
it takes out of white noise and babble, what it leaves of clean speech, and
that its framing neither shifts nor depends on how the stream is cut."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.errors import StageError
from runtime.models.listen.gtcrn_denoiser import HOP, GtcrnDenoiser, gtcrn_session
from voice_server.testing.enhancement import at_snr, si_sdr
from voice_server.testing.speech_corpus import human_clips

SR = 16000


def denoised(audio: np.ndarray, chunk: int = 320) -> np.ndarray:
    d = GtcrnDenoiser()
    return np.concatenate([d.process(audio[i:i + chunk]) for i in range(0, audio.size, chunk)])


@pytest.fixture(scope="module")
def clips():
    return [c for c in human_clips() if c.group == "librivox"]


def test_white_noise_and_babble_come_down_and_speech_stays(clips):
    speech = clips[3].audio
    white = np.random.default_rng(0).standard_normal(speech.size).astype(np.float32)
    others = [c.audio for c in human_clips() if c.group != "librivox"]   # other people
    babble = sum(np.roll(np.resize(a, speech.size), 4000 * k) for k, a in enumerate(others[:8]))
    # measured +8.7 and +0.7 dB: babble is speech too, GTCRN takes little of it
    for noise, gain_db in ((white, 6.0), (babble, 0.3)):
        mixed = at_snr(speech, noise, 5.0)
        assert si_sdr(speech, denoised(mixed)) >= si_sdr(speech, mixed) + gain_db
    assert si_sdr(speech, denoised(speech)) >= 20.0       # clean speech passes nearly as it was


def test_sample_i_out_is_sample_i_in_whatever_the_chunks(clips):
    audio = at_snr(clips[1].audio, np.random.default_rng(1).standard_normal(SR), 10.0)
    whole = denoised(audio, audio.size)
    assert whole.size == (audio.size // HOP - 1) * HOP     # a hop short, and the dropped first
    for chunk in (100, 320, 333):
        out = denoised(audio, chunk)
        assert np.allclose(out, whole[:out.size], atol=1e-5)
    assert si_sdr(audio[:whole.size], whole) > si_sdr(audio[HOP:HOP + whole.size], whole)


def test_a_missing_graph_says_how_to_get_it(tmp_path):
    with pytest.raises(StageError, match="make setup"):
        gtcrn_session(str(tmp_path / "none.onnx"))
