"""When a caller first hears the agent's voice, which is not when its audio begins.

A reply's audio may open with silence (a voice's own padding before the first
word), and a person waits until the voice sounds.  So the benchmarks time the
voice, not the first ``response.output_audio.delta``: the client plays the
reply's deltas end to end from the first one's arrival (a delta that comes
after the line ran dry starts when it comes), and the voice is heard at the
first 10 ms frame louder than :data:`VOICE_DBFS`.
"""

from __future__ import annotations

import base64

import numpy as np

# Quieter than the softest consonant onset of any voice here (~-45 dBFS),
# louder than their noise floors (flite ~-60 dBFS, hibari digital silence).
VOICE_DBFS = -50.0
FRAME_MS = 10
DELTA = "response.output_audio.delta"


def voice_onset(pcm: np.ndarray, rate: int) -> int | None:
    """Index of the first sample of the first frame loud enough to be heard as voice."""
    frame = max(1, rate * FRAME_MS // 1000)
    n = pcm.size // frame
    if n == 0:
        return None
    x = pcm[: n * frame].astype(np.float64).reshape(n, frame) / 32768.0
    loud = np.flatnonzero(np.sqrt(np.mean(x * x, axis=1)) >= 10 ** (VOICE_DBFS / 20))
    return int(loud[0]) * frame if loud.size else None


async def first_heard(c, start: int, timeout: float = 60.0,
                      rate: int = 24000) -> tuple[dict, float | None]:
    """The reply's first audio delta (or its ``response.done`` when no audio
    came) and the monotonic time its voice sounds at the caller (None when the
    reply ended silent).  ``c`` is a :class:`~voice_server.testing.callers.Caller`;
    the session's output is PCM16 at ``rate``."""
    i, first = await c.wait(lambda e: e["type"] in (DELTA, "response.done"), start, timeout)
    if first["type"] != DELTA:
        return first, None
    rid = first["response_id"]
    line_end, ev = first["_t"], first
    while True:
        pcm = np.frombuffer(base64.b64decode(ev["delta"]), dtype="<i2")
        begins = max(line_end, ev["_t"])
        onset = voice_onset(pcm, rate)
        if onset is not None:
            return first, begins + onset / rate
        line_end = begins + pcm.size / rate
        i, ev = await c.wait(lambda e: e.get("response_id", (e.get("response") or {}).get("id")) == rid
                             and e["type"] in (DELTA, "response.done"), i + 1, timeout)
        if ev["type"] != DELTA:
            return first, None
