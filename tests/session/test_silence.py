"""A caller who goes quiet (session/silence.py): ``idle_timeout_ms`` under both
turn detection types, with and without ``create_response``; the model is told
about the silence; noise does not restart the count; the hang-up after N
unanswered check-ins.  Sans-I/O: every time here is the session's clock."""

from __future__ import annotations

import pytest

from voice_server.session import Close, Session, SessionSettings, StartResponse
from voice_server.session.config import TurnDetection

from session_helpers import PLAIN_BARGE_IN, events, of, one, speak, spoken_turn, types

IDLE = 2000


def quiet_session(kind: str, create_response: bool = True, hang_up_after=None):
    """A stream-mode session as the phone bridge builds it."""
    td = TurnDetection(type=kind, idle_timeout_ms=IDLE, create_response=create_response)
    s = Session("sess_quiet", SessionSettings(turn_detection=td), audio_out_mode="stream",
                interruptions=PLAIN_BARGE_IN, hang_up_after=hang_up_after)
    events(s.start(0))
    return s


def reply_heard(s, now: int, text: str = "Hello.", audio_ms: int = 1000) -> int:
    """The active reply speaks ``audio_ms`` and the caller hears all of it;
    returns when playback ended."""
    rid = s.active_response_id
    cmds = s.response_chunk(rid, "speak", speak(text, audio_ms), now)
    item = next(c for c in cmds if hasattr(c, "item_id")).item_id
    events(s.response_finished(rid, "completed", None, now + 10))
    end = now + 10 + audio_ms
    events(s.playback_progress(item, audio_ms, end))
    return end


