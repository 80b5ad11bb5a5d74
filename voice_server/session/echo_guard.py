"""Keep the agent's own voice, leaking back into the caller's microphone, from
being heard as the caller (a speakerphone, a laptop without echo
cancellation): the reply would pause or cancel itself.

The server knows what the listener plays and when (the output pacer's
playout model), so it knows how loud an echo of it could be at any moment.
An echo arrives 0..``max_delay_ms`` after its audio plays and is quieter
than it (the speaker-to-mic path loses 20 dB or more).  Each 10 ms frame of
microphone audio is compared with the loudest reply frame that could have
produced it: a frame quieter than that by more than ``margin_db`` is
explained by the echo and muted before the listen stage hears it (a
residual echo suppressor, as speakerphones have).  The caller talking over
the reply is about as loud as the reply itself, so it passes; once it has,
the following ``hangover_ms`` pass too, so the quieter parts of the caller's
words are not cut out.  With nothing playing, audio passes unchanged.

The test is on energy only: it does not subtract the echo, so the caller's
words over it still carry the (quiet) echo, and a caller much quieter than
the agent's echo margin is muted while the agent speaks.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from runtime.models.voice_contract import LISTEN_RATE_HZ

FRAME_MS = 10.0
_MIC_FRAME = int(LISTEN_RATE_HZ * FRAME_MS / 1000)


def _frame_energy(pcm: np.ndarray, n: int) -> np.ndarray:
    """Mean square per frame of ``n`` samples (int16 scale), the tail dropped."""
    k = pcm.size // n
    if k == 0:
        return np.zeros(0)
    x = pcm[:k * n].astype(np.float64).reshape(k, n)
    return np.mean(x * x, axis=1)


class EchoGuard:
    def __init__(self, margin_db: float = 10.0, max_delay_ms: float = 600.0,
                 hangover_ms: float = 300.0, history_ms: float = 3000.0) -> None:
        self.ratio = 10.0 ** (-margin_db / 10.0)
        self.max_delay_ms = max_delay_ms
        self.hangover_ms = hangover_ms
        self.history_ms = history_ms
        self._ref_t: deque[float] = deque()     # when each reply frame plays (session clock)
        self._ref_e: deque[float] = deque()     # its energy
        self._pass_until = -1e18
        self.muted_ms = 0.0

    def played(self, pcm: np.ndarray, sample_rate: int, start_ms: float) -> None:
        """Reply audio the listener plays from ``start_ms`` on."""
        n = max(1, int(sample_rate * FRAME_MS / 1000))
        for i, e in enumerate(_frame_energy(np.asarray(pcm).reshape(-1), n)):
            self._ref_t.append(start_ms + i * FRAME_MS)
            self._ref_e.append(float(e))

    def _forget(self, now_ms: float) -> None:
        while self._ref_t and self._ref_t[0] < now_ms - self.history_ms:
            self._ref_t.popleft()
            self._ref_e.popleft()

    def process(self, pcm16k: np.ndarray, now_ms: float) -> np.ndarray:
        """Microphone audio (16 kHz int16) that arrived at ``now_ms``, with the
        frames that only echo the reply muted (a chunk's last, shorter frame is
        judged on its own)."""
        self._forget(now_ms)
        if not self._ref_t:
            return pcm16k
        ref_t = np.fromiter(self._ref_t, float, len(self._ref_t))
        ref_e = np.fromiter(self._ref_e, float, len(self._ref_e))
        out = pcm16k.copy()
        span_ms = out.size * 1000.0 / LISTEN_RATE_HZ
        for i in range(0, out.size, _MIC_FRAME):
            x = out[i:i + _MIC_FRAME].astype(np.float64)
            e = float(np.mean(x * x))
            t = now_ms - span_ms + (i + x.size) * 1000.0 / LISTEN_RATE_HZ   # when it reached us
            near = (ref_t >= t - self.max_delay_ms) & (ref_t <= t)
            if not near.any():
                continue
            loudest = ref_e[near].max()
            if e >= loudest * self.ratio:
                self._pass_until = t + self.hangover_ms     # louder than any echo: the caller
            elif t > self._pass_until:
                out[i:i + x.size] = 0
                self.muted_ms += x.size * 1000.0 / LISTEN_RATE_HZ
        return out


__all__ = ["EchoGuard"]
