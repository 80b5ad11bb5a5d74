"""RFC 4733 telephone-events: keys the caller presses, keys the agent sends.

:class:`KeyReader` reports each key once.  An event is one key at one RTP
timestamp (RFC 4733 section 2.5.1: every packet of an event, its three end
packets included, carries the timestamp of its start), so a new
(timestamp, key) pair is a new press; the marker bit is not needed, and a
lost first packet still reports the key.  :class:`KeyWriter` lays a digit
out as the 20 ms ticks of the send clock: 160 ms of progress packets, the
end packet three times, then 60 ms of ordinary audio before the next key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from aiortp import DtmfEvent
from aiortp.dtmf import DTMF_EVENTS, EVENT_TO_DIGIT

from ...session.keypad import KEYS
from .payload import PTIME_MS

TONE_MS = 160
GAP_MS = 60
END_REPEATS = 3
VOLUME = 10  # -10 dBm0


class BadEvent(ValueError):
    """A telephone-event payload shorter than its 4 bytes."""


class KeyReader:
    """The keys in one stream of telephone-event packets."""

    def __init__(self) -> None:
        self._last: Optional[tuple[int, int]] = None  # (timestamp, event) last reported

    def feed(self, timestamp: int, payload: bytes) -> Optional[str]:
        """The key this packet starts, or None (a repeat, or not a key event).
        Raises :class:`BadEvent` for a short payload."""
        if len(payload) < 4:
            raise BadEvent(f"telephone-event payload of {len(payload)} bytes")
        ev = DtmfEvent.parse(payload)
        key = EVENT_TO_DIGIT.get(ev.event)
        if key is None or (timestamp, ev.event) == self._last:
            return None
        self._last = (timestamp, ev.event)
        return key


@dataclass(frozen=True)
class EventTick:
    """What one 20 ms tick of a digit sends: telephone-event payloads (the
    first with the marker set), or none (the audio goes on)."""
    payloads: tuple[bytes, ...] = ()
    marker: bool = False
    starts_event: bool = False  # this tick's timestamp is the event's


class KeyWriter:
    """Digits as ticks of the send clock (module docstring)."""

    def __init__(self, clock_rate: int = 8000) -> None:
        self.clock_rate = clock_rate

    def ticks(self, digits: str) -> list[EventTick]:
        """The ticks for ``digits`` (every character a key of :data:`KEYS`)."""
        out: list[EventTick] = []
        per_tick = self.clock_rate * PTIME_MS // 1000
        for d in digits.upper():
            code = DTMF_EVENTS[d]
            n = TONE_MS // PTIME_MS
            for k in range(n - 1):
                p = DtmfEvent(code, False, VOLUME, per_tick * (k + 1)).serialize()
                out.append(EventTick((p,), marker=k == 0, starts_event=k == 0))
            end = DtmfEvent(code, True, VOLUME, per_tick * n).serialize()
            out.append(EventTick((end,) * END_REPEATS))
            out += [EventTick()] * (GAP_MS // PTIME_MS)
        return out


def valid_digits(digits: str) -> bool:
    """Only keypad keys, at least one."""
    return bool(digits) and all(d in KEYS for d in digits.upper())


__all__ = ["KeyReader", "KeyWriter", "EventTick", "BadEvent", "valid_digits"]
