"""The caller's language in the session core (issue 42): the pin, the
detected language's event, the item's language, the system text's line and
the speak request's ``language``."""

from __future__ import annotations

from session_helpers import events, new_session, of, one, spoken_turn, types
from runtime.models.voice_contract import SPEAK_LANGUAGE, language_event
from voice_server.replies import reply_request
from voice_server.session import ConfigureListen, Session, SessionSettings, StartResponse

PIN = {"type": "session.update", "session": {"audio": {"input": {"transcription": {
    "model": "whisper-1", "language": "es"}}}}}


def _spanish_turn(s: Session, t0: int = 1000, now: int = 100):
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": t0}, now)
    cmds += s.listen_event({"type": "speech_stopped", "audio_end_ms": t0 + 2400}, now + 1)
    cmds += s.listen_event(language_event("es", 0.91), now + 2)
    cmds += s.listen_event({"type": "final", "text": "¿Qué hora es?", "audio_start_ms": t0,
                            "audio_end_ms": t0 + 2400, "language": "es"}, now + 3)
    return cmds


def test_a_pin_is_checked_echoed_and_reaches_the_listen_stage():
    s = new_session()
    cmds = s.client_event(PIN, 10)
    updated = one(cmds, "session.updated")["session"]
    assert updated["audio"]["input"]["transcription"] == {"model": "whisper-1", "language": "es"}
    [listen] = of(cmds, ConfigureListen)
    assert listen.params["language"] == "es"
    changed = one(cmds, "voice_agent.language.changed")
    assert (changed["language"], changed["previous"], changed["source"]) == ("es", None, "pinned")
    assert s.language == "es"
    bad = {"type": "session.update", "session": {"audio": {"input": {"transcription": {
        "language": "spanish"}}}}}
    [err] = [e for e in events(s.client_event(bad, 20)) if e["type"] == "error"]
    assert err["error"]["param"] == "session.audio.input.transcription.language"
    assert s.settings.language == "es"


def test_an_unpinned_session_sends_no_language_and_english_asks_as_before():
    s = new_session()
    assert s.language is None and "language" not in (s._listening or {})
    cmds = spoken_turn(s, "what time is it")
    [start] = of(cmds, StartResponse)
    assert start.language is None and start.instructions is None
    assert SPEAK_LANGUAGE not in reply_request(start)[2]


def test_a_detected_language_is_said_carried_by_the_item_and_asked_for():
    s = new_session()
    cmds = _spanish_turn(s)
    changed = one(cmds, "voice_agent.language.changed")
    assert (changed["language"], changed["source"], changed["probability"]) == \
        ("es", "detected", 0.91)
    done = one(cmds, "conversation.item.input_audio_transcription.completed")
    assert done["voice_agent"] == {"language": "es"}
    item = [e for e in events(cmds) if e["type"] == "conversation.item.done"][0]["item"]
    assert item["voice_agent"] == {"language": "es"}
    [start] = of(cmds, StartResponse)
    assert start.language == "es"
    assert "The caller speaks Spanish. Answer in Spanish." in start.instructions
    assert reply_request(start)[2][SPEAK_LANGUAGE] == "es"
    # a new listen stream starts from it (a hint, not a pin)
    cmds = s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 700}}}}}, 8000)
    [listen] = of(cmds, ConfigureListen)
    assert listen.params["language_start"] == "es" and "language" not in listen.params
    # the same language again is no news
    assert "voice_agent.language.changed" not in types(s.listen_event(language_event("es", 0.95), 9000))


def test_client_instructions_come_after_the_language_line():
    s = new_session(instructions="Always answer in English.")
    [start] = of(_spanish_turn(s), StartResponse)
    assert start.instructions.index("Answer in Spanish.") < start.instructions.index(
        "Always answer in English.")


def test_without_extension_events_nothing_extra_reaches_the_client():
    s = Session("sess_x", SessionSettings(), extension_events=False)
    events(s.start(0))
    cmds = _spanish_turn(s)
    assert "voice_agent.language.changed" not in types(cmds)
    assert all("voice_agent" not in e and "voice_agent" not in e.get("item", {})
               for e in events(cmds))
    [start] = of(cmds, StartResponse)
    assert start.language == "es"           # the reply is still asked and spoken in it
