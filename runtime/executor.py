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
    (chunk scheduler) and always True for batch items.  ``arrived`` lets a
    chunk executor measure its decision latency from the input's arrival.
    """

    request_id: int
    payload: Any
    params: dict = field(default_factory=dict)
    final: bool = True
    first: bool = True
    arrived: float | None = None   # time.monotonic() when the chunk reached the stage


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


# A request whose ``params`` carry this flag asks only that its prompt be decoded
# into the engine's cache, for a later request that starts the same way (a voice
# session's conversation, decoded while the caller is still speaking); it
# produces no output.  An executor that cannot keep a prompt between requests
# leaves ``prefills_only`` False and the scheduler ends such a request at once.
PREFILL_ONLY = "prefill_only"
# With PREFILL_ONLY: the request's last message is the caller's words so far
# (from a transcript of speech still going on), decoded too, up to its end.
PREFILL_WORDS = "prefill_words"
# Whose conversation a request carries (a voice session's id): an engine that
# keeps a finished request's cache for the next turn records whose it is.
CONVERSATION = "conversation"
# A request whose ``params`` carry this flag (and CONVERSATION) says that the
# conversation is over (the session closed): the engine drops what it keeps of
# it, and the request ends with no output.  Left alone, those cells would stay
# until their sequence is taken for another request, and on llama.cpp every
# step attends over the whole used span of its cache.
FORGET = "forget"


class ARExecutor(Executor):
    """Step-level executor: requests join and leave between steps."""

    prefills_only = False      # honours PREFILL_ONLY (see above)

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

    def forget(self, conversation: str) -> None:
        """Drop what is kept of ``conversation`` past its requests (see FORGET);
        an engine that keeps nothing between requests has nothing to do."""

    @staticmethod
    def not_steppable(request_id: int, state: Any) -> Any:
        """What ``step`` answers for a request it cannot advance: one it never
        prefilled (an error for that request alone) or one already finished."""
        if state is None:
            from runtime.errors import ErrorCode, StageError

            return StageError(ErrorCode.INTERNAL, f"request {request_id} was not prefilled")
        if state.finished:
            return StepResult(None, True)
        return None


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

    # ---- work finished off the stage loop's thread (optional) ------------------------
    # An executor that hands heavy work to its own threads (e.g. speech recognition,
    # so that voice-activity decisions never wait behind it) reports the results
    # here; the scheduler emits them from the loop thread, in order per request.

    def wakeup_fd(self) -> int | None:
        """A file descriptor that becomes readable when :meth:`collect` has results.

        The stage loop polls it beside its sockets, so background results are
        emitted at once instead of at the next poll timeout.
        """
        return None

    def has_results(self) -> bool:
        """Cheap check, called every loop turn: are there results for :meth:`collect`?"""
        return False

    def collect(self) -> list[tuple[int, list[Any]]]:
        """Outputs produced in the background since the last call: ``(request_id, chunks)``.

        ``chunks`` may be an exception instance, which fails only that request.
        """
        return []

    def pending(self, request_id: int) -> bool:
        """True while background work for the request may still produce outputs.

        A stream whose input has ended is finished only once this is False, so
        its last outputs are not cut off.
        """
        return False


class Chunks(list):
    """Marks a batch output that is to be emitted as several chunks."""
