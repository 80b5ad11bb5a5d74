"""Operator limits enforced by the session core: the client-event rate limit
(token bucket) and the idle timeout; their settings and env overrides."""

from __future__ import annotations

import numpy as np

from session_helpers import events, one, types
from voice_server.session import Close, SendEvent, ServerLimits, Session, SessionSettings
from voice_server.settings import ServerSettings


def errors(cmds):
    return [c.event["error"] for c in cmds if isinstance(c, SendEvent)
            and c.event["type"] == "error"]


def test_rate_limit_token_bucket_drops_excess_and_session_stays_open():
    s = Session("s", limits=ServerLimits(max_client_events_per_s=10, client_events_burst=5))
    s.start(0)
    codes = []
    for i in range(8):  # all at t=0: 5 pass (burst), 3 dropped
        errs = errors(s.client_event({"type": "input_audio_buffer.clear",
                                      "event_id": f"e{i}"}, 0))
        codes.append(errs[0]["code"] if errs else None)
    assert codes == [None] * 5 + ["rate_limit_exceeded"] * 3
    err = errors(s.client_event({"type": "input_audio_buffer.clear", "event_id": "x"}, 0))[0]
    assert err["type"] == "invalid_request_error" and err["event_id"] == "x"
    assert not s.closed
    # 100 ms later one token is back (10/s)
    assert errors(s.client_event({"type": "input_audio_buffer.clear"}, 100)) == []
    assert errors(s.client_event({"type": "input_audio_buffer.clear"}, 100))[0]["code"] == \
        "rate_limit_exceeded"
    # invalid events count too, and a clock going backwards does not drain the bucket
    assert errors(s.client_event("not json", 10_000))[0]["code"] == "invalid_json"
    assert errors(s.client_event({"type": "input_audio_buffer.clear"}, 5_000)) == []
    # 0 = unlimited
    u = Session("u", limits=ServerLimits(max_client_events_per_s=0))
    u.start(0)
    assert not any(errors(u.client_event({"type": "input_audio_buffer.clear"}, 0))
                   for _ in range(1000))


def test_idle_timeout_closes_after_no_traffic():
    s = Session("s", limits=ServerLimits(idle_timeout_s=5))
    s.start(0)
    assert s.tick(4_000) == []
    s.client_event({"type": "input_audio_buffer.clear"}, 4_000)
    assert s.tick(8_900) == []  # 4.9 s after the last event
    s.input_audio(np.zeros(160, np.int16), 16000, 8_900)  # audio is traffic too
    assert s.tick(13_800) == []
    cmds = s.tick(13_900)
    assert [e["code"] for e in errors(cmds)] == ["idle_timeout"]
    close = [c for c in cmds if isinstance(c, Close)]
    assert close and close[0].code == 1000 and close[0].reason == "idle_timeout"
    assert s.closed and s.tick(20_000) == []
    off = Session("o", limits=ServerLimits(idle_timeout_s=0))
    off.start(0)
    assert off.tick(3_000_000) == [] and not off.closed  # (max_session_s is 3600 s)


def test_limit_defaults_and_env_overrides():
    lim = ServerLimits()
    assert lim.idle_timeout_s > 0 and lim.max_client_events_per_s > 0
    assert lim.client_events_burst >= lim.max_client_events_per_s
    assert lim.max_append_b64_bytes > 0 and lim.max_buffered_input_s > 0
    s = ServerSettings.from_sources(
        {"server": {"limits": {"max_session_s": 50}}},
        env={"VOICE_AGENT_LIMIT_IDLE_TIMEOUT_S": "30",
             "VOICE_AGENT_LIMIT_MAX_CLIENT_EVENTS_PER_S": "7",
             "VOICE_AGENT_WS_MAX_MESSAGE_BYTES": "4096", "VOICE_AGENT_MAX_SESSIONS": "3",
             "VOICE_AGENT_DATACHANNEL_MAX_MESSAGE_BYTES": "8192"})
    assert s.limits.idle_timeout_s == 30 and s.limits.max_client_events_per_s == 7
    assert s.limits.max_session_s == 50  # the YAML value survives the env merge
    assert s.ws_max_message_bytes == 4096 and s.max_sessions == 3
    assert s.datachannel_max_message_bytes == 8192


def test_rejected_client_frame_is_an_error_traffic_and_rate_limited():
    s = Session("s", limits=ServerLimits(max_client_events_per_s=10, client_events_burst=3,
                                         idle_timeout_s=5))
    # before start: the session starts implicitly (session.created first)
    cmds = s.reject_client_frame("binary_frames_not_supported", "no binary frames", 0)
    evs = [c.event for c in cmds if isinstance(c, SendEvent)]
    assert [e["type"] for e in evs] == ["session.created", "error"]
    assert evs[1]["error"] == {"type": "invalid_request_error",
                               "code": "binary_frames_not_supported",
                               "message": "no binary frames", "param": None, "event_id": None}
    # it shares the token bucket with client events: 3 burst, the first frame took one
    codes = [errors(s.reject_client_frame("binary_frames_not_supported", "m", 0))[0]["code"]
             for _ in range(3)]
    assert codes == ["binary_frames_not_supported"] * 2 + ["rate_limit_exceeded"]
    assert errors(s.client_event({"type": "input_audio_buffer.clear"}, 0))[0]["code"] == \
        "rate_limit_exceeded"
    assert not s.closed
    # and it is traffic for the idle timeout
    assert s.tick(4_000) == []
    s.reject_client_frame("message_too_large", "too big", 4_000)
    assert s.tick(8_900) == []
    assert [e["code"] for e in errors(s.tick(9_000))] == ["idle_timeout"]
    assert s.closed and s.reject_client_frame("x", "y", 10_000) == []


def test_rate_limits_updated_follows_response_created_with_the_servers_limits():
    """The client-event bucket (what is left, when it is full again) and the
    response's output-token budget of the operator's cap."""
    s = Session("s", SessionSettings(), limits=ServerLimits(max_client_events_per_s=10,
                                                            client_events_burst=20,
                                                            max_output_tokens_cap=100))
    events(s.start(0))
    for i in range(5):
        events(s.client_event({"type": "input_audio_buffer.clear"}, 0))
    cmds = s.client_event({"type": "response.create", "response": {"max_output_tokens": 30}}, 0)
    assert types(cmds)[:2] == ["response.created", "rate_limits.updated"]
    limits = {x["name"]: x for x in one(cmds, "rate_limits.updated")["rate_limits"]}
    assert limits["requests"] == {"name": "requests", "limit": 20, "remaining": 14,
                                  "reset_seconds": 0.6}
    assert limits["tokens"] == {"name": "tokens", "limit": 100, "remaining": 30, "reset_seconds": 0}


def test_the_token_bucket_drips_back_to_its_burst_and_no_further():
    from voice_server.session.rate_limit import TokenBucket

    b = TokenBucket(rate_per_s=10, burst=3)
    assert [b.take(0) for _ in range(4)] == [True, True, True, False]
    assert b.take(99) is False and b.take(100) is True     # one token per 100 ms
    assert b.level(10_000) == 3.0 and b.full_in_s() == 0.0
    assert all(TokenBucket(rate_per_s=0, burst=1).take(0) for _ in range(100))   # unlimited
