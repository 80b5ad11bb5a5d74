"""Base for thinkers whose engine streams on its own (HTTP servers, SGLang).

The AR scheduler calls ``step()`` in a tight loop and must never block on a
network read.  So each request's stream runs as a task on one private asyncio
loop thread and pushes text deltas into a per-request queue; ``step()`` only
drains queues.  ``release()`` cancels the task, which closes the stream -- the
engine sees the abort (barge-in) at once instead of generating into the void.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, AsyncIterator

from runtime.errors import ErrorCode, StageError
from runtime.executor import ARExecutor, StepResult, WorkItem
from runtime.models.chat import fit_messages
from runtime.models.request import DEFAULT_SYSTEM_PROMPT, ThinkerRequest, read_request
from runtime.models.sampling import Sampling

log = logging.getLogger(__name__)

_DELTA, _DONE, _ERROR = 0, 1, 2


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

    # ------------------------------------------------------------ subclass API
    async def _start(self) -> None:
        """Runs on the loop thread during load (create clients bound to the loop)."""

    async def _stop(self) -> None:
        """Runs on the loop thread during close."""

    async def _generate(self, request_id: int, req: ThinkerRequest) -> AsyncIterator[str]:
        """Yield text deltas; raise StageError with the right code on failure."""
        raise NotImplementedError
        yield ""  # pragma: no cover

    async def _abort(self, request_id: int) -> None:
        """Tell the engine to stop this request (called when its task is cancelled)."""

    # ------------------------------------------------------------- lifecycle
    def load(self) -> None:
        self._loop = asyncio.new_event_loop()
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
        req = read_request(item, self.system_prompt, self.defaults)
        fitted = fit_messages(req.messages, lambda ms: sum(len(m["content"]) for m in ms),
                              self.max_prompt_chars)
        self._last_truncated = fitted.truncated
        if fitted.truncated:
            self._truncated_total += 1
            log.warning("request %s: prompt truncated to %d characters (truncated=True)",
                        item.request_id, self.max_prompt_chars)
        req.messages = fitted.messages
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

    async def _pump(self, rid: int, req: ThinkerRequest, q: queue.SimpleQueue) -> None:
        try:
            async for delta in self._generate(rid, req):
                if delta:
                    q.put((_DELTA, delta))
            q.put((_DONE, None))
        except asyncio.CancelledError:
            try:
                await self._abort(rid)
            except Exception as e:  # the request is gone either way
                log.warning("abort of request %s: %s", rid, e)
            raise
        except StageError as e:
            q.put((_ERROR, e))
        except Exception as e:  # anything unexpected still fails only this request
            q.put((_ERROR, StageError(ErrorCode.INTERNAL, f"{type(e).__name__}: {e}")))

    def step(self, request_ids: list[int]) -> dict[int, StepResult]:
        results: dict[int, Any] = {}
        for rid in request_ids:
            s = self._streams.get(rid)
            if s is None:
                results[rid] = StageError(ErrorCode.INTERNAL, f"request {rid} was not prefilled")
                continue
            if s.finished:
                results[rid] = StepResult(None, True)
                continue
            parts: list[str] = []
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
                results[rid] = StepResult("".join(parts) or None, s.finished)
        self._last_batch = sum(1 for r in results.values() if isinstance(r, StepResult))
        if self._last_batch:
            self._hist[self._last_batch] = self._hist.get(self._last_batch, 0) + 1
        return results

    def release(self, request_id: int) -> None:
        s = self._streams.pop(request_id, None)
        if s is not None and not s.future.done():
            s.future.cancel()  # cancels the task on the loop; the stream closes on the way out

    def stats(self) -> dict:
        return {
            "active": len(self._streams),
            "last_batch_size": self._last_batch,
            "batch_sizes_hist": dict(self._hist),
            "truncated": self._last_truncated,
            "truncated_total": self._truncated_total,
        }
