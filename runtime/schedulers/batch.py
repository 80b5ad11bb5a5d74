"""Batch scheduler: whole inputs, one executor call for up to max_batch requests.

Waits at most ``max_wait_ms`` for a batch to fill (from the oldest ready
request), so a lone request is never held back longer than that.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from runtime.executor import Chunks
from runtime.schedulers.base import Pending, Scheduler


class BatchScheduler(Scheduler):
    kind = "batch"

    def __init__(self, ctx, executor, cfg) -> None:
        super().__init__(ctx, executor, cfg)
        self.ready: deque[int] = deque()
        self.ready_at: dict[int, float] = {}

    def accept(self, req: Pending, src, payload, has_payload, end) -> None:
        req.add(src, payload, has_payload, end)
        if req.complete and req.rid not in self.ready_at:
            self.ready.append(req.rid)
            self.ready_at[req.rid] = time.monotonic()

    def has_work(self) -> bool:
        if not self.ready:
            return False
        if len(self.ready) >= self.cfg.max_batch or not self.cfg.max_wait_ms:
            return True
        return self.wait_hint() == 0.0

    def wait_hint(self) -> float | None:
        if not self.ready:
            return None
        oldest = self.ready_at[self.ready[0]]
        return max(0.0, oldest + self.cfg.max_wait_ms / 1000.0 - time.monotonic())

    def run_once(self) -> None:
        reqs: list[Pending] = []
        while self.ready and len(reqs) < self.cfg.max_batch:
            rid = self.ready.popleft()
            self.ready_at.pop(rid, None)
            req = self.requests.get(rid)
            if req is not None:
                reqs.append(req)
        if not reqs:
            return
        t0 = time.monotonic()
        for r in reqs:
            r.t_start = t0
        results = self._execute(reqs)
        dt = time.monotonic() - t0
        self.record_batch(len(reqs), dt)
        self.ctx.poll_control()  # an abort that landed mid-call discards that output
        for req, out in zip(reqs, results):
            req.compute_s += dt
            if self.ctx.is_dead(req.rid):
                continue
            if isinstance(out, BaseException):
                self.ctx.fail(req.rid, out)
            elif isinstance(out, Chunks):
                for i, chunk in enumerate(out):
                    self.ctx.emit(req.rid, chunk, end=i == len(out) - 1)
                if not out:
                    self.ctx.finish(req.rid)
            else:
                self.ctx.emit(req.rid, out, end=True)

    def _execute(self, reqs: list[Pending]) -> list[Any]:
        items = [r.work_item() for r in reqs]
        try:
            out = self.executor.execute(items)
            if len(out) != len(items):
                raise RuntimeError(f"executor returned {len(out)} outputs for {len(items)} inputs")
            return list(out)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes an error message
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            if len(items) == 1:
                return [exc]
            # Find the culprit: run each alone so batch-mates are still served.
            single: list[Any] = []
            for item in items:
                try:
                    single.append(self.executor.execute([item])[0])
                except Exception as one:  # noqa: BLE001
                    single.append(one)
            return single

    def drop(self, rid: int) -> bool:
        if rid in self.ready_at:
            del self.ready_at[rid]
            try:
                self.ready.remove(rid)
            except ValueError:
                pass
        return super().drop(rid)
