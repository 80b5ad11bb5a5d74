"""What the caller is sent, and what they heard: the socket-free outbound
half of a phone bridge.

The session's ``AudioOut`` (any rate, paced: 100 ms slices) becomes the
line's format in the provider's frames, with marks in between; the
provider's mark echoes become played positions.  Marks are named
``"<item_id>:<ms>"`` (ms of that item's audio sent so far) and go out after
every :data:`MARK_EVERY_MS` of audio and after each chunk; an item opens
with ``"<item_id>:0:start"`` and, once its response is done, closes with
``"<item_id>:<ms>:end"`` after its last (silence-padded) frame.

Everything to send waits in ONE queue, in order; the bridge's sender takes
it with :meth:`Playout.next`.  A barge-in (:meth:`Playout.flush`) drops the
item's queued frames and marks and puts the provider's clear first, so no
frame of the old reply follows it; marks the provider still held are then
cleared, not heard, and their echoes (providers that return them) are
ignored.  A pause (:meth:`Playout.rewind`) clears the same way but keeps
the item: the session sends its audio again from where the caller stopped.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Optional

import numpy as np

from ...audio_codec import StreamResampler
from .codec import Outbound, PhoneCodec
from .dtmf_tones import dtmf_pcm

MARK_EVERY_MS = 200  # the played position is known to 200 ms (and to each chunk)
MAX_CLEARED_MARKS = 512  # echoes still awaited from clears (bounded: some never come)


@dataclass
class _Item:
    """One reply item's audio on its way out."""
    item_id: str
    response_id: str
    resampler: Optional[StreamResampler] = None
    rem: bytes = b""  # encoded bytes short of a whole frame
    sent_bytes: int = 0  # line bytes queued for this item
    since_mark: int = 0  # line bytes queued since the last mark
    rewound: bool = False  # the provider was cleared and nothing was queued since


class Kind(Enum):
    """What a queued message is; the value names its counter in :class:`PlayoutStats`."""
    MEDIA = "media_out"
    MARK = "marks_out"
    CLEAR = "clears"
    DIGITS = "digits_out"
    TONES = "tones_out"       # in-band DTMF: media frames of tones


@dataclass
class Queued:
    """One message waiting to be sent: the item it belongs to (None: a clear
    or tones) and, for a mark, the position it stands for."""
    message: Outbound
    item_id: Optional[str] = None
    mark: Optional[tuple[str, str, int]] = None  # (name, item_id, ms)
    kind: Kind = Kind.MEDIA


@dataclass
class PlayoutStats:
    media_out: int = 0
    marks_out: int = 0
    marks_in: int = 0
    marks_ignored: int = 0
    clears: int = 0
    digits_out: int = 0
    tones_out: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def sent(self, kind: Kind) -> None:
        setattr(self, kind.value, getattr(self, kind.value) + 1)


