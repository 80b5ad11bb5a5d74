"""Talking over a playing reply (sans-I/O, a made-up clock): a backchannel or a
noise resumes the same reply and leaves no user turn; words or speech that
goes on cancel it and truncate it where the listener is; the reply's own echo
in the microphone is muted before the listen stage hears it."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from session_helpers import b64_pcm, events, run_clock, speak, spoken_turn
from voice_server.session import (AudioOut, CancelResponse, FeedListen, Session, SessionSettings,
                                  StartResponse)
from voice_server.session.backchannel import (DEFAULT_BACKCHANNELS, InterruptionSettings,
                                              only_backchannel)
from voice_server.session.echo_guard import EchoGuard

LEAD = 300.0
PHRASES = InterruptionSettings().phrases()


def paced(mode: str = "events", **interruptions) -> Session:
    s = Session("sess_int", SessionSettings(), audio_out_mode=mode, output_lead_ms=LEAD,
                interruptions=InterruptionSettings(**interruptions))
    s.start(0)
    return s


evs = events      # every event checked against the SDK's schema or the extension's keys


def kinds(cmds) -> list[str]:
    return [e["type"] for e in evs(cmds)]


def playing_reply(s: Session, ms: float = 4000, play_ms: float = 1000, audio=None):
    """A reply of ``ms`` audio (a tone, or ``audio`` at 16 kHz), played for
    ``play_ms``: (response id, commands, now)."""
    cmds = spoken_turn(s, "tell me a story")
    rid = next(e for e in evs(cmds) if e["type"] == "response.created")["response"]["id"]
    chunk = speak("Once upon a time there was a dragon.", ms)
    if audio is not None:
        chunk = {**chunk, "audio": audio, "duration_ms": audio.size / 16.0}
    out = s.response_chunk(rid, "speak", chunk, 0.0)
    more, now = run_clock(s, play_ms, 0.0)
    return rid, out + more, now


def talk_over(s: Session, now: float, start_ms: int = 20000) -> list:
    """The listen stage hears the caller: onset, then speech confirmed."""
    return s.listen_event({"type": "onset", "audio_start_ms": start_ms}, now) + \
        s.listen_event({"type": "speech_started", "audio_start_ms": start_ms}, now + 250)


@pytest.mark.parametrize("heard", ["Mm-hmm.", "yeah", "Okay.", "Uh-huh", "[coughing]", "",
                                   "Right, sure."])
def test_a_backchannel_resumes_the_same_reply_and_is_no_turn(heard):
    s = paced()
    rid, _, now = playing_reply(s)
    items = len(s.conversation.items)
    held = talk_over(s, now)
    assert kinds(held) == ["voice_agent.output_audio.paused"]    # no speech_started yet
    assert s.output_paused and s.active_response_id == rid
    paused = s.listen_event({"type": "speech_paused", "audio_end_ms": 20500}, now + 600)
    assert paused == []
    resumed = s.listen_event({"type": "interim", "text": heard, "paused": True}, now + 700)
    assert kinds(resumed)[0] == "voice_agent.output_audio.resumed"
    assert evs(resumed)[0]["response_id"] == rid
    assert not s.output_paused and s.active_response_id == rid
    # the utterance ends and is transcribed: nothing of it reaches the client
    late = s.listen_event({"type": "speech_stopped", "audio_end_ms": 20500}, now + 900)
    late += s.listen_event({"type": "final", "text": heard, "audio_start_ms": 20000,
                            "audio_end_ms": 20500}, now + 950)
    assert [k for k in kinds(late) if not k.startswith("response.output_audio")] == []
    assert not [c for c in late if isinstance(c, (CancelResponse, StartResponse))]
    assert len(s.conversation.items) == items
    # the reply plays to its end and completes
    rest, now = run_clock(s, now + 6000, now + 950)
    rest += s.response_finished(rid, "completed", None, now)
    rest += run_clock(s, now + 1000, now)[0]
    done = [e for e in evs(rest) if e["type"] == "response.done"]
    assert [d["response"]["status"] for d in done] == ["completed"]
    assert "input_audio_buffer.speech_started" not in kinds(late + rest)


def test_words_interrupt_cancel_and_truncate_where_the_listener_is():
    s = paced()
    rid, _, now = playing_reply(s)
    talk_over(s, now)
    t = now + 450
    played = s.played_position_ms(t)
    cmds = s.listen_event({"type": "interim", "text": "Wait, what about tomorrow", "paused": False}, t)
    types = kinds(cmds)
    assert types[0] == "input_audio_buffer.speech_started"
    assert evs(cmds)[0]["audio_start_ms"] == 20000          # the utterance's own start
    assert [c.response_id for c in cmds if isinstance(c, CancelResponse)] == [rid]
    done = next(e for e in evs(cmds) if e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "turn_detected"
    cut = next(e for e in evs(cmds) if e["type"] == "conversation.item.truncated")
    assert abs(cut["audio_end_ms"] - played) <= 1
    # the utterance is the next user turn, answered as usual
    turn = s.listen_event({"type": "speech_stopped", "audio_end_ms": 21500}, t + 600)
    turn += s.listen_event({"type": "final", "text": "wait, what about tomorrow",
                            "audio_start_ms": 20000, "audio_end_ms": 21500}, t + 700)
    assert "input_audio_buffer.committed" in kinds(turn)
    assert [c.messages[-1]["content"] for c in turn if isinstance(c, StartResponse)] == \
        ["wait, what about tomorrow"]


def _talk_on_until_cancelled(s, rid, t: float, websocket: bool) -> list:
    """20 ms chunks of input, as a stream transport feeds them or as a
    WebSocket client's input_audio_buffer.append (24 kHz by default)."""
    append = {"type": "input_audio_buffer.append", "audio": b64_pcm(np.zeros(480, np.int16))}
    cancelled, stop = [], t + 5000
    while s.active_response_id == rid and t < stop:
        t += 20
        cancelled += s.client_event(append, t) if websocket else \
            s.input_audio(np.zeros(320, np.int16), 16000, t)
    return cancelled


