"""What the caller hears next, on the server's own clock: the socket-free
outbound queue of one SIP call.

The session's ``AudioOut`` (any rate, released in real time a little ahead
of playback: ``output_lead_ms``) is cut into 20 ms frames at the line's rate
and queued.  The send clock (:mod:`.media`) takes one frame a tick with
:meth:`Playout.next`; a frame sent is a frame heard, so the played position
of each item is known to the tick and reported every :data:`PROGRESS_MS`
and at the item's end (``runner.playback_progress``).

Barge-in (:meth:`Playout.flush`) drops the item's queued frames at once:
the next tick sends silence.  A pause (:meth:`Playout.rewind`) drops them
too but keeps the item open: the session sends its audio again from where
the caller stopped hearing it.  With a paused item (:meth:`hold`), the
clock sends silence and the queue waits.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...audio_codec import StreamResampler
from .payload import PTIME_MS, PayloadFormat

PROGRESS_MS = 100  # the played position is reported this often (and at each item's end)


@dataclass
class _Item:
    """One reply item's audio on its way out."""
    item_id: str
    response_id: str
    resampler: Optional[StreamResampler] = None
    rem: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))  # short of a frame
    queued_ms: int = 0  # this item's audio queued so far (ms from its start)
    finished: bool = False  # the response is done: no more audio comes


@dataclass
class _Frame:
    pcm: np.ndarray
    item_id: str
    end_ms: int  # the item's position once this frame is heard
    last: bool = False  # the item's final frame


@dataclass(frozen=True)
class Heard:
    """The caller has heard ``item_id`` up to ``ms``."""
    item_id: str
    ms: int


@dataclass
class PlayoutStats:
    frames_out: int = 0
    silence_out: int = 0
    flushed_frames: int = 0


class Playout:
    """The outbound queue of one call (module docstring)."""

    def __init__(self, fmt: PayloadFormat) -> None:
        self.format = fmt
        self.queue: deque[_Frame] = deque()  # frames to send, in order
        self.items: dict[str, _Item] = {}  # items whose audio is still coming or queued
        self.paused: set[str] = set()  # items held where they are (PauseAudio)
        self._reported: dict[str, int] = {}  # item -> the position last reported
        self._due: deque[Heard] = deque()  # ends heard with no frame left to carry them
        self.stats = PlayoutStats()

    # ------------------------------------------------------------ from the session
    def audio(self, response_id: str, item_id: str, pcm: np.ndarray, rate: int) -> None:
        """Queue a reply chunk (``AudioOut``)."""
        it = self.items.get(item_id)
        if it is None:
            it = self.items[item_id] = _Item(item_id, response_id)
        if it.resampler is None or it.resampler.in_rate != rate:
            tail = it.resampler.flush() if it.resampler is not None else np.zeros(0, np.int16)
            it.rem = np.concatenate([it.rem, tail])
            it.resampler = StreamResampler(rate, self.format.sample_rate)
        out = it.resampler.process(np.asarray(pcm, np.int16).reshape(-1))
        self._queue(it, np.concatenate([it.rem, out]), pad=False)

    def finish(self, response_id: str) -> None:
        """The response is done: its tail, padded to a whole frame, goes out last."""
        it = next((x for x in self.items.values() if x.response_id == response_id), None)
        if it is None or it.finished:
            return
        it.finished = True
        tail = it.resampler.flush() if it.resampler is not None else np.zeros(0, np.int16)
        self._queue(it, np.concatenate([it.rem, tail]), pad=True)
        if self.queue and self.queue[-1].item_id == it.item_id:
            self.queue[-1].last = True
        else:  # all of it has gone out already: its end is heard now
            self.items.pop(it.item_id, None)
            self._reported.pop(it.item_id, None)
            self._due.append(Heard(it.item_id, it.queued_ms))

    def flush(self, item_id: str) -> Optional[Heard]:
        """Barge-in: drop what is queued for the item; returns what was heard."""
        self._drop(item_id)
        it = self.items.pop(item_id, None)
        self.paused.discard(item_id)
        heard = self._reported.pop(item_id, None)
        return Heard(item_id, heard) if it is not None and heard is not None else None

    def rewind(self, item_id: str, played_ms: float) -> None:
        """A pause: drop the item's queued frames but keep it; the session sends
        its audio again from ``played_ms``."""
        self._drop(item_id)
        it = self.items.get(item_id)
        if it is not None:
            it.queued_ms = self._reported[item_id] = max(int(played_ms), 0)
            it.rem, it.resampler, it.finished = np.zeros(0, np.int16), None, False

    def hold(self, item_id: str, *, paused: bool) -> None:
        """``PauseAudio`` / ``ResumeAudio``: the item's frames wait, silence goes out."""
        (self.paused.add if paused else self.paused.discard)(item_id)

    # ------------------------------------------------------------ to the clock
    def next(self) -> tuple[Optional[np.ndarray], Optional[Heard]]:
        """This tick's frame (None: silence) and, when due, what the caller has
        heard now."""
        if not self.queue or self.queue[0].item_id in self.paused:
            self.stats.silence_out += 1
            return None, (self._due.popleft() if self._due else None)
        f = self.queue.popleft()
        self.stats.frames_out += 1
        heard = None
        last = self._reported.get(f.item_id, 0)
        if f.last or f.end_ms - last >= PROGRESS_MS:
            self._reported[f.item_id] = f.end_ms
            heard = Heard(f.item_id, f.end_ms)
        if f.last:
            self.items.pop(f.item_id, None)
            self._reported.pop(f.item_id, None)
        return f.pcm, heard

    @property
    def queued_ms(self) -> int:
        return len(self.queue) * PTIME_MS

    # ------------------------------------------------------------ framing
    def _queue(self, it: _Item, pcm: np.ndarray, *, pad: bool) -> None:
        n = self.format.frame_samples
        if pad and pcm.size % n:
            pcm = np.concatenate([pcm, np.zeros(n - pcm.size % n, np.int16)])
        whole = pcm.size // n
        for k in range(whole):
            it.queued_ms += PTIME_MS
            self.queue.append(_Frame(pcm[k * n:(k + 1) * n], it.item_id, it.queued_ms))
        it.rem = pcm[whole * n:]

    def _drop(self, item_id: str) -> None:
        before = len(self.queue)
        self.queue = deque(f for f in self.queue if f.item_id != item_id)
        self.stats.flushed_frames += before - len(self.queue)


__all__ = ["Playout", "Heard", "PlayoutStats", "PROGRESS_MS"]
