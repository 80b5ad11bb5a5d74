"""Output pacing, pause and resume in the session core (sans-I/O, a made-up
clock): the reply's audio is released so that the listener holds at most
``output_lead_ms`` unplayed, ``response.done`` follows the last audio, a
pause holds it and a resume goes on from there, a cancel truncates at the
played position."""

from __future__ import annotations

import base64

import numpy as np

from voice_server.session import (AudioOut, FlushAudio, PauseAudio, ResumeAudio, RewindAudio,
                                  SendEvent, Session, SessionSettings)
from voice_server.session.output_pacer import OutputPacer

from session_helpers import run_clock, speak, spoken_turn

LEAD = 300.0


def paced(mode: str = "events", lead: float = LEAD, extension_events: bool = True) -> Session:
    s = Session("sess_pace", SessionSettings(), audio_out_mode=mode, output_lead_ms=lead,
                extension_events=extension_events)
    s.start(0)
    return s


def evs(cmds) -> list[dict]:
    return [c.event for c in cmds if isinstance(c, SendEvent)]


def delta_ms(cmds) -> float:
    """Audio ms in the released commands (24 kHz pcm16 deltas, or AudioOut)."""
    ms = 0.0
    for c in cmds:
        if isinstance(c, AudioOut):
            ms += c.pcm.size * 1000.0 / c.sample_rate
        elif isinstance(c, SendEvent) and c.event["type"] == "response.output_audio.delta":
            ms += len(base64.b64decode(c.event["delta"])) / 2 / 24.0
    return ms


def start_reply(s: Session) -> str:
    cmds = spoken_turn(s, "hello")
    return next(e for e in evs(cmds) if e["type"] == "response.created")["response"]["id"]


def test_pacer_keeps_the_lead_and_models_playout():
    p = OutputPacer(300)
    p.hold(["a"] * 20, [40.0] * 20)
    first = p.release(0)
    assert len(first) == 7  # 280 ms: one more would pass the lead
    assert p.ahead_ms(0) == 280 and p.played_ms(0) == 0
    assert p.due_ms == 280 - (300 - 40)
    assert p.release(19) == [] and len(p.release(20)) == 1
    assert p.played_ms(100) == 100
    p.paused = True
    assert p.release(1000) == [] and p.due_ms is None
    assert p.played_ms(1000) == 320  # the listener played out what it held
    p.paused = False
    assert len(p.release(1000)) == 7  # after a gap the playout line restarts now


def test_unpaced_releases_everything_at_once():
    s = paced(lead=0)
    rid = start_reply(s)
    cmds = s.response_chunk(rid, "speak", speak("One two.", 2000), 10)
    assert delta_ms(cmds) > 1900
    assert s.next_output_ms is None
    assert "response.done" in [e["type"] for e in evs(s.response_finished(rid, "completed",
                                                                          None, 20))]


def test_websocket_reply_is_paced_and_done_follows_the_last_delta():
    s = paced()
    rid = start_reply(s)
    now = 10.0
    cmds = s.response_chunk(rid, "speak", speak("One two three four.", 2000), now)
    assert 200 <= delta_ms(cmds) <= LEAD
    cmds += s.response_finished(rid, "completed", None, now)
    assert "response.done" not in [e["type"] for e in evs(cmds)]
    released = delta_ms(cmds)
    more, now = run_clock(s, 3000, now)
    types = [e["type"] for e in evs(more)]
    assert types[-1] == "response.done" and types.count("response.done") == 1
    assert types.index("response.output_audio.done") > \
        max(i for i, t in enumerate(types) if t == "response.output_audio.delta")
    assert abs(released + delta_ms(more) - 2000) < 1


def test_the_lead_holds_at_every_moment():
    s = paced()
    rid = start_reply(s)
    now = 0.0
    got = delta_ms(s.response_chunk(rid, "speak", speak("Long.", 3000), now))
    first = now
    while now < 4000:
        now += 7
        if s.next_output_ms is not None and s.next_output_ms <= now:
            got += delta_ms(s.pump_output(now))
        assert got - (now - first) <= LEAD + 40 + 1e-6