@pytest.mark.parametrize("websocket", [False, True], ids=["stream", "websocket"])
@pytest.mark.parametrize("early_words, limit_ms", [(None, 600), ("", 1500), ("[cough]", 1500),
                                                   ("yeah", 1500), ("Mm-hmm.", 1500),
                                                   ("Tell me more", 500)])
def test_speech_that_goes_on_interrupts_whatever_its_words(early_words, limit_ms, websocket):
    """Without a pause, speech interrupts after decide_after_ms; when an early
    transcript had only backchannel words or none (a drawn-out "mm hmm"),
    after backchannel_max_ms; with words, once it is min_interruption_ms long."""
    s = paced(decide_after_ms=600, backchannel_max_ms=1500)
    rid, _, now = playing_reply(s)
    start = int(s.input_ms)
    talk_over(s, now, start)
    if early_words is not None:
        s.listen_event({"type": "interim", "text": early_words, "paused": False}, now + 400)
    assert s.active_response_id == rid
    cancelled = _talk_on_until_cancelled(s, rid, now + 400, websocket)
    assert s.active_response_id is None
    assert kinds(cancelled)[0] == "input_audio_buffer.speech_started"
    # the input ran on: the limit plus the pause notice
    assert limit_ms <= s.input_ms - start <= limit_ms + 150 + 40


def test_a_late_early_transcript_still_decides():
    """A busy recognition thread reads the first 400 ms of a drawn-out "mm hmm"
    only ~900 ms into it (a phone line's, "NMA" / "Mm-hmm."): the default
    limit waits for those words instead of cancelling first."""
    s = paced()
    rid, _, now = playing_reply(s)
    start = int(s.input_ms)
    talk_over(s, now, start)
    t = now
    while s.input_ms - start < 950:                 # speech goes on, no words yet
        t += 20
        s.input_audio(np.zeros(320, np.int16), 16000, t)
    assert s.active_response_id == rid and s.output_paused
    s.listen_event({"type": "interim", "text": "NMA", "alternative": "Mm-hmm.", "paused": False}, t)
    s.listen_event({"type": "speech_paused", "audio_end_ms": start + 1150}, t + 200)
    resumed = s.listen_event({"type": "interim", "text": "MMMM", "paused": True}, t + 300)
    assert "voice_agent.output_audio.resumed" in kinds(resumed)
    assert s.active_response_id == rid