class Playout:
    """The outbound queue of one call (module docstring).  ``codec`` must have
    started (its line is known) before audio is queued."""

    def __init__(self, codec: PhoneCodec) -> None:
        self.codec = codec
        self.queue: deque[Queued] = deque()  # what the sender sends next, in order
        self.items: dict[str, _Item] = {}  # items with audio still coming
        self.outstanding: dict[str, tuple[str, int]] = {}  # mark sent -> (item, ms)
        self.cleared: OrderedDict[str, None] = OrderedDict()  # marks dropped by a clear
        self.stats = PlayoutStats()

    # ------------------------------------------------------------ audio in
    def audio(self, response_id: str, item_id: str, pcm: np.ndarray, rate: int) -> None:
        """Queue a reply chunk (``AudioOut``) for the line."""
        line = self.codec.line
        it = self.items.get(item_id)
        if it is None:
            it = self.items[item_id] = _Item(item_id, response_id)
            self._queue_mark(it, ":start")
        tail = np.zeros(0, np.int16)
        if it.resampler is not None and it.resampler.in_rate != rate:
            tail = it.resampler.flush()
            it.resampler = None
        if it.resampler is None:
            it.resampler = StreamResampler(rate, line.rate)
        out = it.resampler.process(np.asarray(pcm, np.int16).reshape(-1))
        if tail.size:
            out = np.concatenate([tail, out])
        data = it.rem + line.encode(out)
        n = self._queue_frames(it, data)
        it.rem = data[n:]

    def finish(self, response_id: str) -> None:
        """The response is done (not cancelled): its tail, padded to a whole
        frame, and the end mark."""
        it = next((x for x in self.items.values() if x.response_id == response_id), None)
        if it is None:
            return
        del self.items[it.item_id]
        line = self.codec.line
        data = it.rem + (line.encode(it.resampler.flush()) if it.resampler else b"")
        if data:
            frame = self.codec.frame_bytes()
            self._queue_frames(it, data + line.silence((-len(data)) % frame))
        self._queue_mark(it, ":end")

    def flush(self, item_id: str) -> None:
        """Barge-in: drop what is queued for the item; the clear goes out next
        (unless a rewind cleared the provider and nothing was sent since)."""
        it = self.items.pop(item_id, None)
        if it is not None and it.rewound and not any(q.item_id == item_id for q in self.queue):
            return
        self._clear(item_id)

    def rewind(self, item_id: str, played_ms: float) -> None:
        """A pause: the provider's clear goes out next and the item's queued
        frames are dropped, as for a barge-in, but the item stays open: the
        session sends its audio again from ``played_ms`` (where the caller
        stopped hearing it), and the marks after it count from there."""
        it = self.items.get(item_id)
        self._clear(item_id)
        if it is None:
            return
        it.sent_bytes = self.codec.line.frame_bytes(max(int(played_ms), 0))
        it.rem, it.resampler, it.since_mark, it.rewound = b"", None, 0, True

    def _clear(self, item_id: str) -> None:
        self.queue = deque(q for q in self.queue if q.item_id != item_id)
        if self.codec.marks_echo_on_clear:
            for name in self.outstanding:
                self.cleared[name] = None
            while len(self.cleared) > MAX_CLEARED_MARKS:
                self.cleared.popitem(last=False)
        self.outstanding.clear()
        self.queue.appendleft(Queued(self.codec.clear(), kind=Kind.CLEAR))

    def digits(self, digits: str) -> bool:
        """Queue keys for the caller's line, after what is queued: the provider's
        DTMF message where it has one, else the tones themselves as audio
        (:mod:`.dtmf_tones`).  A barge-in's clear drops tones not yet played."""
        msg = self.codec.send_digits(digits)
        if msg is not None:
            self.queue.append(Queued(msg, kind=Kind.DIGITS))
            return True
        line, frame = self.codec.line, self.codec.frame_bytes()
        data = line.encode(dtmf_pcm(digits, line.rate))
        data += line.silence((-len(data)) % frame)
        self.queue.extend(Queued(self.codec.media(data[k:k + frame]), kind=Kind.TONES)
                          for k in range(0, len(data), frame))
        return True

    # ------------------------------------------------------------ to the socket
    def next(self) -> Optional[Queued]:
        """The next message to send (None: nothing queued).  A mark counts as
        outstanding from here on, before the send's await, so a flush that
        runs meanwhile sees it."""
        if not self.queue:
            return None
        q = self.queue.popleft()
        if q.mark is not None:
            self.outstanding[q.mark[0]] = (q.mark[1], q.mark[2])
        self.stats.sent(q.kind)
        return q

    # ------------------------------------------------------------ from the provider
    def played(self, name: str) -> tuple[Optional[tuple[str, int]], str]:
        """A mark came back: ``((item_id, ms), "")`` when it says what was heard,
        ``(None, why)`` when it says nothing (cleared, or not ours)."""
        self.stats.marks_in += 1
        info = self.outstanding.pop(name, None)
        if name in self.cleared:
            del self.cleared[name]
            self.stats.marks_ignored += 1
            return None, ""  # cleared, not played: expected, not an error
        if info is None:
            return None, f"unknown mark {name[:60]!r}"
        return info, ""

    # ------------------------------------------------------------ framing
    def _queue_mark(self, it: _Item, suffix: str = "") -> None:
        ms = self.codec.line.ms_of(it.sent_bytes)
        name = f"{it.item_id}:{ms}{suffix}"
        it.since_mark = 0
        self.queue.append(Queued(self.codec.mark(name), it.item_id, (name, it.item_id, ms),
                                 kind=Kind.MARK))

    def _queue_frames(self, it: _Item, data: bytes) -> int:
        """Whole frames of ``data`` (returns the bytes used), a mark every
        :data:`MARK_EVERY_MS` and one after the last frame."""
        line = self.codec.line
        frame = self.codec.frame_bytes()
        every = line.frame_bytes(MARK_EVERY_MS)
        n = len(data) // frame
        it.rewound = it.rewound and n == 0
        for k in range(n):
            self.queue.append(Queued(self.codec.media(data[k * frame:(k + 1) * frame]),
                                     it.item_id))
            it.sent_bytes += frame
            it.since_mark += frame
            if k < n - 1 and it.since_mark >= every:
                self._queue_mark(it)
        if n:
            self._queue_mark(it)
        return n * frame


__all__ = ["Playout", "Queued", "Kind", "PlayoutStats", "MARK_EVERY_MS"]
