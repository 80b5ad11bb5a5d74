"""AR scheduler: step-level continuous batching.

Requests join (prefill) and leave (finish, fail, abort) between steps; one
``step`` advances every running request by one token.  The process loop reads
the control socket between any two steps, so an abort removes a request from
the running batch at the next step boundary and the output of the step that
was already running is discarded.
"""

from __future__ import annotations

import time
from collections import deque

from runtime.executor import CONVERSATION, FORGET, PREFILL_ONLY
from runtime.schedulers.base import Pending, Scheduler


class ARScheduler(Scheduler):
    kind = "ar"

    def __init__(self, ctx, executor, cfg) -> None:
        super().__init__(ctx, executor, cfg)
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self._admitted: set[int] = set()
        self._idle_until = 0.0
        self.idle_wait_s = float(getattr(executor, "idle_wait_s", 0.0) or 0.0)

    def accept(self, req: Pending, src, payload, has_payload, end) -> None:
        was_complete = req.complete
        req.add(src, payload, has_payload, end)
        if req.complete and not was_complete:
            self.waiting.append(req.rid)

    def has_work(self) -> bool:
        if self.waiting and len(self.running) < self.cfg.max_batch:
            return True
        return bool(self.running) and time.monotonic() >= self._idle_until

    def wait_hint(self) -> float | None:
        if self.running:
            return max(0.0, self._idle_until - time.monotonic())
        return None

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.cfg.max_batch:
            rid = self.waiting.popleft()
            req = self.requests.get(rid)
            if req is None:
                continue
            req.t_start = time.monotonic()
            item = req.work_item()
            if item.params.get(FORGET):
                req.inputs.clear()
                try:
                    self.executor.forget(str(item.params.get(CONVERSATION) or ""))
                except Exception as exc:  # noqa: BLE001 - only this request fails
                    self.ctx.fail(rid, exc)
                    continue
                self.ctx.finish(rid)
                continue
            if item.params.get(PREFILL_ONLY) and not self.executor.prefills_only:
                req.inputs.clear()
                self.ctx.finish(rid)     # nothing this engine could keep for later
                continue
            req.inputs.clear()  # the executor copied what it needs; let buffers go
            try:
                self.executor.prefill(item)
            except Exception as exc:  # noqa: BLE001
                req.compute_s += time.monotonic() - req.t_start
                self._admitted.add(rid)
                self.ctx.fail(rid, exc)
                continue
            del item
            req.compute_s += time.monotonic() - req.t_start
            self._admitted.add(rid)
            self.running.append(rid)

    def run_once(self) -> None:
        self._admit()
        self.ctx.poll_control()
        if not self.running:
            return
        batch = list(self.running)
        t0 = time.monotonic()
        try:
            results = self.executor.step(batch)
        except Exception as exc:  # noqa: BLE001 - a whole-step failure fails the step's requests
            results = {rid: exc for rid in batch}
        dt = time.monotonic() - t0
        self.record_batch(len(batch), dt)
        self.ctx.poll_control()  # aborts that landed mid-step: their output is discarded
        progressed = False
        for rid in batch:
            req = self.requests.get(rid)
            if req is None:
                continue
            req.compute_s += dt
            res = results.get(rid)
            if res is None:
                continue
            progressed = True
            if isinstance(res, BaseException):
                self.ctx.fail(rid, res)
                continue
            if res.chunk is not None:
                self.ctx.emit(rid, res.chunk, end=res.finished)
            elif res.finished:
                self.ctx.finish(rid)
        self._idle_until = 0.0 if progressed or not self.idle_wait_s else time.monotonic() + self.idle_wait_s

    def _leave(self, rid: int) -> None:
        if rid in self.running:
            self.running.remove(rid)
        if rid in self._admitted:
            self._admitted.discard(rid)
            self._release(rid)

    def drop(self, rid: int) -> bool:
        try:
            self.waiting.remove(rid)
        except ValueError:
            pass
        return super().drop(rid)

    def stats(self) -> dict:
        s = super().stats()
        s.update(running=len(self.running), waiting=len(self.waiting))
        return s
