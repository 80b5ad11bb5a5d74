"""The llama.cpp thinker's output: a sampled token becomes the step's result.

Whatever decided a sequence's next token (its sampler chain, the tool-call
decision), the token ends up here: its bytes join the reply's text, a call's
text becomes tool-call events, and the reply ends at the end-of-generation
token, its token budget, its context or its last allowed call, with its usage
event when the request asked for one.
"""

from __future__ import annotations

from typing import Any

from runtime.executor import StepResult
from runtime.models.think.llama_sequences import Seq
from runtime.models.think.llama_vocab import LlamaVocab
from runtime.models.voice_contract import LENGTH, STOP, think_chunk, think_events, usage_event


class ReplyEmitter:
    """Turns tokens into chunks for sequences of at most ``n_ctx_seq`` cells."""

    def __init__(self, vocab: LlamaVocab, n_ctx_seq: int) -> None:
        self._vocab = vocab
        self._n_ctx_seq = n_ctx_seq
        self.tool_calls = 0   # tool calls completed, all replies together (stats)

    def emit(self, seq: Seq, token: int) -> StepResult:
        """``token`` is ``seq``'s next: the step's result for it; unless it
        finished, the token is fed to the next step."""
        seq.generated += 1
        if self._vocab.is_eog(token):
            seq.finished = True
            return StepResult(self._last(seq, self.chunk(seq, seq.text.flush()), STOP), True)
        chunk = self.chunk(seq, seq.text.push(self._vocab.piece(token)))
        calls_done = seq.calls is not None and not seq.calls.open_call and len(seq.calls.calls) >= seq.max_calls
        if seq.generated >= seq.max_tokens or seq.pos + 1 >= self._n_ctx_seq or calls_done:
            # The last call allowed is complete: what the grammar still has to write
            # (the frame's close) carries nothing, so the reply ends here.
            seq.finished = True
            tail = self.chunk(seq, seq.text.flush())
            reason = STOP if calls_done else LENGTH   # the budget or the context cut it
            return StepResult(self._last(seq, think_chunk(think_events(chunk) + think_events(tail)),
                                         reason), True)
        seq.pending = token
        return StepResult(chunk, False)

    @staticmethod
    def _last(seq: Seq, chunk: Any, finish_reason: str) -> Any:
        """The reply's last chunk, with its usage event (and why it ended) when the
        request asked for it (the end-of-generation token counts as generated, as
        OpenAI counts it)."""
        if seq.usage is None:
            return chunk
        prompt, cached = seq.usage
        return think_events(chunk) + [usage_event(prompt, cached, seq.generated, finish_reason)]

    def chunk(self, seq: Seq, text: str | None) -> Any:
        """Text as is, or in a call the tool-call events the text makes (None when none)."""
        if seq.calls is None or not text:
            return text
        events = seq.calls.feed(text)
        if events:
            self.tool_calls += sum(1 for e in events if isinstance(e, dict)
                                   and e["type"] == "tool_call_done")
        return events or None