def test_a_pause_holds_the_deadline_and_yeah_but_decides_again():
    s = paced()
    rid, _, now = playing_reply(s)
    talk_over(s, now)
    s.listen_event({"type": "speech_paused", "audio_end_ms": 20400}, now + 500)
    resumed = s.listen_event({"type": "interim", "text": "Yeah.", "paused": True}, now + 600)
    assert "voice_agent.output_audio.resumed" in kinds(resumed)
    again = s.listen_event({"type": "speech_resumed"}, now + 700)
    assert kinds(again) == ["voice_agent.output_audio.paused"]
    s.listen_event({"type": "speech_paused", "audio_end_ms": 21100}, now + 1000)
    cmds = s.listen_event({"type": "interim", "text": "Yeah, but what about the cat?",
                           "paused": True}, now + 1100)
    assert kinds(cmds)[0] == "input_audio_buffer.speech_started"
    assert any(isinstance(c, CancelResponse) for c in cmds)


def test_an_utterance_that_ends_before_a_decision_is_judged_by_its_final():
    """pocketsphinx has no interim: speech_stopped then the final decide."""
    s = paced()
    rid, _, now = playing_reply(s)
    talk_over(s, now)
    assert s.listen_event({"type": "speech_stopped", "audio_end_ms": 20400}, now + 500) == []
    back = s.listen_event({"type": "final", "text": "okay", "audio_start_ms": 20000,
                           "audio_end_ms": 20400}, now + 600)
    assert kinds(back)[0] == "voice_agent.output_audio.resumed"
    assert s.active_response_id == rid and s.user_speaking is False
    talk_over(s, now + 1000, 22000)
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 22400}, now + 1500)
    cmds = s.listen_event({"type": "final", "text": "stop", "audio_start_ms": 22000,
                           "audio_end_ms": 22400}, now + 1600)
    types = kinds(cmds)
    assert types[0] == "input_audio_buffer.speech_started"
    assert types.index("response.done") < types.index("input_audio_buffer.committed") \
        < types.index("conversation.item.input_audio_transcription.completed")
    assert [c.messages[-1]["content"] for c in cmds if isinstance(c, StartResponse)] == ["stop"]


def test_the_backchannel_words_are_configurable():
    s = paced(backchannel_words=["roger", "copy that"])
    rid, _, now = playing_reply(s)
    talk_over(s, now)
    s.listen_event({"type": "speech_paused", "audio_end_ms": 20400}, now + 500)
    ok = s.listen_event({"type": "interim", "text": "Copy that.", "paused": True}, now + 600)
    assert "voice_agent.output_audio.resumed" in kinds(ok)
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 20400}, now + 800)
    s.listen_event({"type": "final", "text": "Copy that.", "audio_start_ms": 20000,
                    "audio_end_ms": 20400}, now + 850)
    talk_over(s, now + 1000, 22000)
    s.listen_event({"type": "speech_paused", "audio_end_ms": 22600}, now + 1700)
    cmds = s.listen_event({"type": "interim", "text": "Yeah.", "paused": True}, now + 1800)
    assert any(isinstance(c, CancelResponse) for c in cmds)


@pytest.mark.parametrize("heard, cancels", [("NME.", False), ("Mm-hmm.", False),
                                            ("Stop.", True), ("Hold on.", True),
                                            ("Tell me more", False)])
def test_words_heard_while_the_speech_goes_on(heard, cancels):
    """400 ms into a drawn-out "mm hmm" Whisper may hear a fragment as a word
    ("NME."): words mid-speech do not cancel at once unless they take the turn
    ("Stop."); two words do once the sound is min_interruption_ms long (above)."""
    s = paced()
    rid, _, now = playing_reply(s)
    talk_over(s, now)
    cmds = s.listen_event({"type": "interim", "text": heard, "paused": False}, now + 400)
    assert any(isinstance(c, CancelResponse) for c in cmds) == cancels
    assert (s.active_response_id == rid) != cancels


def test_a_fragment_mid_speech_then_a_backchannel_at_the_pause_resumes():
    s = paced()
    rid, _, now = playing_reply(s)
    talk_over(s, now)
    s.listen_event({"type": "interim", "text": "NME.", "paused": False}, now + 400)
    s.listen_event({"type": "speech_paused", "audio_end_ms": 21100}, now + 1200)
    ok = s.listen_event({"type": "interim", "text": "Mm-hmm.", "paused": True}, now + 1300)
    assert "voice_agent.output_audio.resumed" in kinds(ok) and s.active_response_id == rid


