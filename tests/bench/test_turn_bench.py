"""turn_bench's reading of a reply that a person's mid-sentence pause began:
cancelled by their going on before any audio, it is no error and no latency."""

from benchmarks.turn_bench import withdrawn_before_audio


def done(status: str, reason: str | None) -> dict:
    details = {"type": status, "reason": reason} if reason else None
    return {"type": "response.done", "response": {"status": status, "status_details": details}}


def test_only_a_reply_the_callers_speech_cancelled_counts_as_withdrawn():
    assert withdrawn_before_audio(done("cancelled", "turn_detected"))
    assert not withdrawn_before_audio(done("cancelled", "client_cancelled"))
    assert not withdrawn_before_audio(done("failed", None))
    assert not withdrawn_before_audio(done("completed", None))
    assert not withdrawn_before_audio({"type": "response.output_audio.delta", "delta": ""})


def _delta(t: float, ms: float = 20.0, rid: str = "r") -> dict:
    return {"type": "response.output_audio.delta", "response_id": rid, "_t": t, "_ms": ms}


def test_playback_gaps_count_where_the_client_ran_out_of_audio():
    import random

    from benchmarks.turn_bench import playback_gaps

    steady = [_delta(k * 0.02) for k in range(50)]
    assert playback_gaps(steady, "r", 10.0)[0] == 0
    late = steady[:10] + [_delta(0.3)] + [_delta(0.3 + k * 0.02) for k in range(1, 10)]
    n, total, where = playback_gaps(late, "r", 10.0)
    assert n == 1 and abs(total - 100) < 1 and where == [(300, 100)]
    assert playback_gaps(late, "r", 0.25)[0] == 0          # only before `until`
    # 20-50 ms of jitter against a client 80 ms ahead: no gap; 20 ms ahead: gaps
    ahead = [_delta(k * 0.02 - 0.08 if k >= 4 else 0.0) for k in range(100)]
    assert playback_gaps(ahead, "r", 10.0, (20, 50), random.Random(1))[0] == 0
    assert playback_gaps(steady, "r", 10.0, (20, 50), random.Random(1))[0] > 0


def test_phone_heard_stops_at_the_clear_and_tells_a_resume_from_a_cancel():
    from benchmarks.turn_bench import decided, phone_heard

    sent = [_delta(k * 0.1, 100.0) for k in range(10)]     # 1 s, played as it comes
    clear = {"type": "twilio.clear", "item_id": "r", "_t": 0.95}
    h = phone_heard(sent + [clear], "r", 0.85)
    assert h["cancelled"] and h["playing_at_t0"] and abs(h["stop"] - 0.95) < 1e-9
    assert decided(sent + [clear], "r", 0.9) is False
    back = sent + [clear, _delta(1.5, 100.0)]
    h = phone_heard(back, "r", 0.9)
    assert h["resumed"] and not h["cancelled"] and decided(back, "r", 0.9)
    h = phone_heard(sent[:3] + [clear], "r", 0.9)           # silent when interrupted
    assert not h["playing_at_t0"]
