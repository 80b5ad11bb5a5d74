"""The contract between the runtime and model code.

The runtime knows no model. A stage names an executor class by import path in
the pipeline YAML; the stage process constructs it with the YAML ``args`` and
calls ``load()`` once before reporting ready. Which methods it calls depends on
the stage's scheduler kind:

* ``batch``  -> :class:`BatchExecutor` (whole inputs, one call per batch)
* ``ar``     -> :class:`ARExecutor` (prefill / step / release, continuous batching)
* ``chunk``  -> :class:`ChunkExecutor` (streaming in, streaming out)

Payloads are whatever the data plane carries: numpy arrays, torch tensors,
bytes, str, or msgpack-able dicts/lists.  Input arrays may be zero-copy views
of shared memory that are recycled once the call that received them returns
(batch, chunk) or once ``prefill`` returns (ar): an executor that keeps data
longer must copy it.

Per-request failure: raise from a per-request method, or put an exception
instance in the result list of a batch call.  ``MemoryError`` and
``torch.OutOfMemoryError`` become ``resource_exhausted``;
:class:`runtime.errors.StageError` carries its own code.  A batch call that
raises as a whole is retried one request at a time so that only the culprit
fails and its batch-mates are served.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class WorkItem:
    """One request's input to a batch/chunk call.

    ``params`` are the per-request parameters given to ``submit`` (the same
    dict at every stage).  ``final`` is True on the last chunk of a stream
    (chunk scheduler) and always True for batch items.
    """

    request_id: int
    payload: Any
    params: dict = field(default_factory=dict)
    final: bool = True
    first: bool = True


@dataclass
class StepResult:
    """What one AR step produced for one request.

    ``chunk`` is emitted downstream when it is not None; ``finished`` ends the
    request's stream at this stage (after ``chunk``).
    """

    chunk: Any = None
    finished: bool = False


class Executor:
    """Base: construction must be cheap; heavy work belongs in ``load``."""

    def __init__(self, **args: Any) -> None:
        self.args = args

    def load(self) -> None:
        """Load weights / open engines.  Runs in the stage process."""

    def close(self) -> None:
        """Free engine resources at shutdown."""

    def stats(self) -> dict:
        """Numbers for status and metrics (e.g. KV cells in use)."""
        return {}


class BatchExecutor(Executor):
    def execute(self, items: list[WorkItem]) -> list[Any]:
        """Return one output per item (or an exception instance for a failed item).

        An output that is a list/tuple wrapped in :class:`Chunks` is emitted as
        several chunks; anything else is emitted as one.
        """
        raise NotImplementedError


class ARExecutor(Executor):
    """Step-level executor: requests join and leave between steps."""

    def prefill(self, item: WorkItem) -> None:
        """Admit a request (tokenise, fill KV).  Called between steps."""
        raise NotImplementedError

    def step(self, request_ids: list[int]) -> dict[int, StepResult]:
        """Advance every listed request by one step (one token each).

        Requests missing from the result made no progress this step.  A value
        that is an exception instance fails only that request.
        """
        raise NotImplementedError

    def release(self, request_id: int) -> None:
        """Forget the request and free its engine state (KV cells).

        Called exactly once per admitted request: on finish, failure or abort.
        """


class ChunkExecutor(Executor):
    """Streaming executor: the scheduler feeds chunks as they arrive."""

    def open(self, request_id: int, params: dict) -> None:
        """A new stream begins."""

    def process(self, items: list[WorkItem]) -> list[list[Any]]:
        """Feed one chunk per request (same-length chunks batched together).

        Returns, per item, the list of output chunks produced (possibly empty);
        an exception instance in place of a list fails only that request.  On
        an item with ``final`` set the executor flushes everything it holds.
        """
        raise NotImplementedError

    def release(self, request_id: int) -> None:
        """Forget the stream (finished, failed or aborted)."""


class Chunks(list):
    """Marks a batch output that is to be emitted as several chunks."""
