"""The input audio buffer, kept at the listen rate (16 kHz) on the session's input timeline.

With server VAD it is a bounded ring (oldest audio dropped silently) that
backs a manual ``input_audio_buffer.commit``; in push-to-talk it is the
utterance being recorded and refuses audio beyond its cap.
"""

from __future__ import annotations

import numpy as np

from runtime.models.voice_contract import LISTEN_RATE_HZ


class InputBuffer:
    def __init__(self, max_seconds: float) -> None:
        self.max_samples = int(max_seconds * LISTEN_RATE_HZ)
        self._chunks: list[np.ndarray] = []
        self.samples = 0
        self.start_sample = 0  # timeline position of the first buffered sample
        # push-to-talk: the client was told that audio is refused (report_full); it is
        # told again only after the buffer is emptied (take_all, clear)
        self._full_reported = False

    @property
    def duration_ms(self) -> float:
        return self.samples * 1000.0 / LISTEN_RATE_HZ

    def room(self) -> int:
        return self.max_samples - self.samples

    def append(self, pcm: np.ndarray, end_sample: int, ring: bool) -> bool:
        """Add ``pcm`` whose last sample is at ``end_sample`` on the timeline.
        ring=True drops the oldest audio on overflow; otherwise the chunk is
        cut to the room left and False is returned when anything was lost."""
        if self.samples == 0:
            self.start_sample = end_sample - pcm.size
        ok = True
        if not ring and pcm.size > self.room():
            pcm = pcm[: max(self.room(), 0)]
            ok = False
        if pcm.size:
            self._chunks.append(pcm)
            self.samples += pcm.size
        if ring and self.samples > self.max_samples:
            self._drop_front(self.samples - self.max_samples)
        return ok

    def report_full(self) -> bool:
        """``append`` refused audio: True when the client is to be told, the
        first time since the buffer was last emptied."""
        first = not self._full_reported
        self._full_reported = True
        return first

    def _drop_front(self, n: int) -> None:
        while n > 0 and self._chunks:
            c = self._chunks[0]
            if c.size <= n:
                self._chunks.pop(0)
                n -= c.size
                self.samples -= c.size
                self.start_sample += c.size
            else:
                self._chunks[0] = c[n:]
                self.samples -= n
                self.start_sample += n
                n = 0

    def drop_until_ms(self, ms: float) -> None:
        target = int(ms * LISTEN_RATE_HZ / 1000)
        if target > self.start_sample:
            self._drop_front(min(target - self.start_sample, self.samples))

    def take_all(self) -> np.ndarray:
        pcm = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
        self.clear()
        return pcm

    def clear(self, *, keep_report: bool = False) -> None:
        """Empty the buffer; refused audio is reported again, unless
        ``keep_report`` (a session.update's switch to push-to-talk, which has
        always kept the report of an earlier overflow)."""
        self.start_sample += self.samples
        self._chunks = []
        self.samples = 0
        if not keep_report:
            self._full_reported = False
