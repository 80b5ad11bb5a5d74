"""The numpy log-mel against faster-whisper's feature extractor (Whisper's reference in numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from faster_whisper.feature_extractor import FeatureExtractor

from runtime.models.listen.log_mel import HOP, N_MELS, SAMPLE_RATE, log_mel, mel_filterbank
from voice_server.testing.audio import flite_pcm


def test_filterbank_matches_whisper():
    ours = mel_filterbank()
    theirs = FeatureExtractor().mel_filters
    assert ours.shape == theirs.shape == (N_MELS, 201)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-7)


@pytest.mark.parametrize("seconds", [8.0, 2.5, 1.013])
def test_features_match_faster_whisper(seconds):
    speech = flite_pcm("what is the capital of france", SAMPLE_RATE).astype(np.float32) / 32768
    n = int(seconds * SAMPLE_RATE)
    audio = np.zeros(n, np.float32)
    audio[-min(n, speech.size):] = speech[-n:]
    audio += np.random.default_rng(1).normal(0, 1e-3, n).astype(np.float32)
    ours = log_mel(audio)
    # padding=0: faster-whisper otherwise appends 160 zeros (one more frame)
    theirs = FeatureExtractor()(audio, padding=0)
    assert ours.shape == theirs.shape == (N_MELS, n // HOP)
    assert ours.dtype == np.float32
    # faster-whisper works in float32 (complex64 FFT), this module in float64
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-4)
    assert ours.max() - ours.min() > 1.0            # real speech, not a flat floor


def test_batch_rows_equal_single_waveforms():
    rng = np.random.default_rng(2)
    batch = rng.normal(0, 0.1, (3, 4000)).astype(np.float32)
    batch[1] *= 100                                 # each row has its own floor
    out = log_mel(batch)
    assert out.shape == (3, N_MELS, 4000 // HOP)
    for row, features in zip(batch, out):
        np.testing.assert_array_equal(features, log_mel(row))


def test_silence_is_the_floor_not_nan():
    out = log_mel(np.zeros(1600, np.float32))
    assert np.isfinite(out).all() and np.ptp(out) == 0


@pytest.mark.parametrize("bad", [np.zeros(100, np.float32), np.zeros((2, 2, 800), np.float32)])
def test_bad_shapes_are_refused(bad):
    with pytest.raises(ValueError, match="log_mel"):
        log_mel(bad)
