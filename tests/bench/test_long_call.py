"""long_call_bench's summary keeps the reply's own share apart from the
end-of-turn wait, and its callers can speak in hibari's voice as well as flite's."""

import numpy as np

from benchmarks.long_call_bench import summary


def _row(turn: int, first: float, decided: float) -> dict:
    return {"turn": turn, "status": "completed", "first_audio_ms": first, "end_decided_ms": decided}


def test_a_long_wait_for_the_turns_end_is_not_the_replys():
    rows = [_row(k, 700.0, 350.0) for k in range(1, 41)]
    rows[9] = _row(10, 2400.0, 2100.0)       # misheard, read as unfinished: 2 s more
    s = summary(rows)
    assert s["max_ms"] == 2400.0 and not s["targets_met"]["no_turn_over_1500_ms"]
    assert s["reply_ms"]["turns_1_10"]["p95"] <= 350.0
    assert s["reply_ms"]["turns_20_40"]["p50"] == 350.0


def test_the_caller_can_speak_in_flite_or_hibari():
    from voice_server.testing.audio import caller_pcm

    for voice in ("flite", "heart"):
        pcm = caller_pcm("how is bread made", voice)
        assert pcm.dtype == np.int16 and 0.5 * 24000 < pcm.size < 4 * 24000
        assert np.abs(pcm.astype(np.int32)).max() > 3000
