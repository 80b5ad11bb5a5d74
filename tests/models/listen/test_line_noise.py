"""LineNoise: a person's clean recording reads clean, the same under a room's
talk or noise reads noisy, and digital silence is no level at all."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.noise_bench import mix, noisy_sets, pink_noise
from runtime.models.listen.line_noise import LineNoise
from runtime.models.listen.silero_vad import FRAME_SAMPLES
from voice_server.testing.speech_corpus import human_clips


def _heard(audio: np.ndarray) -> LineNoise:
    line = LineNoise()
    for i in range(0, audio.size - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        line.hear(audio[i:i + FRAME_SAMPLES])
    return line


@pytest.fixture(scope="module")
def clips():
    return [c for c in human_clips() if c.group != "cards"]


def test_people_read_clean_and_under_babble_or_noise_noisy(clips):
    # noise_bench's own mixes: eight other people talking, or pink noise, at 5 dB
    sets = noisy_sets(clips, [5.0])
    assert [c.name for c, a in sets["clean"] if _heard(a).judge()] == []
    for name in ("babble@5", "pink@5"):
        assert [c.name for c, a in sets[name] if not _heard(a).judge()] == [], name


def test_digital_silence_between_turns_keeps_a_clean_line_clean(clips):
    quiet = np.zeros(16000 * 3, np.float32)
    line = _heard(np.concatenate([quiet, clips[0].audio, quiet, clips[1].audio, quiet]))
    assert not line.judge()
    assert _heard(quiet).spread_db() is None      # nothing heard: no verdict


def test_a_synthetic_voice_with_exact_zeros_in_its_gaps_reads_clean():
    # hibari between its words writes digital silence: the floor of a clean line,
    # not a level to leave out (left out, half its segments read noisy when served)
    from voice_server.testing.audio import caller_pcm

    said = caller_pcm("Tell me a long story about a lighthouse keeper and the storm that "
                      "came in from the sea one winter night", "heart", 16000)
    line = _heard(said.astype(np.float32) / 32768)
    assert line.spread_db() > 30 and not line.judge()
    # a call that opens with words: its first second is no verdict yet
    assert _heard(said[:16000].astype(np.float32) / 32768).spread_db() is None


def test_a_noisy_line_stays_noisy_through_one_clearer_stretch(clips):
    rng = np.random.default_rng(3)
    c = clips[0]
    line = _heard(mix(c.audio, pink_noise(c.audio.size, rng), 5))
    assert line.judge()
    for i in range(0, 16000, FRAME_SAMPLES):        # a second of a 21 dB line
        line.hear(mix(c.audio, pink_noise(c.audio.size, rng), 21)[i:i + FRAME_SAMPLES])
    assert line.judge()


def test_the_stage_reads_a_noisy_line_with_its_stronger_recogniser(clips):
    from benchmarks.asr_bench import transcribe
    from runtime.models.listen.executor import ListenExecutor

    sets = noisy_sets(clips, [5.0])
    clean = next(a for c, a in sets["clean"] if c.name.endswith("0880"))
    babble = next(a for c, a in sets["babble@5"] if c.name.endswith("0880"))
    ex = ListenExecutor(threads=1, asr_threads=1, asr_model="tiny.en", asr_noisy_model="base",
                         asr_noisy_preload=True)
    ex.load()
    try:
        assert transcribe(ex, clean, 16000, 1, pad=False)
        assert ex.stats()["asr"]["noisy_segments"] == 0
        assert transcribe(ex, babble, 16000, 2, pad=False)
        assert ex.stats()["asr"]["noisy_segments"] >= 1
    finally:
        ex.close()


def _started(ex, rid: int, audio: np.ndarray, params: dict) -> list[int]:
    """The sample offsets (20 ms steps) at which speech_started came."""
    from runtime.executor import WorkItem
    from runtime.models.voice_contract import SPEECH_STARTED

    ex.open(rid, {"sample_rate": 16000, **params})
    at: list[int] = []
    try:
        for i in range(0, audio.size, 320):
            evs = ex.process([WorkItem(rid, audio[i:i + 320], {}, final=i + 320 >= audio.size)])[0]
            at += [i for e in evs if e["type"] == SPEECH_STARTED]
            ex.collect()
    finally:
        ex.release(rid)
    return at


def test_a_room_talking_without_a_pause_opens_one_turn_not_one_per_cut(clips):
    """Eight people talking at once are speech to the VAD from end to end; cut
    at max_utterance_s, the line (noisy) opens no new turn until the sound
    stops, and then the caller's words open one."""
    from benchmarks.noise_bench import babble_noise
    from runtime.models.listen.executor import ListenExecutor

    rng = np.random.default_rng(11)
    room = babble_noise(16000 * 14, [c.audio for c in clips], rng) * 0.3
    caller = clips[0].audio
    ex = ListenExecutor(threads=1, asr_threads=1, asr_model="tiny.en")
    ex.load()
    try:
        at = _started(ex, 1, np.concatenate([room, np.zeros(16000, np.float32), caller]),
                      {"max_utterance_s": 4.0})
        assert sum(a < room.size for a in at) == 1, at      # the room's 14 s: one turn
        assert at[-1] > room.size, at                       # then the caller is heard
        # a clean line's monologue goes on in a new turn at once after the cut
        long_talk = np.concatenate([np.zeros(8000, np.float32)] + [c.audio for c in clips[:3]])
        assert len(_started(ex, 2, long_talk, {"max_utterance_s": 1.0})) >= 3
    finally:
        ex.close()