@pytest.mark.parametrize("kind", ["server_vad", "semantic_vad"])
@pytest.mark.parametrize("create_response", [True, False])
def test_fires_at_its_setting_after_playback_ends(kind, create_response):
    s = quiet_session(kind, create_response)
    wire = one(s.client_event({"type": "session.update", "session": {}}, 0), "session.updated")
    assert wire["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == IDLE
    cmds = spoken_turn(s, "hello", now=0)
    if not create_response:
        cmds = s.client_event({"type": "response.create"}, 5)
    assert of(cmds, StartResponse)
    end = reply_heard(s, 100)
    assert s.tick(end + IDLE - 1) == []
    cmds = s.tick(end + IDLE)
    assert types(cmds)[:4] == ["input_audio_buffer.timeout_triggered",
                               "input_audio_buffer.committed", "conversation.item.added",
                               "conversation.item.done"]
    assert bool(of(cmds, StartResponse)) == create_response
    item = one(cmds, "conversation.item.done")["item"]
    assert item["content"][0]["transcript"] == "[the caller said nothing for 2 s]"
    if create_response:  # the model reads the note, so it checks in instead of repeating
        assert of(cmds, StartResponse)[0].messages[-1] == \
            {"role": "user", "content": "[the caller said nothing for 2 s]"}


@pytest.mark.parametrize("kind", ["server_vad", "semantic_vad"])
def test_never_while_the_caller_speaks(kind):
    s = quiet_session(kind)
    spoken_turn(s, "hello", now=0)
    end = reply_heard(s, 100)
    s.listen_event({"type": "speech_started", "audio_start_ms": 5000}, end + 500)
    assert s.tick(end + IDLE * 5) == []  # speaking: no timeout however long
    cmds = s.listen_event({"type": "speech_stopped", "audio_end_ms": 9000}, end + IDLE * 5)
    cmds += s.listen_event({"type": "final", "text": "sorry go on", "audio_start_ms": 5000,
                            "audio_end_ms": 9000}, end + IDLE * 5 + 1)
    assert "input_audio_buffer.timeout_triggered" not in types(cmds)
    assert of(cmds, StartResponse)  # the caller's words are answered, not the silence


def test_no_check_in_while_the_caller_holds_the_call():
    """A SIP caller's hold (call_held): however long it lasts nothing is due,
    and the resume counts a whole idle_timeout_ms again."""
    s = quiet_session("server_vad")
    spoken_turn(s, "hello", now=0)
    end = reply_heard(s, 100)
    s.call_held(True, end + 500)
    assert s.tick(end + IDLE * 10) == []
    resumed = end + IDLE * 10 + 1
    s.call_held(False, resumed)
    assert s.tick(resumed + IDLE - 1) == []
    assert "input_audio_buffer.timeout_triggered" in types(s.tick(resumed + IDLE))


def test_noise_the_asr_finds_empty_does_not_restart_the_count():
    s = quiet_session("server_vad")
    spoken_turn(s, "hello", now=0)
    end = reply_heard(s, 100)
    # a cough at end+1500: VAD opened a turn, the transcript is empty
    s.listen_event({"type": "speech_started", "audio_start_ms": 3000}, end + 1500)
    s.listen_event({"type": "speech_stopped", "audio_end_ms": 3300}, end + 1800)
    cmds = s.listen_event({"type": "final", "text": "", "audio_start_ms": 3000,
                           "audio_end_ms": 3300}, end + 1900)
    assert not of(cmds, StartResponse)
    cmds = s.tick(end + IDLE)  # the original deadline, not end+1900+IDLE
    assert "input_audio_buffer.timeout_triggered" in types(cmds)


def test_hang_up_after_n_unanswered_check_ins():
    s = quiet_session("semantic_vad", hang_up_after=2)
    spoken_turn(s, "hello", now=0)
    now = reply_heard(s, 100)
    for n in range(2):  # two check-ins
        cmds = s.tick(now + IDLE)
        start = of(cmds, StartResponse)[0]
        assert "goodbye" not in start.messages[-1]["content"]
        now = reply_heard(s, now + IDLE + 10, "Are you still there?")
        assert not of(cmds, Close)
    cmds = s.tick(now + IDLE)  # the third silence: the goodbye
    assert "say a short goodbye" in of(cmds, StartResponse)[0].messages[-1]["content"]
    assert not of(cmds, Close)
    rid = s.active_response_id
    cmds = s.response_chunk(rid, "speak", speak("Goodbye.", 800), now + IDLE + 10)
    item = next(c for c in cmds if hasattr(c, "item_id")).item_id
    s.response_finished(rid, "completed", None, now + IDLE + 20)
    assert not of(s.tick(now + IDLE + 400), Close)  # still playing
    s.playback_progress(item, 800, now + IDLE + 830)
    cmds = s.tick(now + IDLE + 840)
    assert [(c.code, c.reason) for c in of(cmds, Close)] == [(1000, "idle_hangup")]
    assert s.closed


def test_words_or_keys_start_the_count_again():
    s = quiet_session("server_vad", hang_up_after=1)
    spoken_turn(s, "hello", now=0)
    now = reply_heard(s, 100)
    s.tick(now + IDLE)  # check-in 1
    now = reply_heard(s, now + IDLE + 10)
    s.key_pressed("5", now + 100, received_at=0)
    s.key_pressed("#", now + 110, received_at=0)  # an answer: the count starts again
    now = reply_heard(s, now + 200)
    cmds = s.tick(now + IDLE)
    assert "goodbye" not in of(cmds, StartResponse)[0].messages[-1]["content"]


def test_the_watch_holds_the_deadline_over_a_sound_until_it_proves_words():
    from voice_server.session.silence import SilenceWatch

    w = SilenceWatch()
    w.count_until(5000)
    w.hold()
    assert not w.due(9000)
    w.noise(reply_active=False)
    assert w.deadline == 5000 and w.due(5000) and not w.due(4999)
    w.hold()
    w.caller_spoke()          # words: what was held is gone
    w.noise(reply_active=False)
    assert w.deadline is None
    w.count_until(100)
    w.hold()
    w.noise(reply_active=True)  # a reply started meanwhile: it sets its own deadline
    assert w.deadline is None
    w.postpone(200)             # nothing counting: nothing to move
    assert w.deadline is None
