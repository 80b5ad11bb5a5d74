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
