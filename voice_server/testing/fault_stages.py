"""Fault-injection doubles for benchmarks/faults.py: the REAL executors of
configs/voice-cpu-fast.yaml, each wrapped with a one-shot trigger.

They behave exactly like the real stages until the harness drops a trigger
file into ``$VA_FAULT_DIR``; the first request that reaches the stage after
that claims the file (``os.unlink`` succeeds for exactly one claimer) and
gets the fault.  The stage then writes ``<trigger>.fired`` with the wall-clock
time, so the harness can measure from the moment the fault happened.

Triggers (file names):

* ``think.oom``        - ``LlamaCppThinker.prefill`` raises ``MemoryError``
* ``speak.torch_oom``  - ``SpeakExecutor.process`` raises ``torch.OutOfMemoryError``
  for that request once it has emitted its first audio chunk (mid-stream);
  the exception is raised for the whole batch call, so the scheduler's
  one-at-a-time retry has to find the culprit
* ``think.stall``      - the thinker never produces another token for that
  request (the other requests of the batch go on); the stage's ``deadline_s``
  must end it with ``timeout``
* ``<stage>.slow_start`` (content: seconds) - ``load()`` sleeps that long first
  (consumed once, so a restart after a kill is not slowed down)
"""

from __future__ import annotations

import os
import time

from runtime.models.listen.executor import ListenExecutor
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from runtime.models.speak.executor import SpeakExecutor


def _dir() -> str | None:
    return os.environ.get("VA_FAULT_DIR")


def claim(name: str) -> str | None:
    """Consume trigger ``name``; return its content when this caller claimed it."""
    d = _dir()
    if not d:
        return None
    path = os.path.join(d, name)
    try:
        with open(path) as f:
            content = f.read()
        os.unlink(path)
    except (FileNotFoundError, OSError):
        return None
    return content


def fired(name: str, request_id: int | None = None) -> None:
    d = _dir()
    if d and not os.path.exists(os.path.join(d, name + ".fired")):  # the first time counts
        with open(os.path.join(d, name + ".fired"), "w") as f:
            f.write(f"{time.time()} {request_id}")


def _slow_start(stage: str) -> None:
    c = claim(f"{stage}.slow_start")
    if c is not None:
        fired(f"{stage}.slow_start")
        time.sleep(float(c or 3))


class FaultListen(ListenExecutor):
    def load(self) -> None:
        _slow_start("listen")
        super().load()


class FaultThinker(LlamaCppThinker):
    def __init__(self, **args) -> None:
        super().__init__(**args)
        self._stalled: set[int] = set()

    def load(self) -> None:
        _slow_start("think")
        super().load()

    def prefill(self, item) -> None:
        if claim("think.oom") is not None:
            fired("think.oom", item.request_id)
            raise MemoryError("fault injection: think ran out of memory in prefill")
        super().prefill(item)
        if claim("think.stall") is not None:
            fired("think.stall", item.request_id)
            self._stalled.add(item.request_id)

    def step(self, request_ids: list[int]) -> dict:
        live = [r for r in request_ids if r not in self._stalled]
        if not live:
            time.sleep(0.02)  # a stuck step: nothing comes out
            return {}
        return super().step(live)

    def release(self, request_id: int) -> None:
        self._stalled.discard(request_id)
        super().release(request_id)


class FaultSpeak(SpeakExecutor):
    def __init__(self, **args) -> None:
        super().__init__(**args)
        self._seen: set[int] = set()
        self._doomed: set[int] = set()
        self._emitted: dict[int, int] = {}

    def load(self) -> None:
        _slow_start("speak")
        super().load()

    def release(self, request_id: int) -> None:
        super().release(request_id)
        self._seen.discard(request_id)
        self._doomed.discard(request_id)
        self._emitted.pop(request_id, None)

    def process(self, items):
        for it in items:
            if it.request_id not in self._seen:
                self._seen.add(it.request_id)
                if claim("speak.torch_oom") is not None:
                    self._doomed.add(it.request_id)
        for it in items:
            if it.request_id in self._doomed and self._emitted.get(it.request_id, 0) >= 1:
                import torch
                fired("speak.torch_oom", it.request_id)
                raise torch.OutOfMemoryError("fault injection: speak ran out of (CUDA) memory")
        results = super().process(items)
        for it, res in zip(items, results):
            if isinstance(res, list):
                self._emitted[it.request_id] = self._emitted.get(it.request_id, 0) + len(res)
        return results
