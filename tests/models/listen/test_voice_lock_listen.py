"""The voice lock in the real listen stage, on people's recordings (speech_corpus.py).

The caller is the speaker of the card names; once enrolled from two of their
utterances, other people's recordings (the alsa phrases, a LibriVox reader,
"go forward ten meters") open no turn and reach no transcript, and the caller
still opens turns, their shortest command ("ten of clubs", 1.1 s) included,
and so does the caller talking over another person at the same level (the
lock judges the window of the utterance that matches best).
"""

from __future__ import annotations

import numpy as np
import pytest

from runtime.executor import WorkItem
from runtime.models.listen.executor import ListenExecutor
from runtime.models.model_files import campplus_file
from voice_server.testing.speech_corpus import CorpusUnavailable, human_clips

SR = 16000
CHUNK = SR * 20 // 1000


@pytest.fixture(scope="module")
def clips() -> dict:
    # `make setup` installs the corpus and exports CAM++: a missing one is a failure
    assert campplus_file().is_file(), "CAM++ not exported: run `make setup`"
    try:
        return {c.name: c.audio for c in human_clips()}
    except CorpusUnavailable as exc:
        pytest.fail(f"people's recordings missing ({exc}): run `make setup`")


@pytest.fixture(scope="module")
def ex():
    e = ListenExecutor(threads=1, asr_peek_ms=0, asr_alt_prompt="", turn_model=None,
                       voice_lock=True)
    e.load()
    yield e
    e.close()


def run(ex: ListenExecutor, rid: int, audio: np.ndarray) -> list[dict]:
    """Feed 20 ms chunks, waiting out each chunk's jobs: as fast as the models
    allow, but the verdicts land at the frame they would in real time or sooner."""
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    out: list[dict] = []
    for i in range(0, len(pcm), CHUNK):
        [res] = ex.process([WorkItem(rid, pcm[i:i + CHUNK], {}, final=False)])
        assert not isinstance(res, BaseException), res
        out += res
        while ex.pending(rid):
            out += [e for r, evs in ex.collect() if r == rid for e in evs]
        out += [e for r, evs in ex.collect() if r == rid for e in evs]
    return out


def with_pause(audio: np.ndarray, s: float = 1.0) -> np.ndarray:
    return np.concatenate([np.zeros(SR // 4, np.float32), audio, np.zeros(int(s * SR), np.float32)])


def started(events: list[dict]) -> int:
    return sum(e["type"] == "speech_started" for e in events)


def finals(events: list[dict]) -> list[str]:
    return [e["text"] for e in events if e["type"] == "final"]


def test_another_person_opens_no_turn_after_enrolment_and_the_caller_still_does(ex, clips):
    rid = 9001
    ex.open(rid, {"voice_lock": True})
    try:
        enrol = run(ex, rid, with_pause(clips["cards-005"])) + \
            run(ex, rid, with_pause(clips["cards-002"]))
        assert started(enrol) == 2          # before enrolment everyone opens turns
        assert ex._streams[rid].lock.enrolled
        for other in ("alsa-Front_Center", "goforward", "sense_and_sensibility_01_austen_64kb-0880"):
            evs = run(ex, rid, with_pause(clips[other]))
            assert started(evs) == 0 and finals(evs) == [], (other, evs)
            assert any(e["type"] == "onset_dropped" for e in evs)
        for own in ("cards-001", "cards-003"):     # "ten of clubs": 1.1 s, the shortest
            evs = run(ex, rid, with_pause(clips[own]))
            assert started(evs) == 1, (own, evs)
            assert " of " in " ".join(finals(evs)).lower()   # tiny.en: "10 of close" is words enough
        counts = ex._streams[rid].voice_counts
        assert counts["voice_other"] >= 3 and counts["voice_caller"] == 2   # a pause splits one
        # enrolments on the niced thread, verdicts on the other (executor._voice_job)
        assert ex._enrol_thread.counters["busy_s"] > 0 and ex._voice_thread.counters["busy_s"] > 0
    finally:
        ex.release(rid)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


def test_the_caller_over_another_talker_at_the_same_level_still_opens_a_turn(ex, clips):
    """"five five" with "front left" said over it at the caller's level: the
    first second's vector is the mix (0.30 against the caller's voice, under
    the bar); a later window where the caller dominates passes (0.6)."""
    rid = 9003
    ex.open(rid, {"voice_lock": True})
    try:
        for own in ("cards-005", "cards-002"):
            run(ex, rid, with_pause(clips[own]))
        assert ex._streams[rid].lock.enrolled
        caller, other = clips["cards-004"], clips["alsa-Front_Left"]
        over = np.resize(other, caller.size) * rms(caller) / rms(other)
        evs = run(ex, rid, with_pause(caller + over))
        assert started(evs) == 1, evs
        # the other person alone, at that level, still opens nothing
        evs = run(ex, rid, with_pause(other * rms(caller) / rms(other)))
        assert started(evs) == 0, evs
    finally:
        ex.release(rid)


def test_the_lock_is_off_unless_asked(ex, clips):
    rid = 9002
    ex.open(rid, {"voice_lock": False})
    try:
        assert ex._streams[rid].lock is None
        evs = run(ex, rid, with_pause(clips["alsa-Front_Left"]))
        assert started(evs) == 1
    finally:
        ex.release(rid)


def test_a_telephone_line_has_the_narrow_band_bars(ex, clips):
    """A stream sent at 8 kHz, or told its caller's line is 8 kHz (LINE_RATE),
    judges with the telephone line's bars (voice_lock.py); a wide-band line not."""
    from runtime.models.voice_contract import LINE_RATE

    for rid, params, narrow in ((9003, {"voice_lock": True, "sample_rate": 8000}, True),
                                (9004, {"voice_lock": True, LINE_RATE: 8000}, True),
                                (9005, {"voice_lock": True, LINE_RATE: 16000}, False)):
        ex.open(rid, params)
        try:
            s = ex._streams[rid]
            assert s.lock.narrowband is narrow and s.voice_counts["voice_narrowband"] == int(narrow)
        finally:
            ex.release(rid)
