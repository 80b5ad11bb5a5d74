"""Stand-ins for the voice models, for servers whose reply a test must control
(tests/server/fault-pipeline.yaml, tests/server/drain-pipeline.yaml).

* :class:`ScriptedThinker` - an AR "thinker" that streams a fixed reply one
  word per step (no model: starts at once, costs no CPU).
* :class:`FailAfterFirstChunk` - the real speak stage, except that every
  odd-numbered request it sees (1st, 3rd, ...) fails right after its first
  audio chunk was emitted, i.e. mid-stream, after the client heard audio.
* :class:`CountedThinker` - a thinker whose reply length the client picks:
  the last user message ``"words=N"`` makes the reply N words long, one word
  per step of ``step_ms`` (so one server run can have a turn that ends inside
  the drain's grace period and one that outlives it).
"""

from __future__ import annotations

import re
import time

from runtime.errors import ErrorCode, StageError
from runtime.executor import ARExecutor, StepResult, WorkItem
from runtime.models.speak.executor import SpeakExecutor

from .stages import Countdown

# Two sentences, ~7 s of flite speech: long enough to pause, resume and talk
# over; every paced test plays it in real time, so no longer.
REPLY = ("Hello there, this is the first part of my answer. "
         "And here comes a second sentence that never gets spoken.")


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
            if it.request_id not in self._replies:
                self.open(it.request_id, it.params)
        results = super().process(items)
        return [self._doom(it.request_id, res, it.final) for it, res in zip(items, results)]

    def collect(self) -> list:
        """The rest of a lump of text comes out here, not through process(): when
        a loaded machine hands the whole reply over in one item, the failure
        must still come after the first chunk."""
        return [(rid, self._doom(rid, res, False)) for rid, res in super().collect()]

    def _doom(self, rid: int, res, final: bool):
        if rid not in self.doomed or not isinstance(res, list):
            return res
        before = self.emitted.get(rid, 0)
        if before >= 1 and (res or final or self.pending(rid)):
            reply = self._replies.get(rid)
            if reply is not None:
                reply.queue.clear()
                self._rearm()
            return StageError(ErrorCode.RESOURCE_EXHAUSTED, "test: speak ran out of memory mid-stream")
        self.emitted[rid] = before + len(res)
        return res


class CountedThinker(Countdown):
    def __init__(self, step_ms: float = 20.0, **args) -> None:
        super().__init__(step_ms=step_ms, **args)

    def prefill(self, item: WorkItem) -> None:
        n = 5
        msgs = (item.payload or {}).get("messages") or []
        for m in reversed(msgs):
            c = m.get("content")
            text = c if isinstance(c, str) else " ".join(
                str(p.get("text", "")) for p in (c or []) if isinstance(p, dict))
            hit = re.search(r"words=(\d+)", text or "")
            if hit:
                n = max(1, int(hit.group(1)))
                break
        self.left[item.request_id] = n

    def chunk(self) -> str:
        return "word "
