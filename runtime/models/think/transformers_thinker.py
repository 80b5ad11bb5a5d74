"""Thinker on any Hugging Face causal LM, for models no faster engine runs.

This is the portable fallback (and what tests use with a tiny model built in
code): plain ``transformers`` forward passes with one KV cache per request, so
requests join and leave between steps without touching each other's state.
It is not tuned for throughput; each step loops over the active requests.
"""

from __future__ import annotations

import inspect
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ErrorCode, StageError
from runtime.executor import ARExecutor, StepResult, WorkItem
from runtime.models.think.chat import Message, fit_messages, render_template
from runtime.models.think.markup_guard import GuardedReplies
from runtime.models.think.thinker_request import DEFAULT_SYSTEM_PROMPT, read_request
from runtime.models.think.sampling import LogitSampler, Sampling
from runtime.models.think.text_stream import TokenTextStream
from runtime.models.voice_contract import LENGTH, STOP, think_events, usage_event

log = logging.getLogger(__name__)

_MISSING = "transformers/torch are not installed: pip install transformers torch"


@dataclass
class _Seq:
    cache: Any
    logits: Any                      # next-token logits (1-D tensor) once prefilled
    sampler: LogitSampler
    text: TokenTextStream
    max_tokens: int
    history: list[int] = field(default_factory=list)
    pending: int | None = None       # sampled but not yet fed to the model
    generated: int = 0
    finished: bool = False
    prompt_tokens: int | None = None  # report a usage event at the end (include_usage)


