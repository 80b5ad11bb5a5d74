"""One caller and another person, on any transport: the voice lock's
end-to-end script (tests/server/test_voice_lock_*.py).

The caller is the card-names speaker of ``pocketsphinx-testdata``, enrolled
from two of their utterances (the clips the listen stage's own voice-lock test
enrols from); the other person is the "go forward" speaker or the alsa-utils
speaker.  A transport runs :func:`caller_other_caller` with its own way to
say a clip and to read the session's user turns; what the listen stage did
is read from its stats (:func:`listen_stats`), never from timing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import numpy as np

from voice_server.session.items import Item

from .speech_corpus import human_clips
from .waiting import until

CALLER_ENROL = ("cards-005", "cards-002")   # 3.5 s + 2 s: enough voice to enrol
CALLER_AGAIN = "cards-003"                  # "seven of clubs"


def clips() -> dict[str, np.ndarray]:
    """Name -> 16 kHz int16 samples of every recording."""
    return {c.name: (np.clip(c.audio, -1, 1) * 32767).astype(np.int16) for c in human_clips()}


async def listen_stats(server) -> dict:
    """The listen stage's executor stats (live streams summed; the stage
    process reports every 0.2 s)."""
    snap = await server.acall(server.pipeline.snapshot)
    for proc in snap["processes"].values():
        st = proc["stages"].get("listen")
        if st:
            return st.get("executor") or {}
    return {}


async def until_stats(server, pred: Callable[[dict], bool], timeout: float = 60.0,
                      what: str = "listen stats") -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = await listen_stats(server)
        if pred(st):
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}; last {st}")
        await asyncio.sleep(0.1)


def user_turns(items) -> list[str]:
    """The transcripts of a conversation's user audio turns ("" while pending)."""
    return [next((c.transcript or "" for c in it.content if c.type == "input_audio"), "")
            for it in items if isinstance(it, Item) and it.role == "user"
            and any(c.type == "input_audio" for c in it.content)]


async def caller_other_caller(server, say: Callable[[np.ndarray], Awaitable[None]],
                              turns: Callable[[], list[str]], other: str,
                              noise_reduction: str | None, timeout: float = 60.0) -> list[str]:
    """The caller speaks twice (a turn each; enrolled after them), the other
    person once (no turn: the lock drops it), the caller once more (a turn).
    ``say`` sends one 16 kHz int16 clip and the silence after it; ``turns``
    reads the session's user turns.  The stream (opened by the first audio)
    is seen in the listen stage with the lock and ``noise_reduction`` on.
    Returns the turns' transcripts."""
    audio = clips()
    for n, name in enumerate(CALLER_ENROL, 1):
        await say(audio[name])
        await until(lambda: len(turns()) >= n and turns()[n - 1], timeout,
                    f"the caller's turn {n} ({name})")
    await until_stats(server, lambda s: s.get("streams_voice_enrolled", 0) >= 1, timeout,
                      "the caller's enrolment")
    st = await listen_stats(server)
    assert st.get("streams_voice_lock") == 1, st
    if noise_reduction is not None:
        assert st.get(f"streams_noise_reduction_{noise_reduction}") == 1, st
    before = await listen_stats(server)
    await say(audio[other])
    await until_stats(server, lambda s: s.get("voice_other", 0) > before.get("voice_other", 0),
                      timeout, f"the lock's verdict on {other} (turns {turns()})")
    assert len(turns()) == 2, turns()
    # a second of quiet first: speech that follows someone else's at once is
    # heard as them going on (their utterance ends at its pause)
    await say(np.concatenate([np.zeros(16000, np.int16), audio[CALLER_AGAIN]]))
    await until(lambda: len(turns()) >= 3 and turns()[2], timeout, "the caller's turn again")
    got = turns()
    assert len(got) == 3, got
    assert " of " in f" {got[2].lower()} ", got   # tiny.en hears "seven of clubs" as words enough
    return got


__all__ = ["CALLER_ENROL", "CALLER_AGAIN", "clips", "until", "listen_stats", "until_stats",
           "user_turns", "caller_other_caller"]
