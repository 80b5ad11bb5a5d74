"""Test doubles for the fault-injection server (tests/server/fault-pipeline.yaml).

* :class:`ScriptedThinker` - an AR "thinker" that streams a fixed reply one
  word per step (no model: starts at once, costs no CPU).
* :class:`FailAfterFirstChunk` - the real speak stage, except that every
  odd-numbered request it sees (1st, 3rd, ...) fails right after its first
  audio chunk was emitted, i.e. mid-stream, after the client heard audio.
"""

from __future__ import annotations

import time

from runtime.errors import ErrorCode, StageError
from runtime.executor import ARExecutor, StepResult, WorkItem
from runtime.models.speak import SpeakExecutor

REPLY = ("Hello there, this is the first part of my answer. "
         "And here comes a second sentence that never gets spoken. "
         "Then a third one for good measure.")


class ScriptedThinker(ARExecutor):
    def __init__(self, step_ms: float = 15.0, reply: str = REPLY, **args) -> None:
        super().__init__(**args)
        self.step_ms = float(step_ms)
        self.reply = reply
        self.state: dict[int, list[str]] = {}

    def prefill(self, item: WorkItem) -> None:
        words = self.reply.split(" ")
        self.state[item.request_id] = [w + " " for w in words[:-1]] + [words[-1]]

    def step(self, request_ids: list[int]) -> dict:
        if self.step_ms:
            time.sleep(self.step_ms / 1000)
        out = {}
        for rid in request_ids:
            words = self.state[rid]
            w = words.pop(0)
            out[rid] = StepResult(chunk=w, finished=not words)
        return out

    def release(self, request_id: int) -> None:
        self.state.pop(request_id, None)


class FailAfterFirstChunk(SpeakExecutor):
    def __init__(self, **args) -> None:
        super().__init__(**args)
        self.seen = 0
        self.doomed: set[int] = set()
        self.emitted: dict[int, int] = {}

    def open(self, request_id: int, params: dict) -> None:
        super().open(request_id, params)
        self.seen += 1
        if self.seen % 2 == 1:
            self.doomed.add(request_id)

    def release(self, request_id: int) -> None:
        super().release(request_id)
        self.doomed.discard(request_id)
        self.emitted.pop(request_id, None)

    def process(self, items: list[WorkItem]) -> list:
        for it in items:  # open() happens inside process() when the scheduler skipped it
            if it.request_id not in self._segmenters:
                self.open(it.request_id, it.params)
        results = super().process(items)
        out = []
        for it, res in zip(items, results):
            rid = it.request_id
            if rid in self.doomed and isinstance(res, list):
                before = self.emitted.get(rid, 0)
                if before >= 1 and (res or it.final):
                    res = StageError(ErrorCode.RESOURCE_EXHAUSTED,
                                     "test: speak ran out of memory mid-stream")
                else:
                    self.emitted[rid] = before + len(res)
            out.append(res)
        return out
