"""Chunk scheduler: streaming in, streaming out (vocoder-, TTS- and ASR-like stages).

Each request's input stream is cut into slices: for array streams with
``first_chunk`` / ``chunk_size`` set, a small first slice (early first output)
then larger ones; otherwise every arriving chunk is one slice.  One call takes
at most one slice per request, and slices of the same length are batched.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from runtime.executor import WorkItem
from runtime.schedulers.base import Pending, Scheduler


def _empty_like(sample: Any) -> Any:
    if isinstance(sample, np.ndarray):
        return sample[:0]
    if isinstance(sample, str):
        return ""
    if isinstance(sample, bytes):
        return b""
    if isinstance(sample, list):
        return []
    return None


def _length(payload: Any) -> int:
    try:
        return len(payload)
    except TypeError:
        return -1


class _Stream:
    __slots__ = ("slices", "buffer", "sent_first", "ended", "last", "opened")

    def __init__(self) -> None:
        self.slices: deque[list] = deque()  # [payload, first, final, arrived]
        self.buffer: list[np.ndarray] = []
        self.sent_first = False
        self.ended = False
        self.last: Any = None
        self.opened = False


class ChunkScheduler(Scheduler):
    kind = "chunk"

    def __init__(self, ctx, executor, cfg) -> None:
        super().__init__(ctx, executor, cfg)
        self.streams: dict[int, _Stream] = {}
        self.order: deque[int] = deque()
        self.awaiting_end: set[int] = set()   # input ended, background work still running
        self._wakeup: int | None = executor.wakeup_fd()

    def on_new(self, req: Pending) -> None:
        self.streams[req.rid] = _Stream()

    def accept(self, req: Pending, src, payload, has_payload, end) -> None:
        st = self.streams[req.rid]
        if st.ended:
            return
        if has_payload:
            st.last = payload
            if self.cfg.first_chunk and isinstance(payload, np.ndarray):
                st.buffer.append(payload)
                self._cut(st, final=False)
            else:
                self._push(st, payload)
        if end:
            st.ended = True
            if st.buffer:
                self._cut(st, final=True)
            if st.slices:
                st.slices[-1][2] = True
            else:
                self._push(st, _empty_like(st.last), final=True)
        if st.slices and req.rid not in self.order:
            self.order.append(req.rid)

    def _push(self, st: _Stream, payload: Any, final: bool = False) -> None:
        st.slices.append([payload, not st.sent_first, final, time.monotonic()])
        st.sent_first = True

    def _cut(self, st: _Stream, final: bool) -> None:
        data = np.concatenate(st.buffer) if len(st.buffer) > 1 else st.buffer[0]
        st.buffer.clear()
        pos = 0
        while True:
            want = self.cfg.chunk_size or self.cfg.first_chunk
            if not st.sent_first:
                want = self.cfg.first_chunk
            if len(data) - pos < want:
                break
            self._push(st, data[pos:pos + want])
            pos += want
        rest = data[pos:]
        if len(rest):
            if final:
                self._push(st, rest)
            else:
                st.buffer.append(rest)

    def has_work(self) -> bool:
        return bool(self.order) or (self._wakeup is not None and self.executor.has_results())

    def wakeup_fd(self) -> int | None:
        """The executor's background-results descriptor, for the stage loop's poller."""
        return self._wakeup

    def run_once(self) -> None:
        if self._wakeup is not None:
            self._emit_background()
        if self.order:
            self._run_slices()

    def _emit_background(self) -> None:
        """Emit what the executor finished off-thread; end streams that were waiting for it."""
        results = self.executor.collect()
        last = {rid: i for i, (rid, _) in enumerate(results)}   # a stream ends on its last one
        for i, (rid, outs) in enumerate(results):
            req = self.requests.get(rid)
            if req is None or self.ctx.is_dead(rid):
                continue
            if isinstance(outs, BaseException):
                self.ctx.fail(rid, outs)
                continue
            outs = list(outs or ())
            ending = last[rid] == i and rid in self.awaiting_end and not self.executor.pending(rid)
            for i, chunk in enumerate(outs):
                self.ctx.emit(rid, chunk, end=ending and i == len(outs) - 1)
            if ending:
                self.awaiting_end.discard(rid)
                if not outs:
                    self.ctx.finish(rid)
        for rid in [r for r in self.awaiting_end if not self.executor.pending(r)]:
            self.awaiting_end.discard(rid)   # background work ended with nothing to say
            if rid in self.requests and not self.ctx.is_dead(rid):
                self.ctx.finish(rid)

    def _run_slices(self) -> None:
        # One slice per request; batch the largest group of equal-length slices.
        groups: dict[int, list[int]] = {}
        for rid in self.order:
            st = self.streams.get(rid)
            if st and st.slices:
                groups.setdefault(_length(st.slices[0][0]), []).append(rid)
        if not groups:
            self.order.clear()
            return
        rids = max(groups.values(), key=len)[: self.cfg.max_batch]
        items: list[WorkItem] = []
        for rid in rids:
            req = self.requests[rid]
            st = self.streams[rid]
            payload, first, final, arrived = st.slices.popleft()
            if not st.opened:
                st.opened = True
                req.t_start = time.monotonic()
                try:
                    self.executor.open(rid, req.params)
                except Exception as exc:  # noqa: BLE001
                    self._requeue(rid)
                    self.ctx.fail(rid, exc)
                    continue
            items.append(WorkItem(rid, payload, req.params, final=final, first=first, arrived=arrived))
        for rid in rids:
            self._requeue(rid)
        if not items:
            return
        t0 = time.monotonic()
        try:
            results = list(self.executor.process(items))
            if len(results) != len(items):
                raise RuntimeError(f"executor returned {len(results)} results for {len(items)} items")
        except Exception as exc:  # noqa: BLE001
            results = [exc] * len(items)
        dt = time.monotonic() - t0
        self.record_batch(len(items), dt)
        self.ctx.poll_control()
        for item, outs in zip(items, results):
            rid = item.request_id
            req = self.requests.get(rid)
            if req is None or self.ctx.is_dead(rid):
                continue
            req.compute_s += dt
            if isinstance(outs, BaseException):
                self.ctx.fail(rid, outs)
                continue
            outs = list(outs or ())
            # A final input whose background work is still running ends later, with it.
            ending = item.final and not (self._wakeup is not None and self.executor.pending(rid))
            if item.final and not ending:
                self.awaiting_end.add(rid)
            for i, chunk in enumerate(outs):
                self.ctx.emit(rid, chunk, end=ending and i == len(outs) - 1)
            if ending and not outs:
                self.ctx.finish(rid)

    def _requeue(self, rid: int) -> None:
        try:
            self.order.remove(rid)
        except ValueError:
            pass
        st = self.streams.get(rid)
        if st and st.slices and rid in self.requests:
            self.order.append(rid)

    def _leave(self, rid: int) -> None:
        self.awaiting_end.discard(rid)
        st = self.streams.pop(rid, None)
        try:
            self.order.remove(rid)
        except ValueError:
            pass
        if st is not None and st.opened:
            self._release(rid)
