"""Key presses (DTMF) of a phone caller in the session core: announced at
once and in order, one conversation entry per ``#`` or pause, answered like an
utterance (session/keypad.py)."""

from __future__ import annotations

from voice_server.session import StartResponse
from voice_server.session.keypad import ENTRY_GAP_MS

from session_helpers import events, new_session, of, one, types


def test_each_key_is_announced_in_order_and_hash_ends_the_entry():
    s = new_session()
    got = []
    for t, key in enumerate("12*#"):
        cmds = s.key_pressed(key, 100 + t, received_at=1_800_000_000)
        got += [e for e in events(cmds) if e["type"] == "input_audio_buffer.dtmf_event_received"]
    assert [e["event"] for e in got] == list("12*#")
    assert got[0]["received_at"] == 1_800_000_000
    # '#' ended the entry: one user text item the model reads, and a reply
    item = one(cmds, "conversation.item.done")["item"]
    assert item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "[pressed 1 2 * #]"}]
    start = of(cmds, StartResponse)[0]
    assert start.messages[-1] == {"role": "user", "content": "[pressed 1 2 * #]"}


def test_a_pause_ends_the_entry_and_bad_keys_are_dropped():
    s = new_session()
    assert s.key_pressed("x", 10, received_at=0) == []
    assert s.key_pressed("12", 10, received_at=0) == []
    cmds = s.key_pressed("4", 100, received_at=0) + s.key_pressed("2", 600, received_at=0)
    assert types(cmds).count("input_audio_buffer.dtmf_event_received") == 2
    assert "conversation.item.added" not in types(cmds)
    assert s.tick(600 + ENTRY_GAP_MS - 1) == []  # still typing
    cmds = s.tick(600 + ENTRY_GAP_MS)
    assert one(cmds, "conversation.item.added")["item"]["content"][0]["text"] == "[pressed 4 2]"
    assert of(cmds, StartResponse)


def test_without_create_response_the_entry_is_only_added():
    s = new_session(turn_detection={"type": "server_vad", "create_response": False})
    cmds = s.key_pressed("9", 0, received_at=0) + s.key_pressed("#", 10, received_at=0)
    assert "conversation.item.done" in types(cmds) and not of(cmds, StartResponse)


def test_an_entry_typed_over_a_reply_interrupts_it_and_is_answered():
    from session_helpers import spoken_turn
    from voice_server.session import CancelResponse

    s = new_session()
    old = of(spoken_turn(s, "what are my options"), StartResponse)[0].response_id
    cmds = s.key_pressed("1", 100, received_at=0) + s.key_pressed("#", 110, received_at=0)
    assert [c.response_id for c in of(cmds, CancelResponse)] == [old]
    done = one(cmds, "response.done")["response"]
    assert (done["id"], done["status"]) == (old, "cancelled")
    new = of(cmds, StartResponse)[0]
    assert new.response_id != old and new.messages[-1]["content"] == "[pressed 1 #]"
    t = types(cmds)
    assert t.index("response.done") < t.index("conversation.item.added")


def test_a_flood_of_keys_is_rate_limited_like_client_events():
    from voice_server.session import Session, SessionSettings
    from voice_server.session.config import ServerLimits

    s = Session("s", SessionSettings(), limits=ServerLimits(max_client_events_per_s=5,
                                                            client_events_burst=5))
    events(s.start(0))
    got = [t for i in range(20) for t in types(s.key_pressed("1", 0, received_at=0))]
    assert got.count("input_audio_buffer.dtmf_event_received") == 5
    assert got.count("error") == 15
