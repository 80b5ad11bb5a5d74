"""Base for thinkers whose engine streams on its own (HTTP servers, SGLang).

The AR scheduler calls ``step()`` in a tight loop and must never block on a
network read.  So each request's stream runs as a task on one private asyncio
loop thread and pushes text deltas into a per-request queue; ``step()`` only
drains queues.  A stream yields text deltas and, when the engine calls tools,
tool-call events (``voice_contract``); a step's chunk is what arrived since
the last step.  ``release()`` first tells the engine to stop (``_abort``, on
the loop thread, while the engine still knows the request) and only then
cancels the task, which closes the stream.  The order matters: some engines
forget a request when its stream is cancelled, after which an abort is
ignored and generation runs on to ``max_tokens`` after a barge-in.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping

from runtime.errors import ErrorCode, StageError
from runtime.executor import CONVERSATION, ARExecutor, StepResult, WorkItem
from runtime.models.think.chat import fit_messages, message_chars
from runtime.models.think.cut_memory import CutMemory
from runtime.models.think.markup_guard import GuardedReplies
from runtime.models.think.thinker_request import DEFAULT_SYSTEM_PROMPT, ThinkerRequest, read_request
from runtime.models.think.sampling import Range, Sampling, require_within
from runtime.models.voice_contract import ThinkEvent, think_chunk

log = logging.getLogger(__name__)

_DELTA, _DONE, _ERROR = 0, 1, 2
ABORT_TIMEOUT_S = 2.0  # an engine that does not take the abort in this time is cancelled anyway


def code_for_status(status: int) -> ErrorCode:
    """An engine's HTTP-style status -> the closed error set (retryable overload vs caller's fault)."""
    if status in (429, 503):
        return ErrorCode.RESOURCE_EXHAUSTED
    if status in (408, 504):
        return ErrorCode.TIMEOUT
    if status == 502:
        return ErrorCode.STAGE_UNAVAILABLE
    if 400 <= status < 500:
        return ErrorCode.BAD_INPUT
    return ErrorCode.INTERNAL


@dataclass
class _Stream:
    q: "queue.SimpleQueue[tuple[int, Any]]"
    future: Future
    finished: bool = False


class AsyncStreamThinker(ARExecutor):
    """Subclasses implement ``_generate`` (and optionally ``_start``/``_abort``/``_stop``).

    Common args: system_prompt, max_prompt_chars (prompt budget when the
    backend's tokenizer is not at hand; default 6000), and the sampling defaults.
    """

    idle_wait_s = 0.005  # nothing arrived: the scheduler may wait this long before stepping again
    engine_name = "engine"
    sampling_limits: Mapping[str, Range] = {}  # narrower ranges the engine enforces itself
    supports_tools = False  # a backend that passes tools through says so

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.defaults = Sampling.from_args(args)
        self.system_prompt = args.get("system_prompt", DEFAULT_SYSTEM_PROMPT)
        self.max_prompt_chars = int(args.get("max_prompt_chars", 6000))
        self._streams: dict[int, _Stream] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._truncated_total = 0
        self._last_truncated = False
        self._last_batch = 0
        self._hist: dict[int, int] = {}
        self._ending: set[Future] = set()
        self._last_usage: dict[str, int] = {}
        self._guards = GuardedReplies()   # keeps markup from speech, reply by reply (markup_guard)
        self._cuts = CutMemory()          # where each conversation was last cut

    # ------------------------------------------------------------ subclass API
    async def _start(self) -> None:
        """Runs on the loop thread during load (create clients bound to the loop)."""

    async def _stop(self) -> None:
        """Runs on the loop thread during close."""

    async def _generate(self, request_id: int, req: ThinkerRequest) -> AsyncIterator[ThinkEvent]:
        """Yield text deltas and tool-call events; raise StageError with the right code on failure."""
        raise NotImplementedError
        yield ""  # pragma: no cover

    async def _abort(self, request_id: int) -> None:
        """Tell the engine to stop this request; runs on the loop before its task is cancelled."""

    def _note_usage(self, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Token counts the engine reported for the request that just ended (for stats)."""
        self._last_usage = {k: int(v) for k, v in (("prompt_tokens", prompt_tokens),
                                                     ("completion_tokens", completion_tokens))
                            if v is not None}

    # ------------------------------------------------------------- lifecycle
    def _new_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the streams run on (an engine may bring its own)."""
        return asyncio.new_event_loop()

    def load(self) -> None:
        self._loop = self._new_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name=f"{type(self).__name__}-loop", daemon=True)
        self._thread.start()
        self._call(self._start())

    def _call(self, coro: Any, timeout: float | None = None) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        if self._loop is None:
            return
        for rid in list(self._streams):
            self.release(rid)
        for fut in list(self._ending):  # let every abort reach the engine before it stops
            try:
                fut.result(ABORT_TIMEOUT_S + 1)
            except Exception as e:  # noqa: BLE001 - closing must not raise at shutdown
                log.warning("%s close: ending a request: %r", type(self).__name__, e)
        try:
            self._call(self._stop(), timeout=5)
        except Exception as e:  # closing must not raise at shutdown
            log.warning("%s close: %s", type(self).__name__, e)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._loop = None

    # ------------------------------------------------------------- requests
    def _fit(self, item: WorkItem) -> ThinkerRequest:
        req = read_request(item, self.system_prompt, self.defaults, self.supports_tools,
                           f"the {self.engine_name} thinker")
        # cut at anchors, and never before the conversation's last cut: places
        # that never move back (the engine's prefix cache)
        fitted = self._cuts.fit(item.params.get(CONVERSATION) if item.params else None,
                                req.messages, lambda m: fit_messages(
                                    m, message_chars, self.max_prompt_chars, anchored=True))
        self._last_truncated = fitted.truncated
        if fitted.truncated:
            self._truncated_total += 1
            log.warning("request %s: prompt truncated to %d characters (truncated=True)",
                        item.request_id, self.max_prompt_chars)
        req.messages = fitted.messages
        require_within(req.sampling, self.engine_name, self.sampling_limits)
        return req

    def prefill(self, item: WorkItem) -> None:
        if self._loop is None:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, f"{type(self).__name__}.load() was not called")
        if item.request_id in self._streams:
            raise StageError(ErrorCode.BAD_INPUT, f"request {item.request_id} already admitted")
        req = self._fit(item)
        q: queue.SimpleQueue = queue.SimpleQueue()
        fut = asyncio.run_coroutine_threadsafe(self._pump(item.request_id, req, q), self._loop)
        self._streams[item.request_id] = _Stream(q, fut)
        self._guards.open(item.request_id, req.tools.callable_tools())

    async def _pump(self, rid: int, req: ThinkerRequest, q: queue.SimpleQueue) -> None:
        try:
            async for delta in self._generate(rid, req):
                if delta:
                    q.put((_DELTA, delta))
            q.put((_DONE, None))
        except StageError as e:
            q.put((_ERROR, e))
        except Exception as e:  # anything unexpected still fails only this request
            q.put((_ERROR, StageError(ErrorCode.INTERNAL, f"{type(e).__name__}: {e}")))

    def step(self, request_ids: list[int]) -> dict[int, StepResult]:
        results: dict[int, Any] = {}
        for rid in request_ids:
            s = self._streams.get(rid)
            early = self.not_steppable(rid, s)
            if early is not None:
                results[rid] = early
                continue
            parts: list[ThinkEvent] = []
            error = None
            while True:
                try:
                    kind, value = s.q.get_nowait()
                except queue.Empty:
                    break
                if kind == _DELTA:
                    parts.append(value)
                elif kind == _DONE:
                    s.finished = True
                    break
                else:
                    error, s.finished = value, True
                    break
            if error is not None:
                results[rid] = error
            elif parts or s.finished:
                results[rid] = StepResult(think_chunk(parts), s.finished)
        self._last_batch = sum(1 for r in results.values() if isinstance(r, StepResult))
        if self._last_batch:
            self._hist[self._last_batch] = self._hist.get(self._last_batch, 0) + 1
        return self._guards.filter(results)

    def forget(self, conversation: str) -> None:
        self._cuts.forget(conversation)

    def release(self, request_id: int) -> None:
        self._guards.close(request_id)
        s = self._streams.pop(request_id, None)
        if s is None or s.future.done() or self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._end(request_id, s.future), self._loop)
        self._ending.add(fut)
        fut.add_done_callback(self._ending.discard)

    async def _end(self, request_id: int, stream: Future) -> None:
        """Abort in the engine first, then cancel the stream's task (see the module doc)."""
        try:
            await asyncio.wait_for(self._abort(request_id), ABORT_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - cancelling below ends it on our side regardless
            log.warning("abort of request %s: %r", request_id, e)
        finally:
            stream.cancel()  # cancels the task on the loop; the stream closes on the way out

    def stats(self) -> dict:
        return {
            "active": len(self._streams),
            "last_batch_size": self._last_batch,
            "batch_sizes_hist": dict(self._hist),
            "truncated": self._last_truncated,
            "truncated_total": self._truncated_total,
            "last_usage": dict(self._last_usage),
            **self._guards.stats(),
        }