def test_pause_holds_resume_goes_on_with_the_same_response():
    s = paced()
    rid = start_reply(s)
    now = 0.0
    cmds = s.response_chunk(rid, "speak", speak("One two three four five six.", 3000), now)
    cmds += run_clock(s, 500, now)[0]
    now = 500.0
    paused = s.pause_output(now)
    ev = evs(paused)[0]
    assert ev["type"] == "voice_agent.output_audio.paused" and ev["response_id"] == rid
    assert ev["audio_end_ms"] == 500 and ev["item_id"]
    assert s.pause_output(now + 1) == []  # already paused
    held, now = run_clock(s, 2000, now)
    assert delta_ms(held) == 0 and s.next_output_ms is None
    s.response_chunk(rid, "speak", speak("Seven.", 500), now)  # generation goes on
    assert s.next_output_ms is None
    resumed = s.resume_output(now)
    rev = evs(resumed)
    assert rev[0]["type"] == "voice_agent.output_audio.resumed"
    assert rev[0]["response_id"] == rid
    assert delta_ms(resumed) > 0
    s.response_finished(rid, "completed", None, now)
    rest, now = run_clock(s, 6000, now)
    done = [e for e in evs(rest) if e["type"] == "response.done"]
    assert len(done) == 1 and done[0]["response"]["status"] == "completed"
    total = delta_ms(cmds) + delta_ms(resumed) + delta_ms(rest)
    assert abs(total - 3500) < 1  # nothing lost, nothing twice


