"""Whisper's second reading of short sounds (whisper_asr.WhisperASR.hear): an
"uh huh" that Whisper writes as words reads as an acknowledgement, and
people's short commands do not."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.models.listen.whisper_asr import ALT_PROMPT, WhisperASR
from voice_server.session.backchannel import InterruptionSettings, only_backchannel
from voice_server.testing.audio import flite_pcm
from voice_server.testing.speech_corpus import human_clips

PHRASES = InterruptionSettings().phrases()


def _16k(text: str, voice: str, stretch: float) -> np.ndarray:
    return flite_pcm(text, 16000, voice, stretch).astype(np.float32) / 32768


@pytest.fixture(scope="module")
def asr():
    return WhisperASR(window_s=10, beam_size=5, no_repeat_ngram_size=3, alt_prompt=ALT_PROMPT,
                      alt_max_s=2.0)


def _reads_as_backchannel(h) -> bool:
    return only_backchannel(h.text, PHRASES) or bool(h.alternative) and \
        only_backchannel(h.alternative, PHRASES)


def test_a_hum_written_as_words_reads_as_an_acknowledgement(asr):
    # flite's slow "uh huh": Whisper alone writes "hahaha" or words, prompted "Uh-huh."
    sounds = [_16k("uh huh", "slt", 1.15), _16k("mm hmm", "rms", 1.0), _16k("okay", "awb", 1.1)]
    heard = asr.hear(sounds)
    assert all(_reads_as_backchannel(h) for h in heard), heard


def test_commands_and_peoples_short_words_are_not_acknowledgements(asr):
    people = [c.audio for c in human_clips() if c.seconds <= 2.0]
    commands = [_16k(t, "slt", 1.0) for t in ("stop", "no thanks", "repeat that", "what")]
    heard = asr.hear(people + commands)
    assert len(people) >= 5
    assert not any(_reads_as_backchannel(h) for h in heard), heard


def test_long_segments_and_no_prompt_get_no_second_reading(asr):
    long = np.concatenate([_16k("uh huh", "slt", 1.15), np.zeros(40000, np.float32)])
    assert asr.hear([long])[0].alternative is None
    plain = WhisperASR(window_s=10, alt_prompt="")
    assert plain.hear([_16k("uh huh", "slt", 1.15)])[0].alternative is None
    assert plain.transcribe([np.zeros(16000, np.float32)]) == [""]


def _phone(text: str, voice: str, stretch: float) -> np.ndarray:
    """turn_bench's flite sound (24 kHz, its quiet ends cut) as a Twilio line
    carries it (8 kHz mu-law), back at the listen stage's 16 kHz."""
    import soxr

    from voice_server.audio_codec import mulaw_decode, mulaw_encode

    pcm = flite_pcm(text, 24000, voice, stretch)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 300)
    pcm8 = soxr.resample(pcm[loud[0]:loud[-1] + 1].astype(np.float32) / 32768, 24000, 8000)
    line = mulaw_decode(mulaw_encode((np.clip(pcm8, -1, 1) * 32767).astype(np.int16)))
    heard = soxr.resample(line.astype(np.float32) / 32768, 8000, 16000)
    return np.concatenate([np.zeros(1600, np.float32), heard, np.zeros(1600, np.float32)]).astype(np.float32)


def test_a_hum_over_the_reply_is_read_again_with_the_whole_window(asr):
    # the phone line's "mm hmm" that cancelled a reply: the cut window writes
    # words ("And then make a man"), the whole window a hum
    hum = _phone("mm hmm", "slt", 1.0)
    alone, over = asr.hear([hum])[0], asr.hear([hum], full_window=[True])[0]
    assert not _reads_as_backchannel(alone), alone
    assert _reads_as_backchannel(over) and over.text == alone.text, over
    # people's short words over a reply stay words, and long segments are not read again
    people = [c.audio for c in human_clips() if c.seconds <= 2.0]
    heard = asr.hear(people, full_window=[True] * len(people))
    assert not any(_reads_as_backchannel(h) for h in heard), heard
    long = np.concatenate([hum, np.zeros(32000, np.float32)])
    assert asr.hear([long], full_window=[True])[0].alternative is None


def test_a_prompted_reading_of_the_same_words_leaves_room_for_the_whole_windows(asr):
    # turn_bench's quick "stop" with a short lead-in: the cut window writes
    # "Start", the acknowledgements prompt "Start." (the same word: no other
    # reading), the whole window "Stop.", which the server then weighs
    pcm = flite_pcm("stop", 16000, "slt", 0.8)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 300)
    stop = np.concatenate([np.zeros(1600, np.float32),
                           pcm[loud[0]:loud[-1] + 1].astype(np.float32) / 32768,
                           np.zeros(4800, np.float32)])
    alone, over = asr.hear([stop])[0], asr.hear([stop], full_window=[True])[0]
    assert alone.text.strip(".").lower() == "start" and alone.alternative is None, alone
    assert over.alternative and over.alternative.strip(".").lower() == "stop", over


def test_a_last_word_heard_as_a_letter_is_read_again_with_the_whole_window(asr):
    # the long call's "what is the history of tea" in hibari's voice: the cut
    # window writes "... of T?", which the turn reader takes for a cut sentence
    from voice_server.testing.audio import caller_pcm

    pcm = caller_pcm("what is the history of tea", "heart", 16000)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 300)
    tea = np.concatenate([pcm[loud[0]:loud[-1] + 1].astype(np.float32) / 32768,
                          np.zeros(3200, np.float32)])
    assert asr.hear([tea], early=True)[0].text.endswith(" T?")   # early readings: as heard
    assert asr.hear([tea])[0].text == "What is the history of tea?"
    # as the listen stage sends it, after its lead of silence: "... of t?"
    led = np.concatenate([np.zeros(4800, np.float32), tea])
    assert asr.hear([led], early=True)[0].text.endswith(" t?")
    assert asr.hear([led])[0].text == "What is the history of tea?"
    # people's transcripts do not end on a letter: read once, as before
    people = [c.audio for c in human_clips()][:6]
    assert [h.text for h in asr.hear(people)] == [h.text for h in asr.hear(people, early=True)]
