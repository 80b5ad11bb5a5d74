"""Who answered an outbound call (session/answering_machine.py): a person's
short hello is answered once they pause; a machine's greeting is not answered,
the message goes after its beep, and the call ends once it was heard."""

from __future__ import annotations

import numpy as np

from voice_server.session import Close, Session, SessionSettings, StartResponse
from voice_server.session.answering_machine import MESSAGE_NOTE, AnsweringMachineDetector, is_tone
from voice_server.testing.speech_corpus import human_clips

from session_helpers import PLAIN_BARGE_IN, events, of, speak

SR = 16000


def amd_session() -> Session:
    s = Session("sess_amd", SessionSettings(), audio_out_mode="stream",
                interruptions=PLAIN_BARGE_IN, answering_machine=True)
    events(s.start(0))
    return s


def feed_until(s: Session, until_ms: float, audio=None) -> list:
    """Input (silence, or ``audio`` from where the input is) up to ``until_ms``."""
    out = []
    pos = s.input_ms
    x = audio if audio is not None else np.zeros(int((until_ms - pos) * SR / 1000), np.int16)
    for i in range(0, x.size, 320):
        now = s.input_ms
        out += s.input_audio(x[i:i + 320], SR, now)
    return out


def beep(ms: float = 400, freq: float = 1000.0) -> np.ndarray:
    t = np.arange(int(SR * ms / 1000)) / SR
    return (8000 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def test_a_person_saying_hello_is_answered_once_they_pause():
    s = amd_session()
    feed_until(s, 1000)
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": 1000}, 1000)
    cmds += feed_until(s, 1600)
    cmds += s.listen_event({"type": "speech_stopped", "audio_end_ms": 1600}, 1600)
    cmds += s.listen_event({"type": "final", "text": "hello?", "audio_start_ms": 1000,
                            "audio_end_ms": 1600}, 1601)
    assert not of(cmds, StartResponse)  # not yet: it may be a machine
    cmds = feed_until(s, 2600)
    det = [e for e in events(cmds) if e["type"] == "voice_agent.answering_machine.detected"]
    assert [d["result"] for d in det] == ["human"]
    assert of(cmds, StartResponse)[0].messages[-1] == {"role": "user", "content": "hello?"}


def test_a_machine_greeting_gets_the_message_after_its_beep_then_the_call_ends():
    s = amd_session()
    feed_until(s, 500)
    s.listen_event({"type": "speech_started", "audio_start_ms": 500}, 500)
    cmds = feed_until(s, 3500)
    det = [e for e in events(cmds) if e["type"] == "voice_agent.answering_machine.detected"]
    assert [d["result"] for d in det] == ["machine"]
    cmds = s.listen_event({"type": "speech_stopped", "audio_end_ms": 3500}, 3500)
    cmds += s.listen_event({"type": "final", "text": "you have reached jane please leave a "
                            "message after the tone", "audio_start_ms": 500,
                            "audio_end_ms": 3500}, 3501)
    cmds += feed_until(s, 3700)
    assert not of(cmds, StartResponse)  # the greeting is not answered
    cmds = feed_until(s, 0, np.concatenate([beep(), np.zeros(SR // 10, np.int16)]))
    [start] = of(cmds, StartResponse)
    assert start.messages[-1]["content"] == MESSAGE_NOTE
    rid = start.response_id
    out = s.response_chunk(rid, "speak", speak("Hi Jane, call me back.", 900), 5000)
    item = next(c for c in out if hasattr(c, "item_id")).item_id
    s.response_finished(rid, "completed", None, 5010)
    assert not of(s.tick(5100), Close)
    s.playback_progress(item, 900, 6000)
    assert [(c.code, c.reason) for c in of(s.tick(6010), Close)] == \
        [(1000, "machine_message_left")]


def test_the_beep_is_a_steady_tone_and_speech_is_not():
    assert is_tone(beep(32)[:512]) is not None
    assert is_tone(np.zeros(512, np.int16)) is None
    d = AnsweringMachineDetector()
    person = np.concatenate([c.audio for c in human_clips() if c.group == "librivox"][:3])
    pcm = (person * 32767).astype(np.int16)
    d.audio(pcm, pcm.size * 1000 / SR)
    assert d.beep_at_ms is None  # ten seconds of people reading: no beep
    x = np.concatenate([np.zeros(SR // 2, np.int16), beep(), np.zeros(SR // 2, np.int16)])
    d.audio(x, 0)
    assert d.beep_at_ms is not None


def test_nobody_speaking_gets_the_agent_to_speak_first():
    from voice_server.session.answering_machine import NO_ANSWER_MS
    from voice_server.session.silence import no_answer_note

    s = amd_session()
    cmds = feed_until(s, NO_ANSWER_MS + 100)
    det = [e for e in events(cmds) if e["type"] == "voice_agent.answering_machine.detected"]
    assert [d["result"] for d in det] == ["silence"]
    assert of(cmds, StartResponse)[0].messages[-1]["content"] == no_answer_note(NO_ANSWER_MS)
