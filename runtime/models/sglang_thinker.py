"""Thinker on an in-process SGLang engine (GPU).

On a GPU the continuous batching belongs to SGLang's own scheduler, which is
far better at it than a Python step loop; this executor only feeds it and
relays its stream.  So ``step()`` here drains per-request queues filled by
``Engine.async_generate(stream=True)`` on a private event loop, and
``release()`` aborts the request inside SGLang so its KV pages are freed at
once on barge-in.

Written against SGLang's documented Engine API (``sglang.Engine``,
``async_generate(..., stream=True, rid=...)``, ``tokenizer_manager.abort_request``);
not exercised by the test suite, which has no GPU.  ``sglang`` is imported only
in ``load()`` so the module imports anywhere.
"""

from __future__ import annotations

import inspect
import itertools
import os
from typing import Any, AsyncIterator

from runtime.errors import ErrorCode, StageError
from runtime.models.async_stream_thinker import AsyncStreamThinker
from runtime.models.chat import render_template
from runtime.models.request import ThinkerRequest

INSTALL_HINT = "pip install 'voice-agent[gpu]'"

_ENGINE_ARG_NAMES = ("tp_size", "mem_fraction_static", "context_length", "dtype",
                     "max_running_requests", "attention_backend", "random_seed")


class SGLangThinker(AsyncStreamThinker):
    """Args: model_path (HF dir or hub id), engine_args (dict passed to
    ``sglang.Engine``; common keys tp_size, mem_fraction_static,
    context_length may also be given at top level), plus the common thinker
    args (system_prompt, max_tokens, temperature, top_p, repeat_penalty,
    max_prompt_chars).
    """

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.engine = None
        self.tokenizer = None
        self._rids: dict[int, str] = {}
        self._counter = itertools.count()

    def load(self) -> None:
        try:
            import sglang
        except ImportError as e:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             f"sglang is not installed ({e}); fix: {INSTALL_HINT}") from None
        path = self.args.get("model_path")
        if not path:
            raise StageError(ErrorCode.BAD_INPUT, "SGLangThinker needs args.model_path")
        engine_args = dict(self.args.get("engine_args") or {})
        for name in _ENGINE_ARG_NAMES:
            if name in self.args:
                engine_args.setdefault(name, self.args[name])
        engine_args.setdefault("log_level", "error")
        self.engine = sglang.Engine(model_path=path, **engine_args)
        self.tokenizer = getattr(self.engine.tokenizer_manager, "tokenizer", None)
        super().load()

    def close(self) -> None:
        super().close()
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None

    def _prompt(self, req: ThinkerRequest) -> str:
        tok = self.tokenizer
        if tok is not None and getattr(tok, "chat_template", None):
            return tok.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=True)
        return render_template(None, req.messages)

    async def _generate(self, request_id: int, req: ThinkerRequest) -> AsyncIterator[str]:
        s = req.sampling
        params = {"max_new_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
                  "repetition_penalty": s.repeat_penalty}
        if s.seed is not None:
            params["sampling_seed"] = s.seed
        # SGLang rids must be unique for the engine's lifetime; ours are per coordinator.
        rid = f"thinker-{os.getpid()}-{request_id}-{next(self._counter)}"
        self._rids[request_id] = rid
        try:
            gen = self.engine.async_generate(prompt=self._prompt(req), sampling_params=params,
                                             stream=True, rid=rid)
            if inspect.iscoroutine(gen):
                gen = await gen
            sent = ""
            async for out in gen:
                text = out.get("text", "") if isinstance(out, dict) else str(out)
                # Cumulative text is the default; incremental output (stream_output) is also handled.
                if text.startswith(sent):
                    delta, sent = text[len(sent):], text
                else:
                    delta, sent = text, sent + text
                if delta:
                    yield delta
                meta = out.get("meta_info", {}) if isinstance(out, dict) else {}
                reason = meta.get("finish_reason")
                if isinstance(reason, dict) and reason.get("type") == "abort":
                    raise StageError(ErrorCode.RESOURCE_EXHAUSTED,
                                     f"sglang aborted the request: {reason.get('message', '')}")
        except StageError:
            raise
        except (MemoryError, RuntimeError) as e:
            code = ErrorCode.RESOURCE_EXHAUSTED if "out of memory" in str(e).lower() else ErrorCode.INTERNAL
            raise StageError(code, f"sglang: {e}") from None
        finally:
            self._rids.pop(request_id, None)

    async def _abort(self, request_id: int) -> None:
        rid = self._rids.pop(request_id, None)
        if rid is not None and self.engine is not None:
            res = self.engine.tokenizer_manager.abort_request(rid)
            if inspect.isawaitable(res):
                await res
