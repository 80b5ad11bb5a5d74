"""Early readings (peeks) run where they can change something: with the
server's ``agent_speaking`` param the first (backchannel or interruption?)
runs only over a reply, the later ones (the reply's prompt) only when none
plays; without it every one runs, as before."""

import numpy as np

from runtime.models.listen.silero_vad import FRAME_SAMPLES
from runtime.models.listen.stream import UtteranceStream
from runtime.models.listen.vad_params import VadParams

FRAME_MS = FRAME_SAMPLES * 1000 / 16000


class _IdleThread:
    idle = True


class RecordingUtterance:
    """The utterance hooks UtteranceStream calls; it records the peeks (unit-test stand-in
    for SpeculativeSegments, which needs a recogniser)."""

    def __init__(self) -> None:
        self.thread = _IdleThread()
        self.peeks_at: list[int] = []
        self.frames = 0
        self.counters: dict = {}

    def begin(self, audio) -> None:
        self.frames = 1

    def feed(self, frame) -> None:
        self.frames += 1

    def peek(self) -> None:
        self.peeks_at.append(round(self.frames * FRAME_MS))

    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def drop(self) -> None: ...

    def end(self, start_ms, end_ms) -> list:
        return []


def _speak(agent: list[bool | None], speech_ms: float = 1500) -> list[int]:
    """Feed ``speech_ms`` of speech; ``agent`` gives the AGENT_SPEAKING param at
    each frame (its last value holds on).  Returns when the peeks were asked for."""
    p = VadParams(16000, 0.5, 500, 300, 250, 30)
    utt = RecordingUtterance()
    s = UtteranceStream(p, None, utt, peek_ms=400, peek_every_ms=500)
    frame = np.zeros(FRAME_SAMPLES, np.float32)
    for i in range(int(speech_ms / FRAME_MS)):
        s.hear_agent(agent[min(i, len(agent) - 1)])
        s.advance([frame], [0.9], False)
    assert s.peeks["peeks_asked"] == len(utt.peeks_at)
    assert s.peeks["peeks_asked"] + s.peeks["peeks_skipped"] == 3     # due at 400, 900, 1400 ms
    return utt.peeks_at


def test_every_peek_runs_when_the_server_does_not_say():
    assert _speak([None]) == [416, 928, 1440]


def test_no_reply_playing_only_the_peeks_that_ready_the_prompt():
    assert _speak([False]) == [928, 1440]


def test_over_a_reply_only_the_first_peek_decides_the_interruption():
    assert _speak([True]) == [416]


def test_a_reply_cancelled_mid_utterance_gets_the_prompt_peeks_back():
    """The caller spoke over the reply (the first peek runs); the reply is
    cancelled 600 ms in: the later peeks ready the next reply's prompt."""
    frames_600ms = int(600 / FRAME_MS)
    assert _speak([True] * frames_600ms + [False]) == [416, 928, 1440]
