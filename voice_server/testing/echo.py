"""A speakerphone for test callers: what the caller plays comes back into its
microphone, attenuated and late (the agent's echo, as a laptop or a phone on
speaker without echo cancellation would give it)."""

from __future__ import annotations

import base64

import numpy as np


class PlayoutEcho:
    """The caller's playout line (each received piece plays as soon as it
    arrives, or after what is still playing) and its echo: ``gain`` times
    the line, ``delay_ms`` later."""

    def __init__(self, rate: int, gain: float = 0.1, delay_ms: float = 150.0) -> None:
        self.rate = rate
        self.gain = gain
        self.delay_s = delay_ms / 1000.0
        self._pieces: list[tuple[float, np.ndarray]] = []   # (play start, pcm)
        self._end: float | None = None

    def heard(self, pcm: np.ndarray, t: float) -> None:
        start = t if self._end is None else max(self._end, t)
        self._pieces.append((start, pcm))
        self._end = start + pcm.size / self.rate

    def heard_delta(self, ev: dict, t: float) -> None:
        self.heard(np.frombuffer(base64.b64decode(ev["delta"]), "<i2"), t)

    def frame(self, t_end: float, n: int) -> np.ndarray:
        """The echo in the mic frame of ``n`` samples that ends at ``t_end``."""
        out = np.zeros(n, np.float64)
        f0 = t_end - n / self.rate - self.delay_s          # play time of its first sample
        for start, pcm in self._pieces:
            a = int(round((f0 - start) * self.rate))        # offset of the frame in this piece
            lo, hi = max(a, 0), min(a + n, pcm.size)
            if lo < hi:
                out[lo - a:hi - a] += pcm[lo:hi]
        horizon = f0 - 1.0
        self._pieces = [p for p in self._pieces if p[0] + p[1].size / self.rate > horizon]
        return out * self.gain


__all__ = ["PlayoutEcho"]
