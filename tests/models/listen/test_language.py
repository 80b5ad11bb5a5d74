"""A caller's language (issue 42): the lock rule alone, then the real listen
stage with Whisper base.  The speech is synthetic (espeak-ng's voices of each
language): no recordings of people in these languages ship here."""

from __future__ import annotations

import subprocess
import wave

import numpy as np
import pytest
import soxr

from runtime.models.listen.language import (LOCK_MIN_S, SWITCH_COUNT, SWITCH_MIN_S, LanguageAsk,
                                            LanguageLock, check_language, transcribe_in)
from runtime.models.voice_contract import FINAL, LANGUAGE, validate_listen_event
from voice_server.testing.wer import wer

SR = 16000
SPANISH = "hola, quisiera saber el horario de la tienda mañana por la tarde"


# ---------------------------------------------------------------- the rule
def test_the_first_long_sure_utterance_locks_and_a_short_one_does_not():
    lock = LanguageLock()
    assert lock.ask() == LanguageAsk(None, False)
    assert not lock.observe("en", 0.99, 0.7)          # "okay": sure, but short
    assert lock.language is None
    assert not lock.observe("es", 0.3, 3.0)           # long, unsure
    assert lock.observe("es", 0.9, LOCK_MIN_S)
    assert (lock.language, lock.ask()) == ("es", LanguageAsk("es", False))


def test_a_short_english_okay_never_switches_a_spanish_session():
    lock = LanguageLock(language="es")
    for _ in range(10):
        assert not lock.observe("en", 0.99, 0.7)
    assert lock.language == "es"
    # and Whisper is told to transcribe it in Spanish
    assert transcribe_in(lock.ask(), "en", 0.99, 0.7 + 0.5) == "es"


def test_only_a_run_of_long_sure_utterances_switches():
    lock = LanguageLock(language="es")
    assert not lock.observe("en", 0.95, SWITCH_MIN_S)          # one: not yet
    assert not lock.observe("es", 0.9, LOCK_MIN_S)             # back in Spanish: the run ends
    assert not lock.observe("en", 0.95, SWITCH_MIN_S)
    assert not lock.observe("de", 0.95, SWITCH_MIN_S)          # a run is in one language
    assert not lock.observe("en", 0.6, 5.0)                    # unsure: no evidence either way
    changed = [lock.observe("en", 0.95, 3.0) for _ in range(SWITCH_COUNT)]
    assert changed == [False] * (SWITCH_COUNT - 1) + [True]
    assert (lock.language, lock.changes) == ("en", 1)
    # a long sure sentence in another language is transcribed in it, before any switch
    assert transcribe_in(LanguageAsk("es"), "en", 0.95, SWITCH_MIN_S + 0.5) == "en"
    assert transcribe_in(LanguageAsk(None), "ko", 0.3, 0.6) == "ko"     # nothing locked yet


def test_a_pin_and_an_english_only_model_never_change():
    pinned = LanguageLock(pinned="es")
    assert pinned.ask() == LanguageAsk("es", True)
    assert not any(pinned.observe("en", 0.99, 10.0) for _ in range(5))
    assert transcribe_in(pinned.ask(), "en", 0.99, 10.0) == "es"
    english = LanguageLock(pinned="es", multilingual=False)
    assert english.ask() is None and english.language == "en"
    assert check_language("ES") == "es" and check_language(None) is None
    for bad in ("spanish", "xx", 3):
        with pytest.raises(ValueError):
            check_language(bad)


# ---------------------------------------------------------- the listen stage
def espeak_16k(text: str, voice: str, tmp) -> np.ndarray:
    out = tmp / f"{voice}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", "130", "-g", "3", "-w", str(out), text], check=True)
    with wave.open(str(out)) as w:
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768
    return soxr.resample(x, rate, SR).astype(np.float32)


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lang")
    pad = np.zeros(int(0.5 * SR), dtype=np.float32)
    return {"es": np.concatenate([pad, espeak_16k(SPANISH, "es", tmp), pad, pad]),
            "okay": np.concatenate([pad, espeak_16k("okay", "en", tmp), pad, pad])}


@pytest.fixture(scope="module")
def base_ex():
    from runtime.models.listen.executor import ListenExecutor

    e = ListenExecutor(threads=1, asr_model="base", turn_model=None, asr_peek_ms=0)
    e.load()
    yield e
    e.close()


def _run(ex, audio: np.ndarray, params: dict) -> list[dict]:
    """Each recognition awaited before the next chunk: real time's order, where
    an utterance's words are in before the next one pauses."""
    from tests.models.listen.test_listen import stream_judged

    return [e for _, e in stream_judged(ex, audio, params)]


def test_a_pinned_language_is_transcribed_in_it(base_ex, speech):
    events = _run(base_ex, speech["es"], {"language": "es"})
    [final] = [e for e in events if e["type"] == FINAL]
    assert final["language"] == "es" and wer(SPANISH, final["text"]) <= 0.4, final
    assert not [e for e in events if e["type"] == LANGUAGE]       # a pin is no news
    for e in events:
        validate_listen_event(e)


def test_spanish_locks_and_a_short_okay_stays_spanish(base_ex, speech):
    events = _run(base_ex, np.concatenate([speech["es"], speech["okay"], speech["okay"]]), {})
    said = [e for e in events if e["type"] in (FINAL, LANGUAGE)]
    assert [e["type"] for e in said] == [LANGUAGE, FINAL, FINAL, FINAL], said
    assert said[0]["language"] == "es" and said[0]["probability"] >= 0.8
    assert [e["language"] for e in said[1:]] == ["es", "es", "es"], said
    assert wer(SPANISH, said[1]["text"]) <= 0.4, said
    for e in events:
        validate_listen_event(e)


def test_an_english_only_model_says_english(speech):
    from runtime.models.listen.whisper_asr import WhisperASR

    asr = WhisperASR("tiny.en")
    [heard] = asr.hear([speech["okay"]], [LanguageAsk("es", True)])
    assert heard.language == "en" and heard.heard is None and "ok" in heard.text.lower()
