"""Thinker on an in-process SGLang engine (GPU).

On a GPU the continuous batching belongs to SGLang's own scheduler, which is
far better at it than a Python step loop; this executor only feeds it and
relays its stream.  So ``step()`` here drains per-request queues filled by
``Engine.async_generate(stream=True)`` on a private event loop, and
``release()`` aborts the request inside SGLang so its KV pages are freed at
once on barge-in.

Supported release: SGLang 0.5.21 (``SUPPORTED_RELEASES``; the ``gpu`` extra
pins it because it is the newest release built for the project's torch
2.13.0).  What this module relies on, checked against 0.5.19, 0.5.21 and
0.5.23: ``Engine(model_path=..., **server_args)``, the coroutine
``Engine.async_generate(input_ids=..., sampling_params=..., stream=True,
rid=...)`` returning an async iterator of ``{"text", "meta_info"}`` dicts, and
on ``engine.tokenizer_manager``: ``abort_request(rid)`` (the ``Engine`` has
none), ``rid_to_state``, ``tokenizer`` and ``incremental_streaming_output``.

Barge-in: the abort is sent while SGLang still holds the request.  Releases
before 0.5.21 forget a request whose stream is cancelled and then ignore
aborts for it, so cancelling first would leave the GPU generating to
``max_new_tokens``; from 0.5.21 a second abort of a request is dropped, so
abort-then-cancel dispatches exactly one on every release.

With ``include_usage`` the reply's last chunk carries a usage event: the
prompt, cached and completion token counts of the finished request's
``meta_info``.

``seed`` is passed as SGLang's ``sampling_seed``; it makes a request repeatable
only when the engine runs with ``enable_deterministic_inference=True`` (batch
composition changes the numerics otherwise).

Process side effects: building an ``Engine`` switches ``multiprocessing`` to
``spawn``, installs a SIGQUIT handler that kills the whole process tree when a
child fails, and ``Engine.shutdown()`` SIGKILLs every child of the calling
process.  So the thinker insists on having its stage process to itself (no
other child processes at load), shuts down only its own engine's processes if
others appeared since, and puts the start method and SIGQUIT handler back
after close.  ``sglang`` is imported only in ``load()`` so the module imports
anywhere.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.metadata
import inspect
import itertools
import logging
import multiprocessing
import os
import signal
import threading
from typing import Any, AsyncIterator

from runtime.errors import ErrorCode, StageError
from runtime.models.think.async_stream_thinker import AsyncStreamThinker, code_for_status
from runtime.models.think.chat import render_template
from runtime.models.think.thinker_request import ThinkerRequest
from runtime.models.think.sampling import Range
from runtime.models.voice_contract import LENGTH, STOP, ThinkEvent, Usage, usage_event

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'voice-agent[gpu]'"
SUPPORTED_RELEASES = ("0.5.21",)
SHUTDOWN_WAIT_S = 15.0

_ENGINE_ARG_NAMES = ("tp_size", "mem_fraction_static", "context_length", "dtype",
                     "max_running_requests", "attention_backend", "random_seed",
                     "incremental_streaming_output", "enable_deterministic_inference")


def _one_line(e: BaseException, limit: int = 300) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def error_for(e: BaseException) -> StageError:
    """An exception out of SGLang's request path -> the closed error set.

    SGLang validates input with ``ValueError`` (prompt longer than the
    context, input plus ``max_new_tokens`` over it, sampling values out of
    range): the caller's fault, so ``bad_input``.
    """
    if isinstance(e, StageError):
        return e
    status = getattr(e, "status_code", None)  # fastapi.HTTPException from SGLang's request path
    if isinstance(status, int):
        return StageError(code_for_status(status), f"sglang: {_one_line(e)}")
    if isinstance(e, ValueError):
        return StageError(ErrorCode.BAD_INPUT, f"sglang refused the request: {e}")
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return StageError(ErrorCode.TIMEOUT, f"sglang: {_one_line(e)}")
    if isinstance(e, MemoryError) or "out of memory" in str(e).lower():
        return StageError(ErrorCode.RESOURCE_EXHAUSTED, f"sglang: {_one_line(e)}")
    return StageError(ErrorCode.INTERNAL, f"sglang: {_one_line(e)}")


def abort_error(reason: dict) -> StageError:
    """A stream that ended with ``finish_reason.type == "abort"``.

    SGLang attaches an HTTP status when the abort is an error (400: the
    request was invalid; 503: overloaded or out of KV memory; 500: internal);
    an abort without one was asked for (``abort_request``), hence ``cancelled``.
    """
    status = reason.get("status_code")
    code = code_for_status(int(status)) if isinstance(status, int) else ErrorCode.CANCELLED
    return StageError(code, f"sglang aborted the request: {reason.get('message') or 'no reason given'}")


def usage_of(meta: dict) -> Usage:
    """The usage event from a finished request's ``meta_info`` (SGLang counts
    ``prompt_tokens``, ``completion_tokens`` and, of the prompt, the
    ``cached_tokens`` its radix cache held); a count it left out is 0.  Its
    ``finish_reason`` ``{"type": "length", ...}`` (max_new_tokens reached) is
    the contract's ``length``; any other end is ``stop``."""
    def count(key: str) -> int:
        v = meta.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0
    reason = meta.get("finish_reason")
    kind = reason.get("type") if isinstance(reason, dict) else reason
    return usage_event(count("prompt_tokens"), count("cached_tokens"), count("completion_tokens"),
                       LENGTH if kind == LENGTH else STOP)


