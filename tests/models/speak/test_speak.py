"""SpeakExecutor, the clause segmenter and the in-process TTS engines (hibari, flite, espeak)."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from runtime.errors import ErrorCode, StageError
from runtime.executor import WorkItem
from runtime.models.speak.clauses import ClauseSegmenter, strip_markdown
from runtime.models.listen.whisper_asr import WhisperASR
from runtime.models.speak.executor import SpeakExecutor, make_synthesizer
from runtime.models.voice_contract import validate_speak_chunk

REPLY = "Paris is the capital of France. It is a lovely city."
EMOJI = "\U0001F600\U0001F389 \u2728"
_rid = iter(range(1, 1_000_000))


@pytest.fixture(scope="module", params=["hibari", "flite", "espeak"])
def speaker(request) -> SpeakExecutor:
    ex = SpeakExecutor(engine=request.param)
    ex.load()
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def recognizer() -> WhisperASR:
    """Whisper hears both voices; pocketsphinx barely hears espeak-ng (WER 0.6-0.8)."""
    return WhisperASR()


def deltas(text: str, size: int = 3) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def drain(ex: SpeakExecutor) -> list[tuple[int, list]]:
    """What the stage loop does between messages: collect() while clauses wait."""
    out = []
    while ex.has_results():
        out += ex.collect()
    return out


def feed_deltas(ex: SpeakExecutor, pieces: list[str], params: dict | None = None
                ) -> list[tuple[int, dict]]:
    """(index of the delta that produced it, chunk) for every chunk of one request."""
    rid = next(_rid)
    ex.open(rid, params or {})
    out: list[tuple[int, dict]] = []
    try:
        for k, piece in enumerate(pieces):
            [res] = ex.process([WorkItem(rid, piece, {}, final=k == len(pieces) - 1, first=k == 0)])
            assert not isinstance(res, BaseException), res
            out += [(k, c) for c in res]
            for got, outs in drain(ex):
                assert got == rid and not isinstance(outs, BaseException), outs
                out += [(k, c) for c in outs]
        assert not ex.pending(rid)
    finally:
        ex.release(rid)
    return out


def transcribe(rec: WhisperASR, audio: np.ndarray, rate: int) -> str:
    x = audio.astype(np.float32) / 32768
    if rate != 16000:
        x = soxr.resample(x, rate, 16000)
    return rec.transcribe([x])[0]


def words(text: str) -> set[str]:
    return {w.strip(".,!?;:").lower() for w in text.split()} - {""}


def test_deltas_stream_clause_by_clause(speaker, recognizer):
    pieces = deltas(REPLY)
    chunks = feed_deltas(speaker, pieces)
    assert len(chunks) >= 2
    first_at, first = chunks[0]
    assert first_at < len(pieces) - 1, "first audio must not wait for the whole reply"
    for _, c in chunks:
        assert set(c) == {"audio", "sample_rate", "text", "duration_ms"}
        assert c["audio"].dtype == np.int16 and c["audio"].ndim == 1 and c["audio"].size > 0
        assert c["sample_rate"] == speaker.synth.sample_rate
        assert c["duration_ms"] == pytest.approx(c["audio"].size * 1000 / c["sample_rate"])
        assert np.abs(c["audio"]).max() > 1000
    assert first["text"] == "Paris is the capital of France."
    assert " ".join(c["text"] for _, c in chunks) == REPLY
    heard = " ".join(transcribe(recognizer, c["audio"], c["sample_rate"]) for _, c in chunks)
    said = words(REPLY) - {"is", "the", "of", "it", "a"}  # paris capital france lovely city
    heard_said = said & words(heard)
    assert len(heard_said) * 2 > len(said), (heard, heard_said)  # most of them, with either voice


def test_chunks_keep_to_the_voice_contract(speaker):
    """Every chunk is a SpeakChunk, exactly (keys, types, 1-D int16 audio)."""
    chunks = [c for _, c in feed_deltas(speaker, deltas("**Paris** is the capital of France. " + REPLY))]
    assert len(chunks) >= 2
    for c in chunks:
        validate_speak_chunk(c)
        assert c["duration_ms"] == pytest.approx(c["audio"].size * 1000 / c["sample_rate"])


def test_whole_text_as_list(speaker):
    chunks = feed_deltas(speaker, [["Paris is the capital ", "of France. ", "It is a lovely city."]])
    assert [c["text"] for _, c in chunks] == ["Paris is the capital of France.", "It is a lovely city."]


def test_emoji_only_gives_no_chunks(speaker):
    assert feed_deltas(speaker, deltas(EMOJI, 1)) == []
    assert feed_deltas(speaker, [EMOJI + " ... !!"]) == []
    # emoji inside a clause are skipped, the words still spoken
    chunks = feed_deltas(speaker, ["Great \U0001F600 news!"])
    assert len(chunks) == 1 and chunks[0][1]["audio"].size > 0


def test_markdown_not_spoken_but_kept_in_text(speaker):
    chunks = feed_deltas(speaker, ["**Hello** there, `friend`."])
    assert [c["text"] for _, c in chunks] == ["**Hello** there,", "`friend`."]
    assert feed_deltas(speaker, ["*** ### ```"]) == []


def test_long_unpunctuated_text_is_capped(speaker):
    text = " ".join(["word"] * 120)
    chunks = feed_deltas(speaker, deltas(text, 7))
    assert len(chunks) >= 4
    assert all(len(c["text"]) <= speaker.max_clause_chars for _, c in chunks)
    assert " ".join(c["text"] for _, c in chunks) == text


def test_bad_payload_fails_only_that_request(speaker):
    a, b = next(_rid), next(_rid)
    speaker.open(a, {})
    speaker.open(b, {})
    try:
        res = speaker.process([WorkItem(a, 42, {}, final=True), WorkItem(b, "Hi.", {}, final=True)])
        assert isinstance(res[0], StageError) and res[0].code == ErrorCode.BAD_INPUT
        assert len(res[1]) == 1 and res[1][0]["text"] == "Hi."
    finally:
        speaker.release(a)
        speaker.release(b)


@pytest.mark.parametrize("engine,rate", [("hibari", 24000), ("flite", 16000), ("espeak", 22050)])
def test_synthesizers_direct(engine, rate):
    s = make_synthesizer(engine)
    assert s.sample_rate == rate
    assert s.synthesize(EMOJI).size == 0
    assert s.synthesize("").size == 0
    assert s.synthesize("Caf\u00e9 cr\u00e8me.").size > 0
    long = s.synthesize("This is a fairly long sentence that goes on. " * 20)
    assert long.dtype == np.int16 and long.size / rate > 20


def test_unknown_engine_or_voice():
    with pytest.raises(ValueError):
        SpeakExecutor(engine="nope").load()
    with pytest.raises(ValueError):
        make_synthesizer("flite", "no_such_voice")


def test_segmenter_rules():
    seg = ClauseSegmenter(max_clause_chars=120, first_clause_words=6)
    got = []
    for piece in deltas("one two three four five six seven eight. Nine, ten", 2):
        got += seg.push(piece)
    assert got == ["one two three four five six", "seven eight."]   # eager first clause
    assert seg.flush() == ["Nine, ten"]         # later commas need a few words first
    seg = ClauseSegmenter()
    assert seg.push("Well, Dr. Smith paid 3.50 dollars") == ["Well,"]
    assert seg.push(". Then\nleft") == ["Dr. Smith paid 3.50 dollars.", "Then"]
    assert seg.flush() == ["left"]
    assert seg.flush() == []


def test_a_hurried_segmenter_breaks_after_a_few_words():
    seg = ClauseSegmenter(first_clause_words=2, hurry_words=3)
    assert seg.push("The closest planet to the sun ") == ["The closest"]
    assert seg.push("is ") == []                  # later clauses wait for punctuation...
    seg.hurry = True                              # ...unless the listener is running out
    assert seg.push("Mercury") == ["planet to the"]
    seg.hurry = False
    assert seg.push(", the smallest one. ") == ["sun is Mercury, the smallest one."]


def test_a_slow_writer_gets_short_clauses_a_fast_one_whole_sentences():
    """The speak stage hurries a reply whose audio made so far would already
    have been heard (a model writing slower than the voice speaks)."""
    text = "Mercury is closest. It is a small and rocky planet that races around the sun quickly."
    for hurry_ms, want_clauses in ((0.0, 3), (1e9, 7)):
        ex = SpeakExecutor(engine="flite", first_clause_words=2, hurry_below_ms=hurry_ms)
        ex.load()
        rid = next(_rid)
        chunks = []
        for i, piece in enumerate(deltas(text, 4)):
            chunks += ex.process([WorkItem(rid, piece, final=False)])[0]
        chunks += ex.process([WorkItem(rid, "", final=True)])[0]
        chunks += [c for _, cs in drain(ex) for c in cs]
        got = [c["text"] for c in chunks]
        assert " ".join(got) == text and len(got) == want_clauses, got
        assert ex.stats()["hurried"] == (0 if hurry_ms == 0 else want_clauses - 2), ex.stats()
        ex.close()


def test_strip_markdown():
    assert strip_markdown("## Title\n- **bold** [link](http://x) `code`") == "Title bold link code"