def test_only_the_first_transcript_mid_speech_decides():
    """The listen stage's later transcripts of speech still going on
    (asr_peek_every_ms, for the reply's prompt) have no second reading of a
    short sound: flite's "mm hmm" 900 ms in reads "MMH and M".  Only the first
    one decides; the pause's decides as before."""
    s = paced(backchannel_max_ms=1500)
    rid, _, now = playing_reply(s)
    start = int(s.input_ms)
    talk_over(s, now, start)
    s.listen_event({"type": "interim", "text": "NME", "alternative": "And Mm-hmm.",
                    "paused": False}, now + 400)
    cmds = []
    for t in range(0, 1100, 20):     # the sound goes on; a second transcript mid-way
        if t == 900:
            cmds += s.listen_event({"type": "interim", "text": "MMH and M", "paused": False},
                                   now + t)
        cmds += s.input_audio(np.zeros(320, np.int16), 16000, now + t)
    assert not any(isinstance(c, CancelResponse) for c in cmds) and s.active_response_id == rid
    s.listen_event({"type": "speech_paused", "audio_end_ms": start + 1100}, now + 1200)
    ok = s.listen_event({"type": "interim", "text": "Mm-hmm.", "paused": True}, now + 1300)
    assert "voice_agent.output_audio.resumed" in kinds(ok) and s.active_response_id == rid


@pytest.mark.parametrize("heard, alternative, resumes", [
    ("I heard that.", "Uh-huh.", True),        # Whisper's words for a hum, read again
    ("You had.", "Yeah.", True),
    ("Stop.", "Okay.", False),                 # a word that takes the turn wins
    ("Open.", "Stop and...", False),           # in either reading
    ("No thanks.", "No, thanks.", False)])
def test_the_listen_stages_other_reading_of_a_short_sound_decides_too(heard, alternative, resumes):
    s = paced()
    rid, _, now = playing_reply(s)
    talk_over(s, now)
    s.listen_event({"type": "speech_paused", "audio_end_ms": 20500}, now + 600)
    cmds = s.listen_event({"type": "interim", "text": heard, "paused": True,
                           "alternative": alternative}, now + 700)
    assert ("voice_agent.output_audio.resumed" in kinds(cmds)) == resumes
    assert any(isinstance(c, CancelResponse) for c in cmds) != resumes


def test_hums_and_laughs_have_no_spelling_but_are_backchannels():
    for heard in ("MMHMM", "M-H-N-N", "Mmh Mm", "hahaha", "Heh.", "Uhm, okay."):
        assert only_backchannel(heard, PHRASES), heard
    for heard in ("He.", "Hmm, what?", "Nah", "him"):
        assert not only_backchannel(heard, PHRASES), heard


@pytest.mark.parametrize("end_ms, heard, cancels", [
    (20400, "You had.", False),        # a flat "yeah", 400 ms: no interruption
    (20400, "Why?", True),             # a word that takes the turn alone
    (20700, "You had.", True)])
def test_a_sound_shorter_than_min_interruption_ms_is_no_interruption(end_ms, heard, cancels):
    s = paced()
    rid, _, now = playing_reply(s)
    talk_over(s, now)
    cmds = s.listen_event({"type": "speech_paused", "audio_end_ms": end_ms}, now + 500)
    cmds += s.listen_event({"type": "interim", "text": heard, "paused": True}, now + 600)
    # decided at the pause, not after the turn's silence wait
    assert ("voice_agent.output_audio.resumed" in kinds(cmds)) != cancels
    cmds += s.listen_event({"type": "speech_stopped", "audio_end_ms": end_ms}, now + 900)
    cmds += s.listen_event({"type": "final", "text": heard, "audio_start_ms": 20000,
                            "audio_end_ms": end_ms}, now + 950)
    assert any(isinstance(c, CancelResponse) for c in cmds) == cancels
    assert ("voice_agent.output_audio.resumed" in kinds(cmds)) != cancels


def test_with_no_reply_playing_speech_starts_a_turn_at_once():
    s = paced()
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 100}, 10.0)
    assert kinds(cmds) == ["input_audio_buffer.speech_started"]


