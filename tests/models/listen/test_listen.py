"""ListenExecutor on speech generated at test time with the flite CLI (see TESTING.md)."""

from __future__ import annotations

import subprocess
import threading
import time
import wave
from pathlib import Path

import numpy as np
import pytest
import soxr

from runtime.errors import ErrorCode, StageError
from runtime.executor import WorkItem
from runtime.models.listen.executor import ListenExecutor
from runtime.models.listen.pocketsphinx_asr import StreamingRecognizer
from runtime.models.listen.silero_vad import SileroVAD
from runtime.models.voice_contract import FINAL, SPEECH_STARTED, SPEECH_STOPPED, validate_listen_event
from voice_server.testing.audio import flite_pcm
from voice_server.testing.speech_corpus import human_clips
from voice_server.testing.wer import corpus_wer, normalize, wer

SR = 16000
QUESTION = "what is the capital of france"
_rid = iter(range(1, 1_000_000))


def flite_16k(text: str, tmp: Path) -> np.ndarray:
    out = tmp / "tts.wav"
    subprocess.run(["flite", "-voice", "slt", "-t", text, "-o", str(out)], check=True)
    with wave.open(str(out)) as w:
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    if rate != SR:
        x = (soxr.resample(x.astype(np.float32) / 32768, rate, SR) * 32767).astype(np.int16)
    return x


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SR), dtype=np.int16)


