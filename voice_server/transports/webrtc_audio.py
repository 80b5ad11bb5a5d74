"""Audio plumbing for the WebRTC transport.

* :class:`PacedAudioTrack` - the agent's voice: an aiortc ``MediaStreamTrack``
  whose ``recv()`` hands out one 20 ms frame (48 kHz mono s16) per 20 ms of
  wall clock, taken from an output queue, silence when the queue is empty.
  Because the server paces the audio itself, it knows what was played: after
  each frame it reports ``on_played(item_id, played_ms)`` (ms of that item's
  audio sent so far), which the transport forwards to
  ``Session.playback_progress`` - truncation on barge-in uses it.
  ``flush(item_id)`` drops the queued audio of that item at once (barge-in,
  ``output_audio_buffer.clear``); ``pause(item_id)`` sends silence instead
  of that item's audio, keeping it queued, until ``resume(item_id)`` (or a
  flush of it).
* :func:`frame_to_mono` - an aiortc/PyAV ``AudioFrame`` (the decoded Opus
  mic, usually s16 stereo 48 kHz) to int16 mono.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque
from typing import Callable, Optional

import numpy as np

from ..audio_codec import StreamResampler, low_latency_quality

OUT_RATE = 48000
FRAME_MS = 20
FRAME_SAMPLES = OUT_RATE * FRAME_MS // 1000


class FramePacer:
    """Real-time pacing of 20 ms audio frames for any aiortc track we send.

    ``recv`` of a sending track is pulled as fast as the encoder wants;
    awaiting ``next_pts`` before each frame keeps the track at wall-clock
    pace.  After a bad stall it restarts the clock rather than bursting.
    """

    def __init__(self, rate: int = OUT_RATE, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.frame = rate * FRAME_MS // 1000
        self.clock = clock
        self.pts = 0
        self._start: float | None = None

    async def next_pts(self) -> int:
        if self._start is None:
            self._start = self.clock()
            return self.pts
        self.pts += self.frame
        wait = self._start + self.pts / self.rate - self.clock()
        if wait > 0:
            await asyncio.sleep(wait)
        elif wait < -0.5:
            self._start = self.clock() - self.pts / self.rate
        return self.pts


def audio_frame(samples: np.ndarray, pts: int, rate: int = OUT_RATE):
    """An s16 mono av.AudioFrame at ``pts`` (av imported lazily)."""
    from av import AudioFrame

    frame = AudioFrame(format="s16", layout="mono", samples=len(samples))
    frame.planes[0].update(np.ascontiguousarray(samples, np.int16).tobytes())
    frame.pts = pts
    frame.sample_rate = rate
    frame.time_base = fractions.Fraction(1, rate)
    return frame


def frame_to_mono(frame) -> np.ndarray:
    """int16 mono samples of a PyAV AudioFrame (packed or planar, any channel count)."""
    arr = frame.to_ndarray()
    channels = len(frame.layout.channels) or 1
    name = frame.format.name
    if frame.format.is_planar:
        arr = arr.reshape(channels, -1)[0]
    else:
        arr = arr.reshape(-1, channels)[:, 0]
    if name.startswith("s16"):
        return np.ascontiguousarray(arr, dtype=np.int16)
    if name.startswith("flt") or name.startswith("dbl"):
        return np.clip(np.round(arr * 32767.0), -32768, 32767).astype(np.int16)
    if name.startswith("s32"):
        return (arr >> 16).astype(np.int16)
    raise ValueError(f"unsupported audio frame format {name}")


class _ItemAudio:
    __slots__ = ("item_id", "resampler", "in_ms", "out_queued", "out_played", "flushed")

    def __init__(self, item_id: str) -> None:
        self.item_id = item_id
        self.resampler: StreamResampler | None = None
        self.in_ms = 0.0  # ms of this item's audio handed to us (native rate)
        self.out_queued = 0  # 48 kHz samples queued so far
        self.out_played = 0  # 48 kHz samples sent
        self.flushed = False


PlayedFn = Callable[[str, float], None]


class PacedAudioTrack:
    """Factory for the aiortc track class (aiortc is imported lazily)."""

    def __new__(cls, on_played: Optional[PlayedFn] = None, **kw):
        return _track_class()(on_played=on_played, **kw)


_TRACK_CLS = None


def _track_class():
    global _TRACK_CLS
    if _TRACK_CLS is not None:
        return _TRACK_CLS
    from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

    class _PacedAudioTrack(MediaStreamTrack):
        kind = "audio"

        def __init__(self, on_played: Optional[PlayedFn] = None,
                     clock: Callable[[], float] = time.monotonic) -> None:
            super().__init__()
            self.on_played = on_played
            self.clock = clock
            self._q: deque = deque()  # (item, int16 ndarray at 48 kHz)
            self._queued = 0
            self._items: dict[str, _ItemAudio] = {}
            self._paused: str | None = None  # item whose audio is held
            self.pacer = FramePacer(OUT_RATE, clock)
            self.frames_sent = 0
            self.audible_frames = 0

        # ------------------------------------------------------------- input
        def push(self, item_id: str, pcm: np.ndarray, sample_rate: int) -> None:
            it = self._items.get(item_id)
            if it is None:
                it = _ItemAudio(item_id)
                self._items[item_id] = it
                if len(self._items) > 8:  # keep the few most recent
                    for k in list(self._items)[:-8]:
                        del self._items[k]
            if it.flushed:
                return
            pcm = np.asarray(pcm, dtype=np.int16).reshape(-1)
            it.in_ms += pcm.size * 1000.0 / sample_rate
            if sample_rate != OUT_RATE:
                if it.resampler is None or it.resampler.in_rate != sample_rate:
                    it.resampler = StreamResampler(sample_rate, OUT_RATE,
                                                   low_latency_quality(sample_rate, OUT_RATE))
                pcm = it.resampler.process(pcm)
            if pcm.size:
                self._q.append((it, pcm))
                self._queued += pcm.size
                it.out_queued += pcm.size

        def flush(self, item_id: str | None = None) -> int:
            """Drop queued audio (of ``item_id``, or all); returns samples dropped."""
            dropped = 0
            keep: deque = deque()
            for it, pcm in self._q:
                if item_id is None or it.item_id == item_id:
                    dropped += pcm.size
                    it.flushed = True
                else:
                    keep.append((it, pcm))
            self._q = keep
            self._queued -= dropped
            if item_id is not None and item_id in self._items:
                self._items[item_id].flushed = True
            if item_id is None or item_id == self._paused:
                self._paused = None
            return dropped

        def pause(self, item_id: str) -> None:
            self._paused = item_id

        def resume(self, item_id: str) -> None:
            if self._paused == item_id:
                self._paused = None

        @property
        def queued_ms(self) -> float:
            return self._queued * 1000.0 / OUT_RATE

        # ------------------------------------------------------------ output
        def _next_samples(self) -> tuple[np.ndarray, list]:
            need = FRAME_SAMPLES
            parts, touched = [], []
            while need and self._q and self._q[0][0].item_id != self._paused:
                it, pcm = self._q[0]
                take = pcm[:need]
                if take.size == pcm.size:
                    self._q.popleft()
                else:
                    self._q[0] = (it, pcm[need:])
                parts.append(take)
                need -= take.size
                self._queued -= take.size
                it.out_played += take.size
                if not touched or touched[-1] is not it:
                    touched.append(it)
            if not parts:
                return np.zeros(FRAME_SAMPLES, np.int16), touched
            if need:
                parts.append(np.zeros(need, np.int16))
            return (parts[0] if len(parts) == 1 else np.concatenate(parts)), touched

        async def recv(self):
            if self.readyState != "live":
                raise MediaStreamError
            pts = await self.pacer.next_pts()
            samples, touched = self._next_samples()
            frame = audio_frame(samples, pts)
            self.frames_sent += 1
            if touched:
                self.audible_frames += 1
                if self.on_played is not None:
                    for it in touched:
                        if it.out_played >= it.out_queued:
                            # all we were given went out: the resampler's few
                            # held-back samples are not "unplayed" audio
                            played = it.in_ms
                        else:
                            played = min(it.out_played * 1000.0 / OUT_RATE, it.in_ms)
                        self.on_played(it.item_id, played)
            return frame

    _TRACK_CLS = _PacedAudioTrack
    return _TRACK_CLS


__all__ = ["PacedAudioTrack", "frame_to_mono", "OUT_RATE", "FRAME_MS", "FRAME_SAMPLES"]
