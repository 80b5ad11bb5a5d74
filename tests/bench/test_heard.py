"""When the benchmarks' caller hears the voice (voice_server/testing/callers/heard.py):
a reply's leading silence is played before the voice sounds, deltas play end to
end, and a late delta starts when it comes (unit test with a stand-in caller)."""

from __future__ import annotations

import asyncio
import base64

import numpy as np

from voice_server.testing.callers.heard import first_heard, voice_onset

RATE = 24000


def delta(pcm: np.ndarray, t: float, rid: str = "r1") -> dict:
    return {"type": "response.output_audio.delta", "response_id": rid, "_t": t,
            "delta": base64.b64encode(pcm.astype("<i2").tobytes()).decode()}


class _Caller:
    """Replays a fixed event list through ``wait`` as the real Caller does."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events

    async def wait(self, pred, start: int, timeout: float = 60.0):
        for i in range(start, len(self.events)):
            if pred(self.events[i]):
                return i, self.events[i]
        raise TimeoutError


def tone(ms: int) -> np.ndarray:
    t = np.arange(RATE * ms // 1000) / RATE
    return (6000 * np.sin(2 * np.pi * 200 * t)).astype(np.int16)


def silence(ms: int) -> np.ndarray:
    return np.zeros(RATE * ms // 1000, np.int16)


def test_onset_of_a_quiet_start():
    assert voice_onset(silence(100), RATE) is None
    assert voice_onset(np.concatenate([silence(120), tone(50)]), RATE) == RATE * 120 // 1000
    assert voice_onset(np.full(2400, 20, np.int16), RATE) is None   # -64 dBFS: not voice


def test_the_leading_silence_is_played_first():
    # 300 ms of silence over 40 ms deltas that all arrive at once (unpaced)
    pcm = np.concatenate([silence(300), tone(200)])
    evs = [{"type": "response.created"}] + [delta(pcm[i:i + 960], 10.0) for i in range(0, pcm.size, 960)]
    first, heard = asyncio.run(first_heard(_Caller(evs), 0))
    assert first is evs[1]
    assert abs(heard - 10.3) < 1e-6


def test_a_late_delta_starts_when_it_arrives():
    evs = [delta(silence(40), 10.0), delta(silence(40), 10.5), delta(tone(40), 10.52)]
    _, heard = asyncio.run(first_heard(_Caller(evs), 0))
    # the line ran dry at 10.04; the second delta plays 10.5-10.54, the third from 10.54
    assert abs(heard - 10.54) < 1e-6


def test_a_silent_or_audio_less_reply_is_never_heard():
    done = {"type": "response.done", "response": {"id": "r1"}, "_t": 11.0}
    assert asyncio.run(first_heard(_Caller([delta(silence(40), 10.0), done]), 0))[1] is None
    first, heard = asyncio.run(first_heard(_Caller([done]), 0))
    assert first is done and heard is None