def test_the_decision_can_be_turned_off():
    s = paced(resume_backchannels=False)
    rid, _, now = playing_reply(s)
    cmds = talk_over(s, now)
    assert "input_audio_buffer.speech_started" in kinds(cmds)
    assert any(isinstance(c, CancelResponse) for c in cmds)


def test_only_backchannel_reads_words_not_punctuation():
    assert only_backchannel("Mm-hmm. Yeah, okay!", PHRASES)
    assert only_backchannel("All right.", PHRASES)
    assert only_backchannel("(coughs) [door knocks]", PHRASES)
    assert only_backchannel("", PHRASES)
    assert not only_backchannel("Yeah, but why?", PHRASES)
    assert not only_backchannel("stop", PHRASES)
    assert not only_backchannel("all", PHRASES)           # part of a phrase is not the phrase
    assert "mm hmm" in DEFAULT_BACKCHANNELS


# ---- echo --------------------------------------------------------------------------------

def voice(ms: float, rate: int, seed: int, amp: float = 8000.0) -> np.ndarray:
    """Speech-like sound: noise under a loudness that changes every 50-200 ms
    (syllables and gaps, different for every seed)."""
    rng = np.random.default_rng(seed)
    n = int(rate * ms / 1000)
    env = np.empty(n)
    i = 0
    while i < n:
        k = int(rate * rng.uniform(0.05, 0.2))
        env[i:i + k] = rng.choice([0.05, 0.3, 0.6, 1.0])
        i += k
    env = np.convolve(env, np.hanning(int(rate * 0.02)) / (rate * 0.01), "same")
    return (rng.normal(0, 1, n) * env * amp / 2).clip(-32000, 32000).astype(np.int16)


def test_echo_guard_mutes_an_echo_and_lets_the_caller_through():
    g, g2 = EchoGuard(margin_db=10.0), EchoGuard(margin_db=10.0)
    ref = voice(1000, 16000, 1)
    g.played(ref, 16000, 0.0)                     # plays from t=0 for 1 s
    g2.played(ref, 16000, 0.0)
    delay = 2400                                  # 150 ms
    echo = np.concatenate([np.zeros(delay, np.int16), ref[:-delay]]) // 10   # -20 dB
    caller = voice(1000, 16000, 2)
    muted, loud, passed = 0, 0, 0
    for i in range(0, 16000, 320):
        now = (i + 320) / 16
        out = g.process(echo[i:i + 320], now)
        muted += int(not out.any())
        mic = (echo[i:i + 320].astype(np.int32) + caller[i:i + 320]).astype(np.int16)
        both = g2.process(mic, now)
        for k in range(0, 320, 160):
            # the caller's words: 10 dB over the echo, at most 10 dB under the reply
            c, e = caller[i + k:i + k + 160].astype(float), echo[i + k:i + k + 160].astype(float)
            r = ref[max(i + k - 9600, 0):i + k + 160].astype(float)
            if np.mean(c * c) > 10 * np.mean(e * e) and np.mean(c * c) > 0.1 * np.mean(r * r):
                loud += 1
                passed += int(np.array_equal(both[k:k + 160], mic[k:k + 160]))
    assert muted >= 48, muted                    # of 50 chunks of echo alone
    assert loud >= 30 and passed >= 0.95 * loud, (loud, passed)
    quiet = EchoGuard()                            # nothing played: nothing touched
    x = voice(100, 16000, 3, amp=300)
    assert np.array_equal(quiet.process(x, 100.0), x)


def test_echo_guard_places_late_bursts_by_capture_time():
    """A busy loop delivers the mic in bursts, up to 80 ms late: the echo is
    placed where it was captured and still muted."""
    g = EchoGuard(margin_db=10.0)
    ref = voice(2000, 16000, 4)
    g.played(ref, 16000, 0.0)
    delay = 2400                                  # 150 ms
    echo = np.concatenate([np.zeros(delay, np.int16), ref[:-delay]]) // 10
    rng = np.random.default_rng(5)
    muted = 0
    for i in range(0, 32000, 320):
        late = 0.0 if i % 1600 == 0 else float(rng.uniform(0, 80))   # every 100 ms one on time
        muted += int(not g.process(echo[i:i + 320], (i + 320) / 16 + late).any())
    assert muted >= 95, muted                     # of 100 chunks of echo alone


