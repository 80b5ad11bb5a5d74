"""Stand-ins for models (never for the runtime): tiny executors with known
behaviour, for the runtime's tests (Echo, Tag, Counter, Doubler, Crash) and
its benchmark (Identity, Stamper).  Referenced from pipeline configs as
``voice_server.testing.stages:NAME``."""

from __future__ import annotations

import os
import time

import numpy as np

from runtime.errors import ErrorCode, StageError
from runtime.executor import ARExecutor, BatchExecutor, ChunkExecutor, Chunks, StepResult, WorkItem


class Echo(BatchExecutor):
    """Identity; params may ask it to raise, sleep, or split its output."""

    def __init__(self, sleep_ms: float = 0.0, copy: bool = False, **args) -> None:
        super().__init__(**args)
        self.sleep_ms = sleep_ms
        self.copy = copy

    def execute(self, items: list[WorkItem]) -> list:
        if self.sleep_ms:
            time.sleep(self.sleep_ms / 1000)
        out = []
        for it in items:
            p = it.params
            if p.get("raise") == "memory":
                out.append(MemoryError("test: out of memory"))
                continue
            if p.get("raise") == "bad":
                raise StageError(ErrorCode.BAD_INPUT, "test: bad input")
            if p.get("hang_s"):
                time.sleep(p["hang_s"])
            x = it.payload
            if self.copy and isinstance(x, np.ndarray):
                x = x.copy()
            if p.get("split"):
                out.append(Chunks([x] * int(p["split"])))
            else:
                out.append(x)
        return out


class Tag(BatchExecutor):
    """Appends its name to a list payload, to see which path a request took."""

    def __init__(self, tag: str, **args) -> None:
        super().__init__(**args)
        self.tag = tag

    def execute(self, items: list[WorkItem]) -> list:
        out = []
        for it in items:
            x = it.payload
            if isinstance(x, dict):  # fan-in: merge both branches
                merged = []
                for k in sorted(x):
                    merged.extend(x[k])
                x = merged
            out.append(list(x) + [self.tag])
        return out


class Counter(ARExecutor):
    """Counts from payload['start'] for payload['n'] steps, one number per step."""

    def __init__(self, step_ms: float = 0.0, **args) -> None:
        super().__init__(**args)
        self.step_ms = step_ms
        self.state: dict[int, list[int]] = {}
        self.released: list[int] = []
        self.batch_sizes: list[int] = []

    def prefill(self, item: WorkItem) -> None:
        p = item.payload or {}
        if p.get("fail_prefill"):
            raise MemoryError("test: prefill OOM")
        self.state[item.request_id] = [int(p.get("start", 0)), int(p.get("n", 5)), int(p.get("fail_at", -1))]

    def step(self, request_ids: list[int]) -> dict:
        if self.step_ms:
            time.sleep(self.step_ms / 1000)
        self.batch_sizes.append(len(request_ids))
        out = {}
        for rid in request_ids:
            st = self.state[rid]
            if st[2] == st[0]:
                out[rid] = MemoryError("test: OOM mid-generation")
                continue
            val = st[0]
            st[0] += 1
            st[1] -= 1
            out[rid] = StepResult(chunk=val, finished=st[1] <= 0)
        return out

    def release(self, request_id: int) -> None:
        self.state.pop(request_id, None)
        self.released.append(request_id)

    def stats(self) -> dict:
        return {"active": len(self.state), "max_batch_seen": max(self.batch_sizes or [0]),
                "released": len(self.released), "pid": os.getpid()}


class Doubler(ChunkExecutor):
    """Streams: every number/array in, doubled out; strings upper-cased."""

    def __init__(self, **args) -> None:
        super().__init__(**args)
        self.open_ids: set[int] = set()

    def open(self, request_id: int, params: dict) -> None:
        self.open_ids.add(request_id)

    def process(self, items: list[WorkItem]) -> list:
        out = []
        for it in items:
            x = it.payload
            if x is None or (hasattr(x, "__len__") and len(x) == 0):
                out.append([])
            elif isinstance(x, str):
                out.append([x.upper()])
            elif isinstance(x, dict):
                out.append([x])
            elif isinstance(x, np.ndarray):
                out.append([x * 2])
            else:
                out.append([x * 2])
        return out

    def release(self, request_id: int) -> None:
        self.open_ids.discard(request_id)


class Crash(BatchExecutor):
    """Fails to load, for start-up error tests."""

    def load(self) -> None:
        raise RuntimeError("test: this stage cannot load")


class Identity(BatchExecutor):
    def execute(self, items: list[WorkItem]) -> list:
        return [it.payload for it in items]


class Countdown(ARExecutor):
    """An AR stand-in whose every request runs a set number of steps (set by
    ``prefill`` in a subclass), one chunk (``chunk()``) per step, each step
    sleeping ``step_ms``."""

    def __init__(self, step_ms: float = 0.0, **args) -> None:
        super().__init__(**args)
        self.step_ms = float(step_ms)
        self.left: dict[int, int] = {}

    def chunk(self):
        raise NotImplementedError

    def step(self, request_ids: list[int]) -> dict:
        if self.step_ms:
            time.sleep(self.step_ms / 1000)
        out = {}
        for rid in request_ids:
            self.left[rid] -= 1
            out[rid] = StepResult(chunk=self.chunk(), finished=self.left[rid] <= 0)
        return out

    def release(self, request_id: int) -> None:
        self.left.pop(request_id, None)


class Stamper(Countdown):
    """Emits payload['n'] chunks, each carrying the monotonic time it was produced."""

    def prefill(self, item: WorkItem) -> None:
        self.left[item.request_id] = int((item.payload or {}).get("n", 10))

    def chunk(self) -> float:
        return time.monotonic()
