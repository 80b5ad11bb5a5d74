"""The silence around a clause (runtime/models/speak/pauses.py): the engine's own
padding cut away, the pause after a clause set by how it ends; and every engine,
fed a reply delta by delta, starts its first chunk with voice, not silence."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.models.speak.executor import SpeakExecutor
from runtime.models.speak.pauses import (CLAUSE_PAUSE_MS, MARGIN_MS, SENTENCE_PAUSE_MS,
                                         pause_after_ms, spoken_with_pause, voiced_span)
from tests.models.speak.test_speak import deltas, feed_deltas

RATE = 24000


def padded_tone(lead_ms: int, tone_ms: int, tail_ms: int, noise: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(RATE * tone_ms // 1000) / RATE
    tone = 8000 * np.sin(2 * np.pi * 220 * t)
    x = np.concatenate([np.zeros(RATE * lead_ms // 1000), tone, np.zeros(RATE * tail_ms // 1000)])
    return np.round(x + noise * rng.standard_normal(x.size)).astype(np.int16)


@pytest.mark.parametrize("text,ms", [
    ("Your order", 0), ("I have booked you", 0), ("Thanks for calling,", CLAUSE_PAUSE_MS),
    ("Well;", CLAUSE_PAUSE_MS), ("It is nine.", SENTENCE_PAUSE_MS), ("Really?", SENTENCE_PAUSE_MS),
    ('He said "stop!"', SENTENCE_PAUSE_MS), ("(see below.)  ", SENTENCE_PAUSE_MS), ("", 0)])
def test_the_pause_follows_the_clause_ending(text, ms):
    assert pause_after_ms(text) == ms


def test_padding_is_cut_to_the_margin_and_the_pause_added():
    x = padded_tone(300, 500, 400)
    start, end = voiced_span(x, RATE)
    margin = RATE * MARGIN_MS // 1000
    assert abs(start - (RATE * 300 // 1000 - margin)) <= RATE // 100
    assert abs(end - (RATE * 800 // 1000 + margin)) <= RATE // 100
    out = spoken_with_pause(x, RATE, "It is nine.")
    assert out.size == end - start + RATE * SENTENCE_PAUSE_MS // 1000
    assert out.dtype == np.int16
    assert spoken_with_pause(x, RATE, "It is nine.", speed=2.0).size == \
        end - start + RATE * SENTENCE_PAUSE_MS // 2000
    # a clause cut inside a sentence runs straight on into the next one
    assert spoken_with_pause(x, RATE, "Your order").size == end - start


def test_a_noise_floor_far_below_the_voice_is_cut_too():
    x = padded_tone(250, 300, 250, noise=5.0)   # ~-70 dB under the tone, like flite's hiss
    start, end = voiced_span(x, RATE)
    assert start > RATE * 200 // 1000 and end < RATE * 600 // 1000


def test_silence_gives_nothing():
    assert spoken_with_pause(np.zeros(4800, np.int16), RATE, "Hello.").size == 0
    assert spoken_with_pause(np.zeros(0, np.int16), RATE, "Hello.").size == 0


@pytest.mark.parametrize("engine", ["hibari", "flite", "espeak"])
def test_every_engine_starts_the_reply_with_voice(engine):
    """hibari pads each text with ~0.3 s of silence, flite ~0.2 s: as the first
    chunk of a reply that was latency a caller heard as silence."""
    ex = SpeakExecutor(engine=engine, first_clause_words=2)
    ex.load()
    try:
        chunks = [c for _, c in feed_deltas(ex, deltas("Your order shipped this morning. "
                                                       "It should arrive on Thursday."))]
    finally:
        ex.close()
    assert [c["text"] for c in chunks][:1] == ["Your order"]
    for c in chunks:
        a = np.abs(c["audio"].astype(np.int32))
        lead = np.flatnonzero(a > 0.05 * a.max())[0] * 1000 / c["sample_rate"]
        assert lead <= MARGIN_MS + 40, (c["text"], lead)