def test_cancel_after_pause_truncates_at_the_played_position():
    s = paced()
    rid = start_reply(s)
    s.response_chunk(rid, "speak", speak("One two three four five six.", 3000), 0)
    run_clock(s, 800, 0)
    s.pause_output(800)
    # 600 ms later: a real interruption; the client played out its lead meanwhile
    cmds = s.cancel_response("turn_detected", 1400)
    types = [e["type"] for e in evs(cmds)]
    assert types.index("response.done") < types.index("conversation.item.truncated")
    cut = next(e for e in evs(cmds) if e["type"] == "conversation.item.truncated")
    assert abs(cut["audio_end_ms"] - (800 + LEAD)) <= 40
    done = next(e for e in evs(cmds) if e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled"
    assert s.next_output_ms is None and not s.output_paused


def test_stream_mode_pause_commands_and_cancel_flushes():
    s = paced("stream")
    rid = start_reply(s)
    cmds = s.response_chunk(rid, "speak", speak("One two three.", 2000), 0)
    assert [c for c in cmds if isinstance(c, AudioOut)]
    item = next(c.item_id for c in cmds if isinstance(c, AudioOut))
    s.playback_progress(item, 240, 250)
    paused = s.pause_output(250)
    assert [c.item_id for c in paused if isinstance(c, PauseAudio)] == [item]
    assert evs(paused)[0]["audio_end_ms"] == 240  # the transport's report
    resumed = s.resume_output(300)
    assert [c.item_id for c in resumed if isinstance(c, ResumeAudio)] == [item]
    s.pause_output(400)
    cmds = s.cancel_response("turn_detected", 500)
    assert [c.item_id for c in cmds if isinstance(c, FlushAudio)] == [item]
    assert not [c for c in cmds if isinstance(c, AudioOut)]


def test_client_cancel_while_paused_lets_a_stream_transport_go_on():
    s = paced("stream")
    rid = start_reply(s)
    cmds = s.response_chunk(rid, "speak", speak("One two three.", 2000), 0)
    item = next(c.item_id for c in cmds if isinstance(c, AudioOut))
    s.pause_output(100)
    cmds = s.client_event({"type": "response.cancel"}, 200)
    assert [c.item_id for c in cmds if isinstance(c, ResumeAudio)] == [item]
    # the next reply is not held by the old pause
    rid2 = next(e for e in evs(s.client_event({"type": "response.create"}, 300))
                if e["type"] == "response.created")["response"]["id"]
    assert delta_ms(s.response_chunk(rid2, "speak", speak("Yes.", 500), 310)) > 0


def test_extension_events_can_be_turned_off():
    s = paced(extension_events=False)
    rid = start_reply(s)
    s.response_chunk(rid, "speak", speak("One two.", 2000), 0)
    assert evs(s.pause_output(100)) == []
    assert s.output_paused
    assert [e["type"] for e in evs(s.resume_output(200))
            if e["type"].startswith("voice_agent.")] == []


def test_nothing_to_pause_without_an_audio_reply():
    s = paced()
    assert s.pause_output(0) == [] and s.resume_output(1) == []


def test_barge_in_truncates_and_the_clients_own_truncate_is_still_accepted():
    s = paced()
    rid = start_reply(s)
    got = delta_ms(s.response_chunk(rid, "speak", speak("One two three four.", 3000), 0))
    more, now = run_clock(s, 1000, 0)
    got += delta_ms(more)
    held = s.listen_event({"type": "speech_started", "audio_start_ms": 5000}, now)
    assert [e["type"] for e in evs(held)] == ["voice_agent.output_audio.paused"]   # deciding
    cmds = s.listen_event({"type": "interim", "text": "Wait, stop.", "paused": False}, now)
    types = [e["type"] for e in evs(cmds)]
    assert types.index("input_audio_buffer.speech_started") < types.index("response.done")
    done = next(e for e in evs(cmds) if e["type"] == "response.done")
    cut = next(e for e in evs(cmds) if e["type"] == "conversation.item.truncated")
    assert done["response"]["status_details"]["reason"] == "turn_detected"
    assert abs(cut["audio_end_ms"] - now) <= 1  # played from t=0 without a gap
    # the client played a little more than the server thinks, up to what it got
    back = s.client_event({"type": "conversation.item.truncate", "item_id": cut["item_id"],
                           "content_index": 0, "audio_end_ms": int(got)}, now + 5)
    assert [e["type"] for e in evs(back)] == ["conversation.item.truncated"]
    over = s.client_event({"type": "conversation.item.truncate", "item_id": cut["item_id"],
                           "content_index": 0, "audio_end_ms": int(got) + 200}, now + 6)
    assert [e["type"] for e in evs(over)] == ["error"]


def test_failure_while_audio_is_held_ends_at_once_with_what_was_sent():
    s = paced()
    rid = start_reply(s)
    got = delta_ms(s.response_chunk(rid, "speak", speak("One two three four.", 3000), 0))
    cmds = s.response_finished(rid, "failed", {"code": "internal", "message": "boom"}, 50)
    types = [e["type"] for e in evs(cmds)]
    assert types[0] == "error" and types[-1] == "response.done"
    assert delta_ms(cmds) == 0 and s.next_output_ms is None
    item = s.conversation.items[-1]
    assert abs(item.audio_ms - got) < 1


def test_a_reply_that_ends_while_paused_waits_for_the_resume():
    s = paced("stream")
    rid = start_reply(s)
    cmds = s.response_chunk(rid, "speak", speak("One.", 200), 0)  # all of it released
    item = next(c.item_id for c in cmds if isinstance(c, AudioOut))
    assert s.next_output_ms is None
    s.pause_output(50)
    assert "response.done" not in [e["type"] for e in evs(
        s.response_finished(rid, "completed", None, 60))]
    assert s.active_response_id == rid  # a cancel would still truncate it
    resumed = s.resume_output(100)
    assert [c.item_id for c in resumed if isinstance(c, ResumeAudio)] == [item]
    assert "response.done" in [e["type"] for e in evs(resumed)]


def test_settings_from_the_environment():
    from voice_server.settings import ServerSettings

    s = ServerSettings.from_sources({}, env={})
    assert s.output_lead_ms == 300 and s.extension_events is True
    s = ServerSettings.from_sources({"server": {"output_lead_ms": 120}}, env={})
    assert s.output_lead_ms == 120
    s = ServerSettings.from_sources({"server": {"output_lead_ms": 120}}, env={
        "VOICE_AGENT_OUTPUT_LEAD_MS": "0", "VOICE_AGENT_EXTENSION_EVENTS": "off"})
    assert s.output_lead_ms == 0 and s.extension_events is False
    assert ServerSettings.from_sources({}, env={"VOICE_AGENT_EXTENSION_EVENTS": "1"}) \
        .extension_events is True


def test_output_held_until_the_paced_reply_is_out():
    """The drain counts a reply still being paced out as a turn in progress."""
    s = paced()
    rid = start_reply(s)
    s.response_chunk(rid, "speak", speak("One two.", 1500), 0)
    s.response_finished(rid, "completed", None, 5)
    assert s.output_held
    run_clock(s, 2000, 5)
    assert not s.output_held and s.active_response_id is None


def test_a_sound_pauses_the_reply_a_click_resumes_it_words_cancel_it():
    """The listen stage's onset (first speech frame) pauses the playing reply at
    once; onset_dropped (too short to be speech: a cough, a click) resumes it,
    same response; speech_started (min_speech_ms of speech) keeps it paused
    while the words decide; words that are not backchannels cancel it."""
    s = paced()
    rid = start_reply(s)
    s.response_chunk(rid, "speak", speak("One two three four five six.", 3000), 0.0)
    run_clock(s, 500, 0.0)
    paused = s.listen_event({"type": "onset", "audio_start_ms": 9000}, 500.0)
    assert [e["type"] for e in evs(paused)] == ["voice_agent.output_audio.paused"]
    assert s.output_paused
    resumed = s.listen_event({"type": "onset_dropped"}, 620.0)
    assert evs(resumed)[0]["type"] == "voice_agent.output_audio.resumed"
    assert not s.output_paused and s.active_response_id == rid
    assert not [e for e in evs(resumed) if e["type"] == "response.done"]
    s.listen_event({"type": "onset", "audio_start_ms": 9500}, 900.0)
    assert evs(s.listen_event({"type": "speech_started", "audio_start_ms": 9500}, 1150.0)) == []
    assert s.output_paused and s.active_response_id == rid
    cancelled = s.listen_event({"type": "interim", "text": "No, the other one.", "paused": False},
                               1300.0)
    types_ = [e["type"] for e in evs(cancelled)]
    assert types_[0] == "input_audio_buffer.speech_started"
    done = [e for e in evs(cancelled) if e["type"] == "response.done"]
    assert done and done[0]["response"]["status"] == "cancelled"
    assert s.listen_event({"type": "onset_dropped"}, 1200.0) == []   # nothing to resume


def test_a_one_word_command_too_short_for_speech_still_interrupts():
    """"Stop." over a reply is shorter than min_speech_ms: the listen stage drops
    it as speech but reads it (onset_dropped with its words).  A command word
    cancels the reply and is the next user turn; a cough's reading resumes it."""
    s = paced()
    rid = start_reply(s)
    s.response_chunk(rid, "speak", speak("One two three four five six.", 3000), 0.0)
    run_clock(s, 500, 0.0)
    s.listen_event({"type": "onset", "audio_start_ms": 9000}, 500.0)
    resumed = s.listen_event({"type": "onset_dropped", "text": "", "audio_start_ms": 9000,
                              "audio_end_ms": 9200}, 700.0)
    assert evs(resumed)[0]["type"] == "voice_agent.output_audio.resumed"
    run_clock(s, 900, 700.0)
    s.listen_event({"type": "onset", "audio_start_ms": 9400}, 900.0)
    out = s.listen_event({"type": "onset_dropped", "text": "Stop.", "audio_start_ms": 9400,
                          "audio_end_ms": 9650}, 1100.0)
    types_ = [e["type"] for e in evs(out)]
    assert types_[0] == "input_audio_buffer.speech_started", types_
    done = [e for e in evs(out) if e["type"] == "response.done"]
    assert done and done[0]["response"]["status"] == "cancelled"
    assert "input_audio_buffer.committed" in types_
    heard = [e for e in evs(out)
             if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert heard and heard[0]["transcript"] == "Stop."
    assert s.active_response_id != rid


def test_an_onset_with_no_reply_playing_changes_nothing():
    s = paced()
    assert s.listen_event({"type": "onset", "audio_start_ms": 100}, 10.0) == []
    assert s.listen_event({"type": "onset_dropped"}, 20.0) == []


def test_pacer_lead_may_change_between_releases():
    p = OutputPacer(300)
    p.hold(["a"] * 20, [20.0] * 20)
    assert len(p.release(0)) == 15
    p.lead_ms = 80
    assert p.release(100) == []          # 200 ms still ahead: nothing more until 60 are left
    assert p.due_ms == 300 - (80 - 20)
    assert len(p.release(240)) == 1 and p.ahead_ms(240) == 80


def test_pacer_rewind_takes_back_what_was_not_played():
    p = OutputPacer(300, keep_released=True)
    pcm = np.arange(4800, dtype=np.int16)   # 100 ms at 48 kHz per slice
    cmds = [AudioOut("r", "i", pcm, 48000) for _ in range(5)]
    p.hold(cmds, [100.0] * 5)
    assert len(p.release(0)) == 3          # 300 ms ahead
    assert p.rewind(150) == 150            # played to 150 ms
    assert p.released_ms == 150 and p.ahead_ms(150) == 0
    p.paused = True
    assert p.release(400) == []
    p.paused = False
    again = p.release(400)
    first = again[0]
    assert isinstance(first, AudioOut) and first.pcm.size == 2400 and first.pcm[0] == 2400
    assert sum(c.pcm.size for c in again) / 48 == 250   # its last 50 ms, then 100 + 100
    assert p.played_ms(400) == 150


def test_pacer_without_keep_released_cannot_rewind():
    p = OutputPacer(300)
    p.hold([AudioOut("r", "i", np.zeros(4800, np.int16), 48000)], [100.0])
    p.release(0)
    assert p.rewind(50) == 50 and not p.holding


def interruptible(mode: str = "events", **kw) -> Session:
    s = Session("sess_pace", SessionSettings(), audio_out_mode=mode, output_lead_ms=LEAD,
                interruptible_lead_ms=80.0, **kw)
    s.start(0)
    return s


def test_the_lead_is_small_while_the_caller_can_interrupt():
    """A client that knows only the standard events plays on, after the pause,
    what it holds: while VAD can interrupt the reply it holds at most 80 ms,
    in 20 ms deltas; with push-to-talk the full lead again."""
    s = interruptible()
    rid = start_reply(s)
    cmds = s.response_chunk(rid, "speak", speak("One two three.", 2000), 0)
    assert delta_ms(cmds) == 80
    sizes = {len(base64.b64decode(e["delta"])) for e in evs(cmds)
             if e["type"] == "response.output_audio.delta"}
    assert sizes == {20 * 24 * 2}
    for now in range(10, 1500, 10):
        s.pump_output(now)
        assert s._pacer.ahead_ms(now) <= 80 + 1e-6
    s.client_event({"type": "session.update", "session": {
        "type": "realtime", "audio": {"input": {"turn_detection": None}}}}, 1500)
    assert s._pacer.lead_ms == LEAD and s.output_slice_ms == 40
    s.client_event({"type": "session.update", "session": {"type": "realtime", "audio": {
        "input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}}}},
        1600)
    assert s._pacer.lead_ms == LEAD


def test_phone_pause_rewinds_and_resume_sends_again_from_the_played_position():
    s = interruptible("stream", clear_on_pause=True)
    assert s._pacer.lead_ms == LEAD   # the phone keeps its lead: the clear stops it
    rid = start_reply(s)
    cmds = s.response_chunk(rid, "speak", speak("One two three four five.", 3000), 0)
    cmds += run_clock(s, 500, 0)[0]
    sent = delta_ms(cmds)
    assert sent == 800                 # 500 played + 300 ahead
    paused = s.pause_output(500)
    rw = [c for c in paused if isinstance(c, RewindAudio)]
    assert len(rw) == 1 and abs(rw[0].played_ms - 500) < 1e-6
    assert not [c for c in paused if isinstance(c, PauseAudio)]
    held, now = run_clock(s, 900, 500)
    assert delta_ms(held) == 0
    resumed = s.resume_output(900)
    audio = [c for c in resumed if isinstance(c, AudioOut)]
    assert audio and delta_ms(audio) == 300
    rest, now = run_clock(s, 6000, 900)
    s.response_finished(rid, "completed", None, now)
    rest += run_clock(s, 9000, now)[0]
    assert abs(500 + delta_ms(resumed) + delta_ms(rest) - 3000) < 1   # nothing lost, nothing twice


def test_phone_cancel_after_a_rewind_truncates_at_the_played_position():
    s = interruptible("stream", clear_on_pause=True)
    rid = start_reply(s)
    s.response_chunk(rid, "speak", speak("One two three four five.", 3000), 0)
    run_clock(s, 500, 0)
    s.pause_output(500)
    cmds = s.client_event({"type": "response.cancel"}, 700)
    done = next(e for e in evs(cmds) if e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled"
    assert not [c for c in cmds if isinstance(c, AudioOut)]
    item = s.conversation.get(s.conversation.last_id())
    assert item.role == "assistant" and abs(item.audio_ms - 500) < 1   # what was heard
