"""The voice lock's rules (voice_lock.py) on made-up vectors: enrolment gates, verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.models.listen.voice_lock import (ACCEPT, ENROL_SEGMENT_S, SHORT_ACCEPT, SHORT_S,
                                              Verdict, VoiceLock)

rng = np.random.default_rng(7)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def near(base: np.ndarray, cos: float) -> np.ndarray:
    """A unit vector at cosine ``cos`` from unit ``base``."""
    other = rng.standard_normal(base.size)
    other = unit(other - (other @ base) * base)
    return unit(cos * base + np.sqrt(1 - cos ** 2) * other)


CALLER = unit(rng.standard_normal(192))
TV = unit(rng.standard_normal(192))


def test_everyone_is_the_caller_until_enrolled():
    assert VoiceLock().verdict(TV, 2.0) is Verdict.CALLER


def test_enrols_from_two_agreeing_segments_with_enough_voice():
    lock = VoiceLock()
    assert not lock.offer(near(CALLER, 0.8), 1.2)
    assert lock.offer(near(CALLER, 0.8), 1.2)
    assert lock.enrolled and lock.voice @ CALLER > 0.8


def test_short_segments_do_not_enrol():
    lock = VoiceLock()
    for _ in range(5):
        assert not lock.offer(near(CALLER, 0.9), ENROL_SEGMENT_S - 0.1)
    assert not lock.enrolled


def test_a_segment_of_someone_else_agrees_with_nothing():
    """The TV spoke first: the caller's two segments still enrol, without it."""
    lock = VoiceLock()
    assert not lock.offer(TV, 3.0)
    assert not lock.offer(near(CALLER, 0.8), 1.1)
    assert lock.offer(near(CALLER, 0.8), 1.1)
    assert lock.voice @ CALLER > 0.8 and abs(lock.voice @ TV) < 0.3


def test_two_voices_that_disagree_do_not_enrol():
    lock = VoiceLock()
    assert not lock.offer(CALLER, 3.0)
    assert not lock.offer(TV, 3.0)
    assert not lock.enrolled


def enrolled() -> VoiceLock:
    lock = VoiceLock()
    lock.offer(CALLER, 2.0)
    lock.offer(CALLER, 2.0)
    return lock


@pytest.mark.parametrize("cos,voiced_s,want", [
    (0.6, 2.0, Verdict.CALLER), (ACCEPT + 0.01, 2.0, Verdict.CALLER),
    (ACCEPT - 0.01, 2.0, Verdict.OTHER), (0.1, 2.0, Verdict.OTHER),
    # a short word gets the lower bar: weak vectors must not lock the caller out
    (ACCEPT - 0.01, SHORT_S - 0.1, Verdict.CALLER), (SHORT_ACCEPT - 0.01, SHORT_S - 0.1, Verdict.OTHER),
])
def test_verdict_by_similarity_and_length(cos, voiced_s, want):
    lock = enrolled()
    assert lock.verdict(near(CALLER, cos), voiced_s) is want
    assert lock.last_score == pytest.approx(cos, abs=1e-4)


@pytest.mark.parametrize("bad", [np.zeros(192), np.full(192, np.nan)])
def test_a_broken_vector_is_an_error_not_a_verdict(bad):
    with pytest.raises(ValueError):
        enrolled().verdict(bad, 2.0)


def test_voice_lock_param_is_checked_at_the_edge():
    from runtime.errors import StageError
    from runtime.models.listen.vad_params import VadParams

    assert VadParams.from_dicts({}, {}).voice_lock is False
    assert VadParams.from_dicts({"voice_lock": True}, {"voice_lock": None}).voice_lock is True
    assert VadParams.from_dicts({"voice_lock": True}, {"voice_lock": False}).voice_lock is False
    with pytest.raises(StageError, match="voice_lock"):
        VadParams.from_dicts({}, {"voice_lock": "on"})


def test_a_later_window_has_a_higher_bar():
    """Each window after the first is one more chance for someone else to pass."""
    from runtime.models.listen.voice_lock import WINDOW_ACCEPT

    lock = enrolled()
    assert lock.verdict(near(CALLER, ACCEPT + 0.02), 2.0) is Verdict.CALLER
    assert lock.verdict(near(CALLER, ACCEPT + 0.02), 2.0, later_window=True) is Verdict.OTHER
    assert lock.verdict(near(CALLER, WINDOW_ACCEPT + 0.01), 2.0, later_window=True) is Verdict.CALLER


def test_a_telephone_line_has_higher_bars():
    """Every score is higher on an 8 kHz line, other people's too."""
    from runtime.models.listen.voice_lock import (NARROW_ACCEPT, NARROW_SHORT_ACCEPT,
                                                  NARROW_WINDOW_ACCEPT)

    lock = enrolled()
    lock.narrowband = True
    assert lock.verdict(near(CALLER, ACCEPT + 0.05), 2.0) is Verdict.OTHER
    assert lock.verdict(near(CALLER, NARROW_ACCEPT + 0.01), 2.0) is Verdict.CALLER
    assert lock.verdict(near(CALLER, NARROW_SHORT_ACCEPT + 0.01), SHORT_S - 0.1) is Verdict.CALLER
    assert lock.verdict(near(CALLER, NARROW_ACCEPT + 0.01), 2.0, later_window=True) is Verdict.OTHER
    assert lock.verdict(near(CALLER, NARROW_WINDOW_ACCEPT + 0.01), 2.0,
                        later_window=True) is Verdict.CALLER


def test_a_short_word_just_after_someone_else_gets_the_long_bar():
    """"front ... center": the other person going on is not let through by the short bar."""
    lock = enrolled()
    short = near(CALLER, SHORT_ACCEPT + 0.02)
    assert lock.verdict(short, SHORT_S - 0.1) is Verdict.CALLER
    assert lock.verdict(short, SHORT_S - 0.1, after_other=True) is Verdict.OTHER


def test_windows_are_judged_until_a_pause_or_the_limit():
    from runtime.models.listen.voice_lock import CHECK_MAX_S, HOP_S, is_last

    assert not is_last(0.7, paused=False)
    assert is_last(0.7, paused=True)
    assert is_last(CHECK_MAX_S - HOP_S / 2, paused=False)
