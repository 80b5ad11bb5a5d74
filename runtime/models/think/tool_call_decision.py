"""tool_choice auto on llama.cpp: whether a reply calls a tool, read from the model.

With ``auto`` the model chooses at its first token: when the probability of
the tokens that start a call in its dialect reaches ``tool_call_threshold``
the reply becomes a grammar-constrained call, otherwise plain text.  In a
native dialect the call is only begun (a probe, see ``Probe``): the model then
writes the tool's name unconstrained, and a name no callable tool has sends
the reply back to text.  That probability is the model's own, so how well it
chooses is measurable (``benchmarks/answer_bench.py``).  This is the one
place a reply's mode changes after admission.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.executor import StepResult
from runtime.models.think.llama_emit import ReplyEmitter
from runtime.models.think.llama_sequences import Probe, ReplyMode, Seq, SequencePool
from runtime.models.think.llama_vocab import LlamaVocab
from runtime.models.think.text_stream import Utf8Stream
from runtime.models.think.tool_call_format import CallStream
from runtime.models.think.tool_dialect import ToolDialect
from runtime.models.voice_contract import think_chunk, think_events

PROBE_MAX_TOKENS = 12  # a tool name longer than this (in tokens) ends the probe as text


class ToolCallDecision:
    """Decides the undecided replies of one context (``ctx``).  ``call_threshold``:
    the probability of a call's first token at which the reply calls;
    ``name_threshold`` (native dialects, else None): the probability the name
    the model then writes must reach."""

    def __init__(self, lc: Any, ctx: Any, vocab: LlamaVocab, dialect: ToolDialect,
                 pool: SequencePool, emitter: ReplyEmitter, *,
                 call_threshold: float, name_threshold: float | None) -> None:
        self._lc = lc
        self._ctx = ctx
        self._vocab = vocab
        self._dialect = dialect
        self._pool = pool          # drops a probe's cells when the reply goes back to text
        self._emitter = emitter
        self._call_threshold = call_threshold
        self._name_threshold = name_threshold
        self._start_tokens = sorted({vocab.first_token(t) for t in dialect.start_texts})
        # what the decisions were, for stats()
        self.decisions = 0                       # replies decided
        self.calls = 0                           # of them, replies that became calls
        self.probes_to_text = 0                  # probes whose name was no callable tool's
        self.last_call_p: float | None = None    # the last decision's call probability
        self.last_name_p: float | None = None    # the last probe's name probability

    def _call_probability(self, idx: int) -> float:
        """The probability that the reply's first token starts a call in this dialect."""
        logits = np.ctypeslib.as_array(self._lc.llama_get_logits_ith(self._ctx, idx),
                                       shape=(self._vocab.n_tokens,))
        top = float(logits.max())
        return float(np.exp(logits[self._start_tokens] - top).sum() / np.exp(logits - top).sum())

    def decide(self, seq: Seq, idx: int) -> StepResult | None:
        """tool_choice auto: call when the tokens that start a call are likely enough
        (in a native dialect: begin a probe, see Probe).  Returns the step's
        result, None while probing."""
        p = self._call_probability(idx)
        self.last_call_p = p
        self.decisions += 1
        if p < self._call_threshold:
            return self._emitter.emit(seq, self._to_text(seq, idx))
        if self._name_threshold is None:
            return self._emitter.emit(seq, self._to_call(seq, idx))
        head = self._dialect.call.head
        seq.probe = Probe(start=seq.pos, head=head,
                          text_token=self._lc.llama_sampler_sample(seq.sampler, self._ctx, idx))
        seq.mode = ReplyMode.PROBE
        bos = self._vocab.bos()
        seq.prompt = [t for t in self._vocab.tokenize(head) if t != bos]  # decoded by the next step
        return None

    def read_name(self, seq: Seq, idx: int) -> StepResult | None:
        """A probe's next name token (the model's top choice); at the name's closing
        quote the reply becomes that call, or text if the name is no callable tool."""
        probe = seq.probe
        logits = np.ctypeslib.as_array(self._lc.llama_get_logits_ith(self._ctx, idx),
                                       shape=(self._vocab.n_tokens,))
        tok = int(logits.argmax())
        top = float(logits[tok])
        probe.p /= float(np.exp(logits - top).sum())
        piece = self._vocab.piece(tok).decode("utf-8", "replace")
        if '"' in piece:
            self.last_name_p = probe.p
            if probe.name + piece.split('"')[0] in seq.call_names and probe.p >= self._name_threshold:
                return self._call_after_probe(seq, idx)
            return self._text_after_probe(seq)
        if len(probe.tokens) >= PROBE_MAX_TOKENS or self._vocab.is_eog(tok):
            return self._text_after_probe(seq)
        probe.tokens.append(tok)
        probe.name += piece
        seq.pending = tok
        return None

    def _call_after_probe(self, seq: Seq, idx: int) -> StepResult:
        """Keep the decoded head and name: the grammar is walked through them, and
        the call's events start from their text."""
        lc, probe = self._lc, seq.probe
        call_sampler = seq.call_sampler
        bos = self._vocab.bos()
        for tok in [t for t in self._vocab.tokenize(probe.head) if t != bos] + probe.tokens:
            lc.llama_sampler_accept(call_sampler, tok)
        self._to_call(seq, idx, sample=False)
        seq.generated += len(probe.tokens)
        seq.probe = None
        seen = self._emitter.chunk(seq, probe.head + probe.name)
        result = self._emitter.emit(seq, lc.llama_sampler_sample(call_sampler, self._ctx, idx))
        return StepResult(think_chunk(think_events(seen) + think_events(result.chunk)), result.finished)

    def _text_after_probe(self, seq: Seq) -> StepResult:
        """Drop the probe's cells; the reply is text from its first token, as sampled
        before the probe."""
        probe = seq.probe
        self._pool.rewind(seq, probe.start)
        seq.probe = None
        self.probes_to_text += 1
        return self._emitter.emit(seq, self._to_text(seq, None, token=probe.text_token))

    def call_instead(self, seq: Seq, sampler: Any, max_tokens: int) -> None:
        """A text reply that writes a call as text (see markup_guard) is begun
        again as a call: its cells from the reply's start are dropped, and the
        next step decodes the prompt's last token and the call's head, as a probe
        does (sampled under the grammar, Qwen's first tokens go astray: it wrote
        ``set_timer`` for "Text Anna that I'm running late"), then samples the name
        and arguments under ``sampler`` (a grammar chain), ``max_tokens`` more."""
        last = seq.kv[seq.reply_start - 1]
        self._pool.rewind(seq, seq.reply_start - 1)
        self._lc.llama_sampler_free(seq.sampler)
        head = self._dialect.call.head
        bos = self._vocab.bos()
        head_tokens = [t for t in self._vocab.tokenize(head) if t != bos]
        for tok in head_tokens:
            self._lc.llama_sampler_accept(sampler, tok)
        self.calls += 1
        seq.sampler, seq.mode, seq.calls = sampler, ReplyMode.CALL, CallStream(self._dialect.call)
        seq.calls.feed(head)   # decoded as prompt: the call's events start at its name
        seq.prompt, seq.pending, seq.finished = [last] + head_tokens, None, False
        seq.text = Utf8Stream()
        seq.max_tokens = seq.generated + max_tokens

    def _to_call(self, seq: Seq, idx: int, sample: bool = True) -> int | None:
        """Switch an undecided reply to its call sampler; the first token when ``sample``."""
        self.calls += 1
        unused, seq.sampler = seq.sampler, seq.call_sampler
        seq.mode, seq.calls, seq.call_sampler = ReplyMode.CALL, CallStream(self._dialect.call), None
        self._lc.llama_sampler_free(unused)
        return self._lc.llama_sampler_sample(seq.sampler, self._ctx, idx) if sample else None

    def _to_text(self, seq: Seq, idx: int | None, token: int | None = None) -> int:
        """Switch an undecided reply to text; its first token (``token`` if sampled already)."""
        seq.mode = ReplyMode.TEXT
        seq.max_tokens = min(seq.max_tokens, seq.sampling.max_tokens)
        self._lc.llama_sampler_free(seq.call_sampler)
        seq.call_sampler = None
        return token if token is not None else self._lc.llama_sampler_sample(seq.sampler, self._ctx, idx)