def onset_ms(x: np.ndarray) -> float:
    """First 10 ms window with real energy: the ground truth for audio_start_ms."""
    win = x[: len(x) // 160 * 160].astype(np.float64).reshape(-1, 160)
    loud = np.flatnonzero(np.sqrt((win ** 2).mean(axis=1)) > 300)
    return loud[0] * 10.0


def drain(ex: ListenExecutor, rid: int, timeout_s: float = 30.0) -> list[dict]:
    """Wait for the recognition thread's last results for this stream (a poll with a deadline)."""
    out: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while True:
        for r, evs in ex.collect():
            if r == rid:
                out += evs
        if not ex.pending(rid):
            for r, evs in ex.collect():
                if r == rid:
                    out += evs
            return out
        assert time.monotonic() < deadline, "recognition never finished"
        time.sleep(0.005)


def stream(ex: ListenExecutor, audio: np.ndarray, rate: int = SR, chunk_ms: int = 20,
           params: dict | None = None) -> list[tuple[float, dict]]:
    """Feed audio like a client would; return (input ms at emission, event) pairs.

    Results the recognition thread finishes meanwhile are collected after every
    chunk, as the stage loop does; the rest when the stream ends.
    """
    params = {"sample_rate": rate, **(params or {})}
    rid = next(_rid)
    ex.open(rid, params)
    step = max(1, rate * chunk_ms // 1000)
    events: list[tuple[float, dict]] = []
    try:
        starts = list(range(0, len(audio), step)) or [0]
        for k, i in enumerate(starts):
            final = k == len(starts) - 1
            [res] = ex.process([WorkItem(rid, audio[i:i + step], params, final=final, first=k == 0)])
            assert not isinstance(res, BaseException), res
            t = (i + step) * 1000 / rate
            events += [(t, e) for e in res]
            events += [(t, e) for r, evs in ex.collect() if r == rid for e in evs]
        events += [(len(audio) * 1000 / rate, e) for e in drain(ex, rid)]
    finally:
        ex.release(rid)
    return events


# Events whose timing depends on how fast recognition runs relative to the
# (faster than real time) input: checked by their own tests, not by event order.
HINTS = ("partial", "turn_likely_over", "turn_continues", "onset", "onset_dropped",
         "speech_paused", "speech_resumed", "interim")


def kinds(events) -> list[str]:
    return [e["type"] for _, e in events if e["type"] not in HINTS]


def resample_int16(x: np.ndarray, rate: int) -> np.ndarray:
    y = soxr.resample(x.astype(np.float32) / 32768, SR, rate)
    return (np.clip(y, -1, 1) * 32767).astype(np.int16)


@pytest.fixture(scope="module", params=["whisper", "pocketsphinx"])
def ex(request) -> ListenExecutor:
    e = ListenExecutor(threads=1, asr_engine=request.param)
    e.load()
    yield e
    e.close()


NO_PEEK_DROPS = {"asr_peek_max_wait_ms": 60_000, "asr_peek_max_busy": 1.0}


@pytest.fixture(scope="module")
def whisper_ex() -> ListenExecutor:
    """Peeks are never dropped here: the tests feed audio faster than real time, so
    the recognition thread looks busy (and on a loaded CI box, late) in a way no
    live stream makes it; the drop policy has its own tests (test_asr_thread.py)."""
    e = ListenExecutor(threads=1, **NO_PEEK_DROPS)
    e.load()
    yield e
    e.close()


@pytest.fixture(scope="module")
def question(tmp_path_factory) -> np.ndarray:
    return flite_16k(QUESTION, tmp_path_factory.mktemp("q"))


@pytest.fixture(scope="module")
def conversation(question) -> np.ndarray:
    """1 s silence, question, 1 s silence, question, 1 s silence."""
    return np.concatenate([silence(1), question, silence(1), question, silence(1)])


def test_silero_separates_speech_from_silence(question):
    vad = SileroVAD()
    x = np.concatenate([silence(0.5), question, silence(0.5)]).astype(np.float32) / 32768
    probs = np.array([vad.prob(x[i:i + 512]) for i in range(0, len(x) - 511, 512)])
    lead = int(0.5 * SR) // 512
    assert probs[:lead].max() < 0.2
    assert np.median(probs[lead + 10:lead + 40]) > 0.8
    vad.reset()
    assert vad.prob(np.zeros(512, np.float32)) < 0.2


def test_streaming_recognizer_partials_and_final(question):
    rec = StreamingRecognizer()
    for _ in range(2):                      # the decoder is reused across utterances
        rec.start()
        partials = [p for i in range(0, len(question), 320) if (p := rec.feed(question[i:i + 320]))]
        final = rec.finish()
        assert partials and len(set(partials)) == len(partials)
        assert wer(QUESTION, final) <= 0.2


def test_question_transcribed_with_ordered_events(ex, question):
    audio = np.concatenate([silence(1), question, silence(1)])
    # recognition keeps pace as in real time, so partials come while speech goes on
    events = stream_judged(ex, audio.astype(np.float32) / 32768, {})
    assert kinds(events) == ["speech_started", "speech_stopped", "final"]
    (t_start, started), = [(t, e) for t, e in events if e["type"] == "speech_started"]
    (t_stop, stopped), = [(t, e) for t, e in events if e["type"] == "speech_stopped"]
    final = [e for _, e in events if e["type"] == "final"][0]
    assert wer(QUESTION, final["text"]) <= 0.2, final
    true_on = 1000 + onset_ms(question)
    true_off = 1000 + len(question) / 16
    assert abs(started["audio_start_ms"] - true_on) <= 120
    assert true_off - 300 <= stopped["audio_end_ms"] <= true_off + 300
    assert final["audio_start_ms"] == started["audio_start_ms"]
    assert final["audio_end_ms"] == stopped["audio_end_ms"]
    # started is only announced once min_speech_ms (250) has passed, but not much later
    assert started["audio_start_ms"] + 250 <= t_start <= started["audio_start_ms"] + 450
    # stopped after the 500 ms silence window
    assert stopped["audio_end_ms"] + 500 <= t_stop <= stopped["audio_end_ms"] + 650
    partials = [(t, e) for t, e in events if e["type"] == "partial"]
    if ex.engine == "pocketsphinx":       # a streaming decoder: partials while speaking
        # (decoded on the recognition thread: in event order, between start and final)
        order = [e["type"] for _, e in events]
        idx = [i for i, k in enumerate(order) if k == "partial"]
        assert idx and order.index("speech_started") < min(idx) and max(idx) < order.index("final")
        assert all(isinstance(e["text"], str) and e["text"] for _, e in partials)
    else:                                 # Whisper recognises whole segments
        assert partials == []


def test_two_utterances_give_two_finals(ex, conversation):
    events = stream(ex, conversation)
    # Faster than real time, a transcript may come after the next utterance began;
    # each final still follows its own speech_stopped.
    ks = kinds(events)
    assert [k for k in ks if k != "final"] == ["speech_started", "speech_stopped"] * 2
    assert ks.count("final") == 2 and ks.index("final") > ks.index("speech_stopped")
    finals = [e for _, e in events if e["type"] == "final"]
    assert all(wer(QUESTION, f["text"]) <= 0.2 for f in finals), finals
    assert finals[0]["audio_end_ms"] < finals[1]["audio_start_ms"]
    gap = finals[1]["audio_start_ms"] - finals[0]["audio_start_ms"]
    assert abs(gap - (len(conversation) / 16 - 3000) / 2 - 1000) <= 100


def test_events_keep_to_the_voice_contract(ex, conversation):
    """Every event the stage emits is one of the contract's shapes, exactly
    (keys and types), so the server's reading of them cannot drift apart."""
    events = [e for _, e in stream(ex, conversation)]
    for e in events:
        validate_listen_event(e)
    # partials and the turn hints depend on how far recognition got while the
    # words were fed: checked when they come, not required
    assert {SPEECH_STARTED, SPEECH_STOPPED, FINAL} <= {e["type"] for e in events}


def test_silence_only_gives_nothing(ex):
    assert stream(ex, silence(3)) == []
    quiet = (np.random.default_rng(1).normal(0, 30, 3 * SR)).astype(np.int16)   # -60 dBFS hiss
    assert stream(ex, quiet) == []


def test_white_noise_does_not_crash(ex):
    noise = np.random.default_rng(0).normal(0, 0.3, 10 * SR).astype(np.float32)
    events = stream(ex, noise, chunk_ms=50)
    for _, e in events:
        assert e["type"] in {"speech_started", "partial", "speech_stopped", "final"}
    assert len([e for _, e in events if e["type"] == "final"]) <= 1


def test_speech_shorter_than_min_speech_is_dropped(ex, question):
    on = int(onset_ms(question) * 16)
    blip = question[on:on + int(0.15 * SR)]
    # a blip: the onset is said (a reply may pause) and taken back; no turn at all
    assert [e["type"] for _, e in stream(ex, np.concatenate([silence(0.5), blip, silence(1)]))] \
        == ["onset", "onset_dropped"]
    # the same blip counts when the client lowers min_speech_ms
    assert "final" in kinds(stream(ex, np.concatenate([silence(0.5), blip, silence(1)]),
                                   params={"min_speech_ms": 50}))


def test_a_word_too_short_for_speech_is_read(ex, tmp_path):
    """A sound shorter than min_speech_ms but as long as a word is not speech, yet
    it is read (Whisper): onset_dropped carries its words and times, so a server
    can take "Stop." said over a reply as the interruption it is."""
    word = flite_16k("Stop.", tmp_path)
    events = [e for _, e in stream(ex, np.concatenate([silence(0.5), word, silence(1)]),
                                   params={"min_speech_ms": 1000})]
    assert [e["type"] for e in events if e["type"] != "speech_paused"] == ["onset", "onset_dropped"]
    dropped = events[-1]
    validate_listen_event(dropped)
    if ex.engine == "whisper":
        assert dropped["text"].strip(" .!").lower() == "stop", dropped
        assert 400 <= dropped["audio_start_ms"] < dropped["audio_end_ms"] <= 1600, dropped
    else:
        assert "text" not in dropped     # pocketsphinx: dropped unread


def test_max_utterance_splits_long_speech(ex, question):
    events = stream(ex, np.concatenate([silence(0.5), question, silence(1)]),
                    params={"max_utterance_s": 0.8})
    assert kinds(events).count("final") >= 2


def test_final_flag_flushes_open_utterance(ex, question):
    events = stream(ex, np.concatenate([silence(0.5), question]))  # stream ends mid-speech
    assert kinds(events) == ["speech_started", "speech_stopped", "final"]
    assert wer(QUESTION, events[-1][1]["text"]) <= 0.2


@pytest.mark.parametrize("rate", [8000, 24000, 44100, 48000])
def test_declared_sample_rates(ex, question, rate):
    audio = resample_int16(np.concatenate([silence(1), question, silence(1)]), rate)
    events = stream(ex, audio, rate=rate)
    assert kinds(events) == ["speech_started", "speech_stopped", "final"]
    started = events[[e["type"] for _, e in events].index("speech_started")][1]
    assert abs(started["audio_start_ms"] - (1000 + onset_ms(question))) <= 120
    if rate > SR:                              # 8 kHz loses the bands the en-us model relies on
        assert wer(QUESTION, events[-1][1]["text"]) <= 0.2


def test_float_input_and_odd_chunk_sizes(ex, question):
    audio = np.concatenate([silence(1), question, silence(1)]).astype(np.float32) / 32768
    events = stream(ex, audio, chunk_ms=97)
    assert kinds(events) == ["speech_started", "speech_stopped", "final"]
    assert wer(QUESTION, events[-1][1]["text"]) <= 0.2


def _one(ex: ListenExecutor, rid: int, payload, final: bool = False):
    [res] = ex.process([WorkItem(rid, payload, {}, final=final)])
    return res


def test_bad_and_odd_inputs(ex, question):
    rid = next(_rid)
    ex.open(rid, {})
    try:
        assert _one(ex, rid, np.zeros(0, np.int16)) == []                 # empty chunk ignored
        assert _one(ex, rid, np.zeros(320, np.float64)) == []             # float64 converted
        assert _one(ex, rid, np.zeros((320, 2), np.int16)) == []          # stereo downmixed
        assert _one(ex, rid, np.full(320, np.nan, np.float32)) == []      # NaN zeroed
        assert _one(ex, rid, np.zeros(640, np.int16).tobytes()) == []     # raw int16 PCM bytes
        for bad in (np.zeros(320, np.int32), np.zeros((2, 2, 80), np.int16), "hello", b"\x00"):
            res = _one(ex, rid, bad)
            assert isinstance(res, StageError) and res.code == ErrorCode.BAD_INPUT, bad
        # the stream still works after rejected chunks
        audio = np.concatenate([silence(0.5), question, silence(1)])
        out = []
        for i in range(0, len(audio), 320):
            out += _one(ex, rid, audio[i:i + 320], final=i + 320 >= len(audio))
        out += drain(ex, rid)
        assert [e["type"] for e in out if e["type"] not in HINTS] == \
            ["speech_started", "speech_stopped", "final"]
    finally:
        ex.release(rid)


def test_bad_params_rejected(ex):
    for params in ({"sample_rate": 123}, {"sample_rate": "fast"}, {"threshold": 1.5},
                   {"silence_duration_ms": -1}):
        with pytest.raises(StageError) as info:
            ex.open(next(_rid), params)
        assert info.value.code == ErrorCode.BAD_INPUT


def test_one_bad_request_does_not_fail_its_batch_mate(ex):
    a, b = next(_rid), next(_rid)
    ex.open(a, {})
    ex.open(b, {})
    try:
        res = ex.process([WorkItem(a, "junk", {}), WorkItem(b, np.zeros(320, np.int16), {})])
        assert isinstance(res[0], StageError) and res[1] == []
    finally:
        ex.release(a)
        ex.release(b)
    assert ex.stats()["streams"] == 0


def test_batched_vad_matches_one_stream_at_a_time(question):
    """SileroVAD.probs runs several streams' frames in one graph call; each stream's
    recurrent state must come out exactly as if it had run alone."""
    from runtime.models.listen.silero_vad import FRAME_SAMPLES, make_session
    sess = make_session()
    audio = [np.concatenate([silence(0.3), question])[: 40 * FRAME_SAMPLES],
             np.concatenate([question, silence(0.3)])[: 40 * FRAME_SAMPLES] // 2,
             silence(40 * FRAME_SAMPLES / SR)]
    frames = [a.astype(np.float32).reshape(-1, FRAME_SAMPLES) / 32768 for a in audio]
    alone = []
    for fr in frames:
        v = SileroVAD(sess)
        alone.append([v.prob(f) for f in fr])
    vads = [SileroVAD(sess) for _ in audio]
    together = [[] for _ in audio]
    for r in range(40):
        ps = SileroVAD.probs(vads, np.stack([fr[r] for fr in frames]))
        for k, p in enumerate(ps):
            together[k].append(float(p))
    np.testing.assert_allclose(np.array(together), np.array(alone), atol=1e-4)
    assert max(alone[0]) > 0.5 and max(alone[2]) < 0.2  # speech and silence both covered


def test_batch_of_streams_gives_the_events_each_gives_alone(ex, question):
    """Chunks of several streams in one process() call (and two chunks of one stream
    in the same call) give each stream the events it gets when processed alone."""
    audio = np.concatenate([silence(0.5), question, silence(1.0)])
    step = SR * 20 // 1000
    chunks = [audio[i:i + step] for i in range(0, len(audio), step)]
    # partials are left out: their wording depends on the decoder's history (its
    # running cepstral mean), and pooled decoders are handed out in any order
    solo = [e for _, e in stream(ex, audio) if e["type"] not in HINTS]
    rids = [next(_rid) for _ in range(3)]
    for r in rids:
        ex.open(r, {"sample_rate": SR})
    got: dict[int, list] = {r: [] for r in rids}
    try:
        for k in range(0, len(chunks), 2):
            pair = chunks[k:k + 2]
            items, owners = [], []
            for r in rids:
                for j, c in enumerate(pair):
                    final = k + j == len(chunks) - 1
                    items.append(WorkItem(r, c, {"sample_rate": SR}, final=final))
                    owners.append(r)
            for r, res in zip(owners, ex.process(items)):
                assert not isinstance(res, BaseException), res
                got[r] += [e for e in res if e["type"] not in HINTS]
            for r, evs in ex.collect():
                got[r] += [e for e in evs if e["type"] not in HINTS]
        deadline = time.monotonic() + 30
        while any(ex.pending(r) for r in rids) or ex.has_results():
            assert time.monotonic() < deadline, "recognition never finished"
            time.sleep(0.005)
            for r, evs in ex.collect():
                got[r] += [e for e in evs if e["type"] not in HINTS]
    finally:
        for r in rids:
            ex.release(r)
    for r in rids:
        assert got[r] == solo


# ---- Whisper: people, speculative recognition, and a VAD that never waits -------------

@pytest.fixture(scope="module")
def people():
    return human_clips()


def test_whisper_hears_people(whisper_ex, people):
    """Real recordings (LibriVox readers, spoken commands), not synthetic voices.

    The target (<= 6% on the issue's set) lives in benchmarks/asr_bench.py;
    this bound leaves room for a noisy machine but fails pocketsphinx (~30%).
    """
    pairs = []
    for c in people:
        audio = np.concatenate([np.zeros(SR // 2, np.float32), c.audio, np.zeros(SR, np.float32)])
        finals = [e["text"] for _, e in stream(whisper_ex, audio) if e["type"] == "final"]
        pairs.append((c.text, " ".join(finals)))
    assert corpus_wer(pairs) <= 0.10, pairs


def test_speculative_recognition_is_dropped_when_speech_resumes(whisper_ex, people):
    """A 350 ms pause starts recognition (after 192 ms of silence) but not the end of
    the turn (500 ms): when the talker goes on, that work is abandoned and the one
    final covers both halves, each word once."""
    a, b = people[1], people[4]          # "he was not an ill disposed young man", "he might even..."
    before = whisper_ex.stats()
    audio = np.concatenate([np.zeros(SR // 2, np.float32), a.audio, np.zeros(int(0.35 * SR), np.float32),
                            b.audio, np.zeros(SR, np.float32)])
    events = stream(whisper_ex, audio)
    assert kinds(events) == ["speech_started", "speech_stopped", "final"]
    text = [e["text"] for _, e in events if e["type"] == "final"][0]
    words = normalize(text)
    assert wer(f"{a.text} {b.text}", text) <= 0.25, text
    assert words.count("might") == 1 and words.count("young") == 1, text   # no duplicated half
    after = whisper_ex.stats()
    assert after["speculative_wasted"] > before["speculative_wasted"]
    assert after["speculative_used"] == before["speculative_used"] + 1


class _SlowRecognition:
    """Test-only engine beside the real one: the real transcript, 1.5 s late."""

    def __init__(self, real) -> None:
        self.real = real
        self.started = threading.Event()

    def __call__(self, segments):
        self.started.set()
        time.sleep(1.5)
        return self.real(segments)


def test_vad_decisions_do_not_wait_for_recognition(question):
    """With recognition slowed down, speech start/stop come at the same input
    positions as with the real engine, and before the transcript exists."""
    audio = np.concatenate([silence(0.5), question, silence(1.0)])
    fast = ListenExecutor()
    fast.load()
    slow = ListenExecutor()
    slow.load()
    try:
        vad = ("speech_started", "speech_stopped")
        ref = [(t, e) for t, e in stream(fast, audio) if e["type"] in vad]
        slow_engine = _SlowRecognition(slow._thread._transcribe)
        slow._thread._transcribe = slow_engine
        rid = next(_rid)
        slow.open(rid, {"sample_rate": SR})
        got, final_at = [], None
        for i in range(0, len(audio), 320):
            [res] = slow.process([WorkItem(rid, audio[i:i + 320], {}, final=i + 320 >= len(audio))])
            got += [((i + 320) / 16, e) for e in res if e["type"] in vad]
            for _, evs in slow.collect():
                if any(e["type"] == "final" for e in evs):
                    final_at = final_at or (i + 320) / 16
        assert final_at is None                  # every VAD decision came before the text
        assert slow_engine.started.is_set() and slow.pending(rid)
        finals = drain(slow, rid)
        slow.release(rid)
    finally:
        fast.close()
        slow.close()
    assert got == ref
    finals = [e for e in finals if e["type"] == "final"]
    assert len(finals) == 1 and wer(QUESTION, finals[0]["text"]) <= 0.2


# ---- semantic end of turn (Smart Turn) ---------------------------------------------------

def stream_judged(ex: ListenExecutor, audio: np.ndarray, params: dict) -> list[tuple[float, dict]]:
    """Like stream(), but each end-of-turn verdict and recognition job is awaited before
    the next chunk: the order of events is then the one real time gives, where a verdict
    (~40 ms) or a Whisper call (~150 ms) finishes within the silence it was asked in."""
    rid = next(_rid)
    params = {"sample_rate": SR, **params}
    ex.open(rid, params)
    s = ex._streams[rid]
    events: list[tuple[float, dict]] = []
    try:
        for i in range(0, len(audio), 320):
            [res] = ex.process([WorkItem(rid, audio[i:i + 320], params, final=i + 320 >= len(audio))])
            t = (i + 320) / 16
            events += [(t, e) for e in res]
            deadline = time.monotonic() + 10
            while True:
                events += [(t, e) for r, evs in ex.collect() if r == rid for e in evs]
                waiting = ((s.pause.asked and s.pause.verdict is None) or (s.pause.read and s.pause.text_p is None)
                           or ex._thread.busy(rid))
                if not waiting or time.monotonic() > deadline:
                    break
                time.sleep(0.002)
        events += [(len(audio) / 16, e) for e in drain(ex, rid)]
    finally:
        ex.release(rid)
    return events


def test_semantic_turn_ends_sooner_after_a_finished_sentence(whisper_ex, people):
    clip = people[3]        # "had he married a more amiable woman ... than he was"
    audio = np.concatenate([np.zeros(SR // 2, np.float32), clip.audio, np.zeros(2 * SR, np.float32)])
    waits = {}
    for mode in ("silence", "semantic"):
        events = stream_judged(whisper_ex, audio, {"turn_mode": mode})
        (t_stop, stopped), = [(t, e) for t, e in events if e["type"] == "speech_stopped"]
        waits[mode] = t_stop - stopped["audio_end_ms"]
        assert kinds(events) == ["speech_started", "speech_stopped", "final"]
    assert waits["silence"] >= 500                 # the fixed window
    assert waits["semantic"] <= 350, waits         # asked at 128 ms, "complete": 200 ms


def test_semantic_turn_waits_through_a_pause_mid_sentence(whisper_ex, people):
    """The same sentence, cut mid-word by a 700 ms pause: a fixed 500 ms window splits
    it in two turns; the end-of-turn model hears it is unfinished and waits."""
    clip = people[3]
    cut = int(3.8 * SR)
    audio = np.concatenate([np.zeros(SR // 2, np.float32), clip.audio[:cut],
                            np.zeros(int(0.7 * SR), np.float32), clip.audio[cut:],
                            np.zeros(3 * SR, np.float32)])
    finals = {}
    for mode in ("silence", "semantic"):
        events = stream_judged(whisper_ex, audio, {"turn_mode": mode})
        finals[mode] = [e["text"] for _, e in events if e["type"] == "final"]
    assert len(finals["silence"]) == 2, finals
    assert len(finals["semantic"]) == 1 and wer(clip.text, finals["semantic"][0]) <= 0.2, finals
    assert whisper_ex.stats()["verdict_incomplete"] >= 1


def test_a_finished_verdict_the_reading_doubts_waits(whisper_ex, people):
    """A person's "front ... left" with ~360 ms between the words: Smart Turn
    calls "Front." finished (0.5-0.8, not sure) but the chat model reads it as
    a message that may go on (~0.014): they disagree, and the turn waits
    ``unsure`` instead of ending after 200 ms between the two words."""
    clip = next(c for c in people if c.text == "front left")
    audio = np.concatenate([np.zeros(SR // 2, np.float32), clip.audio, np.zeros(2 * SR, np.float32)])
    events = stream_judged(whisper_ex, audio, {"turn_mode": "semantic"})
    finals = [e["text"] for _, e in events if e["type"] == "final"]
    assert len(finals) == 1 and "left" in finals[0].lower(), finals


def test_words_a_chat_model_reads_as_cut_wait_through_a_long_pause(whisper_ex):
    """flite's "i would like to book a table", a 1 s pause, "for two people at seven"
    (voice awb): Whisper ends the first half with a full stop and Smart Turn hears it
    unfinished; SmolLM2 reads it as cut (p ~0.002), so the turn waits ``incomplete``
    (2 s) and the sentence stays one turn, where ``unsure`` (800 ms) would split it."""
    def said(text: str) -> np.ndarray:
        x = flite_pcm(text, SR, "awb").astype(np.float32) / 32768
        loud = np.flatnonzero(np.abs(x) > 0.01)
        return x[loud[0]:loud[-1] + 1]
    audio = np.concatenate([np.zeros(SR // 2, np.float32), said("i would like to book a table"),
                            np.zeros(SR, np.float32), said("for two people at seven"),
                            np.zeros(3 * SR, np.float32)])
    before = whisper_ex.stats().get("verdict_text_cut", 0)
    events = stream_judged(whisper_ex, audio, {"turn_mode": "semantic"})
    finals = [e["text"] for _, e in events if e["type"] == "final"]
    assert len(finals) == 1 and "seven" in finals[0].lower().replace("7", "seven"), finals
    assert whisper_ex.stats()["verdict_text_cut"] > before


def test_words_a_chat_model_reads_as_whole_shorten_an_unfinished_verdict(whisper_ex):
    """flite's flat "what time does the store open tomorrow" sounds unfinished to Smart
    Turn (~0.01); the words read finished, and SmolLM2 expects the message to end there:
    the turn ends after ``likely`` (300 ms), not ``unsure`` (800 ms) as without it."""
    speech = flite_pcm("what time does the store open tomorrow", SR).astype(np.float32) / 32768
    loud = np.flatnonzero(np.abs(speech) > 0.01)
    audio = np.concatenate([np.zeros(SR // 2, np.float32), speech[:loud[-1] + 1],
                            np.zeros(2 * SR, np.float32)])
    waits, reader = {}, whisper_ex._reader
    try:
        for label in ("with", "without"):
            whisper_ex._reader = reader if label == "with" else None
            events = stream_judged(whisper_ex, audio, {"turn_mode": "semantic"})
            (t_stop, stopped), = [(t, e) for t, e in events if e["type"] == "speech_stopped"]
            waits[label] = t_stop - stopped["audio_end_ms"]
    finally:
        whisper_ex._reader = reader
    assert waits["with"] <= 400 and waits["without"] >= 800, waits
    assert whisper_ex.stats()["verdict_text_end"] >= 1


def test_semantic_turn_parameters_are_checked(whisper_ex):
    for params in ({"turn_mode": "psychic"}, {"turn_mode": "semantic", "eagerness": "eager"}):
        with pytest.raises(StageError) as info:
            whisper_ex.open(next(_rid), params)
        assert info.value.code == ErrorCode.BAD_INPUT


def test_a_reply_may_be_prepared_during_the_pause_and_dropped_when_speech_goes_on(whisper_ex, people):
    """Silence mode, 350 ms pause: recognition starts at 192 ms and is ready before the
    500 ms window closes (turn_likely_over, the server may prepare its reply); the
    speaker goes on (turn_continues, the reply is dropped); one final for both halves."""
    a, b = people[1], people[4]
    audio = np.concatenate([np.zeros(SR // 2, np.float32), a.audio, np.zeros(int(0.35 * SR), np.float32),
                            b.audio, np.zeros(SR, np.float32)])
    order = [e["type"] for _, e in stream_judged(whisper_ex, audio, {})
             if e["type"] not in ("partial", "interim", "speech_paused", "speech_resumed")]
    assert order == ["onset", "speech_started", "turn_likely_over", "turn_continues", "turn_likely_over",
                     "speech_stopped", "final"], order


def test_interim_words_come_while_speaking_and_at_each_pause(whisper_ex, people):
    """What a server deciding an interruption reads: speech_paused once the speaker
    is silent, an interim 400 ms into the utterance (the words so far, while they
    go on) and one at the pause (paused: the words up to it); speech_resumed when
    the utterance goes on."""
    a, b = people[1], people[4]
    audio = np.concatenate([np.zeros(SR // 2, np.float32), a.audio, np.zeros(int(0.35 * SR), np.float32),
                            b.audio, np.zeros(SR, np.float32)])
    events = [e for _, e in stream_judged(whisper_ex, audio, {})]
    for e in events:
        validate_listen_event(e)
    order = [e["type"] for e in events
             if e["type"] in ("speech_started", "speech_paused", "speech_resumed", "speech_stopped")]
    # a pause between words (64 ms and more) is a pause too; they alternate
    assert order[0] == "speech_started" and order[-2:] == ["speech_paused", "speech_stopped"], order
    pauses = order[1:-1]
    assert pauses[::2] == ["speech_paused"] * len(pauses[::2]), order
    assert pauses[1::2] == ["speech_resumed"] * len(pauses[1::2]) and pauses[1::2], order
    interims = [e for e in events if e["type"] == "interim"]
    peeks = [e for e in interims if not e["paused"]]
    at_pause = [e for e in interims if e["paused"]]
    assert peeks and all(e["text"] for e in peeks), interims
    assert len(normalize(peeks[0]["text"])) < len(normalize(a.text))
    assert len(at_pause) == 2 and wer(a.text, at_pause[0]["text"]) <= 0.3, at_pause
    final = next(e for e in events if e["type"] == "final")
    assert at_pause[-1]["text"] == final["text"]


def test_peeks_repeat_while_the_speech_goes_on(people):
    """asr_peek_every_ms: the words so far again and again while the utterance
    goes on (recognition idle), each reading further than the last."""
    clip = max(people, key=lambda c: c.audio.size)
    ex = ListenExecutor(threads=1, asr_peek_every_ms=300, **NO_PEEK_DROPS)
    ex.load()
    try:
        audio = np.concatenate([np.zeros(SR // 2, np.float32), clip.audio, np.zeros(SR, np.float32)])
        events = [e for _, e in stream_judged(ex, audio, {})]
        peeks = [e["text"] for e in events if e["type"] == "interim" and not e["paused"]]
        assert len(peeks) >= 2, (clip.audio.size / SR, peeks)
        assert len(normalize(peeks[0])) < len(normalize(peeks[-1])), peeks
    finally:
        ex.close()


def test_no_interim_with_asr_peek_off(people):
    ex = ListenExecutor(threads=1, asr_peek_ms=0)
    ex.load()
    try:
        audio = np.concatenate([np.zeros(SR // 2, np.float32), people[1].audio,
                                np.zeros(SR, np.float32)])
        events = [e for _, e in stream_judged(ex, audio, {})]
        assert [e["paused"] for e in events if e["type"] == "interim"] == [True]
    finally:
        ex.close()


def test_cpu_by_role_splits_the_process(whisper_ex, people):
    """The budget per role (benchmarks/cpu_budget.py): voice activity on the loop
    thread, recognition on the rest of the process, each growing with the work it
    did, and the parts never adding up to more than the process."""
    before = whisper_ex.stats()["cpu_s"]
    audio = np.concatenate([np.zeros(SR // 2, np.float32), people[0].audio, np.zeros(SR, np.float32)])
    assert "final" in kinds(stream(whisper_ex, audio))
    after = whisper_ex.stats()
    cpu = after["cpu_s"]
    assert cpu["vad"] > before["vad"]
    # recognition is the process less the other roles' threads, split between
    # transcripts and early readings by the recognition thread's busy time: the
    # split moves with the clip's early readings, the whole only grows
    recognized = cpu["recognition_transcripts"] + cpu["recognition_early"]
    assert recognized > before["recognition_transcripts"] + before["recognition_early"]
    # every figure is rounded to the millisecond, so a sum of n of them may overshoot
    # the rounded whole by up to (n + 1) / 2 ms with nothing wrong
    parts = [v for k, v in cpu.items() if k != "process"]
    assert sum(parts) <= cpu["process"] + (len(parts) + 1) * 5e-4 + 1e-9
    asr = after["asr"]
    assert asr["busy_transcript_s"] > 0
    assert asr["busy_transcript_s"] + asr["busy_early_s"] <= asr["busy_s"] + 1.5e-3 + 1e-9