def _construction_error(e: BaseException, path: str) -> StageError:
    where = f"SGLang engine for {path!r} did not start: {_one_line(e)}"
    if isinstance(e, TypeError):
        return StageError(ErrorCode.BAD_INPUT, where + " (check engine_args: they are sglang ServerArgs fields)")
    if isinstance(e, (ValueError, FileNotFoundError)):
        return StageError(ErrorCode.BAD_INPUT, where)
    if isinstance(e, MemoryError) or "memory" in str(e).lower():
        return StageError(ErrorCode.RESOURCE_EXHAUSTED, where + " (lower mem_fraction_static or context_length)")
    return StageError(ErrorCode.STAGE_UNAVAILABLE, where)


def require_sole_parent() -> None:
    """Refuse to start an engine in a process that already has child processes.

    ``Engine.shutdown()`` (and SGLang's SIGQUIT handler) SIGKILL every child
    of the process, which here would include another stage's workers.
    """
    import psutil

    others = sorted(c.pid for c in psutil.Process().children(recursive=True))
    if others:
        raise StageError(ErrorCode.UNSUPPORTED,
                         "SGLangThinker needs its stage process to itself (SGLang kills every child "
                         f"process of the process it runs in), but this one has children {others}: "
                         "give the thinker its own placement group")


