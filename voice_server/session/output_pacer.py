"""Real-time release of a reply's output, and the listener's playout model.

A transport that sends audio as fast as the speaker makes it leaves seconds
of the reply in the client (or in Twilio): the server then cannot pause it,
and does not know what was heard.  :class:`OutputPacer` holds the active
reply's commands (audio slices and the events that must stay behind them)
and releases them so that the listener holds at most ``lead_ms`` of audio it
has not played yet.  It assumes the listener plays what it gets as soon as it
gets it, without gaps of its own: released audio is laid end to end on a
playout line, starting at its release time when the line was idle.  Hence
the played position at any moment, without help from the client.

Sans-I/O, like the rest of the session: every method takes ``now_ms``; the
caller asks :attr:`due_ms` when to call :meth:`release` next.  ``lead_ms``
<= 0 releases everything at once (no pacing), except while paused.

``lead_ms`` may change between calls (the session keeps it small while the
caller can interrupt: whatever the listener holds is what a client that
cannot be told to stop still plays).  A listener whose buffer can be
emptied from here (a phone provider's ``clear``) lets the pacer take back
what it had released and not yet played (:meth:`rewind`, with
``keep_released``), so a reply paused there goes on later from the very
sample the listener stopped at.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

from .commands import AudioOut, Command


@dataclass
class _Held:
    cmd: Command
    ms: float  # audio duration (0 for an event that only keeps its place)


@dataclass
class _Released:
    cmd: AudioOut
    ms: float
    start: float  # when the listener starts playing it


def _rest_of(cmd: AudioOut, played_ms: float) -> tuple[AudioOut, float] | None:
    """The part of ``cmd`` after its first ``played_ms``, and its length."""
    n = int(round(played_ms * cmd.sample_rate / 1000.0))
    rest = cmd.pcm[n:]
    if rest.size == 0:
        return None
    return (AudioOut(cmd.response_id, cmd.item_id, rest, cmd.sample_rate),
            rest.size * 1000.0 / cmd.sample_rate)


class OutputPacer:
    def __init__(self, lead_ms: float, keep_released: bool = False) -> None:
        self.lead_ms = float(lead_ms)
        # remember released AudioOut the listener may not have played (for rewind)
        self.keep_released = keep_released
        self._released: deque[_Released] = deque()
        self._q: deque[_Held] = deque()
        self.paused = False
        self.released_ms = 0.0  # audio of the current reply released so far
        self._play_end: float | None = None  # when the listener runs out of released audio
        # told of each released audio command and when the listener starts playing it
        self.on_play: Optional[Callable[[Command, float], None]] = None

    @property
    def paced(self) -> bool:
        return self.lead_ms > 0

    def reset(self) -> None:
        """A new reply: nothing held, nothing played, not paused."""
        self._q.clear()
        self._released.clear()
        self.paused = False
        self.released_ms = 0.0
        self._play_end = None

    def hold(self, cmds: list[Command], audio_ms: list[float]) -> None:
        """Queue ``cmds`` (``audio_ms[i]``: the audio in ``cmds[i]``)."""
        self._q.extend(_Held(c, float(ms)) for c, ms in zip(cmds, audio_ms))

    @property
    def holding(self) -> bool:
        return bool(self._q)

    @property
    def held_audio_ms(self) -> float:
        return sum(h.ms for h in self._q)

    def drop(self) -> None:
        """Forget everything held (the reply was cancelled or failed)."""
        self._q.clear()
        self._released.clear()

    def rewind(self, now_ms: float) -> float:
        """The listener's unplayed audio was thrown away (a provider's clear):
        take the released audio it had not played back at the head of the
        queue (an ``AudioOut`` cut where the listener is), so the next release
        goes on from there.  Returns the played position (ms of the reply's
        audio).  Only released ``AudioOut`` kept with ``keep_released`` can
        come back; without it nothing changes."""
        back: list[_Held] = []
        for r in self._released:
            if r.start + r.ms <= now_ms:
                continue
            if r.start >= now_ms:
                back.append(_Held(r.cmd, r.ms))
                continue
            rest = _rest_of(r.cmd, now_ms - r.start)
            if rest is not None:
                back.append(_Held(*rest))
        self._released.clear()
        if back:
            self.released_ms = max(self.released_ms - sum(h.ms for h in back), 0.0)
            self._q.extendleft(reversed(back))
            self._play_end = now_ms
        return self.played_ms(now_ms)

    def ahead_ms(self, now_ms: float) -> float:
        """Released audio the listener has not played yet."""
        if self._play_end is None:
            return 0.0
        return max(self._play_end - now_ms, 0.0)

    def played_ms(self, now_ms: float) -> float:
        """Position the listener has reached in the reply's audio."""
        return max(self.released_ms - self.ahead_ms(now_ms), 0.0)

    def _may_release(self, ms: float, now_ms: float) -> bool:
        if ms <= 0 or not self.paced:
            return True
        ahead = self.ahead_ms(now_ms)
        return ahead <= 0 or ahead + ms <= self.lead_ms + 1e-6

    def release(self, now_ms: float) -> list[Command]:
        """What may go to the listener now, in order."""
        out: list[Command] = []
        while self._q and not (self.paused and self._q[0].ms > 0):
            h = self._q[0]
            if not self._may_release(h.ms, now_ms):
                break
            self._q.popleft()
            if h.ms > 0:
                start = now_ms if self._play_end is None else max(self._play_end, now_ms)
                self._play_end = start + h.ms
                self.released_ms += h.ms
                if self.keep_released and isinstance(h.cmd, AudioOut):
                    self._remember(h.cmd, h.ms, start, now_ms)
                if self.on_play is not None:
                    self.on_play(h.cmd, start)
            out.append(h.cmd)
        return out

    def _remember(self, cmd: AudioOut, ms: float, start: float, now_ms: float) -> None:
        while self._released and self._released[0].start + self._released[0].ms <= now_ms:
            self._released.popleft()    # played: never comes back
        self._released.append(_Released(cmd, ms, start))

    @property
    def due_ms(self) -> float | None:
        """When :meth:`release` will have something to give (None: only when
        more output arrives or the pacer is resumed)."""
        if not self._q:
            return None
        head = self._q[0].ms
        if head <= 0:
            return 0.0
        if self.paused:
            return None
        if self._play_end is None or not self.paced:
            return 0.0
        return self._play_end - max(self.lead_ms - head, 0.0)


__all__ = ["OutputPacer"]
