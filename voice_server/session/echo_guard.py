"""Keep the agent's own voice, leaking back into the caller's microphone, from
being heard as the caller (a speakerphone, a laptop without echo
cancellation): the reply would pause or cancel itself.

The server knows what the listener plays and when (the output pacer's
playout model).  An echo is that audio again, some 0..``max_delay_ms``
later and quieter: its loudness follows the reply's, frame by frame, at one
delay.  So the guard keeps, per 10 ms slot of the session clock, the energy
of the reply audio played and of the microphone audio (placed by when it
was captured, not when it arrived: mic_clock.py), and
estimates the echo path from the last ``window_ms``: the delay at which the
microphone's log-energy follows the reply's best (correlation at least
``min_corr``; a path found is kept until another lag fits clearly better,
so the caller talking over the echo does not move it) and the echo's level
at that delay (the median energy ratio).
A microphone frame no louder than the echo predicted for it (the reply's
energy at that delay, +-20 ms, times that level) plus ``margin_db`` is the
echo and is muted before the listen stage hears it (a residual echo
suppressor, as speakerphones have).  The caller talking over the reply is
far louder than the echo and passes; once a frame has passed, the following
``hangover_ms`` pass too, so the quieter parts of the caller's words are not
cut out.  Until a path is found (the first 500 ms of a reply, or no echo at
all: headphones, a handset), anything 15 dB below the loudest reply audio of
the last 600 ms is taken for its echo.

The guard judges energy only: it mutes, it does not subtract, so words over
the echo still carry it (quietly), and a caller quieter than the echo plus
the margin (or, with no echo path, 15 dB quieter than the agent) is not
heard while the agent speaks.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from runtime.models.voice_contract import LISTEN_RATE_HZ

from .mic_clock import MicClock

SLOT_MS = 10.0
_MIC_FRAME = int(LISTEN_RATE_HZ * SLOT_MS / 1000)
ACTIVE_ENERGY = 1e4        # reply audio louder than this (rms ~100 of 32768) can echo
MIN_ACTIVE_SLOTS = 50      # reply audio that shows an echo path (500 ms)
JITTER_SLOTS = 2           # arrival jitter allowed around the echo delay
HOLD_SLACK = 0.25          # a path found is kept while its correlation stays this close
SWITCH_MARGIN = 0.1        # ... and no other lag fits clearly better
ECHO_COVERAGE = 0.8        # share of the reply's active slots an echo must be heard in
MAX_LEVEL = 0.25           # an echo is quieter than what it echoes (-6 dB)
PRIOR_LEVEL = 0.03         # before an estimate: the speaker-to-mic path loses 15 dB
# Quieter than this (rms ~32 of 32768, -60 dBFS) a frame is nobody talking, only
# residue; without the floor, a frame of the reply's digital silence (a voice's
# pause) predicts no echo at all and any residue would pass as the caller.
CALLER_FLOOR = 1e3


def _energies(pcm: np.ndarray, n: int) -> np.ndarray:
    k = pcm.size // n
    if k == 0:
        return np.zeros(0)
    x = pcm[:k * n].astype(np.float64).reshape(k, n)
    return np.mean(x * x, axis=1)


class EchoGuard:
    def __init__(self, margin_db: float = 10.0, max_delay_ms: float = 600.0,
                 hangover_ms: float = 300.0, window_ms: float = 1500.0,
                 min_corr: float = 0.8) -> None:
        self.margin = 10.0 ** (margin_db / 10.0)
        self.max_lag = int(max_delay_ms / SLOT_MS)
        self.hangover_ms = hangover_ms
        self.window = int(window_ms / SLOT_MS)
        self.min_corr = min_corr
        self._ref: dict[int, float] = {}                 # slot -> reply energy played in it
        self._mic: deque[tuple[int, float]] = deque()    # (slot, energy) of recent mic frames
        self._since_estimate = 0
        self.delay_slots: int | None = None              # the echo path; None: not known
        self.level: float | None = None                  # echo / reply energy (0: no echo)
        self._pass_until = -1e18
        self._reply: str | None = None
        self.muted_ms = 0.0
        self._clock = MicClock()     # mic slots by capture time, not arrival (mic_clock.py)

    # -- the reply --------------------------------------------------------
    def played(self, pcm: np.ndarray, sample_rate: int, start_ms: float,
               reply: str | None = None) -> None:
        """Reply audio the listener plays from ``start_ms`` on.  A new ``reply``
        starts a new estimate: a path taken from the caller's words talking
        over one reply must not mute the caller through the next."""
        if reply != self._reply:
            self._reply = reply
            self.delay_slots, self.level = None, None
        n = max(1, int(sample_rate * SLOT_MS / 1000))
        for i, e in enumerate(_energies(np.asarray(pcm).reshape(-1), n)):
            slot = int(round(start_ms / SLOT_MS)) + i
            self._ref[slot] = max(self._ref.get(slot, 0.0), float(e))

    def _ref_at(self, slots: np.ndarray) -> np.ndarray:
        get = self._ref.get
        return np.fromiter((get(int(s), 0.0) for s in slots), float, slots.size)

    # -- the echo path ----------------------------------------------------
    def _estimate(self) -> None:
        if len(self._mic) < MIN_ACTIVE_SLOTS:
            return
        slots = np.fromiter((s for s, _ in self._mic), int, len(self._mic))
        mic = np.fromiter((e for _, e in self._mic), float, len(self._mic))
        lo = slots.min() - self.max_lag
        ref_line = self._ref_at(np.arange(lo, slots.max() + 1))
        lmic = np.log10(mic + 1.0)
        heard = mic > 4.0 * max(float(np.percentile(mic, 10)), 1.0)    # above the mic's floor
        fits = self._fits(ref_line[slots[None, :] - np.arange(self.max_lag + 1)[:, None] - lo],
                          mic, lmic, heard)
        lag = max(fits, key=lambda k: fits[k][0], default=None)
        held = fits.get(self.delay_slots) if self.delay_slots is not None else None
        if held is not None and held[0] >= self.min_corr - HOLD_SLACK and \
                fits[lag][0] < held[0] + SWITCH_MARGIN:
            # the path found still explains the mic: keep it (the caller talking
            # over the echo blurs the correlation; syllables make nearby lags fit too)
            if held[0] >= self.min_corr:
                self.level = held[1]
            return
        if lag is not None and fits[lag][0] >= self.min_corr:
            self.delay_slots, self.level = lag, fits[lag][1]
        # a path once found stays until another is found; none found: the prior
        # bound stays (an echo may begin at any time: a phone put on speaker)

    @staticmethod
    def _fits(ref: np.ndarray, mic: np.ndarray, lmic: np.ndarray,
              heard: np.ndarray) -> dict[int, tuple[float, float]]:
        """Lag -> (correlation of log energies, echo level) for every lag that
        could be an echo path; ``ref`` holds the reply's energy at each lag
        (a row) for each mic slot.  All lags at once: this runs every 100 ms
        of every talking session, on the server's event loop."""
        active = ref > ACTIVE_ENERGY
        n = active.sum(axis=1)
        rows = np.flatnonzero(n >= MIN_ACTIVE_SLOTS)
        if rows.size == 0:
            return {}
        active, n, ref = active[rows], n[rows].astype(float), ref[rows]
        lref = np.where(active, np.log10(ref + 1.0), 0.0)
        a = np.where(active, lmic[None, :], 0.0)
        mean_a, mean_b = a.sum(axis=1) / n, lref.sum(axis=1) / n
        var_a = (a * a).sum(axis=1) / n - mean_a ** 2
        var_b = (lref * lref).sum(axis=1) / n - mean_b ** 2
        cov = (a * lref).sum(axis=1) / n - mean_a * mean_b
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.nanmedian(np.where(active, mic[None, :] / ref, np.nan), axis=1)
            corr = cov / np.sqrt(var_a * var_b)
        coverage = (active & heard[None, :]).sum(axis=1) / n
        # an echo is there whenever the reply is, and quieter than it: the
        # caller's words now and then (silence between) are not an echo path
        keep = (var_a > 1e-12) & (var_b > 1e-12) & (coverage >= ECHO_COVERAGE) & (level <= MAX_LEVEL)
        return {int(lag): (float(c), float(lv))
                for lag, c, lv, k in zip(rows, corr, level, keep) if k}

    def _echo_bound(self, slot: int) -> float | None:
        """The loudest a pure echo could be in this mic slot (None: nothing can echo)."""
        recent = self._ref_at(np.arange(slot - self.max_lag, slot + 1))
        if recent.max() <= ACTIVE_ENERGY:
            return None
        if self.level is None:         # no path found: an echo at most PRIOR_LEVEL, no margin
            return recent.max() * PRIOR_LEVEL / self.margin
        d = self.delay_slots
        around = recent[max(self.max_lag - d - JITTER_SLOTS, 0):self.max_lag - d + JITTER_SLOTS + 1]
        return self.level * (around.max() if around.size else 0.0)

    # -- the microphone ---------------------------------------------------
    def process(self, pcm16k: np.ndarray, now_ms: float) -> np.ndarray:
        """Microphone audio (16 kHz int16) that arrived at ``now_ms``, with the
        frames that only echo the reply muted (a chunk's last, shorter frame
        is judged on its own)."""
        span_ms = pcm16k.size * 1000.0 / LISTEN_RATE_HZ
        end_ms = self._clock.stamp(span_ms, now_ms)
        if not self._ref:
            return pcm16k
        horizon = int((now_ms - self.max_lag * SLOT_MS - self.window * SLOT_MS) / SLOT_MS)
        for s in [s for s in self._ref if s < horizon]:
            del self._ref[s]
        out = pcm16k.copy()
        for i in range(0, out.size, _MIC_FRAME):
            x = out[i:i + _MIC_FRAME].astype(np.float64)
            e = float(np.mean(x * x))
            t = end_ms - span_ms + (i + x.size) * 1000.0 / LISTEN_RATE_HZ   # when it was captured
            slot = int(round(t / SLOT_MS))
            self._mic.append((slot, e))
            while len(self._mic) > self.window:
                self._mic.popleft()
            self._since_estimate += 1
            if self._since_estimate >= 10:               # every 100 ms
                self._since_estimate = 0
                self._estimate()
            bound = self._echo_bound(slot)
            if bound is None:
                continue
            if e > max(bound * self.margin, CALLER_FLOOR):
                self._pass_until = t + self.hangover_ms  # louder than any echo: the caller
            elif t > self._pass_until:
                out[i:i + x.size] = 0
                self.muted_ms += x.size * 1000.0 / LISTEN_RATE_HZ
        return out


__all__ = ["EchoGuard"]