def test_echo_guard_residue_in_the_replys_silent_pause_is_not_the_caller():
    """A voice's pause between clauses is digital silence: it predicts no echo,
    and the residue the mic picks up meanwhile (rms < 1) must not pass as the
    caller, or its hangover lets the echo of the next words through."""
    g = EchoGuard(margin_db=10.0)
    ref = np.concatenate([voice(1000, 16000, 6), np.zeros(4800, np.int16), voice(1000, 16000, 7)])
    g.played(ref, 16000, 0.0)
    delay = 2400                                  # 150 ms
    echo = np.concatenate([np.zeros(delay, np.int16), ref[:-delay]]) // 10
    residue = np.random.default_rng(8).integers(-1, 2, echo.size).astype(np.int16)
    mic = (echo + residue).astype(np.int16)
    muted = sum(int(not g.process(mic[i:i + 320], (i + 320) / 16).any())
                for i in range(0, mic.size, 320))
    assert muted >= 0.95 * (mic.size // 320), (muted, mic.size // 320)


def test_the_replys_echo_neither_pauses_nor_reaches_the_listen_stage():
    """The session feeds the listen stage the mic audio with the reply's own
    echo (-20 dB, 150 ms late) muted; the caller's voice on top gets through."""
    s = paced()
    rid, cmds, now = playing_reply(s, play_ms=0, audio=voice(3000, 16000, 5))
    rate = 24000
    line = np.zeros(0, np.int16)            # what the client plays, from t=0, end to end
    fed, fed_caller = [], []
    caller = voice(420, rate, 7)
    t = 0.0
    while t < 2600:
        t += 20
        released = cmds + s.pump_output(t) if s.next_output_ms is not None and \
            s.next_output_ms <= t else cmds
        cmds = []
        for e in evs(released):
            if e["type"] == "response.output_audio.delta":
                line = np.concatenate([line, np.frombuffer(base64.b64decode(e["delta"]), "<i2")])
        a = int((t - 20 - 150) * rate / 1000)
        b = int((t - 150) * rate / 1000)
        mic = np.zeros(b - a, np.int16)
        if b > 0:
            seg = line[max(a, 0):b] // 10
            mic[mic.size - seg.size:] = seg
        if 1200 <= t < 1600:                  # the caller talks over it
            k = int((t - 1200) * rate / 1000)
            mic = (mic.astype(np.int32) + caller[k:k + mic.size]).clip(-32768, 32767).astype(np.int16)
        out = s.input_audio(mic, rate, t)
        pcm = np.concatenate([c.pcm16k for c in out if isinstance(c, FeedListen)] or
                             [np.zeros(0, np.int16)])
        if 1260 <= t < 1560:
            fed_caller.append(pcm)
        elif 200 <= t < 1200 or t >= 2000:        # the echo alone (after the caller's hangover)
            fed.append(pcm)
    assert np.abs(np.concatenate(fed)).max() == 0      # all muted
    heard = np.concatenate(fed_caller)
    assert np.count_nonzero(heard) > 0.9 * heard.size    # the caller's words pass whole
    assert s.active_response_id == rid and not s.output_paused
    assert not [c for c in released if isinstance(c, AudioOut)]


def test_a_backchannel_stays_no_turn_when_the_reply_ends_before_it_does():
    s = paced()
    rid, _, now = playing_reply(s, ms=1500, play_ms=1000)
    talk_over(s, now, int(s.input_ms))
    s.listen_event({"type": "speech_paused", "audio_end_ms": 400}, now + 400)
    s.listen_event({"type": "interim", "text": "Sure.", "paused": True}, now + 500)
    out = s.response_finished(rid, "completed", None, now + 510)
    out += run_clock(s, now + 3000, now + 510)[0]
    assert "response.done" in kinds(out) and s.active_response_id is None
    chunk = np.zeros(320, np.int16)
    for k in range(20):                        # the silence window runs on
        out += s.input_audio(chunk, 16000, now + 3000 + 20 * k)
    out += s.listen_event({"type": "speech_stopped", "audio_end_ms": 400}, now + 3500)
    out += s.listen_event({"type": "final", "text": "Sure.", "audio_start_ms": 0,
                           "audio_end_ms": 400}, now + 3600)
    assert not [k for k in kinds(out) if k.startswith("input_audio_buffer")]
    assert not [c for c in out if isinstance(c, StartResponse)]