class SGLangThinker(AsyncStreamThinker):
    """Args: model_path (HF dir or hub id), engine_args (dict passed to
    ``sglang.Engine``; common keys tp_size, mem_fraction_static,
    context_length, incremental_streaming_output,
    enable_deterministic_inference may also be given at top level), plus the
    common thinker args (system_prompt, max_tokens, temperature, top_p,
    repeat_penalty, seed, max_prompt_chars).
    """

    engine_name = "SGLang"
    # SamplingParams.verify refuses these with ValueError; checked before the request is sent.
    sampling_limits = {"top_p": Range(0.0, 1.0, lo_open=True),
                       "repeat_penalty": Range(0.0, 2.0, lo_open=True)}

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.engine: Any = None
        self.tokenizer: Any = None
        self.incremental = False
        self._rids: dict[int, str] = {}
        self._counter = itertools.count()
        self._owned = False
        self._engine_pids: set[int] = set()
        self._saved_process_state: tuple[Any, Any] | None = None

    # ------------------------------------------------------------- lifecycle
    def load(self) -> None:
        self.use_engine(self._construct(), owned=True)

    def use_engine(self, engine: Any, owned: bool = False) -> None:
        """Serve from ``engine`` (an ``sglang.Engine`` or one with its request
        boundary).  ``load`` builds one; a caller that hands one in keeps
        ownership (``owned=False``) and shuts it down itself.
        """
        tm = engine.tokenizer_manager
        tokenizer = getattr(tm, "tokenizer", None)
        if tokenizer is None:
            raise StageError(ErrorCode.UNSUPPORTED,
                             "SGLang engine has no tokenizer (skip_tokenizer_init): it streams no text")
        self.engine, self.tokenizer, self._owned = engine, tokenizer, owned
        # Cumulative text per chunk is SGLang's default; incremental output sends only the new text.
        self.incremental = bool(getattr(tm, "incremental_streaming_output", False))
        super().load()

    def _new_loop(self) -> asyncio.AbstractEventLoop:
        # The Engine made a loop for its own sync calls and nothing runs it: host the streams
        # there, so every SGLang object meets one loop only.
        loop = getattr(self.engine, "loop", None)
        if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running() and not loop.is_closed():
            return loop
        return super()._new_loop()

    def _construct(self) -> Any:
        try:
            import sglang
        except ImportError as e:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             f"sglang is not installed ({e}); fix: {INSTALL_HINT}") from None
        path = self.args.get("model_path")
        if not path:
            raise StageError(ErrorCode.BAD_INPUT, "SGLangThinker needs args.model_path")
        try:
            version = importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:  # importable but not installed as a package
            version = getattr(sglang, "__version__", "unknown")
        if version not in SUPPORTED_RELEASES:
            log.warning("sglang %s is not a supported release %s; fix: %s",
                        version, SUPPORTED_RELEASES, INSTALL_HINT)
        engine_args = dict(self.args.get("engine_args") or {})
        for name in _ENGINE_ARG_NAMES:
            if name in self.args:
                engine_args.setdefault(name, self.args[name])
        engine_args.setdefault("log_level", "error")

        import psutil  # an sglang dependency

        require_sole_parent()
        me = psutil.Process()
        # Only what the engine starts is its own: a child that was here before it (where
        # the sole-parent rule is waived) is never killed with it.
        before = {c.pid for c in me.children(recursive=True)}
        self._saved_process_state = (multiprocessing.get_start_method(allow_none=True),
                                     signal.getsignal(signal.SIGQUIT))
        log.warning("starting SGLang %s engine for %s; if this process is killed now, SGLang did it "
                    "after one of its children failed (its error is above)", version, path)
        try:
            engine = sglang.Engine(model_path=path, **engine_args)
        except Exception as e:  # noqa: BLE001 - every way of failing to start becomes one clear line
            self._kill({c.pid for c in me.children(recursive=True)} - before)
            self._restore_process_state()
            raise _construction_error(e, str(path)) from None
        self._engine_pids = {c.pid for c in me.children(recursive=True)} - before
        return engine

    def close(self) -> None:
        super().close()  # aborts what is still running while the engine is up
        engine, self.engine = self.engine, None
        if engine is None or not self._owned:
            return
        atexit.unregister(engine.shutdown)
        foreign = self._foreign_children()
        if foreign:
            log.warning("SGLang close: not calling Engine.shutdown(), which would also kill processes %s "
                        "started since load; stopping only the engine's own", sorted(foreign))
            watchdog = getattr(engine.tokenizer_manager, "_subprocess_watchdog", None)
            if watchdog is not None:  # it would SIGQUIT this process when the engine's children die
                watchdog.stop()
            self._kill(self._engine_pids)
        else:
            try:
                engine.shutdown()  # waits until the scheduler released the GPU; may raise after 60 s
            except Exception as e:  # noqa: BLE001 - closing must not raise at shutdown
                log.warning("SGLang Engine.shutdown(): %s", _one_line(e))
                self._kill(self._engine_pids)
        self._engine_pids = set()
        self._restore_process_state()

    def _foreign_children(self) -> set[int]:
        import psutil

        mine: set[int] = set()
        for pid in self._engine_pids:
            try:
                mine |= {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                pass
        return {c.pid for c in psutil.Process().children(recursive=True)} - mine

    @staticmethod
    def _kill(pids: set[int]) -> None:
        import psutil

        procs = []
        for pid in pids:
            try:
                p = psutil.Process(pid)
                procs.extend(p.children(recursive=True))
                procs.append(p)
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=SHUTDOWN_WAIT_S)
        if alive:
            log.warning("SGLang processes still alive after SIGKILL: %s", [p.pid for p in alive])

    def _restore_process_state(self) -> None:
        saved, self._saved_process_state = self._saved_process_state, None
        if saved is None:
            return
        method, handler = saved
        if multiprocessing.get_start_method(allow_none=True) != method:
            multiprocessing.set_start_method(method, force=True)
        if threading.current_thread() is threading.main_thread() and handler is not None:
            signal.signal(signal.SIGQUIT, handler)

    # ------------------------------------------------------------- requests
    def _prompt(self, req: ThinkerRequest) -> dict:
        """Token ids from the model's chat template, as SGLang's own chat path does.

        Rendering to text and letting SGLang tokenise it again would add the
        special tokens twice (two BOS) for templates that write their own BOS.
        """
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(req.messages, tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
                ids = ids["input_ids"]
            ids = list(ids)
            if ids and isinstance(ids[0], list):
                ids = ids[0]
            return {"input_ids": [int(i) for i in ids]}
        # No template in the model: a plain ChatML text, tokenised once by SGLang.
        return {"prompt": render_template(None, req.messages)}

    async def _generate(self, request_id: int, req: ThinkerRequest) -> AsyncIterator[ThinkEvent]:
        s = req.sampling
        params: dict[str, Any] = {"max_new_tokens": s.max_tokens, "temperature": s.temperature,
                                  "top_p": s.top_p, "repetition_penalty": s.repeat_penalty}
        if s.seed is not None:
            params["sampling_seed"] = s.seed
        # SGLang rids must be unique for the engine's lifetime; ours are per coordinator.
        rid = f"thinker-{os.getpid()}-{request_id}-{next(self._counter)}"
        self._rids[request_id] = rid
        try:
            gen = self.engine.async_generate(**self._prompt(req), sampling_params=params,
                                             stream=True, rid=rid)
            if inspect.isawaitable(gen):
                gen = await gen
            sent = ""
            async for out in gen:
                text = out.get("text") or ""
                if self.incremental:
                    delta = text
                else:
                    if not text.startswith(sent):
                        log.warning("request %s: sglang rewrote text already streamed", request_id)
                    delta, sent = text[len(sent):], text
                if delta:
                    yield delta
                meta = out.get("meta_info") or {}
                reason = meta.get("finish_reason")
                if reason is not None:
                    self._note_usage(meta.get("prompt_tokens"), meta.get("completion_tokens"))
                if isinstance(reason, dict) and reason.get("type") == "abort":
                    raise abort_error(reason)
                if reason is not None and req.include_usage:
                    yield usage_of(meta)
        except Exception as e:  # noqa: BLE001 - mapped to the closed error set
            raise error_for(e) from None
        finally:
            self._rids.pop(request_id, None)

    def engine_rid(self, request_id: int) -> str | None:
        """SGLang's rid for a request still streaming (to find it in ``rid_to_state``)."""
        return self._rids.get(request_id)

    async def _abort(self, request_id: int) -> None:
        rid = self._rids.get(request_id)
        if rid is not None and self.engine is not None:
            res = self.engine.tokenizer_manager.abort_request(rid)
            if inspect.isawaitable(res):
                await res

    def stats(self) -> dict:
        st = super().stats()
        st["incremental_streaming"] = self.incremental
        return st