class TransformersThinker(ARExecutor):
    """Args: model_path (local dir or hub id), device ("cpu"), dtype ("float32"),
    n_threads, max_context (prompt + reply tokens per request; default from the
    model config, capped at 4096), local_files_only (False), system_prompt, and the
    sampling defaults max_tokens / temperature / top_p / repeat_penalty / seed.
    """

    idle_wait_s = 0.0

    supports_tools = False  # no tool format or grammar here: requests with tools are refused

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.defaults = Sampling.from_args(args)
        self.system_prompt = args.get("system_prompt", DEFAULT_SYSTEM_PROMPT)
        self._seqs: dict[int, _Seq] = {}
        self._guards = GuardedReplies()   # keeps markup from speech, reply by reply (markup_guard)
        self._truncated_total = 0
        self._last_truncated = False
        self._last_batch = 0
        self._hist: dict[int, int] = {}
        self.model = None
        self.tokenizer = None

    # ------------------------------------------------------------------ load
    def load(self) -> None:
        try:
            import torch
            from tqdm.auto import tqdm
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, f"{_MISSING} ({e})") from None
        path = self.args.get("model_path")
        if not path:
            raise StageError(ErrorCode.BAD_INPUT, "TransformersThinker needs args.model_path")
        if self.args.get("n_threads"):
            torch.set_num_threads(int(self.args["n_threads"]))
        local = bool(self.args.get("local_files_only", False))
        dtype = getattr(torch, str(self.args.get("dtype", "float32")))
        device = str(self.args.get("device", "cpu"))
        t0 = time.perf_counter()
        with tqdm(total=3, desc=f"loading {path}", unit="step", leave=False) as bar:
            bar.set_postfix_str("tokenizer")
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
            bar.update(1)
            bar.set_postfix_str("weights")
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=local)
            bar.update(1)
            bar.set_postfix_str(device)
            self.model = model.to(device).eval()
            bar.update(1)
        self.device = device
        self._torch = torch
        cfg_ctx = getattr(self.model.config, "max_position_embeddings", None) or 2048
        self.max_context = int(self.args.get("max_context", min(int(cfg_ctx), 4096)))
        self._eos = self._eos_ids()
        # transformers 5.x renamed the cache argument; older releases only know the old name.
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_last = "logits_to_keep" in params
        log.info("TransformersThinker loaded %s in %.1fs", path, time.perf_counter() - t0)

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, (list, tuple)):
                ids.update(int(i) for i in src)
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in self.tokenizer.get_vocab() else None
        if end is not None:
            ids.add(int(end))
        return ids

    # ------------------------------------------------------------- requests
    def _render(self, messages: list[Message]) -> str:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return render_template(None, messages)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prefill(self, item: WorkItem) -> None:
        if self.model is None:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, "TransformersThinker.load() was not called")
        req = read_request(item, self.system_prompt, self.defaults, self.supports_tools,
                           "the transformers thinker")
        budget = max(self.max_context - req.sampling.max_tokens, 8)
        fitted = fit_messages(req.messages, lambda m: len(self._encode(self._render(m))), budget)
        ids = self._encode(self._render(fitted.messages))[-budget:]
        self._last_truncated = fitted.truncated
        if fitted.truncated:
            self._truncated_total += 1
            log.warning("request %s: prompt truncated to %d tokens (truncated=True)",
                        item.request_id, len(ids))
        from transformers import DynamicCache

        cache = DynamicCache()
        logits = self._forward(ids, cache)
        self._seqs[item.request_id] = _Seq(
            cache=cache, logits=logits,
            sampler=LogitSampler(req.sampling),
            text=TokenTextStream(lambda t: self.tokenizer.decode(t, skip_special_tokens=True)),
            max_tokens=req.sampling.max_tokens, history=list(ids),
            prompt_tokens=len(ids) if req.include_usage else None)
        self._guards.open(item.request_id)   # no tools here: markup is dropped

    def _forward(self, ids: list[int], cache: Any) -> Any:
        """Feed ``ids`` into ``cache`` (updated in place); next-token logits as a 1-D tensor."""
        torch = self._torch
        kw: dict[str, Any] = {self._cache_kw: cache, "use_cache": True}
        if self._keep_last:
            kw["logits_to_keep"] = 1
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], device=self.device), **kw)
        return out.logits[0, -1].float()

    def step(self, request_ids: list[int]) -> dict[int, StepResult]:
        results: dict[int, StepResult] = {}
        advanced = 0
        for rid in request_ids:
            seq = self._seqs.get(rid)
            early = self.not_steppable(rid, seq)
            if early is not None:
                results[rid] = early
                continue
            try:
                if seq.pending is not None:
                    seq.logits = self._forward([seq.pending], seq.cache)
                    seq.pending = None
                results[rid] = self._sample(seq)
                advanced += 1
            except Exception as e:  # one request's failure must not fail its batch-mates
                results[rid] = e
        self._last_batch = advanced
        if advanced:
            self._hist[advanced] = self._hist.get(advanced, 0) + 1
        return self._guards.filter(results)

    def _sample(self, seq: _Seq) -> StepResult:
        token = seq.sampler.sample(seq.logits.cpu().numpy(), seq.history)
        seq.history.append(token)
        seq.generated += 1
        if token in self._eos:
            seq.finished = True
            return StepResult(self._last(seq, seq.text.flush(), STOP), True)
        chunk = seq.text.push(token)
        if seq.generated >= seq.max_tokens or len(seq.history) >= self.max_context:
            seq.finished = True
            tail = seq.text.flush()
            return StepResult(self._last(seq, (chunk or "") + (tail or "") or None, LENGTH), True)
        seq.pending = token
        return StepResult(chunk, False)

    @staticmethod
    def _last(seq: _Seq, chunk: str | None, finish_reason: str) -> Any:
        """The reply's last chunk, with its usage event (and why it ended) when
        the request asked for it (no prompt cache here: nothing is ever cached)."""
        if seq.prompt_tokens is None:
            return chunk
        return think_events(chunk) + [usage_event(seq.prompt_tokens, 0, seq.generated, finish_reason)]

    def release(self, request_id: int) -> None:
        self._guards.close(request_id)
        self._seqs.pop(request_id, None)

    def close(self) -> None:
        self._seqs.clear()
        self.model = None

    def stats(self) -> dict:
        return {
            "kv_cells_used": sum(len(s.history) - (1 if s.pending is not None else 0)
                                 for s in self._seqs.values()),
            "active": len(self._seqs),
            "last_batch_size": self._last_batch,
            "batch_sizes_hist": dict(self._hist),
            "truncated": self._last_truncated,
            "truncated_total": self._truncated_total,
            **self._guards.stats(),
        }
