"""Shared helpers for the session-core tests (no sockets, no clock)."""

from __future__ import annotations

import base64
import json
import typing

import numpy as np
from pydantic import TypeAdapter

from openai.types.realtime import realtime_server_event as _rse
from voice_server.session import SendEvent, Session, SessionSettings
from voice_server.session.backchannel import InterruptionSettings

# The Realtime API's own barge-in: speech_started cancels the reply in the same call.
PLAIN_BARGE_IN = InterruptionSettings(resume_backchannels=False, echo_guard=False)
EXTENSION_KEYS = {"type", "event_id", "response_id", "item_id", "audio_end_ms"}
EXTENSION_KEYS_BY_TYPE = {  # extension events with keys of their own
    "voice_agent.answering_machine.detected": {"type", "event_id", "result", "audio_end_ms"},
    "voice_agent.language.changed": {"type", "event_id", "language", "previous", "source",
                                     "probability"}}

_SERVER_CLASSES = {}
for _cls in typing.get_args(typing.get_args(_rse.RealtimeServerEvent)[0]):
    _lit = _cls.model_fields["type"].annotation
    _SERVER_CLASSES[typing.get_args(_lit)[0]] = TypeAdapter(_cls)

_SEEN_IDS: dict[str, int] = {}


def validate_event(ev: dict) -> None:
    """Validate one server event against the official SDK model (GA); an
    extension event (``voice_agent.*``) against its documented keys."""
    if ev["type"].startswith("voice_agent."):
        assert set(ev) == EXTENSION_KEYS_BY_TYPE.get(ev["type"], EXTENSION_KEYS), ev
        assert _SEEN_IDS.setdefault(ev["event_id"], id(ev)) == id(ev), "event_id reused"
        return
    adapter = _SERVER_CLASSES.get(ev["type"])
    assert adapter is not None, f"not a GA server event type: {ev['type']}"
    adapter.validate_python(ev)
    json.dumps(ev)  # must be serialisable as is
    # the same dict may be checked twice; another event with its id may not
    assert _SEEN_IDS.setdefault(ev["event_id"], id(ev)) == id(ev), "event_id reused"


def events(cmds) -> list[dict]:
    out = [c.event for c in cmds if isinstance(c, SendEvent)]
    for e in out:
        validate_event(e)
    return out


def types(cmds) -> list[str]:
    return [e["type"] for e in events(cmds)]


def of(cmds, cls) -> list:
    return [c for c in cmds if isinstance(c, cls)]


def one(cmds, type_: str) -> dict:
    found = [e for e in events(cmds) if e["type"] == type_]
    assert len(found) == 1, f"expected one {type_}, got {len(found)}: {types(cmds)}"
    return found[0]


def tone(ms: float, sr: int = 16000, freq: float = 440.0, amp: int = 8000) -> np.ndarray:
    n = int(round(sr * ms / 1000.0))
    t = np.arange(n) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def speak(text: str, ms: float = 500.0, sr: int = 16000) -> dict:
    audio = tone(ms, sr)
    return {"audio": audio, "sample_rate": sr, "text": text, "duration_ms": ms}


def b64_pcm(pcm: np.ndarray) -> str:
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode()


def new_session(mode: str = "events", interruptions: InterruptionSettings | None = None,
                **settings) -> Session:
    s = Session("sess_test", SessionSettings(**settings), audio_out_mode=mode,
                interruptions=interruptions)
    events(s.start(0))
    return s


def spoken_turn(s: Session, text: str, t0: int = 1000, now: int = 0):
    """speech_started/stopped/final for one utterance; returns all commands."""
    cmds = s.listen_event({"type": "speech_started", "audio_start_ms": t0}, now)
    cmds += s.listen_event({"type": "speech_stopped", "audio_end_ms": t0 + 800}, now + 1)
    cmds += s.listen_event({"type": "final", "text": text, "audio_start_ms": t0,
                            "audio_end_ms": t0 + 800}, now + 2)
    return cmds


def run_clock(s: Session, until_ms: float, now: float, step: float = 10.0):
    """Advance the clock, pumping whenever output is due; returns (commands, now)."""
    out = []
    while now < until_ms:
        now += step
        due = s.next_output_ms
        if due is not None and due <= now:
            out += s.pump_output(now)
    return out, now
