"""Test double for the drain test (tests/server/drain-pipeline.yaml): a thinker
whose reply length the client picks, so one server run can have a turn that
ends inside the drain's grace period and one that outlives it.

The last user message ``"words=N"`` makes the reply N words long, one word per
step of ``step_ms``.
"""

from __future__ import annotations

import re
import time

from runtime.executor import ARExecutor, StepResult, WorkItem


class CountedThinker(ARExecutor):
    def __init__(self, step_ms: float = 20.0, **args) -> None:
        super().__init__(**args)
        self.step_ms = float(step_ms)
        self.left: dict[int, int] = {}

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

    def step(self, request_ids: list[int]) -> dict:
        if self.step_ms:
            time.sleep(self.step_ms / 1000)
        out = {}
        for rid in request_ids:
            self.left[rid] -= 1
            out[rid] = StepResult(chunk="word ", finished=self.left[rid] <= 0)
        return out

    def release(self, request_id: int) -> None:
        self.left.pop(request_id, None)
