"""Noise suppression before VAD and ASR (runtime/models/listen/denoise.py): each
engine takes noise down and keeps a person's speech, in any chunk size; the
listen stage's VAD gets the denoised audio when a stream asks for it."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.errors import StageError
from runtime.models.listen.denoise import make_denoiser
from runtime.models.listen.executor import ListenExecutor
from voice_server.testing.speech_corpus import human_clips

SR = 16000


def pink(n: int, seed: int = 3) -> np.ndarray:
    spec = np.fft.rfft(np.random.default_rng(seed).standard_normal(n))
    spec /= np.sqrt(np.arange(1, spec.size + 1))
    x = np.fft.irfft(spec, n)
    return (0.2 * x / np.abs(x).max()).astype(np.float32)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def run(kind: str, audio: np.ndarray, chunk: int) -> np.ndarray:
    d = make_denoiser(kind)
    return np.concatenate([d.process(audio[i:i + chunk]) for i in range(0, audio.size, chunk)])


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return next(c.audio for c in human_clips() if c.group == "librivox")


@pytest.mark.parametrize("kind", ["near_field", "far_field", "rnnoise", "gtcrn", "dtln"])
def test_noise_goes_down_and_speech_stays(kind, speech):
    noise = pink(SR * 4)
    out = run(kind, noise, 333)  # an odd chunk size: the engines block it themselves
    # at most 32 ms held back (GTCRN: a 16 ms hop short of whole, and the hop it overlaps;
    # DTLN: a step short of whole, and the three steps its block overlaps)
    assert abs(out.size - noise.size) <= SR * 32 // 1000
    tail = slice(SR, out.size)  # after the engine's first second of learning the noise
    assert rms(out[tail]) < 0.5 * rms(noise[tail]), (rms(out[tail]), rms(noise[tail]))
    clean = run(kind, speech, 320)
    assert rms(clean) > 0.5 * rms(speech[:clean.size])  # the person is still there


def test_off_and_unknown_names():
    assert make_denoiser(None) is None
    with pytest.raises(ValueError):
        make_denoiser("studio")


def test_the_stream_feeds_its_vad_denoised_audio_when_asked(speech):
    """What reaches the VAD: the frames the stream cuts (``UtteranceStream.frames``)."""
    noisy = np.concatenate([pink(SR * 2), speech + pink(speech.size, seed=4)])
    ex = ListenExecutor(threads=1, asr_threads=1, asr_engine="pocketsphinx")
    ex.load()
    try:
        seen = {}
        for rid, kind in ((1, None), (2, "near_field")):
            ex.open(rid, {"sample_rate": SR, "noise_reduction": kind})
            frames = ex._streams[rid].frames(noisy, final=False)
            seen[kind] = np.concatenate(frames)
            ex.release(rid)
        lead = slice(SR, 2 * SR)  # noise alone
        assert rms(seen["near_field"][lead]) < 0.5 * rms(seen[None][lead])
        assert np.array_equal(seen[None], noisy[:seen[None].size])  # off: untouched
        with pytest.raises(StageError):
            ex.open(3, {"sample_rate": SR, "noise_reduction": "studio"})
    finally:
        ex.close()
