"""How much unplayed audio a listener that cannot be told to stop may hold
while the caller can interrupt: as little as the line allows.

A client that knows only the Realtime events plays on, after the server
pauses a reply at the caller's first speech frame, whatever it holds: the
lead is stop time.  Too small a lead, and a slice released late (the
server's loop busy, the network slow for a moment) reaches the listener
after it ran out: the reply stutters.  :class:`LeadSizer` keeps the lead at
its floor (``interruptible_lead_ms``) and raises it, up to the full
``output_lead_ms``, by what this connection shows of lateness:

* the pacer's own lateness: a release due at ``due`` done at ``now``;
* the jitter of the caller's audio as it arrives (RFC 3550's interarrival
  jitter of the input: the arrival time against the audio's own timeline),
  the one view the server has of the network's jitter on a WebSocket.

Peaks, not means: one late slice is a stutter.  A peak is forgotten with a
half-life (``HALF_LIFE_MS``), so a burst of load does not keep the lead up
for the rest of the call.  Sans-I/O: every method takes ``now_ms``.
"""

from __future__ import annotations

HALF_LIFE_MS = 10_000.0
SAFETY_MS = 20.0       # slack kept beyond the lateness seen
JITTER_WEIGHT = 3.0    # the arrival jitter estimate is a mean deviation: its tail is wider


class LeadSizer:
    def __init__(self, floor_ms: float, ceiling_ms: float, slice_ms: float) -> None:
        self.floor_ms = float(floor_ms)
        self.ceiling_ms = max(float(ceiling_ms), self.floor_ms)
        self.slice_ms = float(slice_ms)
        self._late_peak = 0.0
        self._late_at = 0.0
        self._jitter = 0.0              # RFC 3550 J, ms
        self._transit: float | None = None
        self._jitter_peak = 0.0
        self._jitter_at = 0.0

    @staticmethod
    def _decayed(peak: float, since_ms: float) -> float:
        return peak * 0.5 ** (max(since_ms, 0.0) / HALF_LIFE_MS)

    def late(self, late_ms: float, now_ms: float) -> None:
        """A release due ``late_ms`` ago was made now."""
        if late_ms <= 0:
            return
        self._late_peak = max(late_ms, self._decayed(self._late_peak, now_ms - self._late_at))
        self._late_at = now_ms

    def arrival(self, audio_end_ms: float, now_ms: float) -> None:
        """Caller audio up to ``audio_end_ms`` of the input timeline arrived now."""
        transit = now_ms - audio_end_ms
        if self._transit is not None:
            self._jitter += (abs(transit - self._transit) - self._jitter) / 16.0
            self._jitter_peak = max(self._jitter,
                                    self._decayed(self._jitter_peak, now_ms - self._jitter_at))
            self._jitter_at = now_ms
        self._transit = transit

    def lead_ms(self, now_ms: float) -> float:
        """The lead for now: one slice, the lateness and jitter seen, a margin."""
        late = self._decayed(self._late_peak, now_ms - self._late_at)
        jitter = self._decayed(self._jitter_peak, now_ms - self._jitter_at)
        want = self.slice_ms + SAFETY_MS + late + JITTER_WEIGHT * jitter
        return min(max(want, self.floor_ms), self.ceiling_ms)


__all__ = ["LeadSizer"]
